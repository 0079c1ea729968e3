// Compact SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for peer authentication, so that the
// plugin does not depend on a system crypto library. Tested against NIST and RFC 4231 vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace autoccl::coord {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::array<uint8_t, 32> finish();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

std::array<uint8_t, 32> sha256(const void* data, size_t n);
std::array<uint8_t, 32> hmacSha256(const void* key, size_t keyLen, const void* msg, size_t msgLen);
bool equalConstTime(const uint8_t* a, const uint8_t* b, size_t n);
std::string hex(const uint8_t* p, size_t n);

}  // namespace autoccl::coord
