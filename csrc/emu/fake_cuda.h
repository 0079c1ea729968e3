// A simulated subset of CUDA's driver API for the emulator (`autoccl-emu --launch-clock`): the entry points
// the plugin's launch clock looks up (csrc/nccl/launch_clock.cc), exported by the emulator executable so
// that the plugin's dlsym(RTLD_DEFAULT, ...) finds them. Streams are the emulator's per-(comm, rank) streams;
// an event recorded around a kernel launch takes that kernel's simulated times once the emulator has run it:
// recorded before the launch, the time the stream reached the launch (the end of its previous kernel); after,
// the kernel's end. Without --launch-clock every entry point answers CUDA_ERROR_NOT_INITIALIZED, so the plugin
// falls back to its kernel clock, as it does in a process without a CUDA driver.
#pragma once

#include <cstdint>

namespace emu {

struct FakeStream;

void fakeCudaEnable();
bool fakeCudaEnabled();
// A GPU running behind its host: a kernel's events complete only this long (host time) after the emulator
// ran it (`--kernel-lag-us`; 0 by default: at once).
void fakeSetKernelLag(uint64_t us);
// A stream of a rank whose device (CUDA context) is `ctx`.
FakeStream* fakeStreamNew(void* ctx);
void fakeStreamCapturing(FakeStream* s, bool capturing);
// Brackets the launch of the stream's next kernel: events recorded after fakeStreamBeginLaunch and before
// fakeStreamLaunched take the kernel's start, events recorded after fakeStreamLaunched its end. Returns the
// kernel's index on the stream.
uint64_t fakeStreamBeginLaunch(FakeStream* s);
void fakeStreamLaunched(FakeStream* s);
// The emulator ran kernel `kernel` of the stream: the stream reached it at `streamStartNs`, it ended at `stopNs`.
void fakeStreamResolve(FakeStream* s, uint64_t kernel, uint64_t streamStartNs, uint64_t stopNs);
// The calling thread's current device (what NCCL makes current before it launches on it).
void fakeSetCurrentCtx(void* ctx);

}  // namespace emu
