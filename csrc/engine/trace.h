// JSONL trace (AUTOCCL_TRACE): one file per process, "<prefix>.<hostname>.<pid>.jsonl".
// A debugging and verification aid: one process-wide mutex per line is acceptable here, and it is
// only ever taken when tracing is on.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

namespace autoccl::engine {

class TraceWriter {
 public:
  // Opens on first use; an unopenable path disables tracing (error returned once through *why).
  bool open(const std::string& prefix, std::string* why);
  bool enabled() const { return file_ != nullptr; }
  void writeLine(const char* jsonObject, size_t len);  // appends '\n'
  void flush();
  const std::string& path() const { return path_; }
  ~TraceWriter();

 private:
  std::mutex mu_;
  FILE* file_ = nullptr;
  std::string path_;
};

// "%016llx" of a communicator hash, as it appears in traces and logs.
std::string commHex(unsigned long long hash);

}  // namespace autoccl::engine
