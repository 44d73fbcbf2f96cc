"""Would the target's pods schedule on its cluster shape? A small, pure model of the scheduler's
filters that matter here: node selectors, required node affinity, taints/tolerations and
extended-resource capacity (GPUs, EFA, RDMA), with first-fit packing of GPU pods onto nodes."""
from __future__ import annotations

from typing import Iterable

from . import catalog
from .catalog.model import Target
from .cluster import POOL_LABEL, EksConfig, NodeShape, build_cluster_plan, gpu_taint_for
from .gpus import INSTANCES, DEFAULT_INSTANCE, nodes_needed

PRODUCT = {s.gpu: s.product for s in INSTANCES.values()}
SYSTEM = NodeShape("system", {POOL_LABEL: "system", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}, [], {}, 2)
EXTENDED_SKIP = {"cpu", "memory", "ephemeral-storage", "hugepages-2Mi"}


def default_eks_config(t: Target) -> EksConfig:
    """The EKS settings a target gets by default: on-demand, except UltraServer GPUs (GB200), which are sold
    only as Capacity Blocks (a placeholder reservation id; stacks name their own)."""
    if INSTANCES[DEFAULT_INSTANCE[t.gpu]].ultraserver:
        return EksConfig(market_type="capacity-block", capacity_reservation_id="cr-00000000000000000")
    return EksConfig()


def _existing_gpu_shape(t: Target, per_node: int, arch: str, capacity: dict, extra_labels: dict) -> NodeShape:
    taint = gpu_taint_for(t)
    labels = {"nvidia.com/gpu.product": PRODUCT[t.gpu], "nvidia.com/gpu.present": "true", "kubernetes.io/arch": arch, **extra_labels}
    return NodeShape("gpu", labels, [{"key": taint["key"], "value": taint["value"], "effect": "NoSchedule"}], {"nvidia.com/gpu": per_node, **capacity}, 0)


def default_shapes(t: Target) -> list[NodeShape]:
    """The node shapes a target runs on by default: EKS for AWS fabrics, the fabric's own cluster otherwise."""
    gpus = catalog.gpus_needed(_dgd(t))
    if t.fabric in ("aws-efa", "none"):
        return [SYSTEM, build_cluster_plan("check", default_eks_config(t), t).gpu_shape]
    if t.fabric == "infiniband":
        shape = _existing_gpu_shape(t, 8, "amd64", {"rdma/ib": 1000}, {})
    elif t.fabric == "gke-rdma":
        nets = {f"networking.gke.io.networks/rdma-{i}{s}": 1 for i in range(4) for s in ("", ".IP")}
        shape = _existing_gpu_shape(t, 4, "arm64", nets, {"cloud.google.com/gke-accelerator": "nvidia-gb200"})
    elif t.fabric == "nscale":
        shape = _existing_gpu_shape(t, 8, "amd64", {"rdma/shared_ib": 1000}, {"node.kubernetes.io/instance-type": "g.192.b200.8"})
    else:
        raise ValueError(f"{t.id}: no default cluster shape for fabric {t.fabric!r}")
    shape.count = nodes_needed(gpus, INSTANCES[DEFAULT_INSTANCE[t.gpu]]) if shape.capacity["nvidia.com/gpu"] == 8 else max(1, -(-gpus // 4))
    return [SYSTEM, shape]


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
    terms = (((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
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
                problems.append(f"{t.id} {comp['name']}: replica {r + 1} does not fit on {shape.count} {shape.name} node(s) (requests {req})")
                break
            for k, v in req.items():
                node[k] -= v
    return problems
