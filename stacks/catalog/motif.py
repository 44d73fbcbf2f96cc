"""Motif-3 NVFP4 on B200: aggregated chat (TP2) and experimental KV-routed disaggregated chat.

Upstream keeps a kustomize base per deployment shape and renders the
disaggregated variants from a matrix (topology x target cluster). Here the two
bases are data (``builders.Recipe``) sharing the engine flags, the per-target
replicas come from the ``shape`` axis, and the Nscale cluster component is an op layer.
"""

from __future__ import annotations

import json
from typing import Any

from stacks import registry
from stacks.registry import versions
from stacks.catalog import k8s
from stacks.catalog.builders import Cache, Component, DownloadJob, Recipe, RevisionPin
from stacks.catalog.model import ModelFamily, Target
from stacks.catalog.ops import FRONTEND, WORKERS, Op, Set, env_insert

MODEL = "motif-3"
REPO = "Motif-Technologies/Motif-3-NVFP4"
CACHE_MOUNT = "/shared-model-cache"
CACHE = Cache(claim=k8s.CACHE_PVC, mount=CACHE_MOUNT, size="300Gi")
RUNTIME_VERSION = "1.5.0"  # runtimeVersionOverride on every component
SHM = "64Gi"
TP = 2
MTP_TOKENS = 2
SYNTHETIC_AL = 2.13  # benchmark-only acceptance length (chat trace)

# Engine flags shared by the aggregated worker and both disaggregated roles.
ENGINE_ARGS = [
    f"--model={REPO}",
    f"--served-model-name={REPO}",
    "--trust-remote-code",
    "--quantization=modelopt_nvfp4",
    "--speculative-config=$(SPECULATIVE_CONFIG)",
    f"--tensor-parallel-size={TP}",
    "--data-parallel-size=1",
    "--data-parallel-size-local=1",
    "--enable-expert-parallel",
    "--dtype=bfloat16",
    "--gpu-memory-utilization=0.85",
    "--max-model-len=262144",
    "--block-size=128",
    "--kv-cache-dtype=fp8",
    "--scheduler-cls",
    "vllm.v1.core.sched.async_scheduler.AsyncScheduler",
    "--dyn-enable-structural-tag",
]
FRONTEND_ARGS = [
    "-m",
    "dynamo.frontend",
    "--dyn-chat-processor",
    "vllm",
    "--model-name",
    REPO,
    "--trust-remote-code",
    "--http-port",
    "8000",
    "--tool-call-parser",
    "motif",
    "--reasoning-parser",
    "motif",
    "--enable-auto-tool-choice",
]
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# KV routing: the router and workers exchange KV events over ZMQ (upstream's kv-routing component).
KV_EVENTS_ENV = {"DYN_EVENT_PLANE": "zmq", "PYTHONHASHSEED": "0"}
KV_EVENTS = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:20080"}
# NIXL KV transfer between prefill and decode; UCX bundled by NIXL (not HPC-X), no NCCL net plugin.
NIXL_ENV = {"UCX_RCACHE_MAX_UNRELEASED": "1024", "NCCL_NET_PLUGIN": "none"}
SPEC = {"method": "mtp", "num_speculative_tokens": MTP_TOKENS}
SPEC_SYNTHETIC = {**SPEC, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": SYNTHETIC_AL}
COMPACT: dict[str, Any] = {"separators": (",", ":")}
CONFIG = "{dgd}-{workload}-config"  # ConfigMap named after the app: the DGD name plus the workload (motif3-agg-b200-chat)


def _ref(key: str) -> dict:
    return {"valueFrom": {"configMapKeyRef": {"name": CONFIG, "key": key}}}


def _kv_transfer(role: str) -> str:
    return json.dumps(
        {
            "kv_connector": "NixlConnector",
            "kv_role": role,
            "kv_buffer_device": "cuda",
            "kv_connector_extra_config": {"backends": ["UCX"]},
        },
        **COMPACT,
    )


WORKER_ENV = {
    "HF_HOME": CACHE_MOUNT,
    "DYN_SELF_HOST_METADATA": "1",
    **OFFLINE_ENV,
    "VLLM_USE_V2_MODEL_RUNNER": "1",
    "DYN_HEALTH_CHECK_REQUEST_TIMEOUT": "300",
    "SPECULATIVE_CONFIG": _ref("speculative-config"),
}
KV_WORKER_ENV = {**KV_EVENTS_ENV, **WORKER_ENV, "KV_EVENTS_CONFIG": _ref("kv-events-config"), **NIXL_ENV}
# Every component: runtimeVersionOverride, the model cache, no pull secrets; workers are TP2 with the GPU taint toleration
# (no probes or affinity upstream).
COMMON: dict[str, Any] = {"cache": CACHE, "pull_secrets": False, "runtime_version": RUNTIME_VERSION}
WORKER: dict[str, Any] = {
    **COMMON,
    "gpus": TP,
    "shm": SHM,
    "security": {"runAsUser": 0, "runAsGroup": 0, "capabilities": {"add": ["IPC_LOCK", "SYS_PTRACE", "SYS_RESOURCE"]}},
    "tolerations": (k8s.GPU_TOLERATION,),
}
LABELS: dict[str, Any] = {
    "dgd_labels": {"app.kubernetes.io/name": "{dgd}"},
    "configmap_name": CONFIG,
    "configmap_labels": {"app.kubernetes.io/name": "{dgd}-{workload}", "app.kubernetes.io/part-of": "dynamo"},
}

# The kustomize base ``agg-b200-chat/base``: one TP2 worker behind a round-robin frontend (MTP config written indented).
AGG = Recipe(
    "vllm",
    (
        Component(
            "Frontend",
            "frontend",
            "{image}",
            ("python3",),
            FRONTEND_ARGS,
            {**OFFLINE_ENV, "HF_HOME": CACHE_MOUNT, "DYN_ROUTER_MODE": "{routing}"},
            resources={},
            **COMMON,
        ),
        Component("Worker", "worker", "{image}", ("python3", "-m", "dynamo.vllm"), ENGINE_ARGS, WORKER_ENV, **WORKER),
    ),
    configmap={
        "speculative-config": json.dumps(SPEC, indent=2),
        "speculative-config-synthetic": json.dumps(SPEC_SYNTHETIC, indent=2),
    },
    **LABELS,
)

# xPyD with KV routing: ``shape`` sets the replicas; roles are chosen by ``--disaggregation-mode`` (both type ``worker``);
# upstream disables health checks on prefill only. The rendered disagg manifests write the JSON compact.
DISAGG = Recipe(
    "vllm",
    (
        Component(
            "Frontend",
            "frontend",
            "{image}",
            ("python3",),
            FRONTEND_ARGS,
            {
                **OFFLINE_ENV,
                **KV_EVENTS_ENV,
                "HF_HOME": CACHE_MOUNT,
                "DYN_ROUTER_MODE": "{routing}",
                "DYN_ROUTER_USE_KV_EVENTS": "true",
            },
            resources={},
            **COMMON,
        ),
        *(
            Component(
                name,
                "worker",
                "{image}",
                ("python3",),
                (
                    "-m",
                    "dynamo.vllm",
                    *ENGINE_ARGS,
                    f"--disaggregation-mode={mode}",
                    f"--kv-transfer-config={_kv_transfer(role)}",
                    "--enable-prefix-caching",
                    "--kv-events-config=$(KV_EVENTS_CONFIG)",
                ),
                {**KV_WORKER_ENV, **({"DYN_HEALTH_CHECK_ENABLED": "false"} if mode == "prefill" else {})},
                replicas="{%s_replicas}" % mode,
                **WORKER,
            )
            for mode, name, role in (("prefill", "PrefillWorker", "kv_producer"), ("decode", "DecodeWorker", "kv_consumer"))
        ),
    ),
    configmap={
        "kv-events-config": json.dumps(KV_EVENTS, **COMPACT),
        "speculative-config": json.dumps(SPEC, **COMPACT),
        "speculative-config-synthetic": json.dumps(SPEC_SYNTHETIC, **COMPACT),
    },
    **LABELS,
)


# --------------------------------------------------------------------------- cluster layers

NSCALE_B200_NODES = {
    "kubernetes.io/arch": "amd64",
    "node.kubernetes.io/instance-type": "g.192.b200.8",
    "nvidia.com/gpu.product": registry.label("b200"),
}


def nscale_layer() -> tuple[Op, ...]:
    """Upstream's ``components/nscale``: amd64/B200 node selectors, UCX over shared IB (``rdma/shared_ib``)."""
    return (
        Set("nodeSelector", {"kubernetes.io/arch": "amd64"}, scope="pod", on=FRONTEND),
        Set("nodeSelector", dict(NSCALE_B200_NODES), scope="pod", on=WORKERS),
        env_insert({"UCX_TLS": "rc_x,rc,cuda_copy,cuda_ipc", "NIXL_LOG_LEVEL": "INFO"}, before="DYN_EVENT_PLANE"),
        Set(("resources", "requests", "rdma/shared_ib"), "1"),
        Set(("resources", "limits", "rdma/shared_ib"), "1"),
    )


# --------------------------------------------------------------------------- catalog entries


def _motif(topology: str, *, shape: str | None = None, profile: str = "generic", upstream: str) -> Target:
    disagg = topology == "disagg"
    suffix = ""
    if disagg:
        assert shape is not None, "a disaggregated target names its shape"
        suffix = f"-{profile}-{shape.lower()}-kv"
    return Target(
        id=f"motif3-vllm-{topology}-b200-chat{suffix}",
        upstream=f"motif-3/vllm/{upstream}",
        model=MODEL,
        runtime="vllm",
        gpu="b200",
        topology=topology,
        spec="mtp",
        routing="kv" if disagg else "round-robin",
        precision="nvfp4",
        fabric="nscale" if profile == "nscale" else "none",
        shape=shape,
        workload="chat",
        profile=profile,
        dgd_name=f"motif3-{topology}-b200",
        family=f"vllm-{topology}",
        ops=nscale_layer() if profile == "nscale" else (),
        experimental=disagg,  # upstream marks the disaggregated recipe experimental
        cache_jobs=("model-download",),
        image=versions.image("motif3-disagg" if disagg else "motif3-vllm"),
    )


TARGETS = (
    # The base deploy.yaml carries no cluster scheduling (Nscale placement is a separate kustomize component).
    _motif("agg", upstream="agg-b200-chat/base/deploy.yaml"),
    *(
        _motif("disagg", shape=shape, profile=profile, upstream=f"disagg-b200-chat/deploy-{profile}-{shape.lower()}-kv.yaml")
        for profile in ("generic", "nscale")
        for shape in ("2P1D", "3P1D")
    ),
)


# --------------------------------------------------------------------------- model cache

DOWNLOAD_SCRIPT = """set -eux
pip install --no-cache-dir huggingface_hub==1.16.4
hf download "$MODEL_NAME"
"""


# dynamo:modelRevision (stacks/serving: applied only when set, so the default Job is upstream's and downloads the default
# branch). The ``hf download`` CLI takes ``--revision``, "Git revision id which can be a branch name, a tag, or a commit
# hash" (huggingface_hub src/huggingface_hub/cli/_cli_utils.py, RevisionOpt, which cli/download.py passes to
# snapshot_download; https://huggingface.co/docs/huggingface_hub/guides/download, "Download from the CLI"). The workers load the model by name with HF_HUB_OFFLINE=1, which reads the cache's
# refs/main; the CLI writes refs/<revision> for a branch or tag and no ref for a commit, so the script then points refs/main
# at the snapshot it fetched (and fails when that snapshot is not there): the workers load the pinned commit.
REVISION_PIN = RevisionPin(
    edits=(
        (
            'hf download "$MODEL_NAME"\n',
            'hf download "$MODEL_NAME" --revision "$MODEL_REVISION"\n'
            'repo="$HF_HOME/hub/models--$(printf %s "$MODEL_NAME" | sed \'s|/|--|g\')"\n'
            'commit=$(cat "$repo/refs/$MODEL_REVISION" 2>/dev/null || printf %s "$MODEL_REVISION")\n'
            'test -d "$repo/snapshots/$commit"\n'
            'mkdir -p "$repo/refs" && printf %s "$commit" > "$repo/refs/main"\n',
        ),
    )
)


# Job ``model-download``: the ``hf`` CLI fills ``HF_HOME`` on the shared PVC with the NVFP4 checkpoint.
DOWNLOAD_JOB = DownloadJob(
    "model-download",
    versions.image("motif3-download"),
    DOWNLOAD_SCRIPT,
    CACHE,
    ("sh", "-c"),
    env={"MODEL_NAME": REPO, "HF_HOME": CACHE_MOUNT, "HF_XET_HIGH_PERFORMANCE": "1"},
    security={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
    resources={"requests": {"cpu": "4", "memory": "16Gi"}},
    revision=REVISION_PIN,
)


FAMILY = ModelFamily(
    id=MODEL,
    short="motif",
    served_model=REPO,
    cache=CACHE,
    builders={"vllm-agg": AGG, "vllm-disagg": DISAGG},
    cache_job_builders={"model-download": DOWNLOAD_JOB},
    defaults={"gpu": "b200", "runtime": "vllm", "topology": "agg", "shape": "2P1D", "fabric": "none", "profile": "generic"},
    targets=TARGETS,
)
