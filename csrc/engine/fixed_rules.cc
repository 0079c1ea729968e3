#include "engine/fixed_rules.h"

namespace autoccl::engine {

namespace {
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

bool parseRule(std::string_view text, int maxChannels, FixedRule* rule, std::string* why) {
  size_t colon = text.find(':');
  if (colon == std::string_view::npos) { *why = "missing ':'"; return false; }
  std::string_view lhs = trim(text.substr(0, colon));
  std::string_view rhs = trim(text.substr(colon + 1));

  std::string_view colls = lhs;
  size_t at = lhs.find('@');
  if (at != std::string_view::npos) {
    colls = trim(lhs.substr(0, at));
    std::string_view range = trim(lhs.substr(at + 1));
    size_t dash = range.find('-');
    if (dash == std::string_view::npos) { *why = "size range needs 'lo-hi'"; return false; }
    if (!parseSize(range.substr(0, dash), &rule->lo) || !parseSize(range.substr(dash + 1), &rule->hi)) {
      *why = "bad size in range"; return false;
    }
    if (rule->lo > rule->hi) { *why = "empty size range (lo > hi)"; return false; }
  }
  if (colls == "*") {
    rule->collMask = (1u << kNumColls) - 1;
  } else {
    for (std::string_view c : split(colls, ',')) {
      int id = parseColl(trim(c));
      if (id < 0) { *why = "unknown collective '" + std::string(trim(c)) + "'"; return false; }
      rule->collMask |= 1u << id;
    }
  }

  std::vector<std::string_view> parts = split(rhs, '/');
  if (parts.size() < 2 || parts.size() > 4) { *why = "expected algo/proto[/channels][/chunk=size]"; return false; }
  rule->config.algo = parseAlgo(trim(parts[0]));
  if (rule->config.algo < 0) { *why = "unknown algorithm '" + std::string(trim(parts[0])) + "'"; return false; }
  rule->config.proto = parseProto(trim(parts[1]));
  if (rule->config.proto < 0) { *why = "unknown protocol '" + std::string(trim(parts[1])) + "'"; return false; }
  for (size_t i = 2; i < parts.size(); ++i) {
    std::string_view p = trim(parts[i]);
    if (p.substr(0, 6) == "chunk=") {
      if (rule->config.chunk) { *why = "chunk given twice"; return false; }
      uint64_t chunk = 0;
      if (!parseSize(p.substr(6), &chunk) || chunk < kMinChunk || chunk > kMaxChunk) {
        *why = "chunk must be a size in [4K, 16M]"; return false;
      }
      rule->config.chunk = chunk;
    } else {
      if (i != 2) { *why = "channels must come before chunk="; return false; }
      uint64_t ch = 0;
      if (!parseUint(p, &ch) || ch < 1 || ch > static_cast<uint64_t>(maxChannels)) {
        *why = "channels must be an integer in [1, " + std::to_string(maxChannels) + "]"; return false;
      }
      rule->config.channels = static_cast<int>(ch);
    }
  }
  return true;
}
}  // namespace

bool parseFixedRules(std::string_view text, int maxChannels, std::vector<FixedRule>* rules, std::string* error) {
  rules->clear();
  for (std::string_view raw : split(text, ';')) {
    std::string_view r = trim(raw);
    if (r.empty()) continue;  // tolerate "a;b;" and "a;;b"
    FixedRule rule;
    rule.text = std::string(r);
    std::string why;
    if (!parseRule(r, maxChannels, &rule, &why)) {
      *error = "AUTOCCL_FIXED rule '" + rule.text + "': " + why;
      rules->clear();
      return false;
    }
    rules->push_back(std::move(rule));
  }
  if (rules->empty()) {
    *error = "AUTOCCL_FIXED has no rule";
    return false;
  }
  return true;
}

const FixedRule* matchFixedRule(const std::vector<FixedRule>& rules, int coll, uint64_t bytes) {
  for (const FixedRule& r : rules) {
    if ((r.collMask >> coll & 1u) && bytes >= r.lo && bytes <= r.hi) return &r;
  }
  return nullptr;
}

}  // namespace autoccl::engine
