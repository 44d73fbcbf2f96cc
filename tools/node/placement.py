"""The node labels a target's rendered pods require, put on the local node (tools/kube-node.sh's ``local-node``).

On EKS a GPU node carries these labels from its node group (instance type, capacity type, zone) or from NVIDIA's GPU
feature discovery (``nvidia.com/gpu.product`` and the like); the local node has none of them, so it is labelled as the
rendered placement asks: each pod's ``nodeSelector`` and, for each required node-affinity term, the first value of
each ``In`` expression (the first term only, as one node satisfies one term). The tests (tests/local_node.py) and
``make local-up`` (the local stack's ``render`` output) use the same function.

Usage: placement.py --kubeconfig PATH < rendered.yaml   labels the node, printing the labels.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Iterable

NODE_NAME = "local-node"


def pod_specs(objs: Iterable[dict]) -> Iterable[dict]:
    for o in objs:
        if o.get("kind") == "DynamoGraphDeployment":
            for comp in o["spec"]["components"]:
                yield (comp.get("podTemplate") or {}).get("spec") or {}
        elif o.get("kind") in ("Job", "DaemonSet", "Deployment"):
            yield o["spec"]["template"]["spec"]


def placement_labels(objs: Iterable[dict]) -> dict[str, str]:
    """The labels (module docstring) that every rendered pod's placement requires."""
    labels: dict[str, str] = {}
    for spec in pod_specs(objs):
        labels.update(spec.get("nodeSelector") or {})
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        for term in (required.get("nodeSelectorTerms") or [])[:1]:
            for e in term.get("matchExpressions") or []:
                if e.get("operator") == "In" and e.get("values"):
                    labels[e["key"]] = e["values"][0]
    return labels


def label_args(labels: dict[str, str]) -> list[str]:
    return ["label", "node", NODE_NAME, "--overwrite", *[f"{k}={v}" for k, v in sorted(labels.items())]]


def main() -> None:
    import yaml

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--kubectl", default="kubectl")
    args = ap.parse_args()
    objs = [o for o in yaml.safe_load_all(sys.stdin) if isinstance(o, dict)]
    labels = placement_labels(objs)
    if labels:
        subprocess.run(
            [args.kubectl, "--kubeconfig", args.kubeconfig, *label_args(labels)], check=True, stdout=subprocess.DEVNULL
        )
    for k, v in sorted(labels.items()):
        print(f"{NODE_NAME}: {k}={v}")


if __name__ == "__main__":
    main()
