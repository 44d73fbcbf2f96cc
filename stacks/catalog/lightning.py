"""Nemotron-3.5-Lightning: vLLM (agg/disagg, MTP/DFlash/DSpark) and TensorRT-LLM (agg) targets.

Two vLLM bases (the H100 aggregated and H100 disaggregated recipes), then layers
per GPU, precision, fabric and speculative method, then small per-target deltas
where upstream files differ in flag order or carry one-off settings.
"""

from __future__ import annotations

import json
from typing import Any

from stacks import registry
from stacks.registry import versions
from stacks.catalog import k8s
from stacks.catalog.builders import DownloadJob, RevisionPin
from stacks.catalog.lightning_base import (
    CACHE,
    DRAFT_SUFFIX,
    LEGACY_FIRST_LAYOUT,
    MODEL,
    PERF_FIRST,
    PERF_MAIN,
    REPO,
    frontend,
    gpu_worker,
)
from stacks.catalog.lightning_trtllm import AGG as TRTLLM_AGG, TRTLLM_TARGETS
from stacks.catalog.model import ModelFamily, Perf, PerfRow, Target
from stacks.catalog.ops import FRONTEND, WORKERS, Append, Op, Set


# --------------------------------------------------------------------------- speculative config


def spec_config(
    method: str, precision: str, tokens: int, synthetic_al: float, synthetic: bool, draft_triton_attn: bool = False
) -> str:
    """The vLLM ``--speculative-config`` JSON, formatted as upstream (2-space indent).

    ``draft_triton_attn``: the PR #13021 Blackwell DFlash recipes pin the draft's attention backend.
    """
    cfg: dict = {"method": method}
    if method in DRAFT_SUFFIX:
        cfg["model"] = REPO[precision] + DRAFT_SUFFIX[method]
    if draft_triton_attn:
        cfg["attention_backend"] = "TRITON_ATTN"
    cfg["num_speculative_tokens"] = tokens
    if synthetic:
        cfg["rejection_sample_method"] = "synthetic"
        cfg["synthetic_acceptance_length"] = synthetic_al
    if method == "dspark":
        cfg["attention_backend"] = "TRITON_ATTN"
    return json.dumps(cfg, indent=2)


# --------------------------------------------------------------------------- vLLM bases

PARSERS = [
    "--dyn-tool-call-parser",
    "nemotron_nano",
    "--dyn-reasoning-parser",
    "nemotron_nano",
    "--reasoning-parser",
    "nemotron_v3",
]
MAMBA = ["--mamba-backend", "flashinfer", "--mamba-ssm-cache-dtype", "float16"]
KV_EVENTS = '{"publisher":"zmq","topic":"kv-events","endpoint":"tcp://*:20080","enable_kv_cache_events":true}'

DISABLED_KERNELS = {"VLLM_DISABLED_KERNELS": "FlashInferFP8ScaledMMLinearKernel"}
GB200_AGG_ENV = {
    "LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/nvidia/lib:/usr/local/cuda/compat",
    "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
    "VLLM_OMNI_USE_QUACK_FP8": "0",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1",
}
GB200_DISAGG_ENV = {"VLLM_OMNI_USE_QUACK_FP8": "0", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}

# --------------------------------------------------------------------------- placement layers

GB200_WORKER_TOLERATIONS = (
    k8s.toleration("kubernetes.io/arch", "arm64"),
    k8s.toleration("dedicated"),
    k8s.toleration("skyhook.nvidia.com"),
)


def gb200_placement(frontend_tolerations: int) -> tuple[Op, ...]:
    """GB200 (arm64) nodes: the frontend follows the GPU nodes; workers tolerate the arm64/dedicated taints."""
    fe_tol = [k8s.toleration("nvidia.com/gpu"), *GB200_WORKER_TOLERATIONS][:frontend_tolerations]
    return (
        Set("nodeSelector", {"nvidia.com/gpu.product": registry.label("gb200")}, scope="pod", on=FRONTEND),
        Set("tolerations", fe_tol, scope="pod", on=FRONTEND),
        Append("tolerations", GB200_WORKER_TOLERATIONS, scope="pod", on=WORKERS),
    )


# Per-GPU engine settings shared by every Lightning vLLM target on that GPU: a new GPU adds its row here
# (plus its entry in stacks/registry/__init__.py). Per topology: batched-token budget, FlashInfer autotune off, worker
# env before/after the SPECULATIVE_CONFIG entry and at the end, the default KV-transfer fabric (disagg), and
# placement ops (GB200's arm64 taints).
GPU_PROFILE: dict[str, dict] = {
    "h100": {"agg": {"batched_tokens": "32768"}, "disagg": {"batched_tokens": "32768", "fabric": "aws-efa"}},
    "h200": {"agg": {"batched_tokens": "32768"}, "disagg": {"autotune_off": True, "fabric": "infiniband"}},
    "b200": {
        "agg": {"autotune_off": True, "env_after_spec": DISABLED_KERNELS},
        "disagg": {"autotune_off": True, "env_after_spec": DISABLED_KERNELS, "fabric": "infiniband"},
    },
    "gb200": {
        "agg": {
            "batched_tokens": "10240",
            "env_before_spec": GB200_AGG_ENV,
            "env_end": {"PYTHONUNBUFFERED": "1"},
            "ops": gb200_placement(4),
        },
        "disagg": {
            "env_before_spec": GB200_DISAGG_ENV,
            "env_after_spec": DISABLED_KERNELS,
            "fabric": "none",
            "ops": gb200_placement(2),
        },
    },
}


def _engine(repo: str, max_seqs: str, batched_tokens: str | None) -> list[str]:
    args = [
        "--model",
        repo,
        "--served-model-name",
        repo,
        "--trust-remote-code",
        "--tensor-parallel-size",
        "1",
        "--max-num-seqs",
        max_seqs,
    ]
    if batched_tokens:
        args += ["--max-num-batched-tokens", batched_tokens]
    return args


def _rounding(rounds: int) -> list[str]:
    return ["--enable-mamba-cache-stochastic-rounding", "--mamba-cache-philox-rounds", str(rounds)]


def _configmap(t: Target) -> dict:
    p = t.params
    return k8s.configmap(
        f"{t.dgd_name}-config",
        {
            "speculative-config": spec_config(
                t.spec, t.precision, p["spec_tokens"], p["synthetic_al"], False, p.get("draft_triton_attn", False)
            ),
            "speculative-config-synthetic": spec_config(
                t.spec, t.precision, p["spec_tokens"], p["synthetic_al"], True, p.get("draft_triton_attn", False)
            ),
        },
    )


# The ``--quantization`` value of the upstream files that name one: the 12 Lightning deploy files with
# ``modelopt_fp4`` (../shared/reference/dynamo-recipes/nemotron-3.5-lightning/vllm/*/deploy.yaml).
FP4 = "modelopt_fp4"


def _quantization(t: Target) -> list[str]:
    """``--quantization`` where the target's upstream file names it (param ``quantization``: the NVFP4 files of
    PR #13021 on B200/GB200 and the first H100/H200 disagg MTP files say ``modelopt_fp4``). Data on the target,
    never derived from the GPU, so a new GPU gets no engine flag it was not given."""
    q = t.params.get("quantization")
    return ["--quantization", q] if q else []


def _worker_env(
    cm_name: str,
    *,
    before_spec: dict | None = None,
    after_spec: dict | None = None,
    tail: dict | None = None,
    end: dict | None = None,
) -> list[dict]:
    pairs: dict = {
        "POD_UID": {"valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        "HF_HOME": "/model-cache",
        "HF_HUB_OFFLINE": "1",
        "HF_MODULES_CACHE": "/tmp/hf_modules",
        "TRITON_CACHE_DIR": "/tmp/.triton-cache",
        "VLLM_CONFIG_ROOT": "/tmp/vllm-config",
        "VLLM_CACHE_ROOT": "/tmp/vllm-cache",
    }
    pairs.update(before_spec or {})
    pairs["SPECULATIVE_CONFIG"] = {"valueFrom": {"configMapKeyRef": {"name": cm_name, "key": "speculative-config"}}}
    pairs.update(after_spec or {})
    pairs["NCCL_IB_DISABLE"] = "1"
    pairs.update(tail or {})
    pairs["PYTHONHASHSEED"] = "0"
    pairs.update(end or {})
    return k8s.envs(pairs)


def vllm_agg(t: Target) -> list[dict]:
    gpu, p = GPU_PROFILE[t.gpu]["agg"], t.params
    assert t.image is not None, f"{t.id}: every Lightning target has a runtime image"
    image, repo, cm = t.image, REPO[t.precision], f"{t.dgd_name}-config"
    kv = t.routing == "kv"
    mamba = MAMBA + (["--mamba-cache-mode", "align"] if t.spec == "dspark" else []) + _rounding(5)
    spec = ["--speculative-config=$(SPECULATIVE_CONFIG)"]
    args = (
        _engine(repo, "512", gpu.get("batched_tokens"))
        + ["--enable-prefix-caching"]
        + (["--block-size", "64"] if kv else [])
        + ["--async-scheduling"]
        + (["--no-enable-flashinfer-autotune"] if gpu.get("autotune_off") else [])
        + _quantization(t)
        + (PARSERS + spec + mamba if p.get("parsers_first") else mamba + PARSERS + spec)
        + (["--kv-events-config", KV_EVENTS] if kv else [])
        + ["--disaggregation-mode", "agg"]
    )
    env = _worker_env(cm, before_spec=gpu.get("env_before_spec"), after_spec=gpu.get("env_after_spec"), end=gpu.get("env_end"))
    worker = gpu_worker("agg", "worker", image, t.gpu, ["python3", "-m", "dynamo.vllm"], args, env)
    if kv:
        worker["replicas"] = 4
    fe_args = (
        ["-m", "dynamo.frontend"]
        + (["--router-mode", "kv", "--router-kv-events", "--kv-cache-block-size", "64"] if kv else [])
        + ["--trust-remote-code"]
    )
    return [_configmap(t), k8s.dgd(t.dgd_name, "vllm", [frontend(image, fe_args), worker])]


def _kv_transfer(role: str, backends: list[str] | None) -> str:
    cfg: dict = {"kv_connector": "NixlConnector", "kv_role": role}
    if backends:
        cfg["kv_connector_extra_config"] = {"backends": backends}
    return json.dumps(cfg, separators=(",", ":"))


EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "FI_EFA_ENABLE_SHM_TRANSFER": "0",
    "FI_HMEM_CUDA_USE_DMABUF": "1",
    "NIXL_LIBFABRIC_USE_DEVICE_RDMA": "1",
    "UCX_RCACHE_MAX_UNRELEASED": "1024",
}
UCX_ENV = {"UCX_TLS": "^cuda_ipc", "UCX_RNDV_SCHEME": "get_zcopy", "UCX_MAX_RNDV_RAILS": "4"}
# Fabric profiles for the KV transfer between prefill and decode workers.
FABRIC: dict[str, dict[str, Any]] = {
    "aws-efa": {"backends": ["LIBFABRIC"], "env": EFA_ENV, "nccl_ib_disable": "1", "resources": {"vpc.amazonaws.com/efa": "4"}},
    "infiniband": {"backends": None, "env": UCX_ENV, "nccl_ib_disable": "0", "resources": {"rdma/ib": "1"}},
    "none": {"backends": None, "env": UCX_ENV, "nccl_ib_disable": "0", "resources": {}},
}


def vllm_disagg(t: Target) -> list[dict]:
    """1P1D: prefill and decode workers joined by NIXL over the target's fabric."""
    gpu, p, fabric = GPU_PROFILE[t.gpu]["disagg"], t.params, FABRIC[t.fabric]
    assert t.image is not None, f"{t.id}: every Lightning target has a runtime image"
    image, repo, cm = t.image, REPO[t.precision], f"{t.dgd_name}-config"
    mamba = MAMBA + _rounding(p.get("philox_rounds", 5))
    spec = (
        ["--speculative-config", "$(SPECULATIVE_CONFIG)"]
        if p.get("spec_flag_split")
        else ["--speculative-config=$(SPECULATIVE_CONFIG)"]
    )
    module = ["-m", "dynamo.vllm"]
    comps = [frontend(image, ["-m", "dynamo.frontend", "--trust-remote-code"])]
    for name, kind, role in (("VllmPrefillWorker", "prefill", "kv_producer"), ("VllmDecodeWorker", "decode", "kv_consumer")):
        in_command = kind in p.get("module_in_command", ())
        args = (
            ([] if in_command else module)
            + _engine(repo, p.get("max_num_seqs", "32"), gpu.get("batched_tokens"))
            + ["--async-scheduling"]
            + (["--no-enable-flashinfer-autotune"] if gpu.get("autotune_off") else [])
            + _quantization(t)
            + ["--enable-prefix-caching", "--mamba-cache-mode", "align", "--no-disable-hybrid-kv-cache-manager"]
            + (PARSERS + mamba if p.get("parsers_first") else mamba + PARSERS)
            + spec
            + ["--kv-transfer-config", _kv_transfer(role, fabric["backends"]), "--disaggregation-mode", kind]
        )
        layout = {"VLLM_SSM_CONV_STATE_LAYOUT": "DS"}
        tail = {"NIXL_LOG_LEVEL": "INFO"}
        if p.get("fabric_env_before_layout"):
            tail.update(fabric["env"])
            tail.update(layout)
        else:
            tail.update(layout)
        env = _worker_env(cm, before_spec=gpu.get("env_before_spec"), after_spec=gpu.get("env_after_spec"), tail=tail)
        env[[e["name"] for e in env].index("NCCL_IB_DISABLE")]["value"] = fabric["nccl_ib_disable"]
        if not p.get("fabric_env_before_layout"):
            env += k8s.envs(fabric["env"])
        command = ["python3"] + (module if in_command else [])
        comps.append(gpu_worker(name, kind, image, t.gpu, command, args, env, devices=fabric["resources"]))
    return [_configmap(t), k8s.dgd(t.dgd_name, "vllm", comps)]


# --------------------------------------------------------------------------- catalog entries


def _vllm(
    dirname: str,
    gpu: str,
    topology: str,
    spec: str,
    precision: str,
    tokens: int,
    al: float,
    *,
    routing: str = "single",
    dgd: str | None = None,
    perf: PerfRow | None = None,
    perf_source: str = PERF_MAIN,
    fabric: str | None = None,
    **params,
) -> Target:
    """One Lightning vLLM target; ``params`` are the few upstream quirks of that file."""
    profile = GPU_PROFILE[gpu][topology]
    fabric = fabric or profile.get("fabric", "none")
    ops: tuple[Op, ...] = profile.get("ops", ())
    return Target(
        id=f"lightning-vllm-{dirname}",
        upstream=f"nemotron-3.5-lightning/vllm/{dirname}/deploy.yaml",
        model=MODEL,
        runtime="vllm",
        gpu=gpu,
        topology=topology,
        spec=spec,
        routing=routing,
        precision=precision,
        fabric=fabric,
        shape="1P1D" if topology == "disagg" else None,
        profile="current" if perf_source == PERF_MAIN else "legacy",
        legacy=LEGACY_FIRST_LAYOUT if perf_source == PERF_FIRST else None,
        dgd_name=dgd or f"vllm-{dirname}",
        family=f"vllm-{topology}",
        params={"spec_tokens": tokens, "synthetic_al": al, **params},
        ops=ops,
        perf=Perf(*perf, source=perf_source) if perf else None,
        cache_jobs=("model-download-bf16" if precision == "bf16" else "model-download",),
        image=versions.image("lightning-vllm"),
    )


VLLM_TARGETS = (
    # H100 / H200, NVFP4
    _vllm("agg-h100-mtp", "h100", "agg", "mtp", "nvfp4", 7, 3.687, parsers_first=True, perf=(12, 241.21, 1275.37, 106.28)),
    _vllm("agg-h100-dflash", "h100", "agg", "dflash", "nvfp4", 5, 3.18, parsers_first=True, perf=(16, 216.44, 1757.75, 109.86)),
    _vllm("agg-h100-dspark", "h100", "agg", "dspark", "nvfp4", 7, 3.69, perf=(20, 238.64, 1878.11, 93.91)),
    _vllm(
        "agg-h100-dspark-kv-router", "h100", "agg", "dspark", "nvfp4", 7, 3.69, routing="kv", perf=(80, 303.84, 2037.43, 101.87)
    ),
    _vllm("agg-h200-mtp", "h200", "agg", "mtp", "nvfp4", 7, 3.687, parsers_first=True, perf=(12, 250.66, 1478.67, 123.22)),
    _vllm("agg-h200-dflash", "h200", "agg", "dflash", "nvfp4", 5, 3.18, parsers_first=True, perf=(16, 243.30, 1744.04, 109.00)),
    _vllm("agg-h200-dspark", "h200", "agg", "dspark", "nvfp4", 7, 3.69, perf=(20, 243.97, 2193.59, 109.68)),
    _vllm(
        "agg-h200-dspark-kv-router", "h200", "agg", "dspark", "nvfp4", 7, 3.69, routing="kv", perf=(80, 286.67, 2171.00, 108.55)
    ),
    _vllm(
        "disagg-h100-mtp",
        "h100",
        "disagg",
        "mtp",
        "nvfp4",
        5,
        3.421,
        parsers_first=True,
        spec_flag_split=True,
        quantization=FP4,
        fabric_env_before_layout=True,
        perf=(12, 493.52, 1055.68, 175.95),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "disagg-h100-dflash",
        "h100",
        "disagg",
        "dflash",
        "nvfp4",
        3,
        2.73,
        parsers_first=True,
        spec_flag_split=True,
        perf=(12, 542.71, 1117.29, 186.21),
    ),
    _vllm(
        "disagg-h100-dspark",
        "h100",
        "disagg",
        "dspark",
        "nvfp4",
        1,
        1.83,
        spec_flag_split=True,
        perf=(24, 2028.23, 1445.29, 120.44),
    ),
    _vllm(
        "disagg-h200-mtp",
        "h200",
        "disagg",
        "mtp",
        "nvfp4",
        5,
        3.421,
        quantization=FP4,
        fabric_env_before_layout=True,
        module_in_command=("prefill", "decode"),
        perf=(12, 424.66, 1203.97, 200.66),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "disagg-h200-dflash",
        "h200",
        "disagg",
        "dflash",
        "nvfp4",
        3,
        2.73,
        philox_rounds=1,
        module_in_command=("prefill", "decode"),
        perf=(12, 408.30, 1277.86, 212.98),
    ),
    _vllm("disagg-h200-dspark", "h200", "disagg", "dspark", "nvfp4", 1, 1.83, perf=(24, 834.80, 1656.90, 138.08)),
    # B200 / GB200, BF16 (current main)
    _vllm("agg-b200-mtp-bf16", "b200", "agg", "mtp", "bf16", 3, 2.874, perf=(18, 165.43, 2454.72, 136.37)),
    _vllm("agg-b200-dspark-bf16", "b200", "agg", "dspark", "bf16", 7, 3.69, perf=(50, 221.49, 4005.48, 80.11)),
    _vllm(
        "agg-b200-dspark-kv-router-bf16",
        "b200",
        "agg",
        "dspark",
        "bf16",
        7,
        3.69,
        routing="kv",
        dgd="vllm-agg-b200-dspark-kvr-bf16",
        perf=(192, 254.26, 4162.09, 86.71),
    ),
    _vllm(
        "disagg-b200-dspark-bf16",
        "b200",
        "disagg",
        "dspark",
        "bf16",
        1,
        1.83,
        max_num_seqs="80",
        perf=(80, 1059.12, 3711.37, 92.78),
    ),
    _vllm("agg-gb200-mtp-bf16", "gb200", "agg", "mtp", "bf16", 3, 2.874, perf=(18, 228.77, 2289.75, 127.21)),
    _vllm("agg-gb200-dspark-bf16", "gb200", "agg", "dspark", "bf16", 7, 3.69, perf=(58, 307.73, 4327.90, 74.62)),
    _vllm(
        "disagg-gb200-dflash-bf16",
        "gb200",
        "disagg",
        "dflash",
        "bf16",
        7,
        3.41,
        philox_rounds=1,
        module_in_command=("prefill", "decode"),
        perf=(24, 10641.10, 1148.33, 95.69),
    ),
    _vllm("disagg-gb200-dspark-bf16", "gb200", "disagg", "dspark", "bf16", 1, 1.83, perf=(8, 569.70, 802.30, 200.58)),
    # B200 / GB200, NVFP4 (first published layout, PR #13021; renamed or deleted upstream since)
    _vllm(
        "agg-b200-mtp",
        "b200",
        "agg",
        "mtp",
        "nvfp4",
        3,
        2.874,
        quantization=FP4,
        perf=(18, 217.12, 1829.94, 101.66),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "agg-b200-dflash",
        "b200",
        "agg",
        "dflash",
        "nvfp4",
        5,
        3.18,
        quantization=FP4,
        draft_triton_attn=True,
        perf=(20, 212.57, 2004.06, 100.20),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "agg-b200-dspark",
        "b200",
        "agg",
        "dspark",
        "nvfp4",
        7,
        3.69,
        quantization=FP4,
        perf=(24, 207.44, 2471.12, 102.96),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "agg-b200-dspark-kv-router",
        "b200",
        "agg",
        "dspark",
        "nvfp4",
        7,
        3.69,
        quantization=FP4,
        routing="kv",
        perf=(96, 295.03, 2507.70, 104.49),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "disagg-b200-dspark",
        "b200",
        "disagg",
        "dspark",
        "nvfp4",
        1,
        1.83,
        quantization=FP4,
        perf=(8, 236.43, 904.03, 226.01),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "agg-gb200-mtp",
        "gb200",
        "agg",
        "mtp",
        "nvfp4",
        3,
        2.874,
        quantization=FP4,
        perf=(18, 402.99, 1758.22, 97.68),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "agg-gb200-dflash",
        "gb200",
        "agg",
        "dflash",
        "nvfp4",
        5,
        3.18,
        quantization=FP4,
        draft_triton_attn=True,
        perf=(20, 429.97, 842.42, 42.12),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "agg-gb200-dspark",
        "gb200",
        "agg",
        "dspark",
        "nvfp4",
        7,
        3.69,
        quantization=FP4,
        perf=(24, 296.82, 2860.20, 119.18),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "disagg-gb200-dflash",
        "gb200",
        "disagg",
        "dflash",
        "nvfp4",
        7,
        3.41,
        quantization=FP4,
        philox_rounds=1,
        module_in_command=("prefill", "decode"),
        perf=(4, 491.40, 584.85, 292.43),
        perf_source=PERF_FIRST,
    ),
    _vllm(
        "disagg-gb200-dspark",
        "gb200",
        "disagg",
        "dspark",
        "nvfp4",
        1,
        1.83,
        quantization=FP4,
        perf=(8, 599.17, 939.28, 234.82),
        perf_source=PERF_FIRST,
    ),
)


# --------------------------------------------------------------------------- model cache

DOWNLOAD_SCRIPT = """import os
from pathlib import Path
from huggingface_hub import snapshot_download

for env_name in ("BASE_MODEL", "DFLASH_MODEL", "DSPARK_MODEL"):
    repo_id = os.environ[env_name]
    print(f"Downloading {repo_id}", flush=True)
    snapshot_download(repo_id=repo_id)

for path in Path("/model-cache/hub").glob("*/snapshots"):
    print(path)
"""


# dynamo:modelRevision (stacks/serving: applied only when set, so the default Job is upstream's and downloads each repo's
# default branch). huggingface_hub's snapshot_download "downloads the latest revision by default. If you want a specific
# repository revision, use the revision parameter" (https://huggingface.co/docs/huggingface_hub/guides/download, "Download
# an entire repository"): a branch, a PR, a tag or a full-length commit hash ("From specific version"). The revision
# names a commit of the base checkpoint, so only BASE_MODEL takes it; the draft repositories have commits of their own
# and stay on their default branch. The workers load the model by name with HF_HUB_OFFLINE=1, which reads the cache's
# refs/main; snapshot_download writes a ref only for a branch or tag it was given (refs/<revision>), never refs/main for
# a commit (huggingface_hub src/huggingface_hub/_snapshot_download.py: "if revision != commit_hash ... store a ref"), so the script points refs/main at the snapshot it fetched: the workers then load the pinned commit.
REVISION_PIN = RevisionPin(
    edits=(
        (
            "    snapshot_download(repo_id=repo_id)\n",
            '    revision = os.environ["MODEL_REVISION"] if env_name == "BASE_MODEL" else None\n'
            "    snapshot = Path(snapshot_download(repo_id=repo_id, revision=revision))\n"
            "    if revision:\n"
            '        ref = snapshot.parent.parent / "refs" / "main"\n'
            "        ref.parent.mkdir(parents=True, exist_ok=True)\n"
            "        ref.write_text(snapshot.name)\n"
            '        print(f"Pinned {repo_id} to {snapshot.name} (refs/main)", flush=True)\n',
        ),
    )
)


def download_job(name: str, precision: str) -> DownloadJob:
    """Fills the shared HF cache with the base checkpoint and both draft models for one precision."""
    repo = REPO[precision]
    return DownloadJob(
        name,
        versions.image("lightning-vllm"),
        DOWNLOAD_SCRIPT,
        CACHE,
        ("python3", "-c"),
        env={
            "BASE_MODEL": repo,
            "DFLASH_MODEL": repo + DRAFT_SUFFIX["dflash"],
            "DSPARK_MODEL": repo + DRAFT_SUFFIX["dspark"],
            "HF_HOME": "/model-cache",
            "HF_XET_HIGH_PERFORMANCE": "1",
        },
        security={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        spec={"completions": 1, "parallelism": 1, "activeDeadlineSeconds": 3600},
        pod_labels={"app": name},
        pull_secrets=True,
        revision=REVISION_PIN,
    )


FAMILY = ModelFamily(
    id=MODEL,
    short="lightning",
    served_model=REPO["nvfp4"],
    cache=CACHE,
    builders={"vllm-agg": vllm_agg, "vllm-disagg": vllm_disagg, "trtllm-agg": TRTLLM_AGG},
    cache_job_builders={
        "model-download": download_job("model-download", "nvfp4"),
        "model-download-bf16": download_job("model-download-bf16", "bf16"),
    },
    defaults={
        "gpu": "h100",
        "runtime": "vllm",
        "topology": "agg",
        "spec": ("dspark", "mtp"),
        "routing": "single",
        "profile": "current",
        "precision": {"h100": "nvfp4", "h200": "nvfp4", "b200": "bf16", "gb200": "bf16"},
    },
    targets=VLLM_TARGETS + TRTLLM_TARGETS,
)
