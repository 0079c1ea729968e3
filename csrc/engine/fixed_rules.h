// AUTOCCL_FIXED: rules that force a configuration per (collective, size range). Grammar in
// docs/architecture.md; first matching rule wins.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/common.h"

namespace autoccl::engine {

struct FixedRule {
  unsigned collMask = 0;  // bit c set: applies to collective c
  uint64_t lo = 0;        // inclusive byte range
  uint64_t hi = UINT64_MAX;
  Config config;          // algo and proto always set; channels/chunk optional (0)
  std::string text;       // the rule as written (for logs)
};

// Parses `text`; on error returns false and sets *error to a message naming the bad rule.
// maxChannels bounds the channel field (a larger value is an error, not silently clamped).
bool parseFixedRules(std::string_view text, int maxChannels, std::vector<FixedRule>* rules, std::string* error);

// First rule matching (coll, bytes), or nullptr.
const FixedRule* matchFixedRule(const std::vector<FixedRule>& rules, int coll, uint64_t bytes);

}  // namespace autoccl::engine
