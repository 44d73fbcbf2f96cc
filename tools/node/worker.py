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


def fail(message: str, code: int = 1, engine: str = "dynamo.vllm") -> None:
    print(f"{engine} (local node): {message}", file=sys.stderr, flush=True)
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
    """What vLLM's FlexibleArgumentParser does to argv before argparse sees it (``parse_args`` of
    ``vllm/utils/argparse_utils.py``, vLLM 0.31.0): ``--flag_name`` is ``--flag-name`` (up to the first dot); ``-O3`` is
    ``--optimization-level 3``; a dotted key (``-cc.pass_config.fuse_norm_quant=True``,
    ``--compilation-config.mode 3``) is one field of a JSON-valued flag, and all of a flag's fields are merged into
    one JSON argument (``-cc {"pass_config": {...}}``), whose flag argparse then checks like any other."""
    out: list[str] = []
    for i, a in enumerate(argv):
        if a.startswith("--"):
            head, eq, tail = a.partition("=")
            dot = head.find(".")
            name, rest = (head, "") if dot < 0 else (head[:dot], head[dot:])
            out.append(name.replace("_", "-") + rest + eq + tail)
        elif a.startswith("-O") and a != "-O":
            out += ["--optimization-level", a[3:] if a[2] == "=" else a[2:]]
        elif a == "-O" and i + 1 < len(argv) and argv[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(a)
    merged: dict[str, dict] = {}
    kept: list[str] = []
    skip = False
    for i, a in enumerate(out):
        if skip:
            skip = False
            continue
        if a.startswith("-") and "." in a.partition("=")[0]:
            key, eq, value = a.partition("=")
            if not eq:
                value, skip = (out[i + 1] if i + 1 < len(out) else ""), True
            if key.endswith("+"):
                key, value = key[:-1], json.dumps(value.split(","))
            flag, *path = key.split(".")
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                parsed = value
            node = merged.setdefault(flag, {})
            for k in path[:-1]:
                node = node.setdefault(k, {})
            node[path[-1]] = parsed
            continue
        kept.append(a)
    for flag, value in merged.items():
        kept += [flag, json.dumps(value)]
    return kept


def model_ok(model: str) -> bool:
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
    if not model_ok(engine.model):
        fail(f"model {engine.model!r}: no config.json (not a model directory, nor in the offline Hugging Face cache)")
    plugin = getattr(engine, "reasoning_parser_plugin", None)
    if plugin and not os.access(plugin, os.R_OK):
        fail(f"--reasoning-parser-plugin {plugin}: not readable")
    check_gpus((engine.tensor_parallel_size or 1) * (engine.pipeline_parallel_size or 1) * (engine.data_parallel_size or 1))
    # vLLM writes its torch.compile cache under VLLM_CACHE_ROOT (default ~/.cache/vllm) and Triton its kernels under
    # TRITON_CACHE_DIR as the engine starts: a cache directory that cannot be written fails the start, as it does there.
    for var, default in (("VLLM_CACHE_ROOT", "~/.cache/vllm"), ("TRITON_CACHE_DIR", "~/.triton/cache")):
        root = Path(os.path.expanduser(os.environ.get(var) or default))
        sub = root / "torch_compile_cache" if var == "VLLM_CACHE_ROOT" else root
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f".local-node-{os.getpid()}").write_text("written at start\n")
    mode = MODES.get(str(getattr(dyn_args, "disaggregation_mode", "agg") or "agg").split(".")[-1].lower(), "agg")
    names = engine.served_model_name or [engine.model]
    shared = {f: getattr(engine, f, None) for f in ("max_num_seqs", "max_num_batched_tokens", "block_size")}
    exec_mocker("dynamo.vllm", engine.model, names[0], mode, dyn_args, shared)


def check_gpus(want: int, what: str = "tensor x pipeline x data parallel size", engine: str = "dynamo.vllm") -> None:
    """With NVIDIA_VISIBLE_DEVICES set by the device plugin (a list of device ids), the engine's world size must equal
    the GPUs the container got: the engine fails to start its workers otherwise."""
    devices = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
    if devices and devices not in ("all", "void", "none"):
        n = len([d for d in devices.split(",") if d])
        if want != n:
            fail(f"{what} = {want}, but the container has {n} GPU(s) (NVIDIA_VISIBLE_DEVICES={devices})", engine=engine)


def exec_mocker(engine: str, model: str, name: str, mode: str, dyn_args, shared: dict) -> None:
    """Exec Dynamo's mocker in the worker's disaggregation mode on the same model, with the engine settings the mocker
    shares (``--max-num-seqs``, ``--max-num-batched-tokens``, ``--block-size``) and the Dynamo runtime settings parsed
    from the command line (discovery backend, request plane)."""
    mocker = [
        sys.executable,
        "-m",
        "dynamo.mocker",
        "--model-path",
        model,
        "--model-name",
        name,
        "--disaggregation-mode",
        mode,
        "--speedup-ratio",
        SPEEDUP_RATIO,
        "--discovery-backend",
        str(dyn_args.discovery_backend),
        "--request-plane",
        str(dyn_args.request_plane),
    ]
    for flag, value in shared.items():
        if value is not None:
            mocker += [f"--{flag.replace('_', '-')}", str(value)]
    print(f"{engine} (local node): command line accepted; serving {name} with the mocker ({mode})", flush=True)
    os.execv(sys.executable, mocker)


if __name__ == "__main__":
    main(sys.argv[1:])
