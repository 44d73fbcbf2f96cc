"""``dynamo:modelLoader.format: runai-streamer``: every GPU container of every vLLM target starts its engine with vLLM's
Run:ai Model Streamer flags (as the real bash expands a worker's script), nothing else changes, other runtimes are
refused, and it is off by default. The flag spellings are vLLM's documented ones
(docs.vllm.ai/en/stable/models/extensions/runai_model_streamer), not read from the product."""

from __future__ import annotations

import json

import pytest

from stacks import catalog
from stacks.config.keys import ConfigError
from stacks.program import build_program
from stacks.serving.engine_args import shell_script_index
from test_engine_args import engine_argv

VLLM = sorted(tid for tid, t in catalog.targets().items() if t.runtime == "vllm")
OTHER = sorted(tid for tid, t in catalog.targets().items() if t.runtime != "vllm")
LOADER = {"format": "runai-streamer", "concurrency": 16, "distributed": True}


def _argv(container: dict) -> list[str]:
    if shell_script_index(container) is not None:
        return engine_argv(container)
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


def _gpu(container: dict) -> bool:
    return any("nvidia.com/gpu" in ((container.get("resources") or {}).get(part) or {}) for part in ("limits", "requests"))


def _containers(tid: str, **extra) -> list[tuple[str, dict]]:
    dgd = build_program({"target": tid, **extra}, "t", frozenset({"hfToken"}), env={}).serving.dgd
    return [(c["name"], ct) for c in dgd["spec"]["components"] for ct in c["podTemplate"]["spec"]["containers"]]


@pytest.mark.parametrize("tid", VLLM)
def test_every_gpu_container_of_a_vllm_target_loads_with_the_streamer(tid):
    plain, streamed = _containers(tid), _containers(tid, modelLoader=LOADER)
    assert [n for n, _ in plain] == [n for n, _ in streamed]
    gpus = 0
    for (name, before), (_, after) in zip(plain, streamed):
        if not _gpu(before):
            assert after == before, name
            continue
        gpus += 1
        argv = _argv(after)
        assert argv[:-4] == _argv(before), name
        assert argv[-4:-2] == ["--load-format", "runai_streamer"]
        assert argv[-2] == "--model-loader-extra-config" and json.loads(argv[-1]) == {"concurrency": 16, "distributed": True}
    assert gpus


def test_off_by_default():
    for tid in VLLM:
        assert not any("--load-format" in _argv(c) for _, c in _containers(tid))


@pytest.mark.parametrize("tid", OTHER[:2])
def test_another_runtime_is_refused_with_the_key(tid):
    with pytest.raises(ConfigError, match=r"dynamo:modelLoader\.format: 'runai-streamer' is vLLM's loader"):
        _containers(tid, modelLoader={"format": "runai-streamer"})


def test_a_tunable_without_the_streamer_is_refused():
    with pytest.raises(ConfigError, match=r"modelLoader\.concurrency: has no effect with format: default"):
        _containers(VLLM[0], modelLoader={"concurrency": 4})
