// What a tuning table is valid for: GPU model and count, NCCL version, communicator shape.
#pragma once

#include <cstdint>
#include <string>

namespace autoccl::engine {

struct Fingerprint {
  std::string gpu = "unknown";  // e.g. "NVIDIA H200"
  int gpus = 0;                 // GPUs in this node
  int nccl = 0;                 // NCCL_VERSION_CODE, e.g. 22809 (0 = unknown)
  int ranks = 0;
  int nodes = 0;
  int nvlDomains = 0;

  // Canonical `meta` fields without `created`, in a fixed order; the id hashes exactly this string.
  std::string canonical() const;
  std::string id() const;  // 16 hex digits of FNV-1a 64 over canonical()
};

// Hardware part: AUTOCCL_HW ("<model>" or "<model>x<count>") if non-empty, else the "Model:" lines of
// <procDir>/*/information (procDir normally /proc/driver/nvidia/gpus). Sets gpu and gpus.
void detectHardware(const std::string& hwOverride, const std::string& procDir, Fingerprint* fp);

// "NVIDIA H200" -> quoted form for the meta line; escapes '"' and '\\'.
std::string quoteValue(const std::string& v);

}  // namespace autoccl::engine
