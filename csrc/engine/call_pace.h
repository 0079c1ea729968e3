// How fast a task's calls come on the host: a running mean of the time between its consecutive calls, pauses
// included, waits for plans left out (AUTOCCL_ASK_AHEAD=auto: how many calls go by while a question to the
// authority is answered).
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>

namespace autoccl::engine {

class CallPace {
 public:
  // Each new interval weighs 1/kWeight once kWeight are in (the plain mean before): a window of about that many
  // calls, long enough to take in an nccl-tests loop's pause at its end (20-40 calls enqueued at once, then a
  // wait for the GPU), so that the mean is the rate the GPU completes them, not the host's burst.
  static constexpr uint64_t kWeight = 32;

  void note(std::chrono::steady_clock::time_point now) {
    if (calls_++ > 0) {
      const double ns = std::chrono::duration<double, std::nano>(now - last_).count();
      const uint64_t n = calls_ - 1 < kWeight ? calls_ - 1 : kWeight;
      meanNs_ += (ns - meanNs_) / static_cast<double>(n);
    }
    last_ = now;
  }
  // The latest call waited this long on the host for its plan: the next interval leaves it out. A wait slows the
  // host's calls, and a pace slowed by its waits would ask less far ahead, and wait more.
  void leaveOut(std::chrono::nanoseconds waited) { last_ += waited; }
  // The mean interval in nanoseconds; 0 before two calls.
  double meanNs() const { return calls_ > 1 ? meanNs_ : 0.0; }

 private:
  std::chrono::steady_clock::time_point last_{};
  double meanNs_ = 0.0;
  uint64_t calls_ = 0;
};

// How many calls at `paceNs` apart go by in `answerUs`, rounded up, at most `most`; 0 where either is unknown (<= 0).
inline uint64_t callsWithin(double answerUs, double paceNs, uint64_t most) {
  if (!(answerUs > 0.0) || !(paceNs > 0.0)) return 0;
  const double calls = std::ceil(answerUs * 1e3 / paceNs);
  return calls >= static_cast<double>(most) ? most : static_cast<uint64_t>(calls);
}

}  // namespace autoccl::engine
