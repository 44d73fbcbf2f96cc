"""What every Nemotron-3.5-Lightning recipe shares (vLLM and TensorRT-LLM): the checkpoints, the
model cache, and the frontend and one-GPU worker pod shapes as ``engine.Component`` data.

Both ``lightning.py`` (vLLM, and the family) and ``lightning_trtllm.py`` import this module;
neither imports the other's builders back (no import cycle).
"""
from __future__ import annotations

from .. import registry
from . import k8s
from .engine import Cache, Component, shm

MODEL = "nemotron-3.5-lightning"
REPO = {"nvfp4": "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4", "bf16": "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16"}
DRAFT_SUFFIX = {"dflash": "-DFlash", "dspark": "-DSpark"}
PERF_MAIN = "nemotron-3.5-lightning/perf/README.md@b08b769"
PERF_FIRST = "nemotron-3.5-lightning/perf/README.md@70d2ef4"
CACHE = Cache(claim=k8s.CACHE_PVC, mount="/model-cache", size="140Gi")

FRONTEND_ENV = {
    "POD_UID": {"valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    "DYN_HTTP_BODY_LIMIT_MB": "200",
    "HF_HOME": "/model-cache",
    "HF_HUB_OFFLINE": "1",
    "HF_MODULES_CACHE": "/tmp/hf_modules",
}
WORKER_SECURITY = {"runAsUser": 0, "capabilities": {"add": ["IPC_LOCK", "SYS_RESOURCE"]}}


def frontend(image: str, args: list[str]) -> dict:
    """The Lightning frontend: model cache mounted, HF offline, /health startup probe."""
    return Component("Frontend", "frontend", image, ("python3",), args, FRONTEND_ENV, resources={},
                     startup_probe=k8s.http_probe("/health", 8000, 10, 60, 60), cache=CACHE).build()


def gpu_worker(name: str, kind: str, image: str, gpu: str, command: list[str], args: list[str], env: list[dict], *,
               devices: dict | None = None, volumes: tuple = (), shm_size: str = "40Gi", memory: str = "128Gi") -> dict:
    """A one-GPU Lightning worker: GPU affinity and taint toleration, model cache, /dev/shm; ``devices``: fabric resources."""
    return Component(
        name, kind, image, command, args, env, gpus=1, devices=devices or {}, requests={"memory": memory}, shm=shm_size,
        cache=CACHE, volumes=(shm(shm_size),) + tuple(volumes), working_dir="/workspace/", security=WORKER_SECURITY,
        startup_probe=k8s.http_probe("/live", 9090, 30, 20, 120), affinity=registry.label(gpu), tolerations=(k8s.GPU_TOLERATION,),
    ).build()
