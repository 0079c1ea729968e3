// The two matching engines of the synthesizer (synthesizer.cpp picks one per topology; the comment there says
// what each does): gather_general.cpp for channels that share links or differ in cost, gather_disjoint.cpp for
// channels that share no link and cost the same. Private to the synth library.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "autoccl/synth/synth.h"

namespace autoccl::synth::engines {

struct GatherResult {
  double time = 0;
  std::vector<Transfer> transfers;  // route = channel id
  std::uint64_t count = 0;
  std::size_t max_queue = 0;
  std::uint64_t resent = 0, replaced = 0, cancelled = 0;  // general engine: copies sent again faster, and what
                                                          // became of the slower ones
};

// Takes transfers as they are made (route = channel id) and empties the vector; the engines then keep none.
using Sink = std::function<void(std::vector<Transfer>&)>;

// Spread chunks (chunk c starts at src[c]) to every NPU over channels that may share links and differ in cost.
// What an engine reads and reports while it runs (SynthOptions::stop and ::deliveries; either may be null).
struct Progress {
  const std::atomic<bool>* stop = nullptr;  // read at each event; once true, the engine throws Interrupted
  std::atomic<std::uint64_t>* deliveries = nullptr;  // deliveries made, added every kDeliveriesStep or so
  // A shared counter updated at every event cost the threads of a synthesis 5 % of its time.
  static constexpr std::uint64_t kDeliveriesStep = 1 << 16;
};

GatherResult gather_general(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed,
                            bool record, const Sink* sink, Progress progress);

// The same over channels that share no link (and, unless the topology is too large for the general engine,
// cost the same), its destinations split among `threads` threads (the schedule does not depend on them).
GatherResult gather_disjoint(const Topology& t, const std::vector<int>& src, double chunk_bytes, std::uint64_t seed,
                             bool record, int threads, const Sink* sink, Progress progress);

}  // namespace autoccl::synth::engines
