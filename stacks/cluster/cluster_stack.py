"""Serving on the cluster of a cluster-only stack (``cluster.mode: stack``): ``ClusterStackPlan``, the serving plan
of one entry there, all entries' requirements per GPU, and ``capacity_shortfall`` (the referenced ``nodePools``
against those requirements)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from stacks import catalog
from stacks.config.keys import NS, ConfigError
from stacks.registry.gpus import shape_for
from stacks.cluster.network import check_fabric_on_eks
from stacks.cluster.pools import POOL_LABEL, _untolerated, combined_dgd, pack, pin_gpu_product, pod_requests
from stacks.cluster.pull_secrets import NGC_KEY, PULL_SECRET_KEY, pull_secret


@dataclass
class ClusterStackPlan:
    """A serving stack on the cluster of a cluster-only stack (``cluster.mode: stack``): what its ``up`` checks against
    the referenced ``nodePools`` and ``storageClassName`` (known only as Outputs), and the pull secrets it creates."""

    stack: str  # org/project/name
    requirements: list[dict]  # per GPU: gpu, product, dgd (the sum of its entries), efa_per_gpu, entries
    storage_class: Optional[str]  # the class the cache claim asks for (None: no claim of the stack's own)
    pull_secrets: list[dict] = field(default_factory=list)  # the image pull Secrets it creates in its namespaces
    efa_per_gpu: int = 0  # one entry's plan: EFA devices per GPU of its GPU's default instance


def plan_on_cluster_stack(cfg, cluster, raw: dict, secret_keys, require_secrets: bool = True, door: Optional[dict] = None):
    """The serving plan of one entry on a cluster stack's EKS cluster: EFA per GPU of the GPU's default instance (checked
    against the pool at ``up``), the download Job on the system node group, GPU workers pinned to their GPU (the cluster
    may have several GPU node groups), pull secrets the stack creates in its namespaces; ``door``: the front door's
    ``behind_door``/``client_nvext``, as ``stacks.serving.build_plan`` takes them. Returns ``(plan, serving)``."""
    from stacks.registry import GPUS
    from stacks.serving import build_plan, select_target

    target = select_target(cfg)
    check_fabric_on_eks(target, cfg.fabric_profile)
    for key in (NGC_KEY, PULL_SECRET_KEY):
        if key in (raw or {}):
            raise ConfigError(
                f"{NS}:{key} is set in plain text; set it as a secret: `pulumi config set --secret {NS}:{key} <value>`"
            )
    if require_secrets and cfg.image_pull_secrets and not {NGC_KEY, PULL_SECRET_KEY} & set(secret_keys):
        raise ConfigError(
            f"{NS}:{NGC_KEY} is not set, but {NS}:imagePullSecrets names {list(cfg.image_pull_secrets)}, which this stack creates "
            f"in its namespaces on the cluster of {cluster.stack}; run `pulumi config set --secret {NS}:{NGC_KEY} <NGC API key>`, "
            f"or remove {NS}:imagePullSecrets for public images"
        )
    try:
        shape = shape_for(target.gpu)
    except ValueError as e:
        raise ConfigError(f"{NS}:gpu: {target.gpu!r} cannot run on an EKS cluster stack: {e}") from None
    storage_class = cfg.storage.class_name or "efs-model-cache"
    serving = build_plan(
        cfg,
        default_storage_class=storage_class,
        job_node_selector={POOL_LABEL: "system"},
        efa_per_gpu=shape.efa_per_gpu,
        **(door or {}),
    )
    pin_gpu_product(serving.dgd, GPUS[target.gpu].label)
    ns = serving.dgd["metadata"]["namespace"]
    plan = ClusterStackPlan(
        stack=cluster.stack,
        requirements=[],
        storage_class=storage_class if serving.cache_pvc else None,
        pull_secrets=[pull_secret(n, ns) for n in cfg.image_pull_secrets],
        efa_per_gpu=shape.efa_per_gpu,
    )
    return plan, serving


def combined_stack_plan(cluster, entries: list, plans: list[ClusterStackPlan]) -> ClusterStackPlan:
    """All entries of a serving stack on a cluster stack: requirements per GPU (the sum of the entries' DGDs), every
    namespace's pull secrets once, the storage class of the claims (one class: the cluster stack has one)."""
    from stacks.registry import GPUS

    by_gpu: dict[str, list] = {}
    for e, cp in zip(entries, plans):
        by_gpu.setdefault(e.plan.target.gpu, []).append((e, cp))
    reqs = []
    for gpu, members in by_gpu.items():
        reqs.append(
            {
                "gpu": gpu,
                "product": GPUS[gpu].label,
                "efa_per_gpu": members[0][1].efa_per_gpu,
                "entries": [e.key for e, _ in members],
                "dgd": combined_dgd([(e.name, e.plan.dgd) for e, _ in members]),
            }
        )
    seen, pulls = set(), []
    for cp in plans:
        for obj in cp.pull_secrets:
            k = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if k not in seen:
                seen.add(k)
                pulls.append(obj)
    classes = [cp.storage_class for cp in plans if cp.storage_class]
    return ClusterStackPlan(
        stack=cluster.stack, requirements=reqs, storage_class=classes[0] if classes else None, pull_secrets=pulls
    )


def capacity_shortfall(requirements: list[dict], pools: Any, stack: str) -> Optional[str]:
    """The cluster stack's ``nodePools`` against the serving entries (pure; the wiring calls it on the resolved
    output): a message naming the pool and the shortfall, or None when every GPU's entries fit its pool."""
    if not isinstance(pools, list) or not all(isinstance(p, dict) for p in pools):
        return (
            f"{NS}:cluster.stack: {stack} exports no nodePools list (got {type(pools).__name__}); "
            "is it a cluster-only stack of this project that has been `pulumi up`-ed?"
        )
    out = []
    for req in requirements:
        pool = next((p for p in pools if p.get("gpu") == req["gpu"]), None)
        if pool is None:
            out.append(
                f"{', '.join(req['entries'])}: {stack} has no {req['gpu']} pool (pools: "
                f"{', '.join(str(p.get('gpu')) for p in pools) or 'none'}); add {{gpu: {req['gpu']}, nodes: N}} to its {NS}:cluster.gpuPools"
            )
            continue
        alloc = {k: int(v) for k, v in (pool.get("allocatable") or {}).items()}
        gpus_per_node = alloc.get("nvidia.com/gpu", 0)
        efa = alloc.get("vpc.amazonaws.com/efa", 0)
        if (
            any(
                c for c in req["dgd"]["spec"]["components"] if pod_requests(c["podTemplate"]["spec"]).get("vpc.amazonaws.com/efa")
            )
            and gpus_per_node
            and efa // gpus_per_node != req["efa_per_gpu"]
        ):
            out.append(
                f"pool {pool.get('name')} ({pool.get('instanceType')}): {efa // gpus_per_node} EFA per GPU, the entries "
                f"{', '.join(req['entries'])} request {req['efa_per_gpu']} per GPU (the default {req['gpu']} instance)"
            )
            continue
        taint = pool.get("taint")
        bad = _untolerated([("", req["dgd"])], taint) if isinstance(taint, dict) and taint.get("key") else []
        if bad:
            out.append(
                f"pool {pool.get('name')}: tainted {taint['key']}={taint['value']}, which {', '.join(b.lstrip('/') for b in bad)} do not tolerate"
            )
        needed, too_big = pack(req["dgd"], alloc)
        count = int(pool.get("count") or 0)
        if too_big:
            out.append(f"pool {pool.get('name')} ({pool.get('instanceType')}): no node holds " + "; ".join(too_big))
        elif needed > count:
            gpus = catalog.gpus_needed(req["dgd"])
            out.append(
                f"pool {pool.get('name')} ({count} x {pool.get('instanceType')}) cannot hold {', '.join(req['entries'])}: they need "
                f"{needed} nodes ({gpus} GPUs), {needed - count} more; raise {NS}:cluster.gpuPools nodes of {req['gpu']} in {stack}"
            )
    if not out:
        return None
    return f"{NS}:cluster.stack: the entries do not fit the cluster of {stack}:\n  " + "\n  ".join(out)
