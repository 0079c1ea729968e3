// A memory size for messages, in the unit that shows it ("3.2 GiB", "12.0 MiB", "640 B"): a limit of a few
// bytes printed in GiB read "0.0 GiB allowed".
#pragma once

#include <cstdio>
#include <string>

namespace autoccl::synth {

inline std::string memory_text(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[u]);
  return buf;
}

}  // namespace autoccl::synth
