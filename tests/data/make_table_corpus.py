"""Writes tests/data/tables/: tables both validators must accept (good-*) or refuse (bad-*).

The C++ library (csrc/engine/tests/test_cache.cc, case `corpus`) and the Python CLI
(tests/cli/test_tables.py) read the same files: one schema, one verdict. Rerun after changing a case:
    python tests/data/make_table_corpus.py
"""

from __future__ import annotations

from pathlib import Path

from autoccl.tables import fingerprint_of

OUT = Path(__file__).resolve().parent / "tables"
META = {"gpu": "NVIDIA H200", "gpus": "4", "nccl": "22809", "ranks": "4", "nodes": "1", "nvl_domains": "1"}
FP = fingerprint_of(META)
HEAD = (
    f"# autoccl table v1\nfingerprint {FP}\n"
    'meta gpu="NVIDIA H200" gpus=4 nccl=22809 ranks=4 nodes=1 nvl_domains=1 created=2026-11-21T19:00:00Z\n'
)
TASK = (
    "task coll=allreduce bytes=67108864 pipe=1 algo=ring proto=simple channels=32 chunk=0 time_us=412.5 "
    "nccl_us=455.0 samples=40\n"
)
QUOTED = {**META, "gpu": 'GPU "x" \\ y'}


def task(fields: str) -> str:
    return HEAD + fields + "\n"


GOOD = {
    "basic": HEAD + TASK,
    "halvings": task(
        "task coll=reducescatter bytes=67108864 pipe=1 algo=ring proto=simple channels=64 chunk=0 "
        "chunk_halvings=2 time_us=301.2 nccl_us=330.0 samples=12"
    ),
    "nccl-spelling": task("task coll=ALL_REDUCE bytes=1048576 algo=NVLS_TREE proto=LL128 channels=0"),
    "comments-blank-lines": "\n\n" + HEAD + "# a comment\n\n" + TASK + "\r\n",
    "chunk-bytes": task(
        "task coll=allgather bytes=4096 algo=ring proto=ll128 chunk=65536 time_us=1e3 nccl_us=.5"
    ),
    "no-tasks": HEAD,
    "pairs": HEAD
    + TASK
    + "pair coll=allreduce bytes=67108864 pipe=1 algo=ring proto=ll time_us=1650.0 nccl_us=455.0 samples=3\n"
    + "pair coll=allgather bytes=8388608 algo=RING proto=LL128 time_us=80.5 nccl_us=60 samples=6\n",
    "quoted-gpu": f"# autoccl table v1\nfingerprint {fingerprint_of(QUOTED)}\n"
    'meta gpu="GPU \\"x\\" \\\\ y" gpus=4 nccl=22809 ranks=4 nodes=1 nvl_domains=1\n',
}
BAD = {
    "empty": "",
    "binary-garbage": "\x00\x01\x02 binary \xff garbage\n",
    "header-v2": HEAD.replace("v1", "v2"),
    "no-meta": f"# autoccl table v1\nfingerprint {FP}\n",
    "no-fingerprint": HEAD.replace(f"fingerprint {FP}\n", ""),
    "fingerprint-not-hex": HEAD.replace(FP, "XYZ"),
    "another-machines-meta": HEAD.replace("gpus=4", "gpus=8") + TASK,
    "fingerprint-line-tampered": HEAD.replace(FP, "0123456789abcdef") + TASK,
    "algo-bogus": task("task coll=allreduce bytes=1024 algo=bogus proto=simple"),
    "channels-negative": task("task coll=allreduce bytes=1024 algo=ring proto=simple channels=-5"),
    "channels-65": task("task coll=allreduce bytes=1024 algo=ring proto=simple channels=65"),
    "time-nan": task("task coll=allreduce bytes=1024 algo=ring proto=simple time_us=nan"),
    "time-inf": task("task coll=allreduce bytes=1024 algo=ring proto=simple nccl_us=inf"),
    "time-negative": task("task coll=allreduce bytes=1024 algo=ring proto=simple time_us=-1"),
    "time-hex": task("task coll=allreduce bytes=1024 algo=ring proto=simple time_us=0x10"),
    "time-huge": task("task coll=allreduce bytes=1024 algo=ring proto=simple time_us=1e13"),
    "halvings-99": task("task coll=allreduce bytes=1024 algo=ring proto=simple chunk_halvings=99"),
    "chunk-small": task("task coll=allreduce bytes=1024 algo=ring proto=simple chunk=100"),
    "chunk-and-halvings": task(
        "task coll=allreduce bytes=1024 algo=ring proto=simple chunk=65536 chunk_halvings=1"
    ),
    "bytes-zero": task("task coll=allreduce bytes=0 algo=ring proto=simple"),
    "bytes-overflow": task("task coll=allreduce bytes=18446744073709551616 algo=ring proto=simple"),
    "bytes-signed": task("task coll=allreduce bytes=+1024 algo=ring proto=simple"),
    "no-proto": task("task coll=allreduce bytes=1024 algo=ring"),
    "coll-unknown": task("task coll=alltoall bytes=1024 algo=ring proto=simple"),
    "unknown-task-field": task("task coll=allreduce bytes=1024 algo=ring proto=simple chanels=8"),
    "unknown-meta-field": HEAD.replace("nvl_domains=1", "nvl_domains=1 color=red"),
    "unknown-line": task("bogus line"),
    "unterminated-quote": task('task coll=allreduce bytes=1024 algo=ring proto="simple'),
    "meta-gpus-huge": HEAD.replace("gpus=4", "gpus=99999999"),
    "pipe-huge": task("task coll=allreduce bytes=1024 algo=ring proto=simple pipe=2000000"),
    "pair-no-nccl-time": task("pair coll=allreduce bytes=1024 algo=ring proto=ll time_us=10"),
    "pair-channels": task("pair coll=allreduce bytes=1024 algo=ring proto=ll time_us=1 nccl_us=5 channels=8"),
    "pair-proto-unknown": task("pair coll=allreduce bytes=1024 algo=ring proto=ll64 time_us=10 nccl_us=5"),
    "pair-time-inf": task("pair coll=allreduce bytes=1024 algo=ring proto=ll time_us=inf nccl_us=5"),
    "pair-bytes-zero": task("pair coll=allreduce bytes=0 algo=ring proto=ll time_us=10 nccl_us=5"),
}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.table"):
        old.unlink()
    for prefix, cases in (("good", GOOD), ("bad", BAD)):
        for name, text in cases.items():
            (OUT / f"{prefix}-{name}.table").write_bytes(
                text.encode("latin-1" if "\xff" in text else "utf-8")
            )
    print(f"{len(GOOD)} good, {len(BAD)} bad tables in {OUT}")


if __name__ == "__main__":
    main()
