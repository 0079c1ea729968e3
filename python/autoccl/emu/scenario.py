"""Scenarios for the NCCL emulator (`autoccl-emu`): dataclasses and the flat line format it reads."""

from __future__ import annotations

from dataclasses import dataclass, field

COLLS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
POLICIES = ("roundrobin", "reverse", "random", "sequential")
DTYPES = ("f32", "bf16", "f16", "i8")


@dataclass(frozen=True)
class Call:
    """One collective. `nbytes` is what NCCL hands the tuner (AllGather/ReduceScatter: the full buffer)."""

    coll: str
    nbytes: int

    def __post_init__(self) -> None:
        if self.coll not in COLLS:
            raise ValueError(f"unknown collective {self.coll!r}")
        if self.nbytes <= 0:
            raise ValueError("nbytes must be positive")


@dataclass(frozen=True)
class Comm:
    name: str
    hash: int
    ranks: tuple[int, ...]
    nnodes: int = 1
    channels: int = 24


@dataclass(frozen=True)
class Group:
    """One ncclGroupStart/End of `calls` on `comm`, issued `repeat` times (graph: captured once, replayed)."""

    comm: str
    calls: tuple[Call, ...]
    repeat: int = 1
    graph: bool = False
    load: float | None = None
    dtype: str = "f32"


@dataclass(frozen=True)
class Host:
    """Per-rank host behaviour: skew (a delay before each group, plus jitter), slow delivery of kernel
    timing events (a busy proxy thread), and `kill_after` groups the process playing the rank SIGKILLs
    itself (process mode; in thread mode it takes every rank of the process with it)."""

    delay_us: int = 0
    jitter_us: int = 0
    proxy_delay_us: int = 0
    kill_after: int | None = None

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
        if self.skew_ns < 0:
            raise ValueError("skew_ns must be >= 0")
        if self.skew_ns:
            lines.append(f"skew_ns {int(self.skew_ns)}")
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
        for g in self.groups:
            colls = ",".join(f"{c.coll}:{c.nbytes}" for c in g.calls)
            extra = f" graph={int(g.graph)}" if g.graph else ""
            if g.load is not None:
                extra += f" load={g.load}"
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
