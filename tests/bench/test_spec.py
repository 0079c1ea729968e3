from __future__ import annotations

import pytest

from autoccl.bench import spec as S


def test_parse_size_units() -> None:
    assert S.parse_size("64") == 64
    assert S.parse_size("4K") == 4096
    assert S.parse_size("1M") == 1 << 20
    assert S.parse_size("2MiB") == 2 << 20
    assert S.parse_size("1g") == 1 << 30
    for bad in ("", "x", "1.5M", "-1", "0", "1P"):
        with pytest.raises(S.SpecError):
            S.parse_size(bad)


def test_parse_sizes_ranges() -> None:
    assert S.parse_sizes("1M:1G:x2") == [1 << k for k in range(20, 31)]
    assert S.parse_sizes("1M:16M:x4") == [1 << 20, 4 << 20, 16 << 20]
    assert S.parse_sizes("1M:3M:+1M") == [1 << 20, 2 << 20, 3 << 20]
    assert S.parse_sizes("4K,1K,4K") == [1024, 4096]
    assert S.parse_sizes("1M:1G") == S.parse_sizes("1M:1G:x2")
    for bad in ("1G:1M", "1M:2M:x1", "1M:2M:*2", "1:2:3:4", ","):
        with pytest.raises(S.SpecError):
            S.parse_sizes(bad)


def test_too_many_sizes_are_refused_before_they_are_built() -> None:
    """1M:1G:+1 is a billion sizes: refused by its count, at once, not after filling the memory; so is a
    factor so near 1 that it steps by a byte, and one that is not finite."""
    assert len(S.parse_sizes("1:1000:+1")) == S.MAX_SIZES == 1000
    with pytest.raises(S.SpecError, match=r"gives 1,072,693,249 sizes, more than 1000"):
        S.parse_sizes("1M:1G:+1")
    for text in ("1:1001:+1", "1M:1G:x1.0000001", "1:600:+1,601:1200:+1", ",".join(map(str, range(1, 1002)))):
        with pytest.raises(S.SpecError, match="more than 1000"):
            S.parse_sizes(text)
    for bad in ("1M:2M:xinf", "1M:2M:xnan"):
        with pytest.raises(S.SpecError, match="finite"):
            S.parse_sizes(bad)


def test_format_size_roundtrip() -> None:
    for b in (1, 1000, 1024, 1536, 1 << 20, 3 << 30):
        assert S.parse_size(S.format_size(b)) == b


def test_collectives() -> None:
    assert S.parse_collectives("ag,RS,allreduce") == ["all_gather", "reduce_scatter", "all_reduce"]
    assert S.parse_collectives("all") == list(S.COLLECTIVES)
    with pytest.raises(S.SpecError, match="unknown collective 'allgatherv'"):
        S.parse_collectives("allgatherv")


def test_dtypes() -> None:
    assert S.parse_dtype("bfloat16") == "bf16"
    assert S.dtype_size("fp32") == 4
    with pytest.raises(S.SpecError):
        S.parse_dtype("fp8")


@pytest.mark.parametrize(
    ("coll", "n", "factor"),
    [
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 8, 0.875),
        ("all_to_all", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("reduce", 4, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_bus_factor(coll: str, n: int, factor: float) -> None:
    assert S.bus_factor(coll, n) == pytest.approx(factor)


def test_bandwidth_formulas() -> None:
    # 1 GiB all_reduce on 8 ranks in 10 ms: algbw 107.37 GB/s, busbw 1.75x that
    alg = S.algbw_gbs(1 << 30, 0.01)
    assert alg == pytest.approx(107.374182, rel=1e-6)
    assert S.busbw_gbs("all_reduce", 1 << 30, 0.01, 8) == pytest.approx(alg * 1.75)


def test_buffer_elements_follow_size_convention() -> None:
    assert S.buffer_elements("all_gather", 1 << 20, "bf16", 4) == (131072, 524288)
    assert S.buffer_elements("reduce_scatter", 1 << 20, "bf16", 4) == (524288, 131072)
    assert S.buffer_elements("all_reduce", 1 << 20, "fp32", 4) == (262144, 262144)
    assert S.buffer_elements("all_to_all", 1 << 20, "bf16", 4) == (524288, 524288)


def test_validate_cells_divisibility() -> None:
    S.validate_cells(["all_gather"], [1 << 20], "bf16", 8)
    S.validate_cells(["all_reduce", "broadcast"], [6], "bf16", 4)  # no split: only element size counts
    with pytest.raises(S.SpecError, match="not divisible by world size 3"):
        S.validate_cells(["all_gather", "all_reduce"], [1 << 20], "bf16", 3)
    with pytest.raises(S.SpecError, match="element size"):
        S.validate_cells(["all_reduce"], [6], "fp32", 2)


def test_loads() -> None:
    light = S.parse_load("light")
    assert (light.m, light.k, light.n, light.dtype) == (3456, 128, 3456, "fp16")
    assert S.parse_load("heavy").flops == 2 * 8192**3
    g = S.parse_load("gemm:64x32x16:fp32")
    assert (g.m, g.k, g.n, g.dtype, g.active) == (64, 32, 16, "fp32", True)
    assert S.parse_load("gemm:8x8x8").dtype == "bf16"
    assert not S.parse_load("none").active
    assert [ld.name for ld in S.parse_loads("none,light,none")] == ["none", "light"]
    assert S.load_from_json(g.to_json()) == g
    for bad in ("medium", "gemm:1x2", "gemm:0x1x1", "gemm:1x1x1:int8"):
        with pytest.raises(S.SpecError):
            S.parse_load(bad)
