"""Engine arguments added by ``overrides.<component>.args.append`` reach the engine, also where a component starts it
from a shell script (``bash -lc``): checked with the real bash on every such component of the catalog, by running the
script's last command with ``exec`` replaced by ``printf`` and reading the argv it would have started."""

from __future__ import annotations

import copy
import re
import subprocess

import pytest

from stacks import catalog
from stacks.config import ArgsOverride, ComponentOverride
from stacks.config.keys import ConfigError
from stacks.serving.engine_args import last_command, shell_script_index
from stacks.serving.serve import apply_overrides

APPENDED = ["--probe-flag", "a value with spaces", '{"json": "it\'s"}']


def _dgd(target) -> dict:
    return copy.deepcopy(next(o for o in catalog.recipe_objects(target) if o["kind"] == "DynamoGraphDeployment"))


def _main(comp: dict) -> dict:
    containers = comp["podTemplate"]["spec"]["containers"]
    return next((x for x in containers if x.get("name") == "main"), containers[0])


def script_components() -> list[tuple[str, str]]:
    """(target, component) of every catalog component whose engine container runs a shell script."""
    out = []
    for tid, t in sorted(catalog.targets().items()):
        for comp in _dgd(t)["spec"]["components"]:
            if shell_script_index(_main(comp)) is not None:
                out.append((tid, comp["name"]))
    return out


def engine_argv(container: dict) -> list[str]:
    """The argv the script's last command (``exec ...``) starts, as the real bash expands it with the container's env."""
    script = container["args"][shell_script_index(container)]
    command = re.sub(r"^\s*exec\s+", lambda _: "printf '%s\\0' ", last_command(script), count=1)
    env = {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}
    out = subprocess.run(["bash", "-c", command], capture_output=True, env={"PATH": "/usr/bin:/bin", **env}, check=True)
    return out.stdout.decode().split("\0")[:-1]


SCRIPTS = script_components()


def test_the_catalog_has_script_components():
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("tid, name", SCRIPTS, ids=[f"{t}-{n}" for t, n in SCRIPTS])
def test_appended_arguments_reach_the_engine_a_script_starts(tid, name):
    dgd = _dgd(catalog.targets()[tid])
    comp = next(c for c in dgd["spec"]["components"] if c["name"] == name)
    before = engine_argv(_main(comp))
    assert before[:3] in (["python3", "-m", before[2]], ["python", "-m", before[2]]) and before[2].startswith("dynamo.")
    apply_overrides(dgd, {name: ComponentOverride(args=ArgsOverride(append=APPENDED))}, "dynamo")
    assert engine_argv(_main(comp)) == before + APPENDED


def test_exec_form_components_get_the_arguments_at_the_end_of_args():
    comp = {
        "name": "w",
        "podTemplate": {
            "spec": {"containers": [{"name": "main", "command": ["python3", "-m", "dynamo.vllm"], "args": ["--model", "m"]}]}
        },
    }
    dgd = {"spec": {"components": [comp]}}
    apply_overrides(dgd, {"w": ComponentOverride(args=ArgsOverride(append=APPENDED))}, "dynamo")
    assert _main(comp)["args"] == ["--model", "m", *APPENDED]


def test_a_script_that_does_not_end_by_starting_the_engine_is_refused_with_the_key():
    comp = {
        "name": "w",
        "podTemplate": {
            "spec": {
                "containers": [
                    {"name": "main", "command": ["/bin/bash", "-lc"], "args": ["python3 -m dynamo.vllm --model m\necho done\n"]}
                ]
            }
        },
    }
    with pytest.raises(ConfigError, match=r"dynamo\.overrides\.w\.args\.append: .*exec python3 -m"):
        apply_overrides({"spec": {"components": [comp]}}, {"w": ComponentOverride(args=ArgsOverride(append=["--x"]))}, "dynamo")
