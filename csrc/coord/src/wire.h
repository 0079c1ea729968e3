// Coordinator wire format: length-prefixed binary frames, versioned, bounded.
//   header (12 bytes, little endian): magic u32 "ACC1" | version u16 | type u16 | payload length u32
//   payload <= kMaxPayload bytes, layout per type (see docs/online-search.md)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "autoccl/coord/coord.h"

namespace autoccl::coord::wire {

constexpr uint32_t kMagic = 0x31434341;  // "ACC1"
// 2: SERVE and NEED carry the settings digest; REFUSE. 3: REPORT. 4: a segment carries chunkHalvings. 5: DETACH.
// 6: WAIT. 7: the step guard's segment carries its fallback flag in chunkHalvings and an estimated arm's positions
// in chunk (a build before it read the fallback from chunk: refused, not misread). 8: a step arm's segment carries
// its protocol in the algorithm field (a build before it read such an arm as NCCL's choices). 9: a step arm's
// segment carries a floor in its channels' second byte (a build before it rejected such a frame as malformed).
// 10: NEED carries how far its question leads the asker's own (Board::prefetch's beyondDefault).
constexpr uint16_t kVersion = 10;
constexpr size_t kHeader = 12;
constexpr uint32_t kMaxPayload = 16 * 1024;
constexpr size_t kSegBytes = 33;
constexpr size_t kTaskBytes = 24;
constexpr size_t kMaxSegs = (kMaxPayload - kTaskBytes - 2) / kSegBytes;
constexpr uint32_t kMaxRanks = 1u << 24;  // ATTACH: a communicator larger than this is malformed

enum Type : uint16_t {
  kHelloS = 1,   // server -> client: nonce_s[16]
  kHelloC = 2,   // client -> server: nonce_c[16] mac[32] = HMAC(token, "C" nonce_s nonce_c)
  kHelloOk = 3,  // server -> client: mac[32] = HMAC(token, "S" nonce_c nonce_s)
  kServe = 4,    // client -> server: comm u64, digest u64 (this client holds the authority of comm)
  kNeed = 5,     // client -> server -> authority: task, call index u64, covered u64, digest u64, ahead u64
  kPlan = 6,     // authority -> server -> clients: task, n u16, n segments
  kAttach = 7,   // client -> server: comm u64, rank u32, nRanks u32 (this process holds that rank)
  kRefuse = 8,   // server -> client: comm u64, digest u64 (the communicator's): the client's settings differ
  kReport = 9,   // client -> server -> authority: task, rank u32, call index u64, ns u64 (kUntimedNs: untimed)
  kDetach = 10,  // client -> server: comm u64, rank u32 (this process is done with that rank)
  kWait = 11,    // client -> server -> authority: as kReport, ns = how long the rank waited for call k's lookup
};
constexpr uint16_t kLastType = kWait;
constexpr uint64_t kUntimedNs = ~0ULL;

struct Msg {
  uint16_t type = 0;
  uint64_t comm = 0;
  TaskKey task;
  uint64_t k = 0;
  uint64_t covered = 0;
  uint32_t rank = 0, nRanks = 0;  // kAttach; rank also kReport, kWait and kDetach
  uint64_t ns = 0;                 // kReport: the rank's GPU time of call k, or kUntimedNs; kWait: its wait
  // kServe, kNeed: the sender's settings digest (TcpOptions::settingsDigest); kRefuse: the communicator's
  uint64_t digest = 0;
  // kNeed: how many calls the question leads the one the asker would ask without looking ahead (0: a plain question)
  uint64_t ahead = 0;
  std::vector<Segment> segs;
  uint8_t nonce[16] = {0};
  uint8_t mac[32] = {0};
};

std::vector<uint8_t> encode(const Msg& m);
// Header check: returns false on bad magic/version/type/length.
bool parseHeader(const uint8_t* h, uint16_t* type, uint32_t* len);
bool decodePayload(uint16_t type, const uint8_t* p, size_t n, Msg* out);
// Decode one frame from a buffer: >0 bytes consumed, 0 = incomplete, -1 = malformed (drop peer).
long decode(const uint8_t* buf, size_t n, Msg* out);

// A NEED's `ahead` for a question of call `ask`, where the rank would have asked for upTo - beyondDefault without
// looking ahead (Board::prefetch): how far `ask` lies beyond that; 0 for a question at or before it (a hole the
// rank's copy has before what it holds). Never more than `ask`.
inline uint64_t questionLead(uint64_t ask, uint64_t upTo, uint64_t beyondDefault) {
  const uint64_t plain = upTo - (beyondDefault < upTo ? beyondDefault : upTo);
  return ask > plain ? ask - plain : 0;
}

}  // namespace autoccl::coord::wire
