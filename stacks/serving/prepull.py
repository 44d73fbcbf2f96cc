"""The worker image pulled onto a GPU node as soon as the node joins, beside the device plugins' pods, instead of after
them (the image pre-puller).

A DGD's GPU worker cannot be scheduled before the node's device plugin advertises ``nvidia.com/gpu`` (and
``vpc.amazonaws.com/efa``), so without help its image pull (13 GB, about 72 s with parallel pull: stacks/registry/
durations.yaml ``image``) starts only after the plugins' pods ran. A DaemonSet whose pods request no GPU is scheduled
on the node as soon as it is Ready; its init container, the worker image running ``true``, makes the kubelet pull the
image then. The worker pods that come later find it in the node's containerd store and pull nothing
(``imagePullPolicy: IfNotPresent``: "the image is pulled only if it is not already present locally", Kubernetes docs,
Images). This is the continuous image puller of Zero to JupyterHub (jupyterhub/zero-to-jupyterhub-k8s
jupyterhub/templates/image-puller/_helpers-daemonset.tpl @0790647d: one init container per image, ``echo "Pulling complete"``,
then a ``pause`` container), for the worker image of one DGD.

Its pods go exactly where the DGD's GPU workers may go and nowhere else: the workers' node selector, node
affinity and tolerations, and their image pull Secrets (which live in the DGD's namespace, so the DaemonSet does too).
Without a required node constraint on the workers (a ``nodeSelector`` or required node affinity terms) it is not
planned: it would pull a 13 GB image onto every node. A paused entry keeps it, so that a pause changes only replicas
and node counts (tests/test_pause.py): its pool at 0 nodes runs none of its pods, and on a pool shared with running
entries a joining node pulls its image too, which its resume then finds there. Where several entries share a pool, a
joining node pulls each entry's image (each its own DaemonSet), the pulls sharing the node's bandwidth. It is planned from the final DGD (stacks/program
``image_prepullers``) where the stack's cluster mode creates the cluster and so owns the GPU nodes (``cluster.mode:
eks``), not on a shared cluster a ``kubeconfig`` stack serves on, whose GPU nodes other teams may use. Karpenter does
not count DaemonSet pods when it finds a node empty (sigs.k8s.io/karpenter@v1.13.0 pkg/utils/pod/scheduling.go: ``IsReschedulable`` excludes ``IsOwnedByDaemonSet``).

The init containers run ``true`` from the image's ``PATH``: every GPU worker image of the catalog is an Ubuntu-based
NGC runtime image (``ai-dynamo/vllm-runtime``, ``tensorrtllm-runtime``); an image without a ``true`` (a distroless
``dynamo:images`` override) is still pulled, but its pod then stays in Init:CrashLoopBackOff. They set
``NVIDIA_VISIBLE_DEVICES=void``: the GPU nodes' default runtime is NVIDIA's, and a CUDA image's own
``NVIDIA_VISIBLE_DEVICES=all`` would otherwise hand the node's GPUs to a container that asked for none ("void or empty
or unset: nvidia-container-runtime will have the same behavior as runc", NVIDIA/nvidia-container-toolkit
cmd/nvidia-container-runtime/README.md, "Environment variables (OCI spec)").

Each pod requests a sliver of CPU and memory (the worker's requests are unchanged and Karpenter adds a DaemonSet's
requests to every node it launches for the pool), runs as nobody with no token, no privilege and a read-only root, as
the namespace's restricted Pod Security level asks. ``pulumi.com/skipAwait``: ``up`` does not wait for a rollout that
happens only when nodes join (pulumi-kubernetes pkg/metadata/overrides.go ``SkipAwaitLogic``)."""

from __future__ import annotations

import copy
from typing import Optional

from stacks.catalog.fit import pod_requests
from stacks.serving.hardening import CONTAINER_SECURITY_CONTEXT

PREPULL_LABEL = "dynamo.nvidia.com/image-prepull"  # pod label: the DGD's name (the DaemonSet's selector)
PREPULL_REQUESTS = {"cpu": "10m", "memory": "16Mi"}
SKIP_AWAIT = "pulumi.com/skipAwait"


def prepuller_name(dgd_name: str) -> str:
    """The DaemonSet's name: the DGD's, with ``-image-prepull``."""
    return f"{dgd_name}-image-prepull"


def gpu_worker_specs(dgd: dict) -> list[dict]:
    """The pod specs of the DGD's components whose pods request a GPU (the workers), paused ones included."""
    return [
        c["podTemplate"]["spec"]
        for c in (dgd.get("spec") or {}).get("components") or []
        if pod_requests(c["podTemplate"]["spec"]).get("nvidia.com/gpu")
    ]


def _required_terms(node_affinity: dict) -> list:
    """The node selector terms a pod must match (``requiredDuringSchedulingIgnoredDuringExecution``)."""
    return ((node_affinity or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []


def _unique(items: list) -> list:
    """``items`` without repeats, in first-seen order (dicts compared by value)."""
    out: list = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def image_prepuller(dgd: dict, pause_image: Optional[str] = None) -> Optional[dict]:
    """The DaemonSet that pulls the GPU workers' images onto every node they may run on (module docstring); None when
    the DGD has no GPU worker, or its workers have no node constraint, or they disagree on where they run (then no
    single DaemonSet covers exactly their nodes)."""
    specs = gpu_worker_specs(dgd)
    if not specs:
        return None
    placement = [(s.get("nodeSelector") or {}, (s.get("affinity") or {}).get("nodeAffinity") or {}) for s in specs]
    if len(_unique(placement)) != 1:
        return None
    node_selector, node_affinity = placement[0]
    if not node_selector and not _required_terms(node_affinity):
        return None  # a preferred affinity alone bounds nothing
    if pause_image is None:
        from stacks.registry.versions import image as pinned

        pause_image = pinned("capacity-placeholder")  # the pause image, pinned by tag
    images = _unique([c["image"] for s in specs for c in s.get("containers") or []])
    meta = dgd["metadata"]
    dgd_name = meta["name"]
    labels = {"app.kubernetes.io/name": "image-prepull", "app.kubernetes.io/part-of": "dynamo", PREPULL_LABEL: dgd_name}

    def container(name: str, image: str) -> dict:
        """A container of the pod: a sliver of CPU and memory, no privilege, a read-only root."""
        return {
            "name": name,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": dict(PREPULL_REQUESTS), "limits": dict(PREPULL_REQUESTS)},
            "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
        }

    pod: dict = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65535,
            "runAsGroup": 65535,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # the kubelet pulls each image to start its init container, which exits at once
        "initContainers": [
            {**container(f"pull-{i}", image), "command": ["true"], "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}
            for i, image in enumerate(images)
        ],
        "containers": [container("pause", pause_image)],
    }
    if node_selector:
        pod["nodeSelector"] = dict(node_selector)
    if node_affinity:
        pod["affinity"] = {"nodeAffinity": node_affinity}
    tolerations = _unique([t for s in specs for t in s.get("tolerations") or []])
    if tolerations:
        pod["tolerations"] = tolerations
    pulls = _unique([p for s in specs for p in s.get("imagePullSecrets") or []])
    if pulls:
        pod["imagePullSecrets"] = pulls
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": prepuller_name(dgd_name),
            "namespace": meta["namespace"],
            "labels": dict(labels),
            "annotations": {SKIP_AWAIT: "true"},
        },
        "spec": {
            "selector": {"matchLabels": {PREPULL_LABEL: dgd_name}},
            # a new worker image is pulled on every node at once (as z2jh's puller rolls: maxUnavailable 100%)
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
