"""Policy config for a stack, from its Pulumi.<stack>.yaml: `python policy/stack_config.py h100-disagg > policy-config.json`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stacks.config import parse, select_target  # noqa: E402
from stacks.providers import cluster_config  # noqa: E402
from stacks.render import stack_raw_config  # noqa: E402


def policy_config(stack: str) -> dict:
    raw = stack_raw_config(stack)
    cfg = parse(raw)
    t = select_target(cfg)
    cluster = cluster_config(raw)
    node = {"gpu": t.gpu, "instanceType": cluster.instance_type} if cluster.instance_type else {"gpu": t.gpu}
    return {
        "efa-disagg-workers": {"fabric": cfg.fabric_profile or t.fabric},
        "gpu-fits-node": {k: v for k, v in node.items() if v},
        "model-cache-retained": {"storageProtect": cfg.storage.protect},
    }


if __name__ == "__main__":
    print(json.dumps(policy_config(sys.argv[1]), indent=2))
