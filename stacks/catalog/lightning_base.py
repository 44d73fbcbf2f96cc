"""What every Nemotron-3.5-Lightning recipe shares (vLLM and TensorRT-LLM): the checkpoints, the
model cache, and the frontend and one-GPU worker pod shapes as ``builders.Component`` data.

Both ``lightning.py`` (vLLM, and the family) and ``lightning_trtllm.py`` import this module;
neither imports the other's builders back (no import cycle).
"""

from __future__ import annotations

from typing import Any

from stacks import registry
from stacks.catalog import k8s
from stacks.catalog.builders import Cache, Component, shm

MODEL = "nemotron-3.5-lightning"
REPO = {
    "nvfp4": "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4",
    "bf16": "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16",
}
DRAFT_SUFFIX = {"dflash": "-DFlash", "dspark": "-DSpark"}
PERF_MAIN = "nemotron-3.5-lightning/perf/README.md@b08b769"
PERF_FIRST = "nemotron-3.5-lightning/perf/README.md@70d2ef4"
# The targets that follow the first published layout (ai-dynamo/dynamo PR #13021, commit 70d2ef4), which upstream main
# replaced in PR #13370 (commit b08b769: files renamed to -bf16 variants or deleted; shared/reference/dynamo-recipes
# INDEX.md status column). The project's documents name them, so the catalog keeps them, marked.
LEGACY_FIRST_LAYOUT = (
    "follows the first upstream layout (ai-dynamo/dynamo PR #13021); upstream main replaced it in PR #13370 "
    "(renamed to a -bf16 variant or dropped)"
)
CACHE = Cache(claim=k8s.CACHE_PVC, mount="/model-cache", size="140Gi")

FRONTEND_ENV = {
    "POD_UID": {"valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    "DYN_HTTP_BODY_LIMIT_MB": "200",
    "HF_HOME": "/model-cache",
    "HF_HUB_OFFLINE": "1",
    "HF_MODULES_CACHE": "/tmp/hf_modules",
}
WORKER_SECURITY = {"runAsUser": 0, "capabilities": {"add": ["IPC_LOCK", "SYS_RESOURCE"]}}
# The frontend: model cache mounted, HF offline, /health startup probe.
FRONTEND: dict[str, Any] = {
    "env": FRONTEND_ENV,
    "resources": {},
    "startup_probe": k8s.http_probe("/health", 8000, 10, 60, 60),
    "cache": CACHE,
}
# A one-GPU worker: GPU affinity (``affinity``: the GPU) and taint toleration, model cache, /dev/shm, 128Gi memory.
SHM = "40Gi"
WORKER: dict[str, Any] = {
    "gpus": 1,
    "requests": {"memory": "128Gi"},
    "shm": SHM,
    "cache": CACHE,
    "working_dir": "/workspace/",
    "security": WORKER_SECURITY,
    "startup_probe": k8s.http_probe("/live", 9090, 30, 20, 120),
    "tolerations": (k8s.GPU_TOLERATION,),
}


def frontend(image: str, args: list[str]) -> dict:
    return Component("Frontend", "frontend", image, ("python3",), args, **FRONTEND).build()


def gpu_worker(
    name: str,
    kind: str,
    image: str,
    gpu: str,
    command: list[str],
    args: list[str],
    env: list[dict],
    *,
    devices: dict | None = None,
) -> dict:
    """A Lightning worker on ``gpu``; ``devices``: the fabric's extended resources (EFA, RDMA)."""
    return Component(
        name, kind, image, command, args, env, devices=devices or {}, volumes=(shm(SHM),), affinity=registry.label(gpu), **WORKER
    ).build()
