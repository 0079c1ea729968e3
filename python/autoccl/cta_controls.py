"""Which CTA (channel) controls each NCCL version offers an application, read from NCCL's public header.

NCCL runs a collective's channels as CTAs (thread blocks) on the GPU's SMs. An application can bound them per
communicator (`ncclConfig_t`, given at creation) and, from NCCL 2.31, per call (`ncclCollConfig_t`, given to
the `nccl*Config` variant of a collective). autoccl sets the channel count of each call through its tuner
(`getCollInfo`'s `nChannels`, every NCCL it supports) and raises the communicators' count through
`NCCL_MIN_CTAS`/`NCCL_MAX_CTAS` (`--channel-ceiling`); it uses neither of the application's controls. What
each version allows, and what autoccl does with it: docs/cta-controls.md.

The tables below were read from `include/nccl.h` of the nvidia-nccl-cu12 wheels 2.16.5, 2.17.1, 2.18.3,
2.19.3, 2.20.5, 2.21.5, 2.22.3, 2.23.4, 2.24.3, 2.25.1, 2.26.5, 2.27.3, 2.27.7, 2.28.3, 2.28.9, 2.29.2,
2.29.7, 2.30.3, 2.30.7, 2.31.2 and 2.32.3 (nvidia-nccl-cu13 2.28.9 and 2.31.2: the same header as cu12's;
2.32.6: the same but for its version) by `scripts/nccl_cta_table.py`, which prints them and checks them
(`--check`). Each entry is the first version read that has it: a feature listed from 2.27 was seen in
2.27.3, the first 2.27 wheel, and in no 2.26 one. A version newer than the newest read is said to offer *at
least* the newest's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# The newest NCCL (major, minor) whose header was read; a newer one may have more.
NEWEST_READ = (2, 32)
NEWEST_READ_TEXT = "2.32.3"

# ncclConfig_t's fields that bound a communicator's CTAs or channels, by the first version that has them.
COMM_FIELDS_SINCE: Mapping[str, int] = {
    "cgaClusterSize": 21700,
    "minCTAs": 21700,
    "maxCTAs": 21700,
    "CTAPolicy": 22700,
    "nvlsCTAs": 22700,
    "nChannelsPerNetPeer": 22800,
}
# The values of CTAPolicy the header defines (its comment: "NCCL performance policy"; it says nothing more).
POLICIES_SINCE: Mapping[str, int] = {
    "NCCL_CTA_POLICY_DEFAULT": 22700,
    "NCCL_CTA_POLICY_EFFICIENCY": 22700,
    "NCCL_CTA_POLICY_ZERO": 22800,
}
# The entry points that take an ncclConfig_t (ncclCommInitRankConfig: in every header read; ncclCommSplit's,
# ncclCommShrink's and ncclCommGrow's NULL config inherits the parent's).
COMM_ENTRY_POINTS_SINCE: Mapping[str, int] = {
    "ncclCommInitRankConfig": 0,
    "ncclCommSplit": 21800,
    "ncclCommInitRankScalable": 22300,
    "ncclCommShrink": 22700,
    "ncclCommGrow": 22900,
}
# Per call: ncclCollConfig_t (2.31.2: ncclCollConfig_v23100; 2.32.3: _v23200, which adds
# launchCompletionEvent), its CTA fields (its maxCTAs "must be <= comm->maxCTAs"; CTAPolicy UNDEF inherits the
# communicator's), and the collectives that take it. There is no ncclSendConfig or ncclRecvConfig.
PER_CALL_SINCE = 23100
PER_CALL_FIELDS = ("minCTAs", "maxCTAs", "nvlsCTAs", "cgaClusterSize", "CTAPolicy")
PER_CALL_ENTRY_POINTS = (
    "ncclAllReduceConfig",
    "ncclBroadcastConfig",
    "ncclReduceConfig",
    "ncclAllGatherConfig",
    "ncclReduceScatterConfig",
    "ncclAlltoAllConfig",
    "ncclGatherConfig",
    "ncclScatterConfig",
)

# The CTA attributes of PyTorch's ProcessGroupNCCL.Options().config (the ncclConfig_t it creates
# communicators with) and the ncclConfig_t field each sets. PyTorch 2.11.0+cu130 (built with NCCL 2.28.9),
# imported: blocking, cga_cluster_size, collnet_enable, cta_policy, max_ctas, min_ctas, net_name, nvls_ctas,
# split_share, traffic_class, and ProcessGroupNCCL.NCCL_CTA_POLICY_DEFAULT/EFFICIENCY/ZERO (0, 1, 2); its
# libtorch_cuda.so calls ncclCommInitRankConfig and ncclCommSplit and no nccl*Config collective.
TORCH_CTA_ATTRIBUTES: Mapping[str, str] = {
    "cga_cluster_size": "cgaClusterSize",
    "min_ctas": "minCTAs",
    "max_ctas": "maxCTAs",
    "cta_policy": "CTAPolicy",
    "nvls_ctas": "nvlsCTAs",
}


@dataclass(frozen=True)
class CtaControls:
    """What one NCCL version offers, as the tables above say."""

    version: int  # NCCL's version code
    comm_fields: tuple[str, ...]  # ncclConfig_t's CTA fields
    policies: tuple[str, ...]  # NCCL_CTA_POLICY_* defined
    comm_entry_points: tuple[str, ...]  # the entry points taking an ncclConfig_t
    per_call_fields: tuple[str, ...]  # ncclCollConfig_t's CTA fields; () where there is none
    per_call_entry_points: tuple[str, ...]
    newer_than_read: bool  # newer than the newest header read: at least these

    @property
    def per_call(self) -> bool:
        return bool(self.per_call_fields)


def _since(table: Mapping[str, int], version: int) -> tuple[str, ...]:
    return tuple(name for name, since in table.items() if version >= since)


def minor_of(version: int) -> tuple[int, int]:
    return version // 10000, version % 10000 // 100


def controls_of(version: int) -> CtaControls:
    """The CTA controls of NCCL `version` (a version code: 22809 for 2.28.9)."""
    per_call = version >= PER_CALL_SINCE
    return CtaControls(
        version=version,
        comm_fields=_since(COMM_FIELDS_SINCE, version),
        policies=_since(POLICIES_SINCE, version),
        comm_entry_points=_since(COMM_ENTRY_POINTS_SINCE, version),
        per_call_fields=PER_CALL_FIELDS if per_call else (),
        per_call_entry_points=PER_CALL_ENTRY_POINTS if per_call else (),
        newer_than_read=minor_of(version) > NEWEST_READ,
    )


def policy_names(policies: tuple[str, ...]) -> str:
    """`NCCL_CTA_POLICY_DEFAULT`, ... as `DEFAULT, EFFICIENCY`."""
    return ", ".join(p.removeprefix("NCCL_CTA_POLICY_") for p in policies)


def comm_text(c: CtaControls) -> str:
    """The communicator's controls in one phrase."""
    if not c.comm_fields:
        return "ncclConfig_t has no CTA field (minCTAs, maxCTAs and cgaClusterSize came in 2.17)"
    fields = ", ".join(
        f"CTAPolicy ({policy_names(c.policies)})" if f == "CTAPolicy" else f for f in c.comm_fields
    )
    return f"ncclConfig_t {fields} (at {', '.join(c.comm_entry_points)})"


def per_call_text(c: CtaControls) -> str:
    """The per-call controls in one phrase."""
    if not c.per_call:
        return "none (ncclCollConfig_t came in 2.31)"
    return (
        f"ncclCollConfig_t {', '.join(c.per_call_fields)} (through the nccl*Config collectives: "
        f"{', '.join(e.removeprefix('nccl').removesuffix('Config') for e in c.per_call_entry_points)}; "
        "no send/recv)"
    )
