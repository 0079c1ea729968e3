// The emulator's performance model: GPU time of one collective on the simulated machine as a function of
// (collective, ranks, bytes, algorithm, protocol, channels, chunk, compute load), with log-normal noise and
// rare outliers. Parameters come from a JSON file written by `python -m autoccl.emu.calibrate`; the same
// formula lives in python/autoccl/emu/model.py (tests keep the two in agreement).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "nccl_model.h"

namespace emu {

struct PathParams {
  double latUs = 6.0;         // fixed launch + sync latency
  double stepUs = 1.0;        // per algorithm step (ring: 2(n-1) for AllReduce, n-1 otherwise)
  double bwCh = 15.0;         // GB/s of bus bandwidth one channel adds
  double bwMax = 360.0;       // GB/s ceiling of the path
  double knee = 4.0;          // sharpness of the soft minimum between channels*bwCh and bwMax
  double chunkOverheadUs = 0.1;  // per piece of a step's channel data
  double fill = 0.1;          // share of a piece's transfer time paid once per step
};

struct PerfModel {
  PathParams paths[kAlgos][kProtos];
  bool have[kAlgos][kProtos] = {};
  double collScale[kFuncs] = {1, 1, 1, 1, 1};
  double sigma = 0.03, outlierP = 0.005, outlierMin = 1.3, outlierMax = 2.5;
  double commSlow = 0.8, commSlowPerCh = 0.0, gemmBase = 0.05, gemmPerCh = 0.3;
  // Per protocol (LL, LL128, Simple), a factor on gemmPerCh: how much more (or less) a channel of that protocol
  // slows the computation beside it (LL's threads poll flags where Simple's wait on fewer). 1 for all: not
  // calibrated (no GPU measurement of it is committed); model files set it as load.gemm_proto_<name>.
  double gemmProto[kProtos] = {1, 1, 1};
  std::string source = "builtin";

  static PerfModel builtin();
  bool loadFile(const std::string& path, std::string* error);

  static double busFactor(int func, int nRanks);
  static int steps(int func, int algo, int nRanks);
  double meanUs(int func, int nRanks, size_t bytes, int algo, int proto, int channels, size_t chunk,
                double load) const;
  // Multiplicative noise drawn deterministically from key (so every rank of a comm sees the same value).
  double noiseFactor(uint64_t key) const;
  // The computation's slowdown beside a kernel on `channels` channels of protocol `proto` (< 0: factor 1).
  double gemmSlowdown(int channels, int proto, double load) const;
};

uint64_t mix64(uint64_t x);

// A rank's computation beside its communicators' kernels (GroupSpec::computeUs), as a fluid: while a kernel
// and the computation overlap, the kernel runs `commSlow` times and the computation `computeSlow` times
// slower than alone; outside the overlap each runs at full speed. Times in ns of the rank's GPU clock.
struct ComputeRun {
  double atNs = 0;    // how far the computation has got
  double leftNs = 0;  // its work still to do, at full speed

  // A kernel that takes `aloneNs` alone and starts at `startNs` (>= atNs while work is left): its end.
  double kernel(double startNs, double aloneNs, double commSlow, double computeSlow);
  double end() const { return atNs + leftNs; }
};

}  // namespace emu
