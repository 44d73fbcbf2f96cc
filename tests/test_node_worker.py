"""The local node's worker entry points take the catalog's own worker command lines and refuse what the engine refuses.

``python3 -m dynamo.vllm`` on the node's image is tools/node/worker.py (vLLM 0.31.0's flag table, read from vLLM's
source by tools/node/vllm_args.py) and ``python3 -m dynamo.trtllm`` is tools/node/trtllm_worker.py (the installed
Dynamo wheel's own TensorRT-LLM worker parser). Both run here in the rig's Python, the image's environment, through
tests/node_worker_driver.py. Every worker command line of every catalog target is parsed: each must get as far as
the model check (no model is in the empty Hugging Face cache given here), which means every flag and value was
accepted. Then one command line each is broken the ways the engine refuses: an unknown flag, a value of the wrong
type, a parallelism that does not match the GPUs the device plugin gave the container.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rig import container_env, expand, rig_env_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "tools" / "node"
ENGINES = {"dynamo.vllm": "vllm", "dynamo.trtllm": "trtllm"}
NO_MODEL = "no config.json"


def _worker_argvs() -> list[tuple[str, str, str, list[str]]]:
    """(target, component, engine, argv after ``-m dynamo.<engine>``) of every worker container in the catalog: an
    args list as rendered, or the ``exec python3 -m dynamo.<engine>`` line of a start script, with the container's
    env values put in for ``${NAME}`` (what bash does; the start scripts' own variables stand as their names)."""
    sys.path.insert(0, str(ROOT))
    from stacks import catalog
    from stacks.program.render import render_target

    out = []
    for t in catalog.targets().values():
        for obj in render_target(t.id):
            if obj.get("kind") != "DynamoGraphDeployment":
                continue
            for comp in obj["spec"]["components"]:
                for c in comp["podTemplate"]["spec"]["containers"]:
                    env = container_env(c)
                    argv = [expand(str(a), env) for a in (c.get("command") or []) + (c.get("args") or [])]
                    for i, a in enumerate(argv[:-1]):
                        if a == "-m" and argv[i + 1] in ENGINES:
                            out.append((t.id, comp["name"], ENGINES[argv[i + 1]], argv[i + 2 :]))
                            break
                    else:
                        starts = [f"exec python3 -m {m} " for m in ENGINES]
                        script = next((a for a in argv if any(s in a for s in starts)), None)
                        if script:
                            at = min(script.index(s) for s in starts if s in script)
                            line = script[at:].replace("\\\n", " ").split("\n")[0]
                            line = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), m.group(1)), line)
                            words = shlex.split(line)
                            out.append((t.id, comp["name"], ENGINES[words[3]], words[4:]))
    return out


@lru_cache(maxsize=1)
def _flag_table() -> str:
    sys.path.insert(0, str(NODE))
    import images
    import vllm_args

    return json.dumps(vllm_args.from_sdist(images.fetch("vllm-sdist")))


def _run(tmp_path: Path, cases: list[dict]) -> list[dict]:
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    shutil.copy(NODE / "worker.py", lib / "dynamo_local_worker.py")  # as tools/node/images.py installs them
    shutil.copy(NODE / "trtllm_worker.py", lib / "trtllm_worker.py")
    flags = tmp_path / "vllm-flags.json"
    flags.write_text(_flag_table())
    hf = tmp_path / "hf"
    hf.mkdir(exist_ok=True)
    base = {"HF_HOME": str(hf), "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")}
    for c in cases:
        c["env"] = {**base, **c.get("env", {})}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env_dir = rig_env_dir()
    res = subprocess.run(
        [str(env_dir / "bin" / "python"), str(ROOT / "tests" / "node_worker_driver.py"), "cases.json", "out.json"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(lib), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DYNAMO_LOCAL_VLLM_FLAGS": str(flags)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((tmp_path / "out.json").read_text())


def test_every_catalog_worker_command_line_is_accepted(tmp_path):
    argvs = _worker_argvs()
    engines = {e for _, _, e, _ in argvs}
    assert engines == set(ENGINES.values()), engines  # the catalog has both kinds of worker
    results = _run(tmp_path, [{"engine": e, "argv": a} for _, _, e, a in argvs])
    refused = [
        f"{tid}/{comp} ({engine}): exit {r['code']}: {r['stderr'].strip().splitlines()[-1:]}"
        for (tid, comp, engine, _), r in zip(argvs, results)
        if not (r["code"] == 1 and NO_MODEL in r["stderr"])
    ]
    assert not refused, "\n".join(refused)


def _model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    return model


def _first(engine: str) -> list[str]:
    return next(a for _, _, e, a in _worker_argvs() if e == engine and "--tensor-parallel-size" in " ".join(a))


def _with(argv: list[str], flag: str, value: str) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        if argv[i] == flag:
            i += 2
            continue
        if argv[i].startswith(flag + "="):
            i += 1
            continue
        out.append(argv[i])
        i += 1
    return out + [flag, value]


@pytest.mark.parametrize("engine", sorted(ENGINES.values()))
def test_the_worker_refuses_what_the_engine_refuses(tmp_path, engine):
    argv = _with(_first(engine), "--model", str(_model_dir(tmp_path)))
    if "--extra-engine-args" in argv:  # the ConfigMap the pod mounts: here a file with the same parallelism
        extra = tmp_path / "engine.yaml"
        extra.write_text("tensor_parallel_size: 1\n")
        argv = _with(argv, "--extra-engine-args", str(extra))
    tp1 = _with(argv, "--tensor-parallel-size", "1")
    cases = [
        {"engine": engine, "argv": argv + ["--no-such-flag"]},
        {"engine": engine, "argv": _with(argv, "--tensor-parallel-size", "banana")},
        {"engine": engine, "argv": tp1, "env": {"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}},
        {"engine": engine, "argv": tp1, "env": {"NVIDIA_VISIBLE_DEVICES": "GPU-a"}},
    ]
    unknown, banana, mismatch, fits = _run(tmp_path, cases)
    # vLLM's parser is argparse's parse_args (exit 2); Dynamo's TensorRT-LLM parser logs the leftover and exits 1.
    assert unknown["code"] in (1, 2) and "--no-such-flag" in unknown["stderr"], unknown
    assert banana["code"] == 2 and "invalid int value: 'banana'" in banana["stderr"], banana
    assert mismatch["code"] == 1 and "has 2 GPU(s)" in mismatch["stderr"], mismatch
    assert fits["code"] == "exec", fits
    mocker = fits["exec"]
    assert mocker[1:3] == ["-m", "dynamo.mocker"], mocker
    assert mocker[mocker.index("--model-path") + 1] == argv[argv.index("--model") + 1]
