"""The image pre-puller (stacks/serving/prepull.py): a DaemonSet per DGD on the stack's own GPU nodes, whose init
containers are the GPU workers' images, placed exactly where the workers may run, with their pull Secrets, requesting
no GPU and admitted at the restricted Pod Security level. Expected values are read from each stack's rendered DGD."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from stacks.program.render import program_for_stack
from stacks.serving import plan_pods, pod_security_violations
from stacks.serving.prepull import image_prepuller

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


def _gpu_specs(dgd: dict) -> list[dict]:
    """The pod specs of the DGD's components with a container that asks for nvidia.com/gpu."""
    return [
        c["podTemplate"]["spec"]
        for c in dgd["spec"]["components"]
        if any(
            "nvidia.com/gpu" in ((x.get("resources") or {}).get("limits") or {}) for x in c["podTemplate"]["spec"]["containers"]
        )
    ]


def _entries(stack: str):
    program = program_for_stack(stack)
    return program, program.entries


@pytest.mark.parametrize("stack", STACKS)
def test_every_eks_entry_pulls_its_workers_images_where_they_run_and_no_other_mode_does(stack):
    program, entries = _entries(stack)
    for e in entries:
        ds = e.plan.image_prepuller
        if not program.mode.creates_cluster:
            assert ds is None, f"{stack}: a pre-puller on a cluster the stack does not own"
            continue
        assert ds is not None, f"{stack}: {e.plan.target.id} has no pre-puller"
        specs = _gpu_specs(e.plan.dgd)
        pod = ds["spec"]["template"]["spec"]
        want = sorted({c["image"] for s in specs for c in s["containers"]})
        assert sorted(c["image"] for c in pod["initContainers"]) == want
        assert all(c["command"] == ["true"] and c["imagePullPolicy"] == "IfNotPresent" for c in pod["initContainers"])
        for s in specs:  # exactly the workers' placement and pull Secrets
            assert pod.get("nodeSelector") == s.get("nodeSelector")
            assert pod.get("affinity", {}).get("nodeAffinity") == (s.get("affinity") or {}).get("nodeAffinity")
            assert all(t in pod["tolerations"] for t in s.get("tolerations") or [])
            assert pod.get("imagePullSecrets") == s.get("imagePullSecrets")
        assert pod.get("nodeSelector") or pod.get("affinity"), "a pre-puller on every node"
        limits = [c["resources"]["limits"] for c in pod["initContainers"] + pod["containers"]]
        assert not any(k.startswith(("nvidia.com/", "vpc.amazonaws.com/")) for lim in limits for k in lim)
        assert pod_security_violations(pod, "restricted") == []
        assert ds["metadata"]["namespace"] == e.plan.dgd["metadata"]["namespace"]
        assert ds in e.plan.objects() and any(name == ds["metadata"]["name"] for name, _, _ in plan_pods(e.plan))


def test_no_pre_puller_for_workers_without_a_node_constraint_or_placed_apart():
    program, entries = _entries("h100-disagg")
    dgd = copy.deepcopy(entries[0].plan.dgd)
    assert image_prepuller(dgd) is not None
    specs = _gpu_specs(dgd)
    assert len(specs) > 1
    specs[0].setdefault("nodeSelector", {})["example.com/other"] = "x"  # the workers disagree: no single DaemonSet
    assert image_prepuller(dgd) is None
    for s in specs:
        s.pop("nodeSelector", None)
        s.pop("affinity", None)
    assert image_prepuller(dgd) is None  # nothing bounds it: it would pull onto every node
    dgd["spec"]["components"] = [c for c in dgd["spec"]["components"] if c["podTemplate"]["spec"] not in specs]
    assert image_prepuller(dgd) is None  # no GPU worker


def _pod(ds: dict) -> dict:
    return ds["spec"]["template"]["spec"]


def test_the_init_containers_hide_the_nodes_gpus_from_themselves():
    """The GPU nodes' default runtime is NVIDIA's: a CUDA image's own NVIDIA_VISIBLE_DEVICES would hand the container
    the node's GPUs; ``void`` makes the runtime behave as runc."""
    _, entries = _entries("h100-disagg")
    for c in _pod(entries[0].plan.image_prepuller)["initContainers"]:
        assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in c["env"]


def test_a_preferred_affinity_alone_gets_no_pre_puller_and_a_paused_entry_keeps_its_own():
    _, entries = _entries("h100-disagg")
    dgd = copy.deepcopy(entries[0].plan.dgd)
    for s in _gpu_specs(dgd):
        s.pop("nodeSelector", None)
        required = s["affinity"]["nodeAffinity"].pop("requiredDuringSchedulingIgnoredDuringExecution")
        s["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 1, "preference": required["nodeSelectorTerms"][0]}
        ]
    assert image_prepuller(dgd) is None  # it would pull onto every node that tolerates it
    paused = copy.deepcopy(entries[0].plan.dgd)
    for c in paused["spec"]["components"]:
        c["replicas"] = 0
    assert image_prepuller(paused) == entries[0].plan.image_prepuller  # a pause changes only replicas


def test_each_entry_of_a_two_pool_stack_pulls_where_its_final_workers_run():
    """On an EKS serve stack with two GPU pools the pre-puller follows each entry's final DGD (the pools' GPU pins and
    the entry's overrides included), not the DGD before the cluster plan placed it."""
    from stacks.program import build_program

    pools = [{"gpu": "h100", "nodes": 1}, {"gpu": "b200"}]
    serve = [
        {"target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
        {"model": "motif-3", "topology": "agg", "namespace": "m"},
    ]
    program = build_program(
        {"cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": pools}, "serve": serve}, "t", frozenset({"hfToken"})
    )
    for e in program.entries:
        ds = e.plan.image_prepuller
        assert ds is not None, e.plan.target.id
        for s in _gpu_specs(e.plan.dgd):
            assert _pod(ds).get("nodeSelector") == s.get("nodeSelector")
            assert _pod(ds).get("affinity", {}).get("nodeAffinity") == (s.get("affinity") or {}).get("nodeAffinity")
    selectors = [
        _pod(e.plan.image_prepuller).get("nodeSelector") or _pod(e.plan.image_prepuller).get("affinity") for e in program.entries
    ]
    assert selectors[0] != selectors[1]  # each on its own pool's nodes


def test_the_pre_puller_pulls_the_workers_image_not_the_frontends():
    """With a worker-only ``images`` override the workers' image differs from the frontend's: the pre-puller pulls the
    workers' (the image the GPU pods would otherwise pull after the node joins), never the frontend's, which runs on
    no GPU node and would cost the node a second multi-GB pull that saves the workers nothing."""
    from stacks.program import build_program

    base = {"target": "lightning-vllm-disagg-h100-dspark", "cluster": {"mode": "eks", "region": "us-east-1"}}
    plain = build_program(base, "t", frozenset({"hfToken"})).entries[0].plan.dgd
    gpu = [c["name"] for c in plain["spec"]["components"] if c["podTemplate"]["spec"] in _gpu_specs(plain)]
    others = [c["name"] for c in plain["spec"]["components"] if c["name"] not in gpu]
    assert gpu and others, "the target has GPU workers and a frontend"
    worker_image = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9-workers-only"
    program = build_program({**base, "images": {name: worker_image for name in gpu}}, "t", frozenset({"hfToken"}))
    plan = program.entries[0].plan
    frontend_images = {
        x["image"] for c in plan.dgd["spec"]["components"] if c["name"] in others for x in c["podTemplate"]["spec"]["containers"]
    }
    assert worker_image not in frontend_images
    pulled = [c["image"] for c in _pod(plan.image_prepuller)["initContainers"]]
    assert pulled == [worker_image], pulled
