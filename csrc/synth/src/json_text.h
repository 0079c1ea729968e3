// JSON text for the schedule writers (schedule.cpp, stream.cpp): strings escaped, doubles in the shortest text
// that reads back as the same double (times must survive a round trip exactly).
#pragma once

#include <charconv>
#include <cstdio>
#include <string>

namespace autoccl::synth::json {

inline std::string str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      o += '\\';
      o += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

inline std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace autoccl::synth::json
