"""Run the real Pulumi program (``__main__.py``) under ``pulumi.runtime.set_mocks`` and
record what the engine would receive for every resource: type, name, parent, dependencies,
options, and the raw (still secret-wrapped) inputs."""

from __future__ import annotations

import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pmocks
from pulumi.runtime import config as rc

ROOT = Path(__file__).resolve().parent.parent
SECRET_SIG = "4dabf18193072939515e22adb298388d"


@dataclass
class Registration:
    type: str
    name: str
    urn: str
    parent: str
    dependencies: list[str]
    retain_on_delete: bool
    protect: bool
    additional_secret_outputs: list[str]
    raw_inputs: dict
    inputs: dict
    ignore_changes: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    custom_timeouts: dict = field(default_factory=dict)
    aliases: list = field(default_factory=list)  # the alias specs (e.g. {"parentUrn": ...}) as the engine receives them


@dataclass
class Run:
    resources: list[Registration] = field(default_factory=list)
    outputs: dict = field(default_factory=dict)
    raw_outputs: list[dict] = field(default_factory=list)

    def by_type(self, typ: str) -> list[Registration]:
        return [r for r in self.resources if r.type == typ]

    def one(self, typ: str) -> Registration:
        found = self.by_type(typ)
        assert len(found) == 1, f"expected one {typ}, got {[r.name for r in found]}"
        return found[0]

    def urn_of(self, typ: str) -> str:
        return self.one(typ).urn


# Secrets and GPU capacity types the AWS-rules tests build EKS stacks with (one per capacity type the rules cover).
SECRETS = {"hfToken": "hf_mock", "ngcApiKey": "nvapi-mock"}
CR = "cr-0123456789abcdef0"
CAPACITY = {
    "on-demand": {},
    "reservation": {"capacityReservationId": CR},
    "capacity-block": {"marketType": "capacity-block", "capacityReservationId": CR},
}

MOCK_KUBECONFIG = "apiVersion: v1\nkind: Config\nclusters: [{name: mock, cluster: {server: https://mock.eks.example}}]\n"


def cluster_stack_outputs(name: str) -> dict:
    """The outputs a committed cluster-only stack exports (``Pulumi.<last part of name>.yaml``), from its plan:
    what a serving stack's StackReference reads under mocks unless a test gives its own."""
    from stacks.cluster import node_pools
    from stacks.program.render import program_for_stack

    plan = program_for_stack(name.rsplit("/", 1)[-1], ROOT).cluster_plan
    return {
        "kubeconfig": MOCK_KUBECONFIG,
        "nodePools": node_pools(plan),
        "storageClassName": plan.cache_class_name,
        "clusterName": plan.name,
        "region": plan.region,
    }


class ProviderError(grpc.RpcError):
    """A provider's failed invoke as the engine reports it to the program (a gRPC error with the provider's message),
    which the SDK raises from the invoke call as an Exception the program may catch."""

    def __init__(self, details: str):
        super().__init__(details)
        self._details = details

    def code(self):
        return grpc.StatusCode.UNKNOWN

    def details(self):
        return self._details


class Mocks(pmocks.Mocks):
    def __init__(
        self,
        stack_outputs: dict | None = None,
        eks_clusters: dict | None = None,
        eks_node_groups: dict | None = None,
        ec2_subnets: dict | None = None,
        cache_zones: dict | None = None,
    ):
        super().__init__()
        # cluster -> [(zone, CIDR block)] of the subnets tagged with it; cluster -> the zone of its FSx cache's interfaces
        self.ec2_subnets = ec2_subnets or {}
        self.cache_zones = cache_zones or {}
        self.stack_outputs = stack_outputs or {}
        # EKS cluster name -> the Kubernetes version it runs (absent: no such cluster; an Exception: the lookup fails so)
        self.eks_clusters = eks_clusters or {}
        # cluster -> node group -> (Kubernetes version, capacity type, desired size[, AMI release version, disk size,
        # labels, tags]), as EKS reports them
        self.eks_node_groups = eks_node_groups or {}

    def new_resource(self, args):
        state = dict(args.inputs)
        if args.typ == "pulumi:pulumi:StackReference":  # `outputs` is what StackReference.get_output reads
            ref = args.inputs.get("name") or args.name
            outputs = self.stack_outputs[ref] if ref in self.stack_outputs else cluster_stack_outputs(ref)
            return (ref, {"name": ref, "outputs": outputs, "secretOutputNames": ["kubeconfig"]})
        if args.typ == "kubernetes:core/v1:Secret" and "stringData" in state:
            state.pop("stringData")
        # Outputs a real provider computes and the program reads.
        if args.typ == "aws:eks/cluster:Cluster":
            state.setdefault("endpoint", "https://mock.eks.example")
            state["certificateAuthority"] = {"data": "bW9jaw=="}
            state["vpcConfig"] = {**state.get("vpcConfig", {}), "clusterSecurityGroupId": "sg-cluster"}
        if args.typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state.setdefault("latestVersion", 1)
        if args.typ == "aws:ec2/placementGroup:PlacementGroup":
            state.setdefault("name", args.name)  # auto-named by the provider; the launch template reads it
        if args.typ == "aws:iam/role:Role":  # ARNs the Karpenter wiring writes into its IAM policy and access entry
            state.setdefault("name", args.name)  # auto-named by the provider; policy attachments name their role by it
            state.setdefault("arn", f"arn:aws:iam::123456789012:role/{state.get('name') or args.name}")
        if args.typ == "aws:iam/policy:Policy":  # attachments name a policy by its ARN
            state.setdefault("arn", f"arn:aws:iam::123456789012:policy/{state.get('name') or args.name}")
        if args.typ == "aws:sqs/queue:Queue":
            state.setdefault("arn", f"arn:aws:sqs:us-east-1:123456789012:{state.get('name') or args.name}")
            state.setdefault("url", f"https://sqs.us-east-1.amazonaws.com/123456789012/{state.get('name') or args.name}")
        if args.typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            state.setdefault("dnsName", f"{args.name}.fsx.mock.amazonaws.com")
            state.setdefault("mountName", "abcdefgh")
        return (f"{args.name}-id", state)

    def call(self, args):
        if args.token == "aws:eks/getCluster:getCluster":  # as the provider answers DescribeCluster for a missing cluster
            name = args.args.get("name")
            if name not in self.eks_clusters:  # the data source's error, which reaches the program as a gRPC error
                raise ProviderError(
                    f"invoking aws:eks/getCluster:getCluster: 1 error occurred:\n\t* reading EKS Cluster ({name}): "
                    "couldn't find resource"
                )
            if isinstance(self.eks_clusters[name], Exception):  # any other failure of the lookup
                raise ProviderError(f"invoking aws:eks/getCluster:getCluster: 1 error occurred:\n\t* {self.eks_clusters[name]}")
            return ({"name": name, "version": self.eks_clusters[name], "status": "ACTIVE"}, [])
        if args.token == "aws:eks/getNodeGroups:getNodeGroups":  # ListNodegroups
            cluster = args.args.get("clusterName")
            if isinstance(self.eks_node_groups.get(cluster), Exception):  # a failed ListNodegroups
                raise ProviderError(
                    f"invoking aws:eks/getNodeGroups:getNodeGroups: 1 error occurred:\n\t* {self.eks_node_groups[cluster]}"
                )
            return (
                {"clusterName": cluster, "names": sorted((self.eks_node_groups.get(cluster) or {}).keys()), "id": cluster},
                [],
            )
        if args.token == "aws:eks/getNodeGroup:getNodeGroup":  # DescribeNodegroup
            cluster, ng = args.args.get("clusterName"), args.args.get("nodeGroupName")
            version, capacity, desired, *more = self.eks_node_groups[cluster][ng]
            extra = dict(zip(("releaseVersion", "diskSize", "labels", "tags"), more))  # optional, in this order
            return (
                {
                    "clusterName": cluster,
                    "nodeGroupName": ng,
                    "version": version,
                    "capacityType": capacity,
                    **extra,
                    "scalingConfigs": [{"desiredSize": desired, "minSize": 0, "maxSize": max(desired, 1)}],
                    "id": f"{cluster}:{ng}",
                },
                [],
            )

        def tagged(args) -> str:  # the cluster a lookup filters on (tag:dynamo.nvidia.com/cluster)
            return next(
                (f["values"][0] for f in args.args.get("filters") or [] if f.get("name") == "tag:dynamo.nvidia.com/cluster"), ""
            )

        if args.token == "aws:ec2/getSubnets:getSubnets":
            cluster = tagged(args)
            return (
                {"ids": [f"subnet-{cluster}-{i}" for i, _ in enumerate(self.ec2_subnets.get(cluster) or [])], "id": cluster},
                [],
            )
        if args.token == "aws:ec2/getSubnet:getSubnet":
            sid = args.args.get("id")
            cluster, i = sid[len("subnet-") :].rsplit("-", 1)
            zone, cidr = self.ec2_subnets[cluster][int(i)]
            return ({"id": sid, "availabilityZone": zone, "cidrBlock": cidr}, [])
        if args.token == "aws:ec2/getSecurityGroups:getSecurityGroups":
            cluster = tagged(args)
            return ({"ids": [f"sg-cache-{cluster}"] if cluster in self.cache_zones else [], "id": cluster}, [])
        if args.token == "aws:ec2/getNetworkInterfaces:getNetworkInterfaces":
            sg = next(f["values"][0] for f in args.args.get("filters") or [] if f.get("name") == "group-id")
            return ({"ids": [f"eni-{sg[len('sg-cache-') :]}"], "id": sg}, [])
        if args.token == "aws:ec2/getNetworkInterface:getNetworkInterface":
            cluster = args.args.get("id")[len("eni-") :]
            return ({"id": args.args.get("id"), "availabilityZone": self.cache_zones[cluster]}, [])
        return ({}, [])


class RecordingMonitor(pmocks.MockMonitor):
    def __init__(self, mocks, run: Run):
        super().__init__(mocks)
        self.run = run

    def RegisterResource(self, request):
        resp = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            raw = json_format.MessageToDict(request.object)
            self.run.resources.append(
                Registration(
                    type=request.type,
                    name=request.name,
                    urn=resp.urn,
                    parent=request.parent,
                    dependencies=list(request.dependencies),
                    retain_on_delete=bool(request.retainOnDelete),
                    protect=bool(request.protect),
                    additional_secret_outputs=list(request.additionalSecretOutputs),
                    raw_inputs=raw,
                    inputs=unwrap(raw),
                    ignore_changes=list(request.ignoreChanges),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    custom_timeouts=json_format.MessageToDict(request.customTimeouts),
                    aliases=[json_format.MessageToDict(a).get("spec", {}) for a in request.aliases],
                )
            )
        return resp

    def RegisterResourceOutputs(self, request):
        raw = json_format.MessageToDict(request.outputs)
        self.run.raw_outputs.append(raw)
        return super().RegisterResourceOutputs(request)


def unwrap(x: Any) -> Any:
    if isinstance(x, dict):
        if x.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270":
            return unwrap(x.get("value"))
        return {k: unwrap(v) for k, v in x.items()}
    if isinstance(x, list):
        return [unwrap(v) for v in x]
    return x


def plain_occurrences(x: Any, needle: str) -> list[str]:
    """Paths where ``needle`` appears outside a Pulumi secret envelope."""
    hits: list[str] = []

    def walk(v, path):
        if isinstance(v, dict):
            if v.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270":
                return
            for k, w in v.items():
                walk(w, f"{path}.{k}")
        elif isinstance(v, list):
            for i, w in enumerate(v):
                walk(w, f"{path}[{i}]")
        elif isinstance(v, str) and needle in v:
            hits.append(path)

    walk(x, "")
    return hits


LAST_RUN: "Run | None" = None  # the run in progress, inspectable after run_program raised


# The AWS provider's region a real EKS stack has configured (`pulumi config set aws:region ...`); an EKS stack with
# neither aws:region nor dynamo:cluster.region is refused, so the harness sets it the way such a stack would.
AWS_REGION = "us-east-1"


def run_program(
    config: dict[str, Any],
    secrets: dict[str, str] | None = None,
    stack: str = "test",
    stack_outputs: dict[str, dict] | None = None,
    aws_region: str | None = AWS_REGION,
    eks_clusters: dict[str, str] | None = None,
    eks_node_groups: dict | None = None,
    ec2_subnets: dict | None = None,
    cache_zones: dict | None = None,
) -> Run:
    """Run __main__.py with ``dynamo:`` config (plain values) and secret config. ``stack_outputs``: the outputs of
    the stacks a ``cluster.mode: stack`` program references, by name (default: ``cluster_stack_outputs``).
    ``aws_region``: ``aws:region``, set for an EKS config that names no ``cluster.region`` (None: not set).
    ``eks_clusters``: EKS clusters that exist already, name -> Kubernetes version (default: none); ``eks_node_groups``:
    their managed node groups, cluster -> group -> (version, capacity type, desired size) (default: none)."""
    global LAST_RUN
    run = LAST_RUN = Run()
    secrets = secrets or {}
    all_cfg = {f"dynamo:{k}": (json.dumps(v) if not isinstance(v, str) else v) for k, v in config.items()}
    cluster = config.get("cluster")
    if aws_region and isinstance(cluster, dict) and cluster.get("mode") == "eks" and "region" not in cluster:
        all_cfg["aws:region"] = aws_region
    all_cfg.update({f"dynamo:{k}": v for k, v in secrets.items()})
    rc.set_all_config(all_cfg, [f"dynamo:{k}" for k in secrets])
    mocks = Mocks(stack_outputs, eks_clusters, eks_node_groups, ec2_subnets, cache_zones)
    monitor = RecordingMonitor(mocks, run)
    pmocks.set_mocks(mocks, project="dynamo", stack=stack, preview=False, monitor=monitor)

    exported: dict[str, Any] = {}

    def _export(name, value):
        exported[name] = pulumi.Output.from_input(value)

    @pulumi.runtime.test
    def _go():
        original = pulumi.export
        pulumi.export = _export
        try:
            runpy.run_path(str(ROOT / "__main__.py"), run_name="__pulumi_main__")
        finally:
            pulumi.export = original
        return pulumi.Output.all(**exported).apply(lambda v: run.outputs.update(v))

    _go()
    for raw in run.raw_outputs:
        run.outputs.update(unwrap(raw))
    return run


def go_module_dir(module: str, version: str) -> Path:
    """The directory of Go module ``module@version``, downloaded from the Go module proxy (``go mod download -json``:
    checked against the checksum database); the test fails when it cannot be had."""
    import os
    import shutil
    import subprocess

    import pytest

    go = shutil.which("go")
    if not go:
        pytest.fail(f"go not on PATH: {module}@{version} comes from the Go module proxy")
    out = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        cwd="/",
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode or "Dir" not in info:
        pytest.fail(f"go mod download {module}@{version}: {info.get('Error') or out.stderr}")
    return Path(info["Dir"])
