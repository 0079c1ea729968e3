#include "autoccl/common/config.h"

#include <cstdio>

namespace autoccl {

std::string Config::str() const {
  if (isDefault()) return measure ? "nccl-default(m)" : "nccl-default";
  char buf[112];
  if (chunkHalvings > 0)
    std::snprintf(buf, sizeof buf, "a%d/p%d/ch%d/chunk/%d%s", algo, proto, channels, 1 << chunkHalvings,
                  measure ? "(m)" : "");
  else
    std::snprintf(buf, sizeof buf, "a%d/p%d/ch%d/chunk%llu%s", algo, proto, channels,
                  static_cast<unsigned long long>(chunk), measure ? "(m)" : "");
  return buf;
}

}  // namespace autoccl
