"""Motif-3 NVFP4 on B200: aggregated chat (TP2) and experimental KV-routed disaggregated chat.

Upstream keeps a kustomize base per deployment shape and renders the
disaggregated variants from a matrix (topology x target cluster). Here the two
bases are builders sharing the engine flags, the per-target topology comes
from the ``shape`` axis, and the Nscale cluster component is an op layer.
"""
from __future__ import annotations

import json

from .. import registry, versions
from . import k8s
from .engine import Cache, Component, DownloadJob
from .model import ModelFamily, Target
from .ops import FRONTEND, WORKERS, Op, Set, env_insert

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
    "-m", "dynamo.frontend", "--dyn-chat-processor", "vllm", "--model-name", REPO, "--trust-remote-code",
    "--http-port", "8000", "--tool-call-parser", "motif", "--reasoning-parser", "motif", "--enable-auto-tool-choice",
]
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# KV routing: the router and workers exchange KV events over ZMQ (upstream's kv-routing component).
KV_EVENTS_ENV = {"DYN_EVENT_PLANE": "zmq", "PYTHONHASHSEED": "0"}
KV_EVENTS = {"enable_kv_cache_events": True, "publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:20080"}
# NIXL KV transfer between prefill and decode; UCX bundled by NIXL (not HPC-X), no NCCL net plugin.
NIXL_ENV = {"UCX_RCACHE_MAX_UNRELEASED": "1024", "NCCL_NET_PLUGIN": "none"}
ROLES = {"prefill": ("PrefillWorker", "kv_producer"), "decode": ("DecodeWorker", "kv_consumer")}


def _app(t: Target) -> str:
    """ConfigMap app name: the DGD name plus the workload (``motif3-agg-b200-chat``)."""
    return f"{t.dgd_name}-{t.workload}"


def _spec_configs(indent: int | None) -> dict[str, str]:
    """MTP config as JSON: the agg base writes it indented, the rendered disagg manifests compact."""
    dump = (lambda c: json.dumps(c, indent=indent)) if indent else (lambda c: json.dumps(c, separators=(",", ":")))
    real = {"method": "mtp", "num_speculative_tokens": MTP_TOKENS}
    synthetic = {**real, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": SYNTHETIC_AL}
    return {"speculative-config": dump(real), "speculative-config-synthetic": dump(synthetic)}


def _configmap(t: Target) -> dict:
    kv = t.routing == "kv"
    data = {"kv-events-config": json.dumps(KV_EVENTS, separators=(",", ":"))} if kv else {}
    data.update(_spec_configs(None if t.topology == "disagg" else 2))
    cm = k8s.configmap(f"{_app(t)}-config", data)
    cm["metadata"]["labels"] = k8s.labels(_app(t))
    return cm


def _dgd(t: Target, components: list[dict]) -> dict:
    dgd = k8s.dgd(t.dgd_name, "vllm", components, with_labels=False)
    dgd["metadata"]["labels"] = {"app.kubernetes.io/name": t.dgd_name}
    return dgd


def _frontend(t: Target) -> dict:
    kv = t.routing == "kv"
    env = {**OFFLINE_ENV, **(KV_EVENTS_ENV if kv else {}), "HF_HOME": CACHE_MOUNT, "DYN_ROUTER_MODE": t.routing}
    if kv:
        env["DYN_ROUTER_USE_KV_EVENTS"] = "true"
    return Component("Frontend", "frontend", t.image, ("python3",), FRONTEND_ARGS, env, resources={}, cache=CACHE, pull_secrets=False,
                     runtime_version=RUNTIME_VERSION).build()


WORKER_SECURITY = {"runAsUser": 0, "runAsGroup": 0, "capabilities": {"add": ["IPC_LOCK", "SYS_PTRACE", "SYS_RESOURCE"]}}


def _worker(t: Target, name: str, replicas: int, command: list[str], args: list[str], env: dict) -> dict:
    """A TP2 worker: two GPUs, the GPU taint toleration, model cache; no probes or affinity upstream."""
    return Component(name, "worker", t.image, command, args, env, replicas=replicas, gpus=TP, shm=SHM, cache=CACHE, pull_secrets=False,
                     security=WORKER_SECURITY, tolerations=(k8s.GPU_TOLERATION,), runtime_version=RUNTIME_VERSION).build()


def _worker_env(t: Target) -> dict:
    cm = f"{_app(t)}-config"
    env = {
        **(KV_EVENTS_ENV if t.routing == "kv" else {}),
        "HF_HOME": CACHE_MOUNT,
        "DYN_SELF_HOST_METADATA": "1",
        **OFFLINE_ENV,
        "VLLM_USE_V2_MODEL_RUNNER": "1",
        "DYN_HEALTH_CHECK_REQUEST_TIMEOUT": "300",
        "SPECULATIVE_CONFIG": {"valueFrom": {"configMapKeyRef": {"name": cm, "key": "speculative-config"}}},
    }
    if t.routing == "kv":
        env["KV_EVENTS_CONFIG"] = {"valueFrom": {"configMapKeyRef": {"name": cm, "key": "kv-events-config"}}}
    return env


def vllm_agg(t: Target) -> list[dict]:
    """The kustomize base ``agg-b200-chat/base``: one TP2 worker behind a round-robin frontend."""
    worker = _worker(t, "Worker", 1, ["python3", "-m", "dynamo.vllm"], list(ENGINE_ARGS), _worker_env(t))
    return [_configmap(t), _dgd(t, [_frontend(t), worker])]


def _kv_transfer(role: str) -> str:
    cfg = {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": "cuda", "kv_connector_extra_config": {"backends": ["UCX"]}}
    return json.dumps(cfg, separators=(",", ":"))


def vllm_disagg(t: Target) -> list[dict]:
    """xPyD: ``shape`` sets the prefill replicas; roles are chosen by ``--disaggregation-mode`` (both type ``worker``)."""
    prefill_replicas, decode_replicas = (int(n) for n in t.shape.upper().rstrip("D").split("P"))
    comps = [_frontend(t)]
    for mode, replicas in (("prefill", prefill_replicas), ("decode", decode_replicas)):
        name, role = ROLES[mode]
        args = ["-m", "dynamo.vllm", *ENGINE_ARGS, f"--disaggregation-mode={mode}", f"--kv-transfer-config={_kv_transfer(role)}",
                "--enable-prefix-caching", "--kv-events-config=$(KV_EVENTS_CONFIG)"]
        env = {**_worker_env(t), **NIXL_ENV}
        if mode == "prefill":
            env["DYN_HEALTH_CHECK_ENABLED"] = "false"  # upstream disables health checks on prefill only
        comps.append(_worker(t, name, replicas, ["python3"], args, env))
    return [_configmap(t), _dgd(t, comps)]


# --------------------------------------------------------------------------- cluster layers

NSCALE_B200_NODES = {"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "g.192.b200.8", "nvidia.com/gpu.product": registry.label("b200")}


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
    suffix = f"-{profile}-{shape.lower()}-kv" if disagg else ""
    return Target(
        id=f"motif3-vllm-{topology}-b200-chat{suffix}",
        upstream=f"motif-3/vllm/{upstream}",
        model=MODEL, runtime="vllm", gpu="b200", topology=topology, spec="mtp",
        routing="kv" if disagg else "round-robin", precision="nvfp4",
        fabric="nscale" if profile == "nscale" else "none",
        shape=shape, workload="chat", profile=profile,
        dgd_name=f"motif3-{topology}-b200", family=f"vllm-{topology}",
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


# Job ``model-download``: the ``hf`` CLI fills ``HF_HOME`` on the shared PVC with the NVFP4 checkpoint.
DOWNLOAD_JOB = DownloadJob(
    "model-download", versions.image("motif3-download"), DOWNLOAD_SCRIPT, CACHE, ("sh", "-c"),
    env={"MODEL_NAME": REPO, "HF_HOME": CACHE_MOUNT, "HF_XET_HIGH_PERFORMANCE": "1"},
    security={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
    resources={"requests": {"cpu": "4", "memory": "16Gi"}},
)


FAMILY = ModelFamily(
    id=MODEL,
    short="motif",
    served_model=REPO,
    cache=CACHE,
    builders={"vllm-agg": vllm_agg, "vllm-disagg": vllm_disagg},
    cache_job_builders={"model-download": DOWNLOAD_JOB},
    defaults={"gpu": "b200", "runtime": "vllm", "topology": "agg", "shape": "2P1D", "fabric": "none", "profile": "generic"},
    targets=TARGETS,
)
