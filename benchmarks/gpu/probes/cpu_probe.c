/* A process's host speed, without CUDA or NCCL: the nanoseconds of one dependent load over a working set of
 * 64 MiB (memory latency), of 32 KiB (the first-level cache) and of one dependent multiply-add (the core).
 * benchmarks/gpu/placement_levels.sh runs it as a launch of its own beside nccl-tests' launches: where its
 * numbers take two levels from launch to launch as nccl-tests' host path does, the level is the machine's,
 * not NCCL's or CUDA's. Prints "<64 MiB ns> <32 KiB ns> <mul-add ns>". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ns per load of a random cycle over n entries (Sattolo's shuffle: one cycle through all of them) */
static double chase(size_t n, size_t loads, size_t* sink) {
  size_t* next = malloc(n * sizeof *next);
  if (!next) exit(1);
  for (size_t i = 0; i < n; ++i) next[i] = i;
  uint64_t x = 88172645463325252ull;
  for (size_t i = n - 1; i > 0; --i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t j = (size_t)(x % i), t = next[i];
    next[i] = next[j];
    next[j] = t;
  }
  size_t p = 0;
  for (size_t k = 0; k < n; ++k) p = next[p]; /* warm */
  const double t0 = now_ns();
  for (size_t k = 0; k < loads; ++k) p = next[p];
  const double t1 = now_ns();
  *sink += p;
  free(next);
  return (t1 - t0) / (double)loads;
}

int main(void) {
  size_t sink = 0;
  const double mem = chase((size_t)64 << 20 >> 3, 4000000, &sink);
  const double l1 = chase((size_t)32 << 10 >> 3, 50000000, &sink);
  uint64_t h = 1;
  const size_t n = 200000000;
  const double t0 = now_ns();
  for (size_t k = 0; k < n; ++k) h = h * 6364136223846793005ull + 1442695040888963407ull;
  const double t1 = now_ns();
  printf("%.3f %.4f %.4f\n", mem, l1, (t1 - t0) / (double)n);
  fprintf(stderr, "sink %zu %llu\n", sink, (unsigned long long)h);
  return 0;
}
