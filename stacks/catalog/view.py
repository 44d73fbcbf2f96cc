"""What ``dynamo-stacks targets`` shows for each target: its axes, the GPUs and nodes it needs on the default
instance of its GPU, and the published perf row it was qualified with (the CLI adds the $/h of those nodes)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Optional

from stacks import registry
from stacks.catalog.model import SELECT_ORDER, Target


def _dgd(t: Target) -> dict:
    from stacks.catalog import recipe_objects

    return next(d for d in recipe_objects(t) if d["kind"] == "DynamoGraphDeployment")


def nodes_on(t: Target, dgd: dict) -> tuple[Optional[str], Optional[int]]:
    """The default instance type of the target's GPU and the GPU nodes the DGD packs onto (None without one)."""
    from stacks.registry import gpus
    from stacks.catalog.fit import pack

    instance = registry.gpu(t.gpu).instance
    if not instance:
        return None, None
    shape = gpus.INSTANCES[instance]
    nodes, too_big = pack(dgd, {"nvidia.com/gpu": shape.gpus_per_node, "vpc.amazonaws.com/efa": shape.efa_interfaces})
    return instance, None if too_big else nodes


def row(t: Target) -> dict[str, Any]:
    """One target as plain data (the ``--json`` element)."""
    from stacks.catalog import gpus_needed

    dgd = _dgd(t)
    instance, nodes = nodes_on(t, dgd)
    out: dict[str, Any] = {"id": t.id, "upstream": t.upstream}
    out.update({axis: t.axis(axis) for axis in SELECT_ORDER})
    out.update(
        gpus=gpus_needed(dgd),
        nodes=nodes,
        instance_type=instance,
        dgd=t.dgd_name,
        image=t.image,
        experimental=t.experimental,
        perf=asdict(t.perf) if t.perf else None,
        reference=t.reference,
        source=t.source,
        successor=t.successor,
        renamed_from=sorted(old for old, new in _renamed().items() if new == t.id),
    )
    return out


def _renamed() -> dict[str, str]:
    from stacks.catalog import renamed

    return renamed()


def topology(r: dict) -> str:
    return f"{r['topology']} {r['shape']}" if r.get("shape") else r["topology"]


def perf_text(p: Optional[dict]) -> str:
    if not p:
        return "-"
    ttft = f" ttft {p['ttft_p50_ms']:g}ms" if p.get("ttft_p50_ms") is not None else ""
    return f"c={p['concurrency']}{ttft} {p['output_tok_s_per_gpu']:g} tok/s/GPU {p['tok_s_per_user']:g} tok/s/user"


def _usd(r: dict) -> str:
    return "-" if r.get("usd_per_hour") is None else f"{r['usd_per_hour']:.2f}"


# A table's columns: (header, cell of a ``row`` dict). ``usd_per_hour`` is added by the CLI, which reads the prices.
SHORT = (
    ("ID", lambda r: r["id"]),
    ("GPUS", lambda r: str(r["gpus"])),
    ("NODES", lambda r: "-" if r["nodes"] is None else str(r["nodes"])),
    ("INSTANCE", lambda r: r["instance_type"] or "-"),
    ("$/H", _usd),
)
LONG = (
    SHORT[0],
    ("MODEL", lambda r: r["model"]),
    ("GPU", lambda r: r["gpu"]),
    ("TOPOLOGY", topology),
    ("RUNTIME", lambda r: r["runtime"]),
    ("SPEC", lambda r: r["spec"]),
    *SHORT[1:],
    ("PUBLISHED PERF", lambda r: perf_text(r["perf"])),
)


def table(rows: list[dict], columns=LONG) -> str:
    """An aligned text table of ``row`` dicts (the last column is not padded)."""
    cells = [tuple(h for h, _ in columns)] + [tuple(cell(r) for _, cell in columns) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns) - 1)]
    return "\n".join("  ".join([c[i].ljust(widths[i]) for i in range(len(widths))] + [c[-1]]) for c in cells) + "\n"
