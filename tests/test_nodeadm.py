"""Every user data the program renders for GPU nodes goes through nodeadm, EKS's AL2023 node bootstrap, built from its
own source (tools/nodeadm.sh, from the reference data's awslabs/amazon-eks-ami nodeadm/): `nodeadm config check`
accepts it, and nodeadm's containerd package (tools/nodeadm-check) turns on the SOCI parallel-pull snapshotter for it
on a GPU node and writes it into the containerd config it generates (containerd 1.x's and 2.x's templates). The node groups' launch templates and the Karpenter EC2NodeClasses both carry it.

What stands in for EKS and Karpenter: a second NodeConfig part with the cluster's name, endpoint, CA and service CIDR,
the part EKS (managed node groups) and Karpenter append to the user data they launch a node with; nodeadm merges the
parts in order, as at boot."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from conftest import missing
from harness import CAPACITY, SECRETS, run_program

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
# What EKS and Karpenter add (nodeadm's own doc example: doc/examples; the fields ValidateNodeConfig requires).
PLATFORM_PART = """--BOUNDARY
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: dynamo-test
    apiServerEndpoint: https://example.eks.amazonaws.com
    certificateAuthority: Y2VydGlmaWNhdGVBdXRob3JpdHk=
    cidr: 10.100.0.0/16

--BOUNDARY--
"""
# A p5.48xlarge: 192 vCPUs, 2,048 GiB (EC2 user guide, accelerated computing instance specifications).
P5 = ("192", "2048")


@pytest.fixture(scope="module")
def nodeadm() -> tuple[str, str]:
    proc = subprocess.run([str(ROOT / "tools" / "nodeadm.sh")], capture_output=True, text=True, timeout=1800)
    path = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not path:
        missing(
            f"nodeadm not built: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no source'}",
            "the reference data's tools/nodeadm (../shared/reference, or DYNAMO_REFERENCE), then tools/nodeadm.sh",
        )
    return path, str(Path(path).with_name("nodeadm-check"))


def _with_platform_part(user_data: str) -> str:
    assert user_data.rstrip().endswith("--BOUNDARY--"), "one MIME multipart with the BOUNDARY boundary"
    return user_data.rstrip()[: -len("--BOUNDARY--")] + PLATFORM_PART


def _boot(tools: tuple[str, str], user_data: str, tmp_path: Path, cpus_mem=P5) -> dict:
    f = tmp_path / f"user-data-{len(list(tmp_path.iterdir()))}"
    f.write_text(_with_platform_part(user_data))
    check = subprocess.run([tools[0], "config", "check", "-c", f"file://{f}"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    out = subprocess.run(
        [tools[1], "-c", f"file://{f}", "-cpus", cpus_mem[0], "-memory-gib", cpus_mem[1]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _planned(program) -> list[tuple[str, str]]:
    """(kind, user data) of every GPU node the cluster plan launches (what components/cluster.py registers)."""
    cp = program.cluster_plan
    out = [
        ("launch template", base64.b64decode(p.launch_template["user_data"]).decode())
        for p in cp.gpu_pools
        if p.capacity != "karpenter"
    ]
    out += [("EC2NodeClass", kp.ec2nodeclass["spec"]["userData"]) for kp in (cp.karpenter.pools if cp.karpenter else [])]
    return out


def rendered_user_data() -> dict[tuple[str, str], list[str]]:
    """(kind, user data) -> the stacks that render it: every committed EKS stack (as `up` plans it), plus a Karpenter and
    a Capacity Block stack. Each distinct text goes through nodeadm once."""
    from stacks.program import build_program
    from stacks.program.render import program_for_stack

    programs = {}
    for path in sorted(ROOT.glob("Pulumi.*.yaml")):
        stack = path.name.split(".")[1]
        program = program_for_stack(stack)
        if program.cluster.mode == "eks":
            programs[stack] = program
    for stack, cluster in (("karpenter", {"capacity": "karpenter"}), ("capacity-block", CAPACITY["capacity-block"])):
        programs[stack] = build_program(
            {"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks", **cluster}},
            stack,
            frozenset({"hfToken", "ngcApiKey"}),
            aws_region="us-east-1",
        )
    out: dict[tuple[str, str], list[str]] = {}
    for stack, program in programs.items():
        for kind, text in _planned(program):
            out.setdefault((kind, text), []).append(stack)
    return out


USER_DATA = rendered_user_data()


def test_both_node_kinds_are_covered_and_registered_as_planned():
    assert {kind for kind, _ in USER_DATA} == {"launch template", "EC2NodeClass"}
    # what `up` registers is the planned text (one stack under the mocks)
    registered = [
        base64.b64decode(r.inputs["userData"]).decode()
        for r in run_program(
            {"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks"}}, SECRETS, stack="nodeadm"
        ).resources
        if r.type == LAUNCH_TEMPLATE
    ]
    assert registered and all(("launch template", t) in USER_DATA for t in registered)


@pytest.mark.parametrize("kind, user_data", list(USER_DATA), ids=[f"{k}:{'+'.join(v[:3])}" for (k, _), v in USER_DATA.items()])
def test_nodeadm_accepts_the_user_data_and_pulls_in_parallel(nodeadm, tmp_path, kind, user_data):
    got = _boot(nodeadm, user_data, tmp_path)
    assert got["featureGates"] == {"FastImagePull": True}
    assert got["soci"] is True  # containerd's snapshotter: soci, the parallel pull
    # and the containerd config nodeadm writes for the node names it, with containerd 1.x's and 2.x's templates
    assert got["snapshotters"] == {"containerd1": ["soci"], "containerd2": ["soci"]}
    # node groups ask nodeadm for the RAID0 array; an EC2NodeClass asks Karpenter (instanceStorePolicy: RAID0)
    assert got["localStorage"] == ("RAID0" if kind == "launch template" else "")


def test_a_misspelled_gate_or_a_small_node_gets_no_parallel_pull(nodeadm, tmp_path):
    """The two ways the snapshotter stays off without an error, both seen through nodeadm's own code."""
    _, user_data = next(iter(USER_DATA))
    typo = user_data.replace("FastImagePull", "FastImagepull")
    for got in (_boot(nodeadm, typo, tmp_path), _boot(nodeadm, user_data, tmp_path, cpus_mem=("2", "4"))):  # below 4 CPUs / 7 GiB
        assert got["soci"] is False
        assert got["snapshotters"] == {"containerd1": None, "containerd2": None}  # no snapshotter line: containerd's default
