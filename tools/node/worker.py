"""``python3 -m dynamo.vllm`` on the local node's image: the recipe's own worker command line, checked as the engine
checks it, then served by Dynamo's GPU-free mocker.

The image build (tools/node/images.py) installs this file as ``dynamo/vllm/__main__.py`` of the image's ai-dynamo 1.6.1
(the wheel's own module needs vLLM, which needs a GPU). It parses the argv the way ``dynamo.vllm`` does
(``dynamo/vllm/args.py`` ``_parse_cli_args``, ai-dynamo 1.6.1): Dynamo's own argument groups, from the installed wheel
(``DynamoRuntimeArgGroup``, ``DynamoVllmArgGroup``) with ``parse_known_args``, the router flags through
``parse_worker_router_config``, then what remains with vLLM's engine parser, strictly: an unknown flag or a value the
flag's type refuses (``--tensor-parallel-size banana``) exits 2 with argparse's message, as vLLM does. vLLM's flags
and their types come from vLLM 0.31.0's own source (tools/node/vllm_args.py, the release the wheel requires).

Then, as vLLM would before loading weights:
- the model is a directory with ``config.json`` or a Hugging Face repo id in ``$HF_HOME/hub`` (offline), else exit 1;
- a ``--reasoning-parser-plugin`` file must be readable;
- its compile caches (``VLLM_CACHE_ROOT``, ``TRITON_CACHE_DIR``) must be writable: the engine writes there as it starts;
- with ``NVIDIA_VISIBLE_DEVICES`` set by a device plugin (a list of device ids), tensor x pipeline x data parallel
  size must equal the GPUs the container got (vLLM fails to start its workers otherwise).

Then it execs ``python3 -m dynamo.mocker`` in the worker's disaggregation mode on the same model, with the engine flags
the mocker shares (``--max-num-seqs``, ``--max-num-batched-tokens``, ``--block-size``), the Dynamo runtime settings
parsed above (discovery backend, request plane) and the env the pod runs with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

FLAGS_FILE = Path(os.environ.get("DYNAMO_LOCAL_VLLM_FLAGS", "/opt/dynamo-local/vllm-flags.json"))
SPEEDUP_RATIO = "100"  # the mocker's simulated step times divided by this (tests/rig.py uses the same)
MODES = {"agg": "agg", "prefill": "prefill", "decode": "decode"}


def fail(message: str, code: int = 1) -> None:
    print(f"dynamo.vllm (local node): {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def vllm_parser(table: list[dict]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm", allow_abbrev=False, add_help=False, conflict_handler="resolve")
    for f in table:
        kw: dict = {"dest": f["flags"][0].lstrip("-").replace("-", "_")}
        kind = f["kind"]
        if kind == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif kind == "flag":
            kw["action"] = "store_true"
        elif kind == "int":
            kw["type"] = int
        elif kind == "float":
            kw["type"] = float
        elif kind == "choice":
            kw["choices"] = f["choices"]
        elif kind == "list":
            kw["nargs"] = "+"
        p.add_argument(*f["flags"], **kw)
    return p


def _normalise(argv: list[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser takes ``--flag_name`` for ``--flag-name``."""
    out = []
    for a in argv:
        if a.startswith("--") and "_" in a.split("=", 1)[0]:
            head, eq, tail = a.partition("=")
            a = head.replace("_", "-") + eq + tail
        out.append(a)
    return out


def _model_ok(model: str) -> bool:
    if Path(model).is_dir():
        return (Path(model) / "config.json").is_file()
    hub = Path(os.environ.get("HF_HOME", str(Path.home() / ".cache" / "huggingface"))) / "hub"
    repo = hub / ("models--" + model.replace("/", "--"))
    ref = repo / "refs" / "main"
    return ref.is_file() and (repo / "snapshots" / ref.read_text().strip() / "config.json").is_file()


def main(argv: list[str]) -> None:
    from dynamo.common.configuration.groups.router_args import parse_worker_router_config
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.vllm.backend_args import DynamoVllmArgGroup

    dyn = argparse.ArgumentParser(prog="dynamo.vllm", allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(dyn)
    DynamoVllmArgGroup().add_arguments(dyn)
    dyn_args, rest = dyn.parse_known_args(argv)
    _router, rest = parse_worker_router_config(rest)
    engine = vllm_parser(json.loads(FLAGS_FILE.read_text())).parse_args(_normalise(rest))

    if not engine.model:
        fail("no --model")
    if not _model_ok(engine.model):
        fail(f"model {engine.model!r}: no config.json (not a model directory, nor in the offline Hugging Face cache)")
    plugin = getattr(engine, "reasoning_parser_plugin", None)
    if plugin and not os.access(plugin, os.R_OK):
        fail(f"--reasoning-parser-plugin {plugin}: not readable")
    devices = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
    if devices and devices not in ("all", "void", "none"):
        n = len([d for d in devices.split(",") if d])
        want = (engine.tensor_parallel_size or 1) * (engine.pipeline_parallel_size or 1) * (engine.data_parallel_size or 1)
        if want != n:
            fail(
                f"tensor x pipeline x data parallel size = {want}, but the container has {n} GPU(s) "
                f"(NVIDIA_VISIBLE_DEVICES={devices})"
            )
    # vLLM writes its torch.compile cache under VLLM_CACHE_ROOT (default ~/.cache/vllm) and Triton its kernels under
    # TRITON_CACHE_DIR as the engine starts: a cache directory that cannot be written fails the start, as it does there.
    for var, default in (("VLLM_CACHE_ROOT", "~/.cache/vllm"), ("TRITON_CACHE_DIR", "~/.triton/cache")):
        root = Path(os.path.expanduser(os.environ.get(var) or default))
        sub = root / "torch_compile_cache" if var == "VLLM_CACHE_ROOT" else root
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f".local-node-{os.getpid()}").write_text("written at start\n")
    mode = str(getattr(dyn_args, "disaggregation_mode", "agg") or "agg")
    mode = MODES.get(mode.split(".")[-1].lower(), "agg")
    names = engine.served_model_name or [engine.model]
    mocker = [
        sys.executable,
        "-m",
        "dynamo.mocker",
        "--model-path",
        engine.model,
        "--model-name",
        names[0],
        "--disaggregation-mode",
        mode,
        "--speedup-ratio",
        SPEEDUP_RATIO,
        "--discovery-backend",
        str(dyn_args.discovery_backend),
        "--request-plane",
        str(dyn_args.request_plane),
    ]
    for flag in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
        value = getattr(engine, flag, None)
        if value is not None:
            mocker += [f"--{flag.replace('_', '-')}", str(value)]
    print(f"dynamo.vllm (local node): command line accepted; serving {names[0]} with the mocker ({mode})", flush=True)
    os.execv(sys.executable, mocker)


if __name__ == "__main__":
    main(sys.argv[1:])
