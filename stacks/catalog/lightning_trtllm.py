"""Nemotron-3.5-Lightning on TensorRT-LLM (aggregated only, experimental upstream).

One base: the vLLM Lightning frontend/worker pod shapes with the TRT-LLM engine
flags, the ``agg.yaml`` engine config mounted from the ConfigMap and the TRT-LLM
env. The engine config varies per GPU, as data (``KV_CACHE_EXTRA``: the B200/GB200 files
enable block reuse, KV-cache manager v2 and a mamba snapshot; ``MTP_DRAFT``: the draft
length), never derived from the GPU's generation.
"""

from __future__ import annotations

from stacks.registry import versions
from stacks.catalog import k8s
from stacks.catalog.builders import Component, Recipe, shm
from stacks.catalog.lightning_base import FRONTEND, LEGACY_FIRST_LAYOUT, MODEL, PERF_FIRST, PERF_MAIN, REPO, SHM, WORKER
from stacks.catalog.model import Perf, PerfRow, Target

ENGINE_CONFIG_HEAD = """backend: pytorch
tensor_parallel_size: 1
max_batch_size: 512
max_num_tokens: 32768
enable_chunked_prefill: true
trust_remote_code: true
stream_interval: 10
kv_cache_config:
  dtype: fp8
"""
# The B200/GB200 recipes add prefix-block reuse and the hybrid (mamba) state snapshot settings.
ENGINE_CONFIG_BLOCK_REUSE = """  enable_block_reuse: true
  use_kv_cache_manager_v2: true
  mamba_state_config:
    periodic_snapshot_interval: 0
    additional_snapshot_offsets_from_start: [57600]
"""
ENGINE_CONFIG_MOE = """moe_config:
  backend: CUTLASS
"""
ENGINE_CONFIG_MTP = """# specdec_synthetic_acceptance_length: {al}
speculative_config:
  decoding_type: MTP
  max_draft_len: {tokens}
  mtp_eagle_one_model: true
  speculative_model: {repo}
"""
# Per-GPU engine settings of the TRT-LLM files (a GPU with TRT-LLM targets adds its row to both): the kv_cache_config
# lines after ``dtype``, and the MTP draft length with the synthetic acceptance length upstream benchmarked it with.
KV_CACHE_EXTRA = {"h100": "", "h200": "", "b200": ENGINE_CONFIG_BLOCK_REUSE, "gb200": ENGINE_CONFIG_BLOCK_REUSE}
MTP_DRAFT = {"h100": (7, "3.687"), "h200": (7, "3.687"), "b200": (3, "2.874"), "gb200": (3, "2.874")}

TRTLLM_ENV_TAIL = {
    "TLLM_LOG_LEVEL": "INFO",
    "TLLM_BATCHED_GEMM_LOG_REJECTION": "1",
    "TRTLLM_ENABLE_PDL": "1",
    "TRTLLM_SERVER_DISABLE_GC": "1",
    "TRTLLM_WORKER_DISABLE_GC": "1",
}


def engine_config(gpu: str, spec: str, precision: str) -> str:
    """The ``agg.yaml`` text exactly as upstream writes it (comments included)."""
    text = ENGINE_CONFIG_HEAD + KV_CACHE_EXTRA[gpu] + ENGINE_CONFIG_MOE
    if spec == "mtp":
        tokens, al = MTP_DRAFT[gpu]
        text += ENGINE_CONFIG_MTP.format(al=al, tokens=tokens, repo=REPO[precision])
    return text


WORKER_ENV = {
    "POD_UID": {"valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    "HF_HOME": "/model-cache",
    "HF_HUB_OFFLINE": "1",
    "HF_MODULES_CACHE": "/tmp/hf_modules",
    "TRITON_CACHE_DIR": "/tmp/.triton-cache",
    "NCCL_IB_DISABLE": "1",
    "PYTHONHASHSEED": "0",
    **TRTLLM_ENV_TAIL,
}
# The engine config (ConfigMap key agg.yaml) mounted read-only at /config.
ENGINE_CONFIG_VOLUME = (
    {"name": "trtllm-config", "configMap": {"name": "{dgd}-config"}},
    k8s.mount("trtllm-config", "/config", read_only=True),
)
AGG = Recipe(
    "trtllm",
    (
        Component(
            "Frontend",
            "frontend",
            "{image}",
            ("python3",),
            ("-m", "dynamo.frontend", "--router-mode", "round-robin", "--http-port", "8000"),
            **FRONTEND,
        ),
        Component(
            "agg",
            "worker",
            "{image}",
            ("python3",),
            (
                "-m",
                "dynamo.trtllm",
                "--model",
                "{repo}",
                "--served-model-name",
                "{repo}",
                "--tensor-parallel-size",
                "1",
                "--max-num-tokens",
                "32768",
                "--max-batch-size",
                "512",
                "--extra-engine-args",
                "/config/agg.yaml",
                "--disaggregation-mode",
                "agg",
                "--dyn-tool-call-parser",
                "nemotron_nano",
                "--dyn-reasoning-parser",
                "nemotron_nano",
            ),
            WORKER_ENV,
            volumes=(shm(SHM), ENGINE_CONFIG_VOLUME),
            affinity="{gpu}",
            **WORKER,
        ),
    ),
    configmap={"agg.yaml": "{engine_config}"},
)


def _trtllm(
    dirname: str, gpu: str, spec: str, precision: str, perf: PerfRow | None, perf_source: str, *, dgd: str | None = None
) -> Target:
    """One TRT-LLM target; ``perf_source`` PERF_FIRST marks the PR #13021 copies (legacy layout)."""
    return Target(
        id=f"lightning-trtllm-{dirname}",
        upstream=f"nemotron-3.5-lightning/trtllm/{dirname}/deploy.yaml",
        model=MODEL,
        runtime="trtllm",
        gpu=gpu,
        topology="agg",
        spec=spec,
        routing="round-robin",
        precision=precision,
        fabric="none",
        profile="current" if perf_source == PERF_MAIN else "legacy",
        legacy=LEGACY_FIRST_LAYOUT if perf_source == PERF_FIRST else None,
        dgd_name=dgd or f"trtllm-{dirname}",
        family="trtllm-agg",
        params={"repo": REPO[precision], "engine_config": engine_config(gpu, spec, precision)},
        experimental=True,
        perf=Perf(*perf, source=perf_source) if perf else None,
        cache_jobs=("model-download-bf16" if precision == "bf16" else "model-download",),
        image=versions.image("lightning-trtllm"),
    )


TRTLLM_TARGETS: tuple[Target, ...] = (
    # Current on upstream main.
    _trtllm("agg-h100-mtp", "h100", "mtp", "nvfp4", (12, 1757.00, 264.87, 22.07), PERF_MAIN),
    _trtllm("agg-h200-mtp", "h200", "mtp", "nvfp4", (12, 1692.98, 250.05, 20.84), PERF_MAIN),
    _trtllm("agg-b200-bf16", "b200", "none", "bf16", (18, 219.18, 1869.54, 103.86), PERF_MAIN),
    _trtllm("agg-b200-mtp-bf16", "b200", "mtp", "bf16", (18, 244.95, 3295.50, 183.08), PERF_MAIN),
    _trtllm("agg-gb200-bf16", "gb200", "none", "bf16", (18, 216.77, 1985.84, 110.32), PERF_MAIN),
    _trtllm("agg-gb200-mtp-bf16", "gb200", "mtp", "bf16", (18, 231.34, 3556.40, 197.58), PERF_MAIN),
    # PR #13021 (NVFP4 on Blackwell); the no-spec DGDs were named *-nospec there.
    _trtllm("agg-b200", "b200", "none", "nvfp4", (18, 377.68, 386.998, 21.50), PERF_FIRST, dgd="trtllm-agg-b200-nospec"),
    _trtllm("agg-b200-mtp", "b200", "mtp", "nvfp4", (18, 446.88, 427.82, 23.77), PERF_FIRST),
    _trtllm("agg-gb200", "gb200", "none", "nvfp4", (18, 318.88, 280.10, 15.56), PERF_FIRST, dgd="trtllm-agg-gb200-nospec"),
    _trtllm("agg-gb200-mtp", "gb200", "mtp", "nvfp4", (18, 400.88, 580.09, 32.23), PERF_FIRST),
)
