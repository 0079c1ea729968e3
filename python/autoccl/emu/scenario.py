"""Scenarios for the NCCL emulator (`autoccl-emu`): dataclasses and the flat line format it reads."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace

COLLS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
POLICIES = ("roundrobin", "reverse", "random", "sequential")
DTYPES = ("f32", "bf16", "f16", "i8")
DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i8": 1}
# NCCL's count is per rank for these: their bytes are a multiple of ranks x element size
PER_RANK_COLLS = ("allgather", "reducescatter")
WAITS = ("none", "prev", "self")
MAX_REPEAT = 10_000_000  # the emulator's bound


@dataclass(frozen=True)
class Call:
    """One collective. `nbytes` is what NCCL hands the tuner (AllGather/ReduceScatter: the full buffer)."""

    coll: str
    nbytes: int

    def __post_init__(self) -> None:
        if self.coll not in COLLS:
            raise ValueError(f"unknown collective {self.coll!r}")
        # the scenario file takes whole bytes: 1e6 was written as "1000000.0", which the emulator refuses
        if not isinstance(self.nbytes, int) or isinstance(self.nbytes, bool) or self.nbytes <= 0:
            raise ValueError(f"nbytes must be a positive int, not {self.nbytes!r}")


@dataclass(frozen=True)
class Comm:
    name: str
    hash: int
    ranks: tuple[int, ...]
    nnodes: int = 1
    channels: int = 24

    def __post_init__(self) -> None:
        # the name is one word of a key=value line: "data parallel" was read as comm "data"
        if not self.name or any(ch.isspace() or ch in "=#," for ch in self.name):
            raise ValueError(f"comm name {self.name!r} must be non-empty, without spaces, '=', '#' or ','")


@dataclass(frozen=True)
class Group:
    """One ncclGroupStart/End of `calls` on `comm`, issued `repeat` times (graph: captured once, replayed).

    Computation (docs/emulator.md): `compute_us` of work the rank enqueues on its compute stream right after
    the group. It overlaps the group's collectives unless `wait` says it needs them ("prev": the collectives
    enqueued before this group, "self": this group's); `load` is then its intensity. `step_end`: a training
    step ends when this group's collectives end (the emulator writes a "step" record)."""

    comm: str
    calls: tuple[Call, ...]
    repeat: int = 1
    graph: bool = False
    load: float | None = None
    dtype: str = "f32"
    compute_us: float = 0.0
    wait: str = "none"
    step_end: bool = False

    def __post_init__(self) -> None:
        # left to the emulator, these were refused in terms of the scenario file it was handed
        whole = isinstance(self.repeat, numbers.Integral) and not isinstance(self.repeat, bool)
        if not whole or not 1 <= self.repeat <= MAX_REPEAT:
            raise ValueError(f"repeat must be an int in [1, {MAX_REPEAT}], not {self.repeat!r}")
        if self.load is not None:
            _check_load("load", self.load)
        if self.wait not in WAITS:
            raise ValueError(f"wait must be one of {WAITS}, not {self.wait!r}")
        if self.compute_us < 0:
            raise ValueError("compute_us must be >= 0")
        if self.graph and (self.compute_us or self.wait != "none" or self.step_end):
            raise ValueError("a graph group cannot carry computation (compute_us, wait, step_end)")


@dataclass(frozen=True)
class Host:
    """Per-rank host behaviour: skew (a delay before each group, plus jitter), slow delivery of kernel
    timing events (a busy proxy thread), and `kill_after` groups the process playing the rank SIGKILLs
    itself (process mode; in thread mode it takes every rank of the process with it). `hidden_pct`: this
    rank's kernels hold their stream that percentage of the scenario's `hidden_ns` (a plan that slows one
    rank alone)."""

    delay_us: int = 0
    jitter_us: int = 0
    proxy_delay_us: int = 0
    kill_after: int | None = None
    hidden_pct: int = 100

    def args(self) -> str:
        out = []
        for key in ("delay_us", "jitter_us", "proxy_delay_us"):
            v = int(getattr(self, key))
            if v < 0:
                raise ValueError(f"{key} must be >= 0")
            if v:
                out.append(f"{key}={v}")
        if self.kill_after is not None:
            if self.kill_after < 0:
                raise ValueError("kill_after must be >= 0")
            out.append(f"kill_after={self.kill_after}")
        if self.hidden_pct != 100:
            if not 0 <= self.hidden_pct <= 10_000_000:
                raise ValueError("hidden_pct must be in [0, 10000000]")
            out.append(f"hidden_pct={self.hidden_pct}")
        return " ".join(out)


@dataclass
class Scenario:
    comms: list[Comm]
    groups: list[Group]
    seed: int = 1
    runahead: int = 2
    reorder: int = 1
    noise: bool = True
    load: float = 0.0
    gap_ns: int = 2000
    # > 0: ranks reach each kernel up to this many ns apart (uniform per rank and kernel); a rank's kernel
    # window includes its wait for the last one, as in a training step with rank skew
    skew_ns: int = 0
    # > 0: the log-normal sigma of every kernel's and computation's noise in place of the model's (3 %);
    # 0.15 moves a call by about +-30 % at two sigmas (+35 % / -26 %); needs noise on
    noise_sigma: float = 0.0
    # > 1: a kernel whose configuration differs from its task's previous call's on that rank runs this many
    # times as long, inside its channel window (a configuration whose first call after a switch is slow)
    switch_factor: float = 1.0
    # the rank threads of one emulator process start calling only once all have created their
    # communicators (ncclCommInitAll); otherwise each starts as soon as its own are created
    init_barrier: bool = False
    # > 0: no rank thread starts a communicator's group more than `lead` groups ahead of the slowest rank of
    # that communicator in the same emulator process (finite launch queues, per-step host syncs); 0: unbounded
    lead: int = 0
    # (algorithm, protocol or "" for all) -> ns a kernel holds its stream outside its channel timestamps
    hidden_ns: dict[tuple[str, str], int] = field(default_factory=dict)
    orders: dict[int, str] = field(default_factory=dict)
    hosts: dict[int, Host] = field(default_factory=dict)

    @property
    def world(self) -> list[int]:
        return sorted({r for c in self.comms for r in c.ranks})

    def to_text(self) -> str:
        lines = [
            "autoccl-emu-scenario 1",
            f"seed {self.seed}",
            f"runahead {self.runahead}",
            f"reorder {self.reorder}",
            f"noise {1 if self.noise else 0}",
            f"load {self.load}",
            f"gap_ns {self.gap_ns}",
        ]
        _check_load("Scenario.load", self.load)
        if self.skew_ns < 0:
            raise ValueError("skew_ns must be >= 0")
        if self.skew_ns:
            lines.append(f"skew_ns {int(self.skew_ns)}")
        if not 0 <= self.noise_sigma <= 1 or self.noise_sigma != self.noise_sigma:
            raise ValueError(f"noise_sigma must be in [0, 1] (0: the model's), not {self.noise_sigma}")
        if self.noise_sigma and not self.noise:
            raise ValueError("noise_sigma needs noise on (noise=False plays the noiseless model)")
        if self.noise_sigma:
            lines.append(f"noise_sigma {float(self.noise_sigma)!r}")
        if not 1 <= self.switch_factor <= 1000:
            raise ValueError(f"switch_factor must be in [1, 1000], not {self.switch_factor}")
        if self.switch_factor != 1:
            lines.append(f"switch_factor {float(self.switch_factor)!r}")
        if self.init_barrier:
            lines.append("init_barrier 1")
        if self.lead < 0:
            raise ValueError("lead must be >= 0")
        if self.lead:
            lines.append(f"lead {int(self.lead)}")
        for (algo, proto), ns in sorted(self.hidden_ns.items()):
            lines.append(f"hidden algo={algo}" + (f" proto={proto}" if proto else "") + f" ns={int(ns)}")
        for c in self.comms:
            ranks = ",".join(str(r) for r in c.ranks)
            lines.append(
                f"comm name={c.name} hash={c.hash:#x} ranks={ranks} nnodes={c.nnodes} channels={c.channels}"
            )
        ranks_of = {c.name: len(c.ranks) for c in self.comms}
        for g in self.groups:
            if g.comm not in ranks_of:
                names = ", ".join(ranks_of)
                raise ValueError(f"group comm {g.comm!r} is no comm of the scenario (comms: {names})")
            _check_whole_elements(g, ranks_of[g.comm])
            colls = ",".join(f"{c.coll}:{c.nbytes}" for c in g.calls)
            extra = f" graph={int(g.graph)}" if g.graph else ""
            if g.load is not None:
                extra += f" load={g.load}"
            if g.compute_us:
                extra += f" compute={g.compute_us:g}"
            if g.wait != "none":
                extra += f" wait={g.wait}"
            if g.step_end:
                extra += " step=1"
            lines.append(f"group comm={g.comm} colls={colls} repeat={g.repeat} dtype={g.dtype}{extra}")
        for rank, policy in sorted(self.orders.items()):
            if policy not in POLICIES:
                raise ValueError(f"unknown order policy {policy!r}")
            lines.append(f"order rank={rank} policy={policy}")
        for rank, host in sorted(self.hosts.items()):
            args = host.args()
            if args:
                lines.append(f"host rank={rank} {args}")
        return "\n".join(lines) + "\n"


def simple(
    colls: dict[str, list[int]] | None = None,
    *,
    nranks: int = 4,
    ncomms: int = 1,
    repeat: int = 20,
    seed: int = 1,
    runahead: int = 2,
    reorder: int = 1,
    channels: int = 24,
) -> Scenario:
    """nranks x ncomms, each comm repeating the same single-collective groups (tests, demo)."""
    colls = colls or {"allreduce": [1 << 20, 64 << 20]}
    comms = [
        Comm(name=f"c{i}", hash=0xA0C0_0000 + 0x1111 * (i + 1), ranks=tuple(range(nranks)), channels=channels)
        for i in range(ncomms)
    ]
    groups = [
        Group(comm=c.name, calls=(Call(coll, n),), repeat=repeat)
        for c in comms
        for coll, sizes in colls.items()
        for n in sizes
    ]
    return Scenario(comms=comms, groups=groups, seed=seed, runahead=runahead, reorder=reorder)


def ddp_like(
    *,
    nranks: int = 2,
    steps: int = 60,
    bucket_bytes: tuple[int, ...] = (25 << 20, 25 << 20, 25 << 20, 6 << 20),
    forward_us: float = 2000.0,
    backward_us: float = 4000.0,
    load: float = 0.35,
    seed: int = 1,
    channels: int = 24,
    noise: bool = True,
    waited: tuple[int, ...] = (),
) -> Scenario:
    """A DDP training step: forward, then backward in chunks, each gradient bucket's all_reduce launched when
    its chunk is done and hidden under the next chunk; the last bucket's is exposed (the optimizer needs all
    of them). The step ends with the last all_reduce. `waited`: buckets whose next chunk needs their
    all_reduce first (exposed wherever the all_reduce ends after the chunk before it)."""
    comm = Comm(name="dp", hash=0xDD9_0001, ranks=tuple(range(nranks)), channels=channels)
    n = len(bucket_bytes)
    if n < 1:
        raise ValueError("ddp_like needs at least one bucket")
    if any(not 0 <= b < n for b in waited):
        raise ValueError(f"waited buckets must be in [0, {n}), not {waited}")
    chunk = backward_us / n
    groups: list[Group] = []
    for _ in range(steps):
        for b, nbytes in enumerate(bucket_bytes):
            last = b == n - 1
            groups.append(
                Group(
                    comm="dp",
                    calls=(Call("allreduce", nbytes),),
                    load=load,
                    # under bucket b: the next chunk; after the last: the optimizer, forward and first chunk
                    compute_us=forward_us + chunk if last else chunk,
                    wait="self" if last or b in waited else "none",
                    step_end=last,
                )
            )
    return Scenario(comms=[comm], groups=groups, seed=seed, noise=noise, lead=2)


def fsdp_like(
    *,
    nranks: int = 2,
    steps: int = 40,
    layers: int = 6,
    shard_bytes: int = 32 << 20,
    forward_us: float = 600.0,
    backward_us: float = 1200.0,
    load: float = 0.35,
    seed: int = 1,
    channels: int = 24,
    noise: bool = True,
) -> Scenario:
    """An FSDP training step over `layers` layers: forward gathers each layer's parameters (all_gather) one
    layer ahead, under the previous layer's computation, which waits for its own; the last layer's forward
    and backward run under one more all_gather (the layer below's parameters, gathered again for backward;
    the other layers' backward gathers are left out); each layer's gradients are reduce-scattered under the
    next lower layer's backward, and the last reduce_scatter is exposed."""
    comm = Comm(name="fsdp", hash=0xF5D9_0001, ranks=tuple(range(nranks)), channels=channels)
    if layers < 2:
        raise ValueError("fsdp_like needs at least 2 layers")
    ag, rs = Call("allgather", shard_bytes), Call("reducescatter", shard_bytes)
    groups: list[Group] = []
    for _ in range(steps):
        groups.append(Group(comm="fsdp", calls=(ag,), load=load))  # layer 0's parameters
        for _layer in range(layers - 1):  # gather layer+1 under layer's forward, which waits for its own
            groups.append(Group(comm="fsdp", calls=(ag,), load=load, compute_us=forward_us, wait="prev"))
        # backward from the last layer: its forward and backward wait for its parameters, then each
        # layer's gradients are reduce-scattered under the next (lower) layer's backward
        last = forward_us + backward_us
        groups.append(Group(comm="fsdp", calls=(ag,), load=load, compute_us=last, wait="prev"))
        for _layer in range(layers - 1):
            groups.append(Group(comm="fsdp", calls=(rs,), load=load, compute_us=backward_us))
        groups.append(Group(comm="fsdp", calls=(rs,), load=load, wait="self", step_end=True))
    return Scenario(comms=[comm], groups=groups, seed=seed, noise=noise, lead=2)


def pipeline_like(
    *,
    nranks: int = 2,
    steps: int = 40,
    stages: int = 4,
    stage: int = 0,
    microbatches: int = 8,
    layers: int = 2,
    activation_bytes: int = 8 << 20,
    forward_call: Call | None = None,
    backward_call: Call | None = None,
    forward_us: float = 150.0,
    backward_us: float = 300.0,
    load: float = 0.35,
    seed: int = 1,
    channels: int = 24,
    noise: bool = True,
) -> Scenario:
    """One stage of a pipeline-parallel job under the 1F1B schedule, as its tensor-parallel communicator sees
    a step: `stages - stage - 1` warm-up forwards, then a forward and a backward in turn for the remaining
    microbatches, then the warm-up's backwards. A microbatch's forward through a layer all-gathers its
    activations (sequence parallelism), and the layer's computation waits for them; its backward through a
    layer reduce-scatters the gradients under the next layer's backward, the last of a pass exposed. The step
    ends with the stage's last collective (the activations to and from the neighbouring stages are
    point-to-point, which NCCL does not ask a tuner about, and are left out). `forward_call` and
    `backward_call` replace the two collectives (e.g. all_reduces, tensor parallelism without sequence
    parallelism)."""
    if not 0 <= stage < stages:
        raise ValueError(f"stage must be in [0, {stages}), not {stage}")
    if microbatches < 1 or layers < 1:
        raise ValueError("pipeline_like needs at least one microbatch and one layer")
    comm = Comm(name="tp", hash=0x919E_0001 + stage, ranks=tuple(range(nranks)), channels=channels)
    ag = forward_call or Call("allgather", activation_bytes)
    rs = backward_call or Call("reducescatter", activation_bytes)
    warmup = min(stages - stage - 1, microbatches)

    def forward() -> list[Group]:
        fwd = Group(comm="tp", calls=(ag,), load=load, compute_us=forward_us, wait="self")
        return [fwd] * layers

    def backward() -> list[Group]:
        hidden = Group(comm="tp", calls=(rs,), load=load, compute_us=backward_us)
        return [hidden] * (layers - 1) + [replace(hidden, wait="self")]

    groups: list[Group] = []
    for _ in range(steps):
        step: list[Group] = []
        for _ in range(warmup):
            step += forward()
        for _ in range(microbatches - warmup):
            step += forward() + backward()
        for _ in range(warmup):
            step += backward()
        step[-1] = replace(step[-1], step_end=True)
        groups += step
    return Scenario(comms=[comm], groups=groups, seed=seed, noise=noise, lead=2)


def whole_elements(coll: str, nbytes: int, ranks: int, dtype: str = "f32") -> int:
    """NBYTES rounded down to a size NCCL can be called with (as nccl-tests rounds): whole elements of DTYPE,
    and for all-gather / reduce-scatter the same whole number of them on each of RANKS ranks."""
    unit = DTYPE_BYTES[dtype] * (ranks if coll in PER_RANK_COLLS else 1)
    return nbytes - nbytes % unit


def _check_load(name: str, load: float) -> None:
    # inf made every kernel time infinite; nan and negative loads have no meaning
    if isinstance(load, bool) or not isinstance(load, numbers.Real) or not math.isfinite(load) or load < 0:
        raise ValueError(f"{name} must be a finite number >= 0, not {load!r}")


def _check_whole_elements(g: Group, ranks: int) -> None:
    if g.dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {g.dtype!r}: expected one of {', '.join(DTYPES)}")
    for c in g.calls:
        if whole_elements(c.coll, c.nbytes, ranks, g.dtype) != c.nbytes:
            per = f"{ranks} ranks x " if c.coll in PER_RANK_COLLS else ""
            raise ValueError(
                f"{c.coll} of {c.nbytes} bytes on comm {g.comm}: not a multiple of {per}"
                f"{DTYPE_BYTES[g.dtype]}-byte elements ({g.dtype})"
            )
