#include "engine/trace.h"

#include <chrono>

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace autoccl::engine {

namespace {
// The writer thread wakes at least this often while lines wait, and at once past kWakeBytes.
constexpr auto kWriteEvery = std::chrono::milliseconds(50);
constexpr size_t kWakeBytes = 1 << 16;
}  // namespace

bool TraceWriter::open(const std::string& prefix, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_) return true;
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  path_ = prefix + "." + host + "." + std::to_string(getpid()) + ".jsonl";
  FILE* f = std::fopen(path_.c_str(), "a");
  if (!f) {
    *why = "cannot open trace file " + path_ + ": " + std::strerror(errno);
    return false;
  }
  file_ = f;
  writer_ = std::thread([this] { drain(); });
  return true;
}

void TraceWriter::writeLine(const char* obj, size_t len) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!file_ || stop_) return;
    buf_.append(obj, len);
    buf_.push_back('\n');
    wake = buf_.size() >= kWakeBytes;
  }
  if (wake) cv_.notify_one();
}

void TraceWriter::drain() {
  std::string out;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, kWriteEvery, [this] { return stop_ || buf_.size() >= kWakeBytes; });
    out.swap(buf_);
    lock.unlock();
    if (!out.empty()) {
      std::lock_guard<std::mutex> f(fileMu_);
      std::fwrite(out.data(), 1, out.size(), file_);
      std::fflush(file_);
      out.clear();
    }
    lock.lock();
  }
}

void TraceWriter::flush() {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!file_) return;
    out.swap(buf_);
  }
  std::lock_guard<std::mutex> f(fileMu_);
  if (!out.empty()) std::fwrite(out.data(), 1, out.size(), file_);
  std::fflush(file_);
}

TraceWriter::~TraceWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  flush();
  if (file_) std::fclose(file_);
}

std::string jsonNumber(double v, int decimals) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  if (decimals < 0) std::snprintf(b, sizeof b, "%.6g", v);
  else std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

std::string commHex(unsigned long long hash) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", hash);
  return buf;
}

}  // namespace autoccl::engine
