// Helpers shared by the engine's test programs: an injectable environment and a scratch directory.
#pragma once

#include <stdlib.h>

#include <map>
#include <memory>
#include <string>

#include "engine/settings.h"

namespace autoccl::engine::testenv {

// A getenv-like lookup over a fixed map (Settings are read through it, never from the real environment).
inline EnvLookup envOf(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* k) -> const char* {
    auto it = shared->find(k);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// A fresh directory under /tmp whose name starts with `prefix` ("/tmp" if it cannot be created).
inline std::string tempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  char* d = mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string("/tmp");
}

}  // namespace autoccl::engine::testenv
