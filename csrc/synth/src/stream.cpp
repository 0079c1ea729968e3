// Schedules streamed to disk while they are synthesized (format autoccl-schedule-stream v1, docs/synth.md).
//
//   "ACSS" u32 version (1), u64 header length, header (JSON, UTF-8), then per section a run of records:
//     u8 1: a block: f64 start_us, u32 count, count x (route, chunk), each a zigzag LEB128 varint of the
//           difference from the previous record's (0 before the first of the block)
//     u8 2: the section's end: f64 time_us, u64 transfers
//   and u8 0 at the end of the file. Little-endian, as written by x86-64 and AArch64.
// A forward section's transfer goes over route `route` of the section (src and dst: the route's ends) from start
// to start + route_us[route], offset by the times of the sections before it. A mirror section holds the
// spreading phase a reduction is the time reversal of: each record is a reduction over route `route` (already
// in the reduction's direction) from offset + time - (start + route_us) to offset + time - start. A section
// with "blocks_of": k has no records of its own: it reads section k's.
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "autoccl/synth/synth.h"
#include "json_text.h"

namespace autoccl::synth {

namespace {

using json::num;

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f) std::fclose(f);
  }
};

}  // namespace

// Buffers of 8 MiB go to a writer thread (at most 4 waiting), so synthesis and the disk work at once.
// The stream is written to <path>.partial and renamed to <path> by finish(): a synthesis that fails or is
// interrupted leaves no stream that looks whole, and removes what it wrote.
struct StreamWriter::Impl {
  std::unique_ptr<std::FILE, FileCloser> f;
  std::string path, partial;
  bool finished = false;
  std::vector<char> buf;
  std::uint64_t section_count = 0;
  std::uint64_t bytes = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<char>> queue;
  bool closing = false;
  std::string error;  // set by the writer thread
  std::thread writer;
  static constexpr std::size_t kBuffer = 8u << 20, kPending = 4;

  void start() {
    writer = std::thread([this] {
      for (;;) {
        std::vector<char> b;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [this] { return closing || !queue.empty(); });
          if (queue.empty()) return;
          b = std::move(queue.front());
          queue.pop_front();
        }
        cv.notify_all();
        const bool ok = std::fwrite(b.data(), 1, b.size(), f.get()) == b.size();
        std::lock_guard<std::mutex> lk(mu);
        if (!ok && error.empty()) error = "cannot write " + path + " (disk full?)";
        bytes += b.size();
      }
    });
  }
  void put(const void* p, std::size_t n) {
    const auto* c = static_cast<const char*>(p);
    buf.insert(buf.end(), c, c + n);
    if (buf.size() >= kBuffer) hand_off();
  }
  void hand_off() {
    if (buf.empty()) return;
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [this] { return queue.size() < kPending || !error.empty(); });
    if (!error.empty()) throw Error(error);
    queue.push_back(std::move(buf));
    buf = std::vector<char>();
    buf.reserve(kBuffer + (1u << 20));
    lk.unlock();
    cv.notify_all();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu);
      closing = true;
    }
    cv.notify_all();
    if (writer.joinable()) writer.join();
  }
  ~Impl() {
    stop();
    if (!finished) {
      f.reset();
      std::remove(partial.c_str());
    }
  }
  // zigzag varint
  void put_varint(std::int64_t v) {
    std::uint64_t z = (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
    char tmp[10];
    std::size_t n = 0;
    while (z >= 0x80) {
      tmp[n++] = static_cast<char>((z & 0x7F) | 0x80);
      z >>= 7;
    }
    tmp[n++] = static_cast<char>(z);
    put(tmp, n);
  }
};

StreamWriter::StreamWriter(const std::string& path, const std::string& header_json) : impl_(new Impl) {
  impl_->path = path;
  impl_->partial = path + ".partial";
  impl_->f.reset(std::fopen(impl_->partial.c_str(), "wb"));
  if (!impl_->f) throw Error("cannot write " + impl_->partial);
  impl_->buf.reserve(Impl::kBuffer + (1u << 20));
  impl_->start();
  const std::uint32_t version = 1;
  const std::uint64_t len = header_json.size();
  impl_->put("ACSS", 4);
  impl_->put(&version, 4);
  impl_->put(&len, 8);
  impl_->put(header_json.data(), header_json.size());
}

StreamWriter::~StreamWriter() = default;

void StreamWriter::write(std::vector<Transfer>& ts) {
  std::size_t i = 0;
  while (i < ts.size()) {
    std::size_t j = i;
    while (j < ts.size() && ts[j].start == ts[i].start) ++j;
    const std::uint8_t tag = 1;
    const double start = ts[i].start;
    const auto count = static_cast<std::uint32_t>(j - i);
    impl_->put(&tag, 1);
    impl_->put(&start, 8);
    impl_->put(&count, 4);
    std::int64_t route = 0, chunk = 0;
    for (std::size_t k = i; k < j; ++k) {
      impl_->put_varint(ts[k].route - route);
      impl_->put_varint(ts[k].chunk - chunk);
      route = ts[k].route;
      chunk = ts[k].chunk;
    }
    impl_->section_count += j - i;
    i = j;
  }
  ts.clear();
}

void StreamWriter::end_section(double time_us) {
  const std::uint8_t tag = 2;
  impl_->put(&tag, 1);
  impl_->put(&time_us, 8);
  impl_->put(&impl_->section_count, 8);
  impl_->section_count = 0;
}

std::uint64_t StreamWriter::finish() {
  const std::uint8_t tag = 0;
  impl_->put(&tag, 1);
  impl_->hand_off();
  impl_->stop();
  if (!impl_->error.empty()) throw Error(impl_->error);
  if (std::fflush(impl_->f.get()) != 0 || std::fclose(impl_->f.release()) != 0)
    throw Error("cannot write " + impl_->path + " (disk full?)");
  if (std::rename(impl_->partial.c_str(), impl_->path.c_str()) != 0)
    throw Error("cannot rename " + impl_->partial + " to " + impl_->path + ": " + std::strerror(errno));
  impl_->finished = true;
  return impl_->bytes;
}

std::string stream_header_json(const Schedule& s, const Topology& topo, const std::vector<StreamSection>& sections) {
  std::string o = "{\"format\": \"autoccl-schedule-stream\", \"version\": 1, \"collective\": \"";
  o += to_string(s.collective);
  o += "\", \"algorithm\": " + json::str(s.algorithm) + ", \"nranks\": " + std::to_string(s.nranks) +
       ", \"nchunks\": " + std::to_string(s.nchunks) + ", \"chunks_per_rank\": " + std::to_string(s.chunks_per_rank) +
       ", \"root\": " + std::to_string(s.root) + ", \"chunk_bytes\": " + num(s.chunk_bytes) +
       ", \"bytes\": " + num(s.bytes) + ", \"seed\": " + std::to_string(s.seed) + ", \"owner\": [";
  for (std::size_t i = 0; i < s.owner.size(); ++i) o += (i ? "," : "") + std::to_string(s.owner[i]);
  o += "], \"topology\": " + json::str(topo.name) + ", \"ranks\": [";
  for (int r = 0; r < topo.num_npus(); ++r) o += (r ? "," : "") + json::str(topo.node(topo.npu_node(r)).name);
  o += "], \"links\": [";
  for (int l = 0; l < topo.num_links(); ++l)
    o += (l ? ",[" : "[") + json::str(topo.node(topo.link(l).src).name) + "," + json::str(topo.node(topo.link(l).dst).name) + "]";
  o += "], \"sections\": [";
  for (std::size_t k = 0; k < sections.size(); ++k) {
    const auto& sec = sections[k];
    o += k ? ", {" : "{";
    o += "\"kind\": \"" + std::string(sec.mirror ? "mirror" : "forward") + "\"";
    if (sec.blocks_of >= 0) {
      o += ", \"blocks_of\": " + std::to_string(sec.blocks_of);
    }
    o += ", \"routes\": [";
    for (std::size_t r = 0; r < sec.routes.size(); ++r) {
      o += r ? ",[" : "[";
      for (std::size_t j = 0; j < sec.routes[r].size(); ++j) o += (j ? "," : "") + std::to_string(sec.routes[r][j]);
      o += "]";
    }
    o += "], \"route_us\": [";
    for (std::size_t r = 0; r < sec.route_us.size(); ++r) o += (r ? "," : "") + num(sec.route_us[r]);
    o += "]}";
  }
  o += "]}";
  return o;
}

// ---------------------------------------------------------------------------------------------- reading

void read_schedule_stream(const std::string& path, const std::vector<StreamSection>& sections, Schedule& s,
                          const std::vector<int>& route_src, const std::vector<int>& route_dst) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error("cannot read " + path);
  auto get = [&](void* p, std::size_t n) {
    if (std::fread(p, 1, n, f.get()) != n) throw Error(path + ": truncated schedule stream");
  };
  auto varint = [&]() -> std::int64_t {
    std::uint64_t z = 0;
    for (int shift = 0;; shift += 7) {
      const int c = std::fgetc(f.get());
      if (c == EOF) throw Error(path + ": truncated schedule stream");
      if (shift > 63) throw Error(path + ": bad number in schedule stream");
      z |= static_cast<std::uint64_t>(c & 0x7F) << shift;
      if (!(c & 0x80)) break;
    }
    return static_cast<std::int64_t>(z >> 1) ^ -static_cast<std::int64_t>(z & 1);
  };
  char magic[4];
  std::uint32_t version = 0;
  std::uint64_t len = 0;
  get(magic, 4);
  get(&version, 4);
  get(&len, 8);
  if (std::memcmp(magic, "ACSS", 4) != 0 || version != 1) throw Error(path + ": not an autoccl schedule stream v1");
  if (std::fseek(f.get(), static_cast<long>(len), SEEK_CUR) != 0) throw Error(path + ": truncated schedule stream");
  // Each section's records: (start, route, chunk).
  struct Rec {
    double start;
    std::uint32_t route, chunk;
  };
  std::vector<std::vector<Rec>> recs(sections.size());
  std::vector<double> times(sections.size(), 0);
  std::size_t k = 0;
  // route ids of section k are offset by route_base[k] in s.routes (filled by the caller)
  std::vector<std::size_t> base(sections.size() + 1, 0);
  for (std::size_t i = 0; i < sections.size(); ++i) base[i + 1] = base[i] + sections[i].routes.size();
  while (k < sections.size() && sections[k].blocks_of >= 0) ++k;
  for (;;) {
    std::uint8_t tag = 0;
    get(&tag, 1);
    if (tag == 0) break;
    if (k >= sections.size()) throw Error(path + ": more sections than its header lists");
    if (tag == 1) {
      double start = 0;
      std::uint32_t count = 0;
      get(&start, 8);
      get(&count, 4);
      std::int64_t route = 0, chunk = 0;
      for (std::uint32_t i = 0; i < count; ++i) {
        route += varint();
        chunk += varint();
        if (route < 0 || static_cast<std::size_t>(route) >= sections[k].routes.size() || chunk < 0 ||
            chunk >= s.nchunks)
          throw Error(path + ": a record names route " + std::to_string(route) + " or chunk " +
                      std::to_string(chunk) + " out of range");
        recs[k].push_back({start, static_cast<std::uint32_t>(route), static_cast<std::uint32_t>(chunk)});
      }
    } else if (tag == 2) {
      double t = 0;
      std::uint64_t count = 0;
      get(&t, 8);
      get(&count, 8);
      if (count != recs[k].size()) throw Error(path + ": a section's count disagrees with its records");
      times[k] = t;
      ++k;
      while (k < sections.size() && sections[k].blocks_of >= 0) {
        const auto src = static_cast<std::size_t>(sections[k].blocks_of);
        if (src >= k) throw Error(path + ": a section reads the blocks of a later section");
        times[k] = times[src];
        ++k;
      }
    } else {
      throw Error(path + ": unknown record tag " + std::to_string(tag));
    }
  }
  if (k != sections.size()) throw Error(path + ": fewer sections than its header lists");
  double offset = 0;
  s.transfers.clear();
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const auto& sec = sections[i];
    const auto& rs = sec.blocks_of >= 0 ? recs[static_cast<std::size_t>(sec.blocks_of)] : recs[i];
    for (const Rec& r : rs) {
      const std::size_t gr = base[i] + r.route;
      const double d = sec.route_us[r.route];
      Transfer t;
      t.chunk = static_cast<std::int32_t>(r.chunk);
      t.src = route_src[gr];
      t.dst = route_dst[gr];
      t.route = static_cast<std::int32_t>(gr);
      if (sec.mirror) {
        t.start = offset + times[i] - (r.start + d);
        t.end = offset + times[i] - r.start;
        t.op = Op::Reduce;
      } else {
        t.start = offset + r.start;
        t.end = offset + r.start + d;
      }
      s.transfers.push_back(t);
    }
    offset += times[i];
  }
  s.time_us = offset;
  assign_reduction_order(s);
}

}  // namespace autoccl::synth
