"""A table of bad stack configurations, every key, three paths that must agree (so no bad value is accepted
silently or ends in a traceback, and ``render --stack`` shows what ``up`` would do).

For each case:
- ``stacks.program.build_program`` (what ``pulumi up`` runs) raises ``ConfigError`` and nothing else;
- the message names the key (``dynamo:...``), the bad value and, for a finite set, the valid choices;
- the real program (``__main__.py``) under mocks fails with that same message and registers no resource;
- ``render --stack`` (a ``Pulumi.<stack>.yaml`` file read by ``stacks.program.render.program_for_stack``) refuses it
  with the same message.
Valid edge cases (quoted digits, ``1.5Ti``, ``10G``, numeric revisions, pinned pre-release tags) pass all three.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pytest
import yaml

import harness
from harness import run_program
from stacks import registry
from stacks.config.keys import ConfigError
from stacks.program import build_program
from stacks.program.render import program_for_stack

TOKEN = "hf_TABLE_canary_93c1"
AGG = {"target": "lightning-vllm-agg-h100-dspark"}
ULTRA = {"model": "nemotron-3-ultra", "gpu": "b200"}
EKS = {"gpu": "h100", "topology": "agg"}
TARGETS_SAMPLE = "lightning-vllm-agg-h100-dspark"


@dataclass
class Case:
    id: str
    raw: dict
    key: str  # the key the message must name, without "dynamo:"
    shows: tuple = ()  # substrings the message must carry: the bad value and the valid choices
    secrets: dict = field(default_factory=lambda: {"hfToken": TOKEN})
    # The kubeconfig file belongs to the machine that runs `up`: render (review, CI) does not look for it.
    machine: bool = False
    # A secret's value is wrong: `up` reads it (and refuses it without printing it); render sees only ciphertext.
    values: bool = False

    def __post_init__(self):
        self.shows = tuple(self.shows)


def C(id, raw, key, *shows, base=None, secrets=None, machine=False, values=False) -> Case:
    merged = {**copy.deepcopy(base if base is not None else AGG), **raw}
    return Case(id, merged, key, shows, {"hfToken": TOKEN} if secrets is None else secrets, machine, values)


def unknown_value_case(axis: str, example: str) -> Case:
    """A selection axis set to a value the registry does not list: the message names the value and the registry's
    first choices. ``example`` is a plausible name; once a model brings it into the registry (a new family's ``fp8``
    checkpoints, say), a variant of it that no registry entry takes stands in, so adding a model needs no edit here."""
    choices = registry.axes()[axis]
    value = example if example not in choices else f"{example}-not-registered"
    return C(f"{axis}-unknown", {axis: value}, axis, repr(value), *(repr(c) for c in choices[:2]), base={})


def eks(**cluster) -> dict:
    return {"cluster": {"mode": "eks", "region": "us-east-1", **cluster}}


CASES = [
    # ---- selection axes: unknown values (finite sets: the choices are listed)
    unknown_value_case("model", "llama"),
    C("model-case", {"model": "Motif-3"}, "model", "'Motif-3'", "did you mean 'motif-3'", base={}),
    unknown_value_case("runtime", "sglang"),
    unknown_value_case("gpu", "a100"),
    C("gpu-case", {"gpu": "H100"}, "gpu", "'H100'", "did you mean 'h100'", base={}),
    C("gpu-number", {"gpu": 100}, "gpu", "100", "'h200'", base={}),
    unknown_value_case("topology", "disaggregated"),
    C("shape-case", {"shape": "1p1d"}, "shape", "'1p1d'", "'1P1D'", base={}),
    unknown_value_case("spec", "eagle"),
    unknown_value_case("routing", "random"),
    unknown_value_case("precision", "fp8"),
    unknown_value_case("context", "2m"),
    unknown_value_case("workload", "batch"),
    unknown_value_case("fabric", "roce"),
    unknown_value_case("profile", "latest"),
    C("fabricProfile-unknown", {"fabricProfile": "infiniband"}, "fabricProfile", "'infiniband'", "'aws-efa'", base={}),
    C("fabricProfile-on-agg", {"fabricProfile": "aws-efa"}, "fabricProfile", "'aws-efa'"),
    # ---- target
    C("target-unknown", {"target": "nope"}, "target", "'nope'", TARGETS_SAMPLE, base={}),
    C(
        "target-typo",
        {"target": "lightning-vllm-agg-h100-dspak"},
        "target",
        "did you mean 'lightning-vllm-agg-h100-dspark'",
        base={},
    ),
    C("target-list", {"target": ["a"]}, "target", "['a']", base={}),
    C("target-vs-model", {"model": "motif-3"}, "model", "'motif-3'", "nemotron-3.5-lightning", TARGETS_SAMPLE),
    C("target-vs-gpu", {"gpu": "h200"}, "gpu", "'h200'", "gpu=h100"),
    C("target-vs-topology", {"topology": "disagg"}, "topology", "'disagg'", "topology=agg"),
    C("target-vs-runtime", {"runtime": "trtllm"}, "runtime", "'trtllm'", "runtime=vllm"),
    C("target-vs-spec", {"spec": "mtp"}, "spec", "'mtp'", "spec=dspark"),
    C("target-vs-precision", {"precision": "bf16"}, "precision", "'bf16'", "precision=nvfp4"),
    C("target-vs-context", {"context": "1m"}, "context", "'1m'", TARGETS_SAMPLE),
    C("target-vs-routing", {"routing": "kv"}, "routing", "'kv'", "routing=single"),
    # ---- combinations no target qualifies for
    C("trtllm-disagg", {"runtime": "trtllm", "topology": "disagg"}, "topology", "'disagg'", "qualified choices: agg", base={}),
    C("gb200-disagg-mtp", {"gpu": "gb200", "topology": "disagg", "spec": "mtp"}, "spec", "'mtp'", "dflash, dspark", base={}),
    C("h100-kv-mtp", {"gpu": "h100", "routing": "kv", "spec": "mtp"}, "routing", "'kv'", "qualified choices: single", base={}),
    C("ultra-on-h100", {"model": "nemotron-3-ultra", "gpu": "h100"}, "gpu", "'h100'", "b200", base={}),
    C("motif-on-h100", {"model": "motif-3", "gpu": "h100"}, "gpu", "'h100'", "b200", base={}),
    C("lightning-1m", {"context": "1m"}, "context", "'1m'", "qualified choices", base={}),
    C("ultra-shape-3p1d", {"model": "nemotron-3-ultra", "shape": "3P1D"}, "shape", "'3P1D'", "qualified choices", base={}),
    # ---- unknown keys: the valid keys, and a suggestion
    C("unknown-modle", {"modle": "x"}, "modle", "unknown key", "did you mean 'model'"),
    C("unknown-case", {"Namespace": "x"}, "Namespace", "unknown key", "did you mean 'namespace'"),
    C("unknown-chartVersions", {"chartVersions": {"dynamo-platform": "1.5.0"}}, "chartVersions", "unknown key", "images"),
    C("unknown-gpus", {"gpus": "h100"}, "gpus", "unknown key", "did you mean 'gpu'"),
    C("unknown-storage-key", {"storage": {"clas": "efs"}}, "storage.clas", "unknown key", "did you mean 'className'"),
    C("unknown-wait-key", {"wait": {"timeout": "5m"}}, "wait.timeout", "unknown key", "jobTimeout"),
    C("unknown-cluster-key", {"cluster": {"mde": "eks"}}, "cluster.mde", "unknown key", "did you mean 'mode'"),
    # ---- namespace (DNS-1123 label)
    C("ns-underscore", {"namespace": "Bad_NS"}, "namespace", "'Bad_NS'", "DNS-1123 label"),
    C("ns-leading-dash", {"namespace": "-dynamo"}, "namespace", "'-dynamo'"),
    C("ns-too-long", {"namespace": "a" * 64}, "namespace", "'" + "a" * 64 + "'", "1-63"),
    C("ns-dot", {"namespace": "dynamo.prod"}, "namespace", "'dynamo.prod'"),
    C("ns-bool", {"namespace": True}, "namespace", "True"),
    C("ns-space", {"namespace": "dynamo prod"}, "namespace", "'dynamo prod'"),
    C("createNamespace-word", {"createNamespace": "maybe"}, "createNamespace", "'maybe'"),
    # ---- the HF token and its Secret
    C(
        "hfTokenSecretName-underscore",
        {"hfTokenSecretName": "HF_Token"},
        "hfTokenSecretName",
        "'HF_Token'",
        "DNS-1123",
        secrets={},
    ),
    C("hfTokenSecretName-space", {"hfTokenSecretName": "hf token"}, "hfTokenSecretName", "'hf token'", secrets={}),
    C("hfTokenSecretName-with-token", {"hfTokenSecretName": "team-hf"}, "hfTokenSecretName", "'team-hf'", "hfToken"),
    C("hfToken-plain-text", {"hfToken": TOKEN}, "hfToken", "plain text", "--secret", secrets={}),
    C("kubeconfig-plain-text", {"kubeconfig": "apiVersion: v1\nkind: Config\n"}, "kubeconfig", "plain text", "--secret"),
    # ---- imagePullSecrets
    C("pullSecret-underscore", {"imagePullSecrets": ["NGC_Secret"]}, "imagePullSecrets", "'NGC_Secret'"),
    C("pullSecret-empty", {"imagePullSecrets": [""]}, "imagePullSecrets", "''"),
    C("pullSecret-duplicate", {"imagePullSecrets": ["ngc", "ngc"]}, "imagePullSecrets", "'ngc'", "twice"),
    C("pullSecret-not-a-list", {"imagePullSecrets": "ngc-secret"}, "imagePullSecrets", "'ngc-secret'"),
    # ---- images (pinned, valid references)
    C(
        "image-untagged",
        {"images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime"}},
        "images.*",
        "vllm-runtime'",
        "no tag or digest",
    ),
    C("image-latest", {"images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"}}, "images.*", ":latest'", "moving tag"),
    C(
        "image-nightly",
        {"images": {"Frontend": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:nightly"}},
        "images.Frontend",
        ":nightly'",
        "moving tag",
    ),
    C("image-main", {"images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:main"}}, "images.*", ":main'", "moving tag"),
    C("image-dev", {"images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:dev"}}, "images.*", ":dev'", "moving tag"),
    C(
        "image-cuda-latest",
        {"images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:cuda12-latest"}},
        "images.*",
        "cuda12-latest",
        "moving tag",
    ),
    C(
        "image-trailing-space",
        {"images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.4.0 "}},
        "images.*",
        ":1.4.0 '",
        "whitespace",
    ),
    C("image-empty", {"images": {"*": ""}}, "images.*", "''", "empty image"),
    C(
        "image-uppercase-repo",
        {"images": {"*": "nvcr.io/NVIDIA/vllm:1.4.0"}},
        "images.*",
        "'nvcr.io/NVIDIA/vllm:1.4.0'",
        "not a valid image reference",
    ),
    C(
        "image-bad-digest",
        {"images": {"*": "nvcr.io/x/y:1.0@sha256:abc"}},
        "images.*",
        "sha256:abc'",
        "not a valid image reference",
    ),
    C("image-double-slash", {"images": {"*": "nvcr.io//y:1.0"}}, "images.*", "'nvcr.io//y:1.0'"),
    C("image-double-colon", {"images": {"*": "nvcr.io/x/y::1.0"}}, "images.*", "'nvcr.io/x/y::1.0'"),
    C("image-null", {"images": {"*": None}}, "images.*", "None"),
    C(
        "image-unknown-component",
        {"images": {"NoSuchComp": "nvcr.io/x/y:1.0"}},
        "images.NoSuchComp",
        "'NoSuchComp'",
        "Frontend, agg",
    ),
    C("image-empty-component", {"images": {"": "nvcr.io/x/y:1.0"}}, "images", "''"),
    C("images-not-a-map", {"images": "nvcr.io/x/y:1.0"}, "images", "'nvcr.io/x/y:1.0'"),
    # ---- replicas
    C("replicas-negative", {"replicas": {"agg": -1}}, "replicas.agg", "-1", "0 and 100"),
    C("replicas-huge", {"replicas": {"agg": 1000000}}, "replicas.agg", "1000000", "0 and 100"),
    C("replicas-fraction", {"replicas": {"agg": 1.5}}, "replicas.agg", "1.5"),
    C("replicas-word", {"replicas": {"agg": "two"}}, "replicas.agg", "'two'"),
    C("replicas-bool", {"replicas": {"agg": True}}, "replicas.agg", "True"),
    C("replicas-unknown-component", {"replicas": {"Decode": 2}}, "replicas.Decode", "'Decode'", "Frontend, agg"),
    C("replicas-star", {"replicas": {"*": 2}}, "replicas.*", "'*'", "Frontend, agg"),
    C("replicas-not-a-map", {"replicas": 3}, "replicas", "3"),
    # ---- modelRevision
    C(
        "revision-escapes-tags",
        {"modelRevision": "refs/tags/../heads/main"},
        "modelRevision",
        "'refs/tags/../heads/main'",
        "not a valid git revision",
        base=ULTRA,
    ),
    C("revision-space", {"modelRevision": "main branch"}, "modelRevision", "'main branch'", base=ULTRA),
    C("revision-tilde", {"modelRevision": "v1.0~1"}, "modelRevision", "'v1.0~1'", base=ULTRA),
    C("revision-hidden-component", {"modelRevision": "feature/.hidden"}, "modelRevision", "'feature/.hidden'", base=ULTRA),
    C("revision-lock", {"modelRevision": "v1.lock"}, "modelRevision", "'v1.lock'", base=ULTRA),
    # ---- storage
    C("size-word", {"storage": {"size": "lots"}}, "storage.size", "'lots'", "140Gi"),
    C("size-zero", {"storage": {"size": "0Gi"}}, "storage.size", "'0Gi'", "1Gi"),
    C("size-negative", {"storage": {"size": "-5Gi"}}, "storage.size", "'-5Gi'"),
    C("size-tiny", {"storage": {"size": "100Mi"}}, "storage.size", "'100Mi'", "1Gi"),
    C("size-space", {"storage": {"size": "10 Gi"}}, "storage.size", "'10 Gi'"),
    C("size-two-dots", {"storage": {"size": "1.5.5Ti"}}, "storage.size", "'1.5.5Ti'"),
    C("size-bare-number", {"storage": {"size": 100}}, "storage.size", "'100'", "1Gi"),
    C("size-lowercase-unit", {"storage": {"size": "10gi"}}, "storage.size", "'10gi'"),
    C("size-huge", {"storage": {"size": "99999999Ei"}}, "storage.size", "'99999999Ei'"),
    C("class-bang", {"storage": {"className": "Bad_Class!"}}, "storage.className", "'Bad_Class!'", "DNS-1123"),
    C("class-empty", {"storage": {"className": ""}}, "storage.className", "''"),
    C("class-uppercase", {"storage": {"className": "EFS"}}, "storage.className", "'EFS'"),
    C(
        "accessMode-short",
        {"storage": {"accessMode": "RWX"}},
        "storage.accessMode",
        "'RWX'",
        "'ReadWriteMany'",
        "'ReadWriteOncePod'",
    ),
    C(
        "accessMode-read-only-own-claim",
        {"storage": {"accessMode": "ReadOnlyMany"}},
        "storage.accessMode",
        "'ReadOnlyMany'",
        "ReadWriteMany",
    ),
    C(
        "accessMode-space",
        {"storage": {"accessMode": "ReadWriteMany "}},
        "storage.accessMode",
        "'ReadWriteMany '",
        "did you mean 'ReadWriteMany'",
    ),
    C("claim-underscore", {"storage": {"existingClaim": "My_Claim"}}, "storage.existingClaim", "'My_Claim'"),
    C("claim-with-size", {"storage": {"existingClaim": "cache", "size": "10Gi"}}, "storage.size", "'cache'", "no effect"),
    C(
        "claim-with-class",
        {"storage": {"existingClaim": "cache", "className": "efs"}},
        "storage.className",
        "'cache'",
        "no effect",
    ),
    C(
        "claim-with-accessMode",
        {"storage": {"existingClaim": "cache", "accessMode": "ReadWriteOnce"}},
        "storage.accessMode",
        "no effect",
    ),
    C("protect-word", {"storage": {"protect": "sometimes"}}, "storage.protect", "'sometimes'"),
    C("storage-not-a-map", {"storage": "big"}, "storage", "'big'"),
    # ---- wait
    C("jobTimeout-word", {"wait": {"jobTimeout": "soon"}}, "wait.jobTimeout", "'soon'", "90s, 60m or 2h"),
    C("jobTimeout-zero", {"wait": {"jobTimeout": "0s"}}, "wait.jobTimeout", "'0s'", "1s and 168h"),
    C("dgdTimeout-days", {"wait": {"dgdTimeout": "10d"}}, "wait.dgdTimeout", "'10d'"),
    C("dgdTimeout-negative", {"wait": {"dgdTimeout": "-5m"}}, "wait.dgdTimeout", "'-5m'"),
    C("dgdTimeout-too-long", {"wait": {"dgdTimeout": "200h"}}, "wait.dgdTimeout", "'200h'", "168h"),
    C("wait-enabled-word", {"wait": {"enabled": "perhaps"}}, "wait.enabled", "'perhaps'"),
    C("wait-timeout-while-off", {"wait": {"enabled": False, "jobTimeout": "5m"}}, "wait.jobTimeout", "'5m'", "no effect"),
    C("wait-dgd-timeout-while-off", {"wait": {"dgd": False, "dgdTimeout": "5m"}}, "wait.dgdTimeout", "'5m'", "no effect"),
    C("wait-not-a-map", {"wait": False}, "wait", "False"),
    # ---- several targets per stack (dynamo:serve, stacks/serving/serve.py)
    C("serve-string", {"serve": "x"}, "serve", "'x'", "non-empty list", base={}),
    C("serve-empty-not-eks", {"serve": []}, "serve", "[]", "cluster.mode: eks", base={}),
    C("serve-entry-string", {"serve": ["x"]}, "serve[0]", "'x'", "not a mapping", base={}),
    C("serve-entry-cluster", {"serve": [{**AGG, "cluster": {}}]}, "serve[0].cluster", "stack-wide", base={}),
    C("serve-entry-gpu", {"serve": [{"gpu": "a100"}]}, "serve[0].gpu", "'a100'", "'h100'", base={}),
    C("serve-entry-name", {"serve": [{**AGG, "name": "Bad_Name"}]}, "serve[0].name", "'Bad_Name'", base={}),
    C(
        "serve-override-flag",
        {"serve": [{**AGG, "overrides": {"agg": {"args": {"set": {"max-num-seqs": "1"}}}}}]},
        "serve[0].overrides.agg.args.set",
        "'max-num-seqs'",
        base={},
    ),
    C(
        "serve-override-component",
        {"serve": [{**AGG, "overrides": {"Nope": {}}}]},
        "serve[0].overrides.Nope",
        "'Nope'",
        "Frontend, agg",
        base={},
    ),
    C(
        "serve-override-env",
        {"serve": [{**AGG, "overrides": {"agg": {"env": {"1BAD": "x"}}}}]},
        "serve[0].overrides.agg.env",
        "'1BAD'",
        base={},
    ),
    # ---- cluster: mode and the non-EKS keys
    C("mode-typo", {"cluster": {"mode": "rendr"}}, "cluster.mode", "'rendr'", "'render'", "'kubeconfig'", "'eks'"),
    C("mode-empty", {"cluster": {"mode": ""}}, "cluster.mode", "''", "'render'"),
    C("cluster-string", {"cluster": "eks"}, "cluster", "'eks'", "'render'", "'kubeconfig'"),
    C("renderDir-empty", {"cluster": {"mode": "render", "renderDir": ""}}, "cluster.renderDir", "''", "never talks to a cluster"),
    C("renderDir-blank", {"cluster": {"mode": "render", "renderDir": "  "}}, "cluster.renderDir", "'  '"),
    C("render-with-region", {"cluster": {"mode": "render", "region": "us-east-1"}}, "cluster.region", "'us-east-1'", "'eks'"),
    C(
        "render-with-platform",
        {"cluster": {"mode": "render", "installPlatform": True}},
        "cluster.installPlatform",
        "True",
        "'kubeconfig'",
    ),
    C(
        "render-with-kubeconfigPath",
        {"cluster": {"mode": "render", "kubeconfigPath": "/tmp/kc"}},
        "cluster.kubeconfigPath",
        "'/tmp/kc'",
    ),
    C(
        "kubeconfig-with-renderDir",
        {"cluster": {"mode": "kubeconfig", "renderDir": "out"}},
        "cluster.renderDir",
        "'out'",
        "'render'",
    ),
    C("kubeconfig-empty-context", {"cluster": {"mode": "kubeconfig", "context": ""}}, "cluster.context", "''"),
    C(
        "kubeconfig-plugins-word",
        {"cluster": {"mode": "kubeconfig", "installDevicePlugins": "yes please"}},
        "cluster.installDevicePlugins",
        "'yes please'",
    ),
    C(
        "kubeconfig-missing-file",
        {"cluster": {"mode": "kubeconfig", "kubeconfigPath": "/nonexistent/kubeconfig"}},
        "cluster.kubeconfigPath",
        "'/nonexistent/kubeconfig'",
        "not a readable file",
        machine=True,
    ),
    C("kubeconfig-nothing-set", {"cluster": {"mode": "kubeconfig"}}, "cluster.kubeconfigPath", "KUBECONFIG", machine=True),
    C(
        "eks-with-kubeconfigPath",
        {**eks(kubeconfigPath="/tmp/kc")},
        "cluster.kubeconfigPath",
        "'/tmp/kc'",
        "'kubeconfig'",
        base=EKS,
    ),
    C("eks-with-plugins", {**eks(installDevicePlugins=True)}, "cluster.installDevicePlugins", "True", base=EKS),
    # ---- cluster: EKS keys (stacks/config/eks.py EksConfig)
    C("region-mars", eks(region="mars-1"), "cluster.region", "'mars-1'", "us-west-2", base=EKS),
    C("region-empty", eks(region=""), "cluster.region", "''", "us-east-1", base=EKS),
    # Neither dynamo:cluster.region nor aws:region: no region is assumed (the table's stacks set no aws:region).
    C(
        "region-missing",
        {"cluster": {"mode": "eks"}},
        "cluster.region",
        "aws:region",
        "pulumi config set aws:region us-east-1",
        base=EKS,
    ),
    C(
        "region-missing-cluster-only",
        {"serve": [], "cluster": {"mode": "eks", "gpuPools": [{"gpu": "h100"}]}},
        "cluster.region",
        "aws:region",
        "pulumi config set aws:region us-east-1",
        base={},
    ),
    C(
        "zones-other-region",
        eks(availabilityZones=["us-west-2a", "us-west-2b"]),
        "cluster.availabilityZones",
        "us-west-2a",
        "us-east-1a",
        base=EKS,
    ),
    C(
        "zones-duplicate",
        eks(availabilityZones=["us-east-1a", "us-east-1a"]),
        "cluster.availabilityZones",
        "us-east-1a",
        "once",
        base=EKS,
    ),
    C("zones-one", eks(availabilityZones=["us-east-1a"]), "cluster.availabilityZones", "us-east-1a", "two", base=EKS),
    C(
        "zones-seven",
        eks(availabilityZones=[f"us-east-1{c}" for c in "abcdefg"]),
        "cluster.availabilityZones",
        "7 zones",
        base=EKS,
    ),
    C("zones-garbage", eks(availabilityZones=["banana", "us-east-1a"]), "cluster.availabilityZones", "banana", base=EKS),
    C(
        "gpuZone-outside",
        eks(gpuAvailabilityZone="us-west-2a"),
        "cluster.gpuAvailabilityZone",
        "'us-west-2a'",
        "us-east-1a",
        base=EKS,
    ),
    C(
        "reservation-banana",
        eks(capacityReservationId="banana"),
        "cluster.capacityReservationId",
        "'banana'",
        "cr-0123456789abcdef0",
        base=EKS,
    ),
    C("k8s-version-banana", eks(kubernetesVersion="banana"), "cluster.kubernetesVersion", "'banana'", "choose one of", base=EKS),
    C("gpuNodes-zero", eks(gpuNodes=0), "cluster.gpuNodes", "0", base=EKS),
    C("gpuNodes-million", eks(gpuNodes=1000000), "cluster.gpuNodes", "1000000", "450", base=EKS),
    C("systemNodes-zero", eks(systemNodes=0), "cluster.systemNodes", "0", base=EKS),
    C("capacity-block-no-reservation", eks(marketType="capacity-block"), "cluster.marketType", "capacityReservationId", base=EKS),
    C("marketType-spot", eks(marketType="spot"), "cluster.marketType", "'spot'", "'on-demand'", "'capacity-block'", base=EKS),
    C("vpcCidr-banana", eks(vpcCidr="banana"), "cluster.vpcCidr", "'banana'", "10.0.0.0/16", base=EKS),
    C("vpcCidr-too-big", eks(vpcCidr="10.0.0.0/8"), "cluster.vpcCidr", "'10.0.0.0/8'", "/16 to /20", base=EKS),
    C("cacheStorage-s3", eks(cacheStorage="s3"), "cluster.cacheStorage", "'s3'", "'efs'", "'fsx-lustre'", base=EKS),
    C("nvidiaStack-typo", eks(nvidiaStack="operator"), "cluster.nvidiaStack", "'operator'", "'gpu-operator'", base=EKS),
    C("efsThroughput-typo", eks(efsThroughputMode="fast"), "cluster.efsThroughputMode", "'fast'", "'elastic'", base=EKS),
    C(
        "fsx-capacity-odd",
        eks(cacheStorage="fsx-lustre", fsxStorageCapacityGib=1000),
        "cluster.fsxStorageCapacityGib",
        "1000",
        "2400",
        base=EKS,
    ),
    C("efa-off-on-efa-disagg", eks(efa=False), "cluster.efa", "false", base={"gpu": "h100", "topology": "disagg"}),
    C("eks-infiniband-recipe", eks(), "fabricProfile", "aws-efa", base={"gpu": "b200", "topology": "disagg"}),
    # ---- settings that would be ignored silently: secrets the stack never reads, two that fill one Secret, a name
    #      that names nothing, an entry name that falls back to the default
    C(
        "ngcApiKey-never-used",
        {},
        "ngcApiKey",
        "never creates an image pull Secret",
        "'render'",
        secrets={"hfToken": TOKEN, "ngcApiKey": "nvapiTABLEkey"},
    ),
    C(
        "imagePullSecret-never-used",
        {},
        "imagePullSecret",
        "never creates an image pull Secret",
        secrets={"hfToken": TOKEN, "imagePullSecret": '{"auths": {"nvcr.io": {"auth": "eA=="}}}'},
    ),
    C(
        "imagePullSecret-kubeconfig-cluster",
        {"cluster": {"mode": "kubeconfig"}},
        "imagePullSecret",
        "'kubeconfig'",
        secrets={"hfToken": TOKEN, "kubeconfig": "apiVersion: v1", "imagePullSecret": '{"auths": {"nvcr.io": {"auth": "eA=="}}}'},
    ),
    C(
        "kubeconfig-never-used",
        {},
        "kubeconfig",
        "'render'",
        "never reads it",
        secrets={"hfToken": TOKEN, "kubeconfig": "apiVersion: v1"},
    ),
    C(
        "ngcApiKey-and-imagePullSecret",
        {**eks(), "imagePullSecrets": ["ngc-secret"]},
        "ngcApiKey",
        "dynamo:imagePullSecret",
        "both",
        base=EKS,
        secrets={"hfToken": TOKEN, "ngcApiKey": "nvapiTABLEkey", "imagePullSecret": '{"auths": {"nvcr.io": {"auth": "eA=="}}}'},
    ),
    C("top-level-name", {"name": "chat"}, "name", "'chat'", "dynamo:serve[0].name"),
    C("serve-top-level-name", {"name": "chat", "serve": [AGG]}, "name", "'chat'", base={}),
    C("serve-entry-name-empty", {"serve": [{**AGG, "name": ""}]}, "serve[0].name", "''", "1-40", base={}),
    # ---- values that are not what they claim: booleans as numbers, non-ASCII digits, snake_case spellings
    C("gpuNodes-true", eks(gpuNodes=True), "cluster.gpuNodes", "True", "boolean", base=EKS),
    C(
        "gpuPools-nodes-true",
        eks(gpuPools=[{"gpu": "h100", "nodes": True}]),
        "cluster.gpuPools.0.nodes",
        "True",
        "boolean",
        base=EKS,
    ),
    C("systemNodes-false", eks(systemNodes=False), "cluster.systemNodes", "False", "boolean", base=EKS),
    C("requestCount-true", {"benchmark": {"enabled": True, "requestCount": True}}, "benchmark.requestCount", "True", "boolean"),
    C("gpuNodes-arabic-digits", eks(gpuNodes="٣"), "cluster.gpuNodes", "'٣'", "ASCII", base=EKS),
    C("jobTimeout-arabic-digit", {"wait": {"jobTimeout": "٣m"}}, "wait.jobTimeout", "'٣m'", "60m"),
    C("jobTimeout-fullwidth-digit", {"wait": {"jobTimeout": "３m"}}, "wait.jobTimeout", "'３m'", "60m"),
    C("createNamespace-yes", {"createNamespace": "yes"}, "createNamespace", "'yes'", "true or false"),
    C("wait-enabled-on", {"wait": {"enabled": "on"}}, "wait.enabled", "'on'", "true or false"),
    C("efa-one", eks(efa=1), "cluster.efa", "1", "true or false", base=EKS),
    C("snake-wait-key", {"wait": {"job_timeout": "5m"}}, "wait.job_timeout", "unknown key", "did you mean 'jobTimeout'"),
    C("snake-top-key", {"create_namespace": False}, "create_namespace", "unknown key", "createNamespace"),
    C("snake-storage-key", {"storage": {"existing_claim": "cache"}}, "storage.existing_claim", "unknown key", "existingClaim"),
    C("snake-cluster-key", eks(gpu_nodes=2), "cluster.gpu_nodes", "unknown key", "gpuNodes", base=EKS),
    C(
        "snake-observability-key",
        {"observability": {"enabled": True, "create_namespace": False}},
        "observability.create_namespace",
        "unknown key",
        "createNamespace",
    ),
    # ---- URLs: a port past 65535, NUL, a bidi control
    C(
        "prometheusEndpoint-port",
        {"observability": {"enabled": True, "prometheus": "existing", "prometheusEndpoint": "http://prom:99999"}},
        "observability.prometheusEndpoint",
        "'http://prom:99999'",
        "1-65535",
    ),
    C(
        "prometheusEndpoint-nul",
        {"observability": {"enabled": True, "prometheus": "existing", "prometheusEndpoint": "http://prom:9090/\x00"}},
        "observability.prometheusEndpoint",
        "\\x00",
        "control",
    ),
    C(
        "prometheusEndpoint-bidi",
        {"observability": {"enabled": True, "prometheus": "existing", "prometheusEndpoint": "http://prom\u202e.svc:9090"}},
        "observability.prometheusEndpoint",
        "\\u202e",
        "control",
    ),
    # ---- a fractional extended resource (was a ValueError traceback in gpus_needed)
    C(
        "override-fractional-gpu",
        {"serve": [{**AGG, "overrides": {"agg": {"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}}}]},
        "serve[0].overrides.agg.resources.limits",
        "'0.5'",
        "whole",
        base={},
    ),
    C(
        "override-gpu-bool",
        {"serve": [{**AGG, "overrides": {"agg": {"resources": {"limits": {"nvidia.com/gpu": True}}}}}]},
        "serve[0].overrides.agg.resources.limits",
        "True",
        base={},
    ),
    # ---- secret values of the wrong shape (refused by `up`, never echoed; render sees ciphertext only)
    C(
        "imagePullSecret-empty",
        {**eks(), "imagePullSecrets": ["ngc-secret"]},
        "imagePullSecret",
        "empty",
        base=EKS,
        secrets={"hfToken": TOKEN, "imagePullSecret": ""},
        values=True,
    ),
    C(
        "imagePullSecret-not-json",
        {**eks(), "imagePullSecrets": ["ngc-secret"]},
        "imagePullSecret",
        "not JSON",
        "auths",
        base=EKS,
        secrets={"hfToken": TOKEN, "imagePullSecret": "hf_TABLE_canary_93c1"},
        values=True,
    ),
    C(
        "imagePullSecret-no-auths",
        {**eks(), "imagePullSecrets": ["ngc-secret"]},
        "imagePullSecret",
        '"auths"',
        base=EKS,
        secrets={"hfToken": TOKEN, "imagePullSecret": '{"registry": "hf_TABLE_canary_93c1"}'},
        values=True,
    ),
    C(
        "ngcApiKey-empty",
        {**eks(), "imagePullSecrets": ["ngc-secret"]},
        "ngcApiKey",
        "empty",
        base=EKS,
        secrets={"hfToken": TOKEN, "ngcApiKey": ""},
        values=True,
    ),
    C("hfToken-empty", {}, "hfToken", "empty", secrets={"hfToken": ""}, values=True),
    C(
        "hfToken-not-a-token",
        {},
        "hfToken",
        "not a Hugging Face token",
        "hf_",
        secrets={"hfToken": "Bearer hf_TABLE_canary_93c1"},
        values=True,
    ),
    # ---- names and ranges
    C("stack-ref-1000", {"cluster": {"mode": "stack", "stack": "a" * 1000}}, "cluster.stack", "1000 characters", "100"),
    C("vpcCidr-public", eks(vpcCidr="8.8.0.0/16"), "cluster.vpcCidr", "'8.8.0.0/16'", "10.0.0.0/8", "RFC 1918", base=EKS),
    C("vpcCidr-public-edge", eks(vpcCidr="172.32.0.0/16"), "cluster.vpcCidr", "'172.32.0.0/16'", "172.16.0.0/12", base=EKS),
    C(
        "adminArn-not-an-arn",
        eks(adminPrincipalArns=["alice"]),
        "cluster.adminPrincipalArns",
        "'alice'",
        "arn:aws:iam::",
        base=EKS,
    ),
    C(
        "adminArn-s3",
        eks(adminPrincipalArns=["arn:aws:s3:::bucket"]),
        "cluster.adminPrincipalArns",
        "'arn:aws:s3:::bucket'",
        base=EKS,
    ),
    C(
        "accessEntries-not-an-arn",
        eks(accessEntries=[{"principalArn": "alice", "policy": "cluster-admin"}]),
        "cluster.accessEntries[0].principalArn",
        "'alice'",
        "arn:aws:iam::",
        base=EKS,
    ),
    C(
        "accessEntries-unknown-policy",
        eks(accessEntries=[{"principalArn": "arn:aws:iam::123456789012:role/deploy", "policy": "root"}]),
        "cluster.accessEntries.0.policy",
        "'root'",
        "'cluster-admin', 'admin', 'edit' or 'view'",
        base=EKS,
    ),
    C(
        "accessEntries-no-cluster-admin",
        eks(accessEntries=[{"principalArn": "arn:aws:iam::123456789012:role/deploy", "policy": "view"}]),
        "cluster.accessEntries",
        "no entry has policy cluster-admin",
        base=EKS,
    ),
    C(
        "accessEntries-twice",
        eks(
            accessEntries=[
                {"principalArn": "arn:aws:iam::123456789012:role/deploy", "policy": "cluster-admin"},
                {"principalArn": "arn:aws:iam::123456789012:role/deploy", "policy": "view"},
            ]
        ),
        "cluster.accessEntries[1].principalArn",
        "'arn:aws:iam::123456789012:role/deploy'",
        "one access entry",
        base=EKS,
    ),
    C(
        "controlPlaneLogs-unknown",
        eks(controlPlaneLogs=["audit", "kubelet"]),
        "cluster.controlPlaneLogs.1",
        "'kubelet'",
        "'authenticator'",
        base=EKS,
    ),
    C(
        "controlPlaneLogRetentionDays-10",
        eks(controlPlaneLogRetentionDays=10),
        "cluster.controlPlaneLogRetentionDays",
        "10",
        "3653",
        base=EKS,
    ),
    C("secretsEncryption-yes", eks(secretsEncryption="yes"), "cluster.secretsEncryption", "'yes'", "true or false", base=EKS),
    # ---- namespaces the cluster owns, as namespaces the stack would create
    C("ns-default-created", {"namespace": "default"}, "namespace", "'default'", "createNamespace: false"),
    C("ns-kube-system-created", {"namespace": "kube-system"}, "namespace", "'kube-system'", "kube-*"),
    C("ns-kube-public-created", {"namespace": "kube-public"}, "namespace", "'kube-public'"),
    C(
        "observability-ns-kube-system",
        {"observability": {"enabled": True, "namespace": "kube-system"}},
        "observability.namespace",
        "'kube-system'",
        "observability.createNamespace: false",
    ),
    C(
        "observability-ns-default",
        {"observability": {"enabled": True, "namespace": "default"}},
        "observability.namespace",
        "'default'",
    ),
    # ---- floating references, on every model family
    C("revision-main", {"modelRevision": "main"}, "modelRevision", "'main'", "branch", base=ULTRA),
    C("revision-main-lightning", {"modelRevision": "main"}, "modelRevision", "'main'", "branch"),
    C("revision-main-motif", {"modelRevision": "main"}, "modelRevision", "'main'", "branch", base={"model": "motif-3"}),
    C(
        "revision-refs-heads",
        {"modelRevision": "refs/heads/release"},
        "modelRevision",
        "'refs/heads/release'",
        "branch",
        base=ULTRA,
    ),
    # ---- a top-level key with no value (YAML null or ''; `up` gets both as "" from the Pulumi CLI): refused, not the
    # default taken silently
    C("empty-model", {"model": ""}, "model", "empty", "silently take the default"),
    C(
        "empty-target",
        {"target": "", "gpu": "h100", "topology": "agg"},
        "target",
        "empty",
        "pulumi config rm dynamo:target",
        base={},
    ),
    C("empty-namespace", {"namespace": ""}, "namespace", "empty", "remove the key"),
    C("empty-secret-name", {"hfTokenSecretName": ""}, "hfTokenSecretName", "empty"),
    C("empty-revision", {"modelRevision": ""}, "modelRevision", "empty", base=ULTRA),
    C("empty-gpu", {"gpu": ""}, "gpu", "empty"),
    C("empty-replicas", {"replicas": ""}, "replicas", "empty"),
    C("empty-paused", {"paused": ""}, "paused", "empty"),
    # ---- a Secret the stack reads but does not make, in a namespace the same `up` creates: it cannot exist yet
    C(
        "own-secret-in-created-namespace",
        {"hfTokenSecretName": "team-hf"},
        "hfTokenSecretName",
        "'team-hf'",
        "createNamespace: false",
        secrets={},
    ),
    C(
        "pull-secrets-in-created-namespace",
        {"imagePullSecrets": ["ngc-secret"]},
        "imagePullSecrets",
        "'ngc-secret'",
        "createNamespace: false",
    ),
    C(
        "alert-secret-in-created-namespace",
        {"observability": {"enabled": True, "alerts": {"webhookUrlSecret": {"name": "slack", "key": "url"}}}},
        "observability.alerts.webhookUrlSecret",
        "'slack'",
        "observability.createNamespace: false",
    ),
]
assert len(CASES) >= 120, len(CASES)
assert len({c.id for c in CASES}) == len(CASES)


def as_pulumi(raw: dict) -> dict:
    """The mapping as the Pulumi runtime hands it over (stacks.config.pulumi_config.raw_config): a top-level number
    arrives as text, objects keep their JSON types."""
    return {
        k: "" if v is None else str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else copy.deepcopy(v)
        for k, v in raw.items()
    }  # a top-level empty value (YAML null or '') arrives as ""


def _program_error(case: Case, monkeypatch) -> ConfigError:
    env = {k: v for k, v in __import__("os").environ.items() if k != "KUBECONFIG"}
    with pytest.raises(Exception) as e:
        build_program(as_pulumi(case.raw), "table", frozenset(case.secrets), env=env, secret_values=case.secrets)
    assert type(e.value) is ConfigError, f"{type(e.value).__name__}: {e.value}"
    return e.value


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_refused_with_key_value_and_choices(case, monkeypatch):
    msg = str(_program_error(case, monkeypatch))
    assert f"dynamo:{case.key}" in msg, msg
    for s in case.shows:
        assert s in msg, f"{s!r} not in: {msg}"
    assert "Traceback" not in msg
    assert TOKEN not in msg  # a refused secret is never echoed


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_program_under_mocks_registers_nothing(case, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    expected = str(_program_error(case, monkeypatch))
    with pytest.raises(Exception) as e:
        run_program(copy.deepcopy(case.raw), dict(case.secrets), stack="table", aws_region=None)  # as its stack file
    assert isinstance(e.value, pulumi.RunError), f"{type(e.value).__name__}: {e.value}"
    assert str(e.value) == expected
    assert harness.LAST_RUN.resources == []


def _stack_file(tmp_path: Path, raw: dict, secrets: dict) -> Path:
    cfg = {f"dynamo:{k}": v for k, v in raw.items()}
    cfg.update({f"dynamo:{k}": {"secure": "v1:AAAAAAAAAAAAAAAA:table"} for k in secrets})
    (tmp_path / "Pulumi.table.yaml").write_text(yaml.dump({"config": cfg}, Dumper=_QuotedStrings, sort_keys=False))
    return tmp_path


class _QuotedStrings(yaml.SafeDumper):
    """Every string quoted, so the Pulumi CLI (YAML 1.2) reads the case's text as text: PyYAML leaves a YAML 1.1
    string such as ``2e11`` unquoted, which the CLI reads as a number."""


_QuotedStrings.add_representer(str, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"'))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_render_stack_gives_the_same_verdict(case, tmp_path, monkeypatch):
    root = _stack_file(tmp_path, case.raw, case.secrets)
    if case.values:
        # render reads `secure: v1:...` ciphertext only: the value is checked by `up` (the test above), not here
        assert program_for_stack("table", root).objects()
        return
    if case.machine:
        # The kubeconfig file is the deploying machine's, not the config's: render --stack (review, CI)
        # accepts the stack, `up` on a machine without the file refuses it (test above).
        assert program_for_stack("table", root).objects()
        return
    expected = str(_program_error(case, monkeypatch))
    with pytest.raises(Exception) as e:
        program_for_stack("table", root)
    assert type(e.value) is ConfigError, f"{type(e.value).__name__}: {e.value}"
    assert str(e.value) == expected


# --------------------------------------------------------------------------- valid edge cases

VALID = [
    ("namespace-quoted-digits", {**AGG, "namespace": "123"}, {}),
    ("namespace-digits-number", {**AGG, "namespace": 123}, {}),
    ("size-1.5Ti", {**AGG, "storage": {"size": "1.5Ti"}}, {}),
    ("size-10G", {**AGG, "storage": {"size": "10G"}}, {}),
    ("size-exponent", {**AGG, "storage": {"size": "2e11"}}, {}),
    ("revision-number", {**ULTRA, "modelRevision": 20250101}, {}),
    ("revision-quoted-number", {**ULTRA, "modelRevision": "20250101"}, {}),
    ("revision-tag", {**ULTRA, "modelRevision": "refs/tags/v1.0"}, {}),
    (
        "image-prerelease-tag",
        {**AGG, "images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.5.0-nemotron-3.5-lightning-dev.1"}},
        {},
    ),
    ("image-digest", {**AGG, "images": {"Frontend": "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "a" * 64}}, {}),
    ("image-registry-port", {**AGG, "images": {"agg": "registry.example.com:5000/dynamo/vllm-runtime:1.4.0"}}, {}),
    ("replicas-zero", {**AGG, "replicas": {"agg": 0}}, {}),
    ("replicas-quoted", {**AGG, "replicas": {"agg": "2"}}, {}),
    ("target-and-matching-model", {**AGG, "model": "nemotron-3.5-lightning", "gpu": "h100"}, {}),
    (
        "existing-secret-no-token",
        {**AGG, "hfTokenSecretName": "hf-token-secret", "createNamespace": False},
        {"__no_token__": True},
    ),
    ("existing-claim", {**AGG, "storage": {"existingClaim": "shared-cache"}}, {}),
    ("default-namespace-not-owned", {**AGG, "namespace": "default", "createNamespace": False}, {}),
    ("pull-secrets", {**AGG, "imagePullSecrets": ["ngc-secret", "team.registry"], "createNamespace": False}, {}),
    ("eks-six-zones", {**EKS, **eks(availabilityZones=[f"us-east-1{c}" for c in "abcdef"])}, {}),
    ("render-dir-set", {**AGG, "cluster": {"mode": "render", "renderDir": "out/x"}}, {}),
    # Values that look like the bad ones but are fine.
    ("revision-version-tag", {**ULTRA, "modelRevision": "v1.0"}, {}),
    # every model's download Job takes a revision (tests/test_model_revision.py)
    ("revision-lightning", {**AGG, "modelRevision": "a" * 40}, {}),
    ("revision-motif", {"model": "motif-3", "modelRevision": "v1.0"}, {}),
    ("vpcCidr-rfc6598", {**EKS, **eks(vpcCidr="100.64.0.0/16")}, {}),
    ("admin-role-arn", {**EKS, **eks(adminPrincipalArns=["arn:aws:iam::123456789012:role/admin"])}, {}),
    (
        "access-entries-named",
        {
            **EKS,
            **eks(
                accessEntries=[
                    {"principalArn": "arn:aws:iam::123456789012:role/deploy", "policy": "cluster-admin"},
                    {"principalArn": "arn:aws:iam::123456789012:user/alice", "policy": "view", "namespaces": ["dynamo-table"]},
                ]
            ),
        },
        {},
    ),
    ("encryption-and-logs-off", {**EKS, **eks(secretsEncryption=False, controlPlaneLogs=[])}, {}),
    (
        "prometheusEndpoint-port-65535",
        {
            **AGG,
            "observability": {
                "enabled": True,
                "prometheus": "existing",
                "prometheusEndpoint": "http://prom.monitoring.svc:65535",
            },
        },
        {},
    ),
    ("kube-namespace-not-created", {**AGG, "namespace": "kube-tools", "createNamespace": False}, {}),
    ("override-whole-gpu", {"serve": [{**AGG, "overrides": {"agg": {"resources": {"limits": {"nvidia.com/gpu": "1"}}}}}]}, {}),
]


@pytest.mark.parametrize("raw, opts", [(r, o) for _, r, o in VALID], ids=[i for i, _, _ in VALID])
def test_valid_edge_cases_are_accepted_everywhere(raw, opts, tmp_path):
    secrets = {} if opts.get("__no_token__") else {"hfToken": TOKEN}
    plan = build_program(as_pulumi(raw), "table", frozenset(secrets), env={})
    run = run_program(copy.deepcopy(raw), secrets, stack="table", aws_region=None)
    assert run.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    rendered = program_for_stack("table", _stack_file(tmp_path, raw, secrets)).objects()
    assert rendered == plan.objects()


def test_numeric_revision_reaches_the_download_job_as_text():
    objs = build_program({**ULTRA, "modelRevision": 20250101}, "table", frozenset({"hfToken"}), env={}).objects()
    envs = [
        e for o in objs if o["kind"] == "Job" for c in o["spec"]["template"]["spec"]["containers"] for e in c.get("env") or []
    ]
    assert {"name": "MODEL_REVISION", "value": "20250101"} in envs


def test_quoted_digits_from_pulumi_stay_strings():
    run = run_program({**AGG, "namespace": "123"}, {"hfToken": TOKEN}, stack="table")
    assert run.one("kubernetes:core/v1:Namespace").inputs["metadata"]["name"] == "123"


@pytest.mark.parametrize("text", ["- dynamo:gpu: h100\n", "config:\n  - dynamo:gpu: h100\n", "config: h100\n", "config: [\n"])
def test_stack_file_that_is_not_a_mapping_is_a_config_error(tmp_path, text):
    (tmp_path / "Pulumi.table.yaml").write_text(text)
    with pytest.raises(ConfigError, match="Pulumi.table.yaml"):
        program_for_stack("table", tmp_path)
