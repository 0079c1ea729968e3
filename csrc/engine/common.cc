#include "engine/common.h"

#include <cctype>
#include <cstdio>
#include <limits>

namespace autoccl::engine {

namespace {
const char* const kCollNames[kNumColls] = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"};
const char* const kAlgoNames[kNumAlgos] = {"tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"};
const char* const kProtoNames[kNumProtos] = {"ll", "ll128", "simple"};

// Lower-case and drop '_' so that NCCL's "NVLS_TREE" and our "nvlstree" compare equal.
std::string canon(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '_') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

int lookup(std::string_view s, const char* const* names, int n) {
  std::string c = canon(s);
  for (int i = 0; i < n; ++i) {
    if (c == names[i]) return i;
  }
  return -1;
}
}  // namespace

const char* collName(int c) { return c >= 0 && c < kNumColls ? kCollNames[c] : "unknown"; }
const char* algoName(int a) { return a >= 0 && a < kNumAlgos ? kAlgoNames[a] : "unknown"; }
const char* protoName(int p) { return p >= 0 && p < kNumProtos ? kProtoNames[p] : "unknown"; }
int parseColl(std::string_view s) { return lookup(s, kCollNames, kNumColls); }
int parseAlgo(std::string_view s) { return lookup(s, kAlgoNames, kNumAlgos); }
int parseProto(std::string_view s) { return lookup(s, kProtoNames, kNumProtos); }

std::string armLimitText(const ArmLimit& a) {
  std::string out = a.channels > 0 ? std::to_string(a.channels) : "";
  if (a.proto >= 0) out += (out.empty() ? "" : "/") + std::string(protoName(a.proto));
  if (a.exposed > 0) out += "+" + (a.exposed >= kMaxChannelsHard ? std::string("max") : std::to_string(a.exposed));
  return out;
}

const char* sourceName(Source s) {
  switch (s) {
    case Source::Nccl: return "nccl";
    case Source::Observe: return "observe";
    case Source::Fixed: return "fixed";
    case Source::Table: return "table";
    case Source::Online: return "online";
    case Source::Manual: return "manual";
  }
  return "nccl";
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool parseUint(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool parseSize(std::string_view s, uint64_t* out) {
  s = trim(s);
  if (s.empty()) return false;
  unsigned shift = 0;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
  if (last == 'K') shift = 10;
  if (last == 'M') shift = 20;
  if (last == 'G') shift = 30;
  if (shift) s.remove_suffix(1);
  uint64_t v = 0;
  if (!parseUint(s, &v)) return false;
  if (shift && v > (std::numeric_limits<uint64_t>::max() >> shift)) return false;
  *out = v << shift;
  return true;
}

}  // namespace autoccl::engine
