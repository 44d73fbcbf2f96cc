"""vLLM workers that read the checkpoint with the Run:ai Model Streamer (``dynamo:modelLoader.format: runai-streamer``).

The facts it rests on:
- vLLM, "Loading models with Run:ai Model Streamer" (https://docs.vllm.ai/en/stable/models/extensions/runai_model_streamer/):
  the streamer "read[s] tensors in concurrency, while streaming it to GPU memory"; it needs vLLM's ``runai`` extra
  (``pip install vllm[runai]``) and is chosen with ``--load-format runai_streamer``; its tunables go in
  ``--model-loader-extra-config`` as JSON: ``concurrency``, "the level of concurrency and number of OS threads reading
  tensors from the file to the CPU buffer", and ``distributed``, distributed streaming across the GPUs of a worker.
- vLLM's loader (vllm/model_executor/model_loader/runai_streamer_loader.py, ``RunaiModelStreamerLoader.__init__``)
  reads ``distributed`` as a bool and ``concurrency`` as an int from that JSON, and ignores values of another type:
  so the values here are typed by the config (``ModelLoaderConfig``), never passed as text.
- The Dynamo vLLM runtime images install ``vllm[flashinfer,runai,otel]`` (ai-dynamo/dynamo
  container/deps/vllm/install_vllm.sh), and ``python3 -m dynamo.vllm`` takes vLLM's engine arguments (Dynamo's vLLM
  backend guide: "full compatibility with vLLM's native engine arguments").
- It loads Safetensors checkpoints from a local path (the model cache) as well as from S3; the catalog's checkpoints
  are Safetensors on the cache volume.

The flags go on every GPU container of the DGD (the engine workers; the frontend asks for no GPU), at the end of the
engine's command line (stacks/serving/engine_args.py: also where a worker starts the engine from a script). The
loader changes how weights are read, not what is served: the rendered DGD differs from upstream's only by these flags,
and only on a stack that asks for them.
"""

from __future__ import annotations

import json
from typing import Any

from stacks.config.keys import NS, ConfigError
from stacks.serving.compile_cache import container_gpus
from stacks.serving.engine_args import append_engine_args

LOAD_FORMAT = "runai_streamer"  # vLLM's --load-format value for the Run:ai Model Streamer
RUNTIME = "vllm"  # the runtime whose engine has this loader


def loader_args(cfg: Any) -> list[str]:
    """The engine flags of ``cfg`` (a ``ModelLoaderConfig`` with ``format: runai-streamer``)."""
    extra = {k: v for k, v in (("concurrency", cfg.concurrency), ("distributed", cfg.distributed)) if v is not None}
    flags = ["--load-format", LOAD_FORMAT]
    if extra:
        flags += ["--model-loader-extra-config", json.dumps(extra, separators=(",", ":"))]
    return flags


def apply_model_loader(dgd: dict, cfg: Any, target_id: str, runtime: str) -> None:
    """Add the loader's flags to every GPU container of ``dgd``, in place; a target of another runtime is refused."""
    if runtime != RUNTIME:
        raise ConfigError(
            f"{NS}:modelLoader.format: 'runai-streamer' is vLLM's loader, and {target_id} runs {runtime}; "
            f"remove {NS}:modelLoader or choose a vllm target"
        )
    flags = loader_args(cfg)
    for comp in dgd["spec"]["components"]:
        for container in comp["podTemplate"]["spec"]["containers"]:
            if container_gpus(container):
                try:
                    append_engine_args(container, flags)
                except ValueError as e:
                    raise ConfigError(f"{NS}:modelLoader.format: {comp['name']} of {target_id}: {e}") from None
