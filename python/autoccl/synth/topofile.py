"""Topology files (YAML or JSON) and generator specs -> C++ Topology, with clear validation errors.

Format (docs/synth.md):

    name: two-hosts            # optional
    description: ...           # optional free text
    defaults: {latency_us: 0.5, bandwidth_gbps: 50}   # optional, used by links that omit them
    npus: [g0, g1, g2, g3]     # or nodes: [{name: g0, kind: npu}, ...]; kinds npu, switch, nic
    switches: [sw]
    nics: []
    links:
      - {src: g0, dst: sw, bidirectional: true}                      # uses defaults
      - {src: g1, dst: sw, latency_us: 1, bandwidth_gbps: 25}        # one direction only
    dims: [2, 2]               # optional mixed-radix structure of the NPU ranks (hierarchical baseline)
    failed: {nodes: [g3], links: [[g0, sw]]}                         # optional
    # or, instead of nodes/links: generator: {kind: mesh, dims: [4, 4], bandwidth_gbps: 50, latency_us: 0.5}
"""

from __future__ import annotations

import math
import re
from typing import Any

from autoccl.synth._ext import ext

_TOP_KEYS = {
    "name",
    "defaults",
    "nodes",
    "npus",
    "switches",
    "nics",
    "links",
    "dims",
    "failed",
    "generator",
    "description",  # free text (autoccl topo writes what it detected); read by no one
}
_LINK_KEYS = {"src", "dst", "latency_us", "bandwidth_gbps", "bidirectional"}
_GEN_KEYS = {
    "kind",
    "dims",
    "bandwidth_gbps",
    "latency_us",
    "dim_bandwidth_gbps",
    "dim_latency_us",
    "dim_types",
    "degree",
    "global_bandwidth_gbps",
    "global_latency_us",
    "nic_bandwidth_gbps",
    "nic_latency_us",
    "rails",
}


# The generator keys each kind takes besides kind, dims, bandwidth_gbps and latency_us (docs/synth.md).
_DIM_KEYS = {"dim_bandwidth_gbps", "dim_latency_us"}
_KIND_KEYS: dict[str, set[str]] = {
    "ring": set(),
    "uni_ring": set(),
    "fully_connected": set(),
    "fc": set(),
    "mesh": _DIM_KEYS,
    "torus": _DIM_KEYS,
    "hypercube": _DIM_KEYS,
    "dragonfly": {"global_bandwidth_gbps", "global_latency_us"},
    "switch": set(),
    "switch_unwound": {"degree"},
    "multidim": _DIM_KEYS | {"dim_types"},
    "cluster": {"nic_bandwidth_gbps", "nic_latency_us", "rails"},
}


class TopologyFileError(ValueError):
    """A topology file or spec that does not validate."""


# A number in exponent form that YAML 1.1 (PyYAML) leaves a string: its floats need a dot and a signed
# exponent, so 1e3, 1.5e3 and 2E-1 arrive as text, while YAML 1.2 and JSON read them as numbers.
_EXPONENT_FORM = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _num(where: str, v: Any) -> float:
    if isinstance(v, str) and _EXPONENT_FORM.fullmatch(v.strip()):
        value = float(v)
        if not math.isfinite(value):
            raise TopologyFileError(f"{where}: must be a finite number, got {v!r}")
        return value
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TopologyFileError(f"{where}: must be a number, got {v!r}")
    return float(v)


def _name_list(where: str, v: Any) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(x, str | int) for x in v):
        raise TopologyFileError(f"{where}: must be a list of node names")
    return [str(x) for x in v]


def _int_list(where: str, v: Any) -> list[int]:
    if (
        not isinstance(v, list)
        or not v
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)
    ):
        raise TopologyFileError(f"{where}: must be a non-empty list of positive integers")
    return [int(x) for x in v]


def _generator(where: str, g: Any) -> Any:
    if not isinstance(g, dict):
        raise TopologyFileError(f"{where}: must be a mapping")
    unknown = set(g) - _GEN_KEYS
    own = _KIND_KEYS.get(str(g.get("kind")))
    if unknown:
        # the keys this kind takes where the kind is known: every generator's keys read as if ring took rails
        allowed = _GEN_KEYS if own is None else own | {"kind", "dims", "bandwidth_gbps", "latency_us"}
        raise TopologyFileError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    if "kind" not in g or "dims" not in g:
        raise TopologyFileError(f"{where}: needs 'kind' and 'dims'")
    if g["kind"] == "multidim" and "dim_types" not in g:
        raise TopologyFileError(
            f"{where}: multidim needs dim_types, one per dimension (ring, line, fc or switch: "
            "--gen-opt dim_types=fc,ring, or dim_types: [fc, ring] in a topology file)"
        )
    if own is not None:  # (an unknown kind: the generator's own error names the kinds)
        foreign = set(g) - own - {"kind", "dims", "bandwidth_gbps", "latency_us"}
        if foreign:
            takes = ", ".join(sorted(own)) if own else "none besides bandwidth_gbps and latency_us"
            raise TopologyFileError(
                f"{where}: '{g['kind']}' does not take {', '.join(sorted(foreign))} (its own keys: {takes})"
            )
    kw: dict[str, Any] = {}
    for key, arg in (
        ("bandwidth_gbps", "bandwidth"),
        ("latency_us", "latency"),
        ("global_bandwidth_gbps", "global_bandwidth"),
        ("global_latency_us", "global_latency"),
        ("nic_bandwidth_gbps", "nic_bandwidth"),
        ("nic_latency_us", "nic_latency"),
    ):
        if key in g:
            kw[arg] = _num(f"{where}.{key}", g[key])
    for key, arg in (("dim_bandwidth_gbps", "dim_bandwidth"), ("dim_latency_us", "dim_latency")):
        if key in g:
            if not isinstance(g[key], list):
                raise TopologyFileError(f"{where}.{key}: must be a list of numbers")
            kw[arg] = [_num(f"{where}.{key}[{i}]", x) for i, x in enumerate(g[key])]
    if "dim_types" in g:
        kw["dim_types"] = _name_list(f"{where}.dim_types", g["dim_types"])
    for key in ("degree", "rails"):
        if key in g:
            count = _num(f"{where}.{key}", g[key])
            if not count.is_integer():  # int() cut rails: 2.5 to 2
                raise TopologyFileError(f"{where}.{key}: must be a whole number, got {g[key]!r}")
            kw[key] = int(count)
    dims = _int_list(f"{where}.dims", g["dims"])  # outside the try: its error names `where` already
    try:
        return ext().generate(str(g["kind"]), dims, **kw)
    except ValueError as e:
        raise TopologyFileError(f"{where}: {e}") from e


def topology_from_dict(data: Any, source: str = "topology") -> Any:
    """Validate a parsed topology document and build the C++ Topology."""
    if not isinstance(data, dict):
        raise TopologyFileError(f"{source}: top level must be a mapping")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise TopologyFileError(f"{source}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    if "generator" in data:
        if any(k in data for k in ("nodes", "npus", "switches", "nics", "links")):
            raise TopologyFileError(f"{source}: 'generator' cannot be combined with nodes/links")
        for key, why in (
            ("defaults", "its links' latency_us and bandwidth_gbps go in the generator"),
            ("dims", "the generator gives the dims"),
        ):
            if key in data:  # they were read by no one: the file said something the topology did not do
                raise TopologyFileError(f"{source}: 'generator' cannot be combined with {key} ({why})")
        gen = _generator(f"{source}: generator", data["generator"])
        if "failed" not in data:
            if "name" in data:
                gen.name = str(data["name"])
            return gen
        # rebuild as an explicit topology so that failures can be applied
        data = {
            "nodes": [{"name": n, "kind": k} for n, k in gen.nodes],
            "links": [
                {"src": s, "dst": d, "latency_us": lat, "bandwidth_gbps": bw} for s, d, lat, bw in gen.links
            ],
            "failed": data["failed"],
            "name": data.get("name", gen.name),
        }
    t = ext().Topology()
    npus = 0  # NPUs declared (before failures): what `dims` must describe
    if "name" in data:
        t.name = str(data["name"])
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict) or set(defaults) - {"latency_us", "bandwidth_gbps"}:
        raise TopologyFileError(f"{source}: defaults may only hold latency_us and bandwidth_gbps")
    try:
        for i, node in enumerate(data.get("nodes") or []):
            if isinstance(node, str):
                t.add_node(node, "npu")
                npus += 1
                continue
            if not isinstance(node, dict) or "name" not in node or set(node) - {"name", "kind"}:
                raise TopologyFileError(f"{source}: nodes[{i}]: must be a name or {{name, kind}}")
            t.add_node(str(node["name"]), str(node.get("kind", "npu")))
            npus += str(node.get("kind", "npu")) == "npu"
        for key, kind in (("npus", "npu"), ("switches", "switch"), ("nics", "nic")):
            for name in _name_list(f"{source}: {key}", data.get(key)):
                t.add_node(name, kind)
                npus += kind == "npu"
        links = data.get("links") or []
        if not isinstance(links, list):
            raise TopologyFileError(f"{source}: links must be a list")
        for i, link in enumerate(links):
            where = f"{source}: links[{i}]"
            if isinstance(link, list) and len(link) in (2, 4):
                link = dict(zip(["src", "dst", "latency_us", "bandwidth_gbps"], link, strict=False))
            if not isinstance(link, dict):
                got = f"a list of {len(link)}" if isinstance(link, list) else repr(link)
                raise TopologyFileError(
                    f"{where}: a link is a mapping {{src, dst, latency_us, bandwidth_gbps, bidirectional}}, "
                    f"or a list [src, dst] or [src, dst, latency_us, bandwidth_gbps]; got {got}"
                )
            bad = set(link) - _LINK_KEYS
            if bad:
                raise TopologyFileError(f"{where}: unknown key(s) {sorted(bad)}")
            if "src" not in link or "dst" not in link:
                raise TopologyFileError(f"{where}: needs src and dst")
            lat = link.get("latency_us", defaults.get("latency_us"))
            bw = link.get("bandwidth_gbps", defaults.get("bandwidth_gbps"))
            if lat is None or bw is None:
                raise TopologyFileError(f"{where}: needs latency_us and bandwidth_gbps (or defaults)")
            lat_f, bw_f = _num(f"{where}.latency_us", lat), _num(f"{where}.bandwidth_gbps", bw)
            src, dst = str(link["src"]), str(link["dst"])
            both = link.get("bidirectional", False)
            if not isinstance(both, bool):  # "false" (a string) is truthy: it made links both ways
                raise TopologyFileError(f"{where}.bidirectional: must be true or false, got {both!r}")
            try:
                t.add_link(src, dst, lat_f, bw_f)
                if both:
                    t.add_link(dst, src, lat_f, bw_f)
            except ValueError as e:
                raise TopologyFileError(f"{where}: {e}") from e
        failed = data.get("failed") or {}
        if not isinstance(failed, dict) or set(failed) - {"nodes", "links"}:
            raise TopologyFileError(f"{source}: failed must be {{nodes: [...], links: [[src, dst], ...]}}")
        for name in _name_list(f"{source}: failed.nodes", failed.get("nodes")):
            t.fail_node(name)
        for i, pair in enumerate(failed.get("links") or []):
            if not isinstance(pair, list) or len(pair) != 2:
                raise TopologyFileError(f"{source}: failed.links[{i}]: must be [src, dst]")
            t.fail_link(str(pair[0]), str(pair[1]))
        if "dims" in data:
            t.dims = _int_list(f"{source}: dims", data["dims"])
            product = 1
            for d in t.dims:
                product *= d
            if product != npus:
                raise TopologyFileError(
                    f"{source}: dims {list(t.dims)} describe {product} NPUs, the file declares {npus}"
                )
        t.finalize()
    except TopologyFileError:
        raise
    except ValueError as e:
        raise TopologyFileError(f"{source}: {e}") from e
    return t


def parse_gen_spec(
    spec: str,
    bandwidth: float | None = None,
    latency: float | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """'mesh:16x16' (kind:dims) plus link parameters -> generated Topology."""
    kind, _, dims_s = spec.partition(":")
    if not dims_s:
        raise TopologyFileError(f"generator spec {spec!r}: expected kind:dims, e.g. mesh:16x16")
    try:
        dims = [int(x) for x in dims_s.lower().split("x")]
    except ValueError as e:
        raise TopologyFileError(f"generator spec {spec!r}: dims must be like 16x16") from e
    if any(d < 1 for d in dims):  # named here: the mapping's own error would read "generator 'ring:0'.dims"
        raise TopologyFileError(f"generator spec {spec!r}: every dimension must be at least 1, e.g. ring:8")
    given = sorted({"kind", "dims"} & set(options or {}))
    if given:  # they replaced the spec's: `-g ring:4 --gen-opt kind=mesh` built a mesh
        raise TopologyFileError(
            f"generator {spec!r}: the spec (kind:dims) sets kind and dims; an option may not set "
            f"{' or '.join(given)}"
        )
    g: dict[str, Any] = {"kind": kind, "dims": dims}
    if bandwidth is not None:
        g["bandwidth_gbps"] = bandwidth
    if latency is not None:
        g["latency_us"] = latency
    g.update(options or {})
    return _generator(f"generator {spec!r}", g)
