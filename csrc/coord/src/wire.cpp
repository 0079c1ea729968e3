#include "wire.h"

#include <cstring>

namespace autoccl::coord::wire {
namespace {

struct W {
  std::vector<uint8_t> b;
  void u8(uint8_t v) { b.push_back(v); }
  void u16(uint16_t v) { for (int i = 0; i < 2; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void u32(uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void u64(uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i))); }
  void raw(const uint8_t* p, size_t n) { b.insert(b.end(), p, p + n); }
};

struct R {
  const uint8_t* p;
  size_t n, off = 0;
  bool ok = true;
  bool need(size_t k) {
    if (!ok || n - off < k) ok = false;
    return ok;
  }
  uint64_t get(int bytes) {
    if (!need(static_cast<size_t>(bytes))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[off + static_cast<size_t>(i)]) << (8 * i);
    off += static_cast<size_t>(bytes);
    return v;
  }
  void raw(uint8_t* dst, size_t k) {
    if (!need(k)) return;
    std::memcpy(dst, p + off, k);
    off += k;
  }
};

void putTask(W& w, const TaskKey& t) {
  w.u64(t.comm);
  w.u32(static_cast<uint32_t>(t.coll));
  w.u32(static_cast<uint32_t>(t.pipe));
  w.u64(t.bytes);
}
TaskKey getTask(R& r) {
  TaskKey t;
  t.comm = r.get(8);
  t.coll = static_cast<int>(static_cast<uint32_t>(r.get(4)));
  t.pipe = static_cast<int>(static_cast<uint32_t>(r.get(4)));
  t.bytes = r.get(8);
  return t;
}

}  // namespace

std::vector<uint8_t> encode(const Msg& m) {
  W p;
  switch (m.type) {
    case kHelloS: p.raw(m.nonce, 16); break;
    case kHelloC: p.raw(m.nonce, 16); p.raw(m.mac, 32); break;
    case kHelloOk: p.raw(m.mac, 32); break;
    case kServe: p.u64(m.comm); p.u64(m.digest); break;
    case kNeed: putTask(p, m.task); p.u64(m.k); p.u64(m.covered); p.u64(m.digest); p.u64(m.ahead); break;
    case kRefuse: p.u64(m.comm); p.u64(m.digest); break;
    case kAttach: p.u64(m.comm); p.u32(m.rank); p.u32(m.nRanks); break;
    case kDetach: p.u64(m.comm); p.u32(m.rank); break;
    case kReport:
    case kWait: putTask(p, m.task); p.u32(m.rank); p.u64(m.k); p.u64(m.ns); break;
    case kPlan: {
      putTask(p, m.task);
      size_t n = std::min(m.segs.size(), kMaxSegs);
      p.u16(static_cast<uint16_t>(n));
      for (size_t i = 0; i < n; ++i) {
        const Segment& s = m.segs[i];
        p.u64(s.begin);
        p.u64(s.end);
        p.u8(static_cast<uint8_t>(static_cast<int8_t>(s.cfg.algo)));
        p.u8(static_cast<uint8_t>(static_cast<int8_t>(s.cfg.proto)));
        p.u32(static_cast<uint32_t>(s.cfg.channels));
        p.u64(s.cfg.chunk);
        p.u8(static_cast<uint8_t>(s.cfg.chunkHalvings));
        p.u8(s.cfg.measure ? 1 : 0);
        p.u8(static_cast<uint8_t>(s.phase));
      }
      break;
    }
    default: break;
  }
  W out;
  out.u32(kMagic);
  out.u16(kVersion);
  out.u16(m.type);
  out.u32(static_cast<uint32_t>(p.b.size()));
  out.raw(p.b.data(), p.b.size());
  return out.b;
}

bool parseHeader(const uint8_t* h, uint16_t* type, uint32_t* len) {
  R r{h, kHeader};
  uint32_t magic = static_cast<uint32_t>(r.get(4));
  uint16_t ver = static_cast<uint16_t>(r.get(2));
  *type = static_cast<uint16_t>(r.get(2));
  *len = static_cast<uint32_t>(r.get(4));
  return r.ok && magic == kMagic && ver == kVersion && *type >= kHelloS && *type <= kLastType && *len <= kMaxPayload;
}

bool decodePayload(uint16_t type, const uint8_t* p, size_t n, Msg* m) {
  R r{p, n};
  *m = Msg();
  m->type = type;
  switch (type) {
    case kHelloS: r.raw(m->nonce, 16); break;
    case kHelloC: r.raw(m->nonce, 16); r.raw(m->mac, 32); break;
    case kHelloOk: r.raw(m->mac, 32); break;
    case kServe:
    case kRefuse:
      m->comm = r.get(8);
      m->digest = r.get(8);
      break;
    case kNeed:
      m->task = getTask(r);
      m->k = r.get(8);
      m->covered = r.get(8);
      m->digest = r.get(8);
      m->ahead = r.get(8);
      if (m->ahead > m->k) return false;
      break;
    case kAttach:
      m->comm = r.get(8);
      m->rank = static_cast<uint32_t>(r.get(4));
      m->nRanks = static_cast<uint32_t>(r.get(4));
      if (m->nRanks == 0 || m->nRanks > kMaxRanks || m->rank >= m->nRanks) return false;
      break;
    case kDetach:
      m->comm = r.get(8);
      m->rank = static_cast<uint32_t>(r.get(4));
      if (m->rank >= kMaxRanks) return false;
      break;
    case kReport:
    case kWait:
      m->task = getTask(r);
      m->rank = static_cast<uint32_t>(r.get(4));
      m->k = r.get(8);
      m->ns = r.get(8);
      if (m->rank >= kMaxRanks) return false;
      break;
    case kPlan: {
      m->task = getTask(r);
      size_t cnt = static_cast<size_t>(r.get(2));
      if (cnt > kMaxSegs || !r.need(cnt * kSegBytes)) return false;
      for (size_t i = 0; i < cnt; ++i) {
        Segment s;
        s.begin = r.get(8);
        s.end = r.get(8);
        s.cfg.algo = static_cast<int8_t>(static_cast<uint8_t>(r.get(1)));
        s.cfg.proto = static_cast<int8_t>(static_cast<uint8_t>(r.get(1)));
        s.cfg.channels = static_cast<int32_t>(static_cast<uint32_t>(r.get(4)));
        s.cfg.chunk = r.get(8);
        uint64_t halvings = r.get(1);
        if (halvings > static_cast<uint64_t>(kMaxChunkHalvings)) return false;
        s.cfg.chunkHalvings = static_cast<int>(halvings);
        uint64_t meas = r.get(1), ph = r.get(1);
        s.cfg.measure = meas == 1;
        if (meas > 1 || ph > 3 || s.begin >= s.end) return false;
        s.phase = static_cast<Phase>(ph);
        if (s.cfg.algo < -1 || s.cfg.algo >= kNumAlgos || s.cfg.proto < -1 || s.cfg.proto >= kNumProtos)
          return false;
        if ((s.cfg.algo < 0) != (s.cfg.proto < 0)) return false;
        // A task's count is at most 64 (the context clamps what it applies); the step guard's key packs an arm's cap
        // and floor in two bytes.
        if (s.cfg.channels < 0 || s.cfg.channels >= (1 << 16)) return false;
        if (!m->segs.empty() && m->segs.back().end != s.begin) return false;  // contiguous
        m->segs.push_back(s);
      }
      break;
    }
    default: return false;
  }
  return r.ok && r.off == n;
}

long decode(const uint8_t* buf, size_t n, Msg* out) {
  if (n < kHeader) return 0;
  uint16_t type;
  uint32_t len;
  if (!parseHeader(buf, &type, &len)) return -1;
  if (n - kHeader < len) return 0;
  if (!decodePayload(type, buf + kHeader, len, out)) return -1;
  return static_cast<long>(kHeader + len);
}

}  // namespace autoccl::coord::wire
