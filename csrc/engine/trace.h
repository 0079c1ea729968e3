// JSONL trace (AUTOCCL_TRACE): one file per process, "<prefix>.<hostname>.<pid>.jsonl".
// A debugging and verification aid. Lines are appended to a memory buffer under one mutex (a copy, no
// system call) and written to the file by a thread of the writer's own, so that the file's I/O never runs
// on NCCL's enqueue thread; flush() writes what is buffered before it returns (finalize, exit).
#pragma once

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

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
  void drain();  // the writer thread
  std::mutex mu_;        // buf_, stop_
  std::mutex fileMu_;    // file writes (the thread and flush())
  std::condition_variable cv_;
  std::string buf_;
  bool stop_ = false;
  std::thread writer_;
  FILE* file_ = nullptr;
  std::string path_;
};

// "%016llx" of a communicator hash, as it appears in traces and logs.
std::string commHex(unsigned long long hash);

// `text` as a JSON string literal, quotes included (quote, backslash and control characters escaped).
std::string jsonString(const std::string& text);

// `v` as a JSON number with `decimals` after the point (< 0: "%.6g"); null where it is not finite (printf's
// "inf" and "nan" are no JSON).
std::string jsonNumber(double v, int decimals = -1);

}  // namespace autoccl::engine
