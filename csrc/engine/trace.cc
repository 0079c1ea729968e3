#include "engine/trace.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace autoccl::engine {

bool TraceWriter::open(const std::string& prefix, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) return true;
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  path_ = prefix + "." + host + "." + std::to_string(getpid()) + ".jsonl";
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) {
    *why = "cannot open trace file " + path_ + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

void TraceWriter::writeLine(const char* obj, size_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!file_) return;
  std::fwrite(obj, 1, len, file_);
  std::fputc('\n', file_);
}

void TraceWriter::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) std::fflush(file_);
}

TraceWriter::~TraceWriter() {
  if (file_) std::fclose(file_);
}

std::string commHex(unsigned long long hash) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", hash);
  return buf;
}

}  // namespace autoccl::engine
