"""What ``python -m stacks targets --long/--json`` shows for each target: its axes, the GPUs and
nodes it needs on the default instance of its GPU, and the published perf row it was qualified with."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Optional

from .. import registry
from .model import SELECT_ORDER, Target


def _dgd(t: Target) -> dict:
    from . import recipe_objects

    return next(d for d in recipe_objects(t) if d["kind"] == "DynamoGraphDeployment")


def nodes_on(t: Target, dgd: dict) -> tuple[Optional[str], Optional[int]]:
    """The default instance type of the target's GPU and the GPU nodes the DGD packs onto (None without one)."""
    from .. import gpus
    from ..cluster import pack

    instance = registry.gpu(t.gpu).instance
    if not instance:
        return None, None
    shape = gpus.INSTANCES[instance]
    nodes, too_big = pack(dgd, {"nvidia.com/gpu": shape.gpus_per_node, "vpc.amazonaws.com/efa": shape.efa_interfaces})
    return instance, None if too_big else nodes


def row(t: Target) -> dict[str, Any]:
    """One target as plain data (the ``--json`` element)."""
    from . import gpus_needed

    dgd = _dgd(t)
    instance, nodes = nodes_on(t, dgd)
    out: dict[str, Any] = {"id": t.id, "upstream": t.upstream}
    out.update({axis: t.axis(axis) for axis in SELECT_ORDER})
    out.update(gpus=gpus_needed(dgd), nodes=nodes, instance_type=instance, dgd=t.dgd_name, image=t.image,
               experimental=t.experimental, perf=asdict(t.perf) if t.perf else None,
               reference=t.reference, source=t.source, successor=t.successor,
               renamed_from=sorted(old for old, new in _renamed().items() if new == t.id))
    return out


def _renamed() -> dict[str, str]:
    from . import renamed

    return renamed()


def topology(r: dict) -> str:
    return f"{r['topology']} {r['shape']}" if r.get("shape") else r["topology"]


def perf_text(p: Optional[dict]) -> str:
    if not p:
        return "-"
    ttft = f" ttft {p['ttft_p50_ms']:g}ms" if p.get("ttft_p50_ms") is not None else ""
    return f"c={p['concurrency']}{ttft} {p['output_tok_s_per_gpu']:g} tok/s/GPU {p['tok_s_per_user']:g} tok/s/user"


COLUMNS = ("ID", "MODEL", "GPU", "TOPOLOGY", "RUNTIME", "SPEC", "GPUS", "NODES", "INSTANCE", "PUBLISHED PERF")


def table(rows: list[dict]) -> str:
    """An aligned text table of ``row`` dicts."""
    cells = [COLUMNS] + [
        (r["id"], r["model"], r["gpu"], topology(r), r["runtime"], r["spec"], str(r["gpus"]),
         "-" if r["nodes"] is None else str(r["nodes"]), r["instance_type"] or "-", perf_text(r["perf"]))
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS) - 1)]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(widths))) + "  " + c[-1] for c in cells) + "\n"
