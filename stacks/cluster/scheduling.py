"""Would the target's pods schedule on its cluster shape? A small, pure model of the scheduler's
filters that matter here: node selectors, required node affinity, taints/tolerations and
extended-resource capacity (GPUs, EFA, RDMA), with first-fit packing of GPU pods onto nodes."""

from __future__ import annotations

from typing import Iterable

from stacks import catalog, registry
from stacks.catalog.model import Target
from stacks.cluster import POOL_LABEL, EksConfig, NodeShape, build_cluster_plan, gpu_taint_for
from stacks.registry.gpus import default_shape

SYSTEM = NodeShape("system", {POOL_LABEL: "system", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}, [], {}, 2)
EXTENDED_SKIP = {"cpu", "memory", "ephemeral-storage", "hugepages-2Mi"}

# Existing clusters of the fabrics no plan of ours builds: GPUs per node, kubernetes arch, extended resources beyond
# nvidia.com/gpu, extra labels the recipes of that fabric select on. "none" is the existing cluster of a GPU
# registered without instance data (with instance data, "none" and "aws-efa" run on the EKS plan).
EXISTING_FABRICS: dict[str, tuple[int, str, dict[str, int], dict[str, str]]] = {
    "infiniband": (8, "amd64", {"rdma/ib": 1000}, {}),
    "gke-rdma": (
        4,
        "arm64",
        {f"networking.gke.io.networks/rdma-{i}{s}": 1 for i in range(4) for s in ("", ".IP")},
        {"cloud.google.com/gke-accelerator": "nvidia-gb200"},
    ),
    "nscale": (8, "amd64", {"rdma/shared_ib": 1000}, {"node.kubernetes.io/instance-type": "g.192.b200.8"}),
    "none": (8, "amd64", {}, {}),
}


def default_eks_config(t: Target) -> EksConfig:
    """The EKS settings a target gets by default: on-demand, except UltraServer GPUs (GB200), which are sold
    only as Capacity Blocks (a placeholder reservation id; stacks name their own). A GPU without instance data
    gets the plain settings, and the EKS plan refuses it by name."""
    shape = default_shape(t.gpu)
    if shape is not None and shape.ultraserver:
        return EksConfig(market_type="capacity-block", capacity_reservation_id="cr-00000000000000000")
    return EksConfig()


def on_eks_by_default(t: Target) -> bool:
    """Whether the target's default cluster is the EKS plan: an AWS fabric, on a GPU with instance data (EFA
    targets always: their fabric is EC2's, and the EKS plan refuses a GPU without an instance by name)."""
    return t.fabric == "aws-efa" or (t.fabric == "none" and default_shape(t.gpu) is not None)


def _existing_gpu_shape(t: Target, gpus: int) -> NodeShape:
    per_node, arch, capacity, extra_labels = EXISTING_FABRICS[t.fabric]
    taint = gpu_taint_for(t)
    labels = {
        "nvidia.com/gpu.product": registry.label(t.gpu),
        "nvidia.com/gpu.present": "true",
        "kubernetes.io/arch": arch,
        **extra_labels,
    }
    return NodeShape(
        "gpu",
        labels,
        [{"key": taint["key"], "value": taint["value"], "effect": "NoSchedule"}],
        {"nvidia.com/gpu": per_node, **capacity},
        max(1, -(-gpus // per_node)),
    )


def default_shapes(t: Target) -> list[NodeShape]:
    """The node shapes a target runs on by default: the EKS plan for AWS fabrics, the fabric's own existing cluster
    otherwise (and for a GPU registered without instance data)."""
    if on_eks_by_default(t):
        return [SYSTEM, build_cluster_plan("check", default_eks_config(t), t).gpu_shape]
    if t.fabric not in EXISTING_FABRICS:
        raise ValueError(
            f"{t.id}: no default cluster shape for fabric {t.fabric!r}; known: aws-efa, {', '.join(EXISTING_FABRICS)}"
        )
    return [SYSTEM, _existing_gpu_shape(t, catalog.gpus_needed(_dgd(t)))]


def _dgd(t: Target) -> dict:
    return next(d for d in catalog.recipe_objects(t) if d["kind"] == "DynamoGraphDeployment")


def _match_expr(labels: dict, e: dict) -> bool:
    op, key, vals = e["operator"], e["key"], e.get("values") or []
    if op == "In":
        return labels.get(key) in vals
    if op == "NotIn":
        return labels.get(key) not in vals
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise ValueError(f"unsupported operator {op}")


def _tolerates(tols: Iterable[dict], taint: dict) -> bool:
    for tol in tols:
        if tol.get("effect") and tol["effect"] != taint["effect"]:
            continue
        if tol.get("operator", "Equal") == "Exists" and (not tol.get("key") or tol["key"] == taint["key"]):
            return True
        if tol.get("key") == taint["key"] and tol.get("value") == taint.get("value"):
            return True
    return False


def _requests(pod: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in pod["containers"]:
        res = c.get("resources") or {}
        merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        for k, v in merged.items():
            if k not in EXTENDED_SKIP:
                out[k] = out.get(k, 0) + int(v)
    return out


def misfits(t: Target, pod: dict, node: NodeShape) -> list[str]:
    """Why this pod cannot run on this node shape (empty when it can)."""
    why = []
    for k, v in (pod.get("nodeSelector") or {}).items():
        if node.labels.get(k) != v:
            why.append(f"nodeSelector {k}={v} (node has {node.labels.get(k)!r})")
    terms = (
        ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    ).get("nodeSelectorTerms")
    if terms and not any(all(_match_expr(node.labels, e) for e in term.get("matchExpressions", [])) for term in terms):
        why.append(f"affinity {terms} (node labels {node.labels})")
    for taint in node.taints:
        if not _tolerates(pod.get("tolerations") or [], taint):
            why.append(f"taint {taint['key']}={taint.get('value')}:{taint['effect']} not tolerated")
    for k, v in _requests(pod).items():
        if node.capacity.get(k, 0) < v:
            why.append(f"requests {k}={v} > node capacity {node.capacity.get(k, 0)}")
    return why


def check_target(t: Target, shapes: list[NodeShape] | None = None, dgd: dict | None = None) -> list[str]:
    """Problems scheduling every pod of the target's DGD (or the given, configured one) on its
    shapes: '<target> <component>: <field> ...'."""
    shapes = shapes or default_shapes(t)
    problems: list[str] = []
    free = {s.name: [dict(s.capacity) for _ in range(s.count)] for s in shapes}
    for comp in (dgd or _dgd(t))["spec"]["components"]:
        pod = comp["podTemplate"]["spec"]
        req = _requests(pod)
        fitting = [s for s in shapes if not misfits(t, pod, s)]
        if not fitting:
            reasons = "; ".join(f"{s.name}: {', '.join(misfits(t, pod, s))}" for s in shapes)
            problems.append(f"{t.id} {comp['name']}: fits no node group ({reasons})")
            continue
        if not req.get("nvidia.com/gpu"):
            continue
        shape = next(s for s in fitting if s.capacity.get("nvidia.com/gpu"))
        for r in range(int(comp.get("replicas", 1))):
            node = next((n for n in free[shape.name] if all(n.get(k, 0) >= v for k, v in req.items())), None)
            if node is None:
                problems.append(
                    f"{t.id} {comp['name']}: replica {r + 1} does not fit on {shape.count} {shape.name} node(s) (requests {req})"
                )
                break
            for k, v in req.items():
                node[k] -= v
    return problems
