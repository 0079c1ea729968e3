// Scratch directories for autoccl's C++ tests, removed when the test program exits: a suite run thousands
// of times (CI, sanitizer builds, developers' loops) must not fill /tmp. Kept when a check failed, so
// the traces and tables a failing case wrote can be read.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

namespace autoccl::test {

class ScratchDirs {
 public:
  ScratchDirs() : owner_(::getpid()) {}
  ScratchDirs(const ScratchDirs&) = delete;
  ScratchDirs& operator=(const ScratchDirs&) = delete;
  ~ScratchDirs() {
    // forked children that exit normally leave the directories to the process that made them
    if (::getpid() != owner_) return;
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& d : dirs_) {
      if (::testing::UnitTest::GetInstance()->Failed()) {
        std::fprintf(stderr, "scratch directory kept (a check failed): %s\n", d.c_str());
        continue;
      }
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  }
  void add(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(dir);
  }

 private:
  pid_t owner_;
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

inline ScratchDirs& scratchDirs() {
  static ScratchDirs dirs;
  return dirs;
}

// A fresh directory under /tmp whose name starts with `prefix` ("/tmp" if it cannot be created; never
// removed then).
inline std::string scratchDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return "/tmp";
  scratchDirs().add(tmpl);
  return tmpl;
}

}  // namespace autoccl::test
