"""Policy config for a stack, from its Pulumi.<stack>.yaml: `python policy/stack_config.py h100-disagg > policy-config.json`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stacks.config.keys import parse, select_target  # noqa: E402
from stacks.config import cluster_config  # noqa: E402
from stacks.program.render import stack_raw_config  # noqa: E402


def policy_config(stack: str) -> dict:
    raw = stack_raw_config(stack)
    if "serve" in raw:
        return _serve_policy_config(stack)
    cfg = parse(raw)
    t = select_target(cfg)
    instance_type = getattr(cluster_config(raw), "instance_type", None)  # a key of the EKS cluster's config only
    node = {"gpu": t.gpu, "instanceType": instance_type} if instance_type else {"gpu": t.gpu}
    return {
        "efa-disagg-workers": {"fabric": cfg.fabric_profile or t.fabric},
        "gpu-fits-node": {k: v for k, v in node.items() if v},
        "model-cache-retained": {"storageProtect": cfg.storage.protect},
    }


def _serve_policy_config(stack: str) -> dict:
    """A ``dynamo:serve`` stack (several entries): the entries' settings where they agree; a cluster-only stack has none.
    Several GPUs: a pod must fit the smallest of their nodes (conservative)."""
    from stacks.registry.gpus import shape_for
    from stacks.program.render import program_for_stack

    program = program_for_stack(stack)
    entries = program.entries
    if not entries:
        return {}
    fabrics = {e.cfg.fabric_profile or e.plan.target.fabric for e in entries if e.plan.target.topology == "disagg"}
    cluster = program.cluster
    # The instance type is a key of the EKS cluster's config (one pool's; with gpuPools each pool names its own).
    instance_type = None if getattr(cluster, "gpu_pools", None) else getattr(cluster, "instance_type", None)
    try:
        per_node = {"gpusPerNode": min(shape_for(e.plan.target.gpu, instance_type).gpus_per_node for e in entries)}
    except ValueError:  # a GPU served only on existing clusters (no instance data)
        per_node = {}
    return {
        "efa-disagg-workers": {"fabric": fabrics.pop()} if len(fabrics) == 1 else {},
        "gpu-fits-node": per_node,
        "model-cache-retained": {"storageProtect": all(e.cfg.storage.protect for e in entries)},
    }


if __name__ == "__main__":
    print(json.dumps(policy_config(sys.argv[1]), indent=2))
