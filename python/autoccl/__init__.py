"""autoccl: online tuning of NCCL collectives, topology-aware collective synthesis, benchmarks."""

__version__ = "0.1.0"
