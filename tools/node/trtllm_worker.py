"""``python3 -m dynamo.trtllm`` on the local node's image: the recipe's own TensorRT-LLM worker command line, parsed by
the installed Dynamo wheel's own parser, checked as the engine checks it, then served by Dynamo's GPU-free mocker.

The image build (tools/node/images.py) installs this file as ``dynamo/trtllm/__main__.py`` of the image's ai-dynamo
1.6.1. The wheel's ``dynamo.trtllm.args.parse_args`` parses the whole command line, strictly (an unknown flag exits 1,
a value its type refuses exits 2); it needs TensorRT-LLM only for ``BuildConfig``'s field defaults
(``dynamo/trtllm/backend_args.py``), and TensorRT-LLM needs a GPU and CUDA to import. So ``tensorrt_llm.llmapi`` is
given here as the one class, with the defaults of TensorRT-LLM's own ``BuildConfig`` (``tensorrt_llm/builder.py``:
``max_batch_size`` 2048, ``max_num_tokens`` 8192, ``max_seq_len`` None, ``max_beam_width`` 1).

Then, as the engine would before loading weights:
- the model is a directory with ``config.json`` or a Hugging Face repo id in ``$HF_HOME/hub`` (offline), else exit 1;
- ``--extra-engine-args`` is a readable YAML mapping (the engine loads it over the command line's settings);
- with ``NVIDIA_VISIBLE_DEVICES`` set by the device plugin, tensor x pipeline parallel size (the YAML's, else the
  command line's) must equal the GPUs the container got.

Then it execs the mocker in the worker's disaggregation mode (tools/node/worker.py ``exec_mocker``), with
``max_batch_size`` as the mocker's ``--max-num-seqs`` and ``max_num_tokens`` as its ``--max-num-batched-tokens``.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

from dynamo_local_worker import check_gpus, exec_mocker, fail, model_ok

ENGINE = "dynamo.trtllm"
BUILD_CONFIG_DEFAULTS = {"max_batch_size": 2048, "max_num_tokens": 8192, "max_seq_len": None, "max_beam_width": 1}
# dynamo/trtllm/constants.py DisaggregationMode values -> the mocker's --disaggregation-mode
MODES = {"prefill_and_decode": "agg", "prefill": "prefill", "decode": "decode"}


def _install_build_config() -> None:
    field = types.SimpleNamespace
    build_config = type("BuildConfig", (), {"model_fields": {k: field(default=v) for k, v in BUILD_CONFIG_DEFAULTS.items()}})
    llmapi = types.ModuleType("tensorrt_llm.llmapi")
    llmapi.BuildConfig = build_config  # type: ignore[attr-defined]
    root = types.ModuleType("tensorrt_llm")
    root.llmapi = llmapi  # type: ignore[attr-defined]
    sys.modules.setdefault("tensorrt_llm", root)
    sys.modules.setdefault("tensorrt_llm.llmapi", llmapi)


def main(argv: list[str]) -> None:
    import yaml

    _install_build_config()
    from dynamo.trtllm.args import parse_args

    config = parse_args(argv)
    if not model_ok(config.model):
        fail(
            f"model {config.model!r}: no config.json (not a model directory, nor in the offline Hugging Face cache)",
            engine=ENGINE,
        )
    extra: dict = {}
    if config.extra_engine_args:
        path = Path(config.extra_engine_args)
        try:
            extra = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            fail(f"--extra-engine-args {path}: {e}", engine=ENGINE)
        if not isinstance(extra, dict):
            fail(f"--extra-engine-args {path}: not a YAML mapping", engine=ENGINE)
    tp = int(extra.get("tensor_parallel_size", config.tensor_parallel_size) or 1)
    pp = int(extra.get("pipeline_parallel_size", config.pipeline_parallel_size) or 1)
    check_gpus(tp * pp, "tensor x pipeline parallel size", engine=ENGINE)
    mode = MODES.get(getattr(config.disaggregation_mode, "value", str(config.disaggregation_mode)))
    if mode is None:
        fail(f"--disaggregation-mode {config.disaggregation_mode}: the local node serves {sorted(MODES)}", engine=ENGINE)
    shared = {
        "max_num_seqs": extra.get("max_batch_size", config.max_batch_size),
        "max_num_batched_tokens": extra.get("max_num_tokens", config.max_num_tokens),
    }
    exec_mocker(ENGINE, config.model, config.served_model_name or config.model, mode, config, shared)


if __name__ == "__main__":
    main(sys.argv[1:])
