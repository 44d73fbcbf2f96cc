"""Every command the program prints for a user to paste is quoted from its parts: run in a real shell with values full
of shell metacharacters (a served model name, a kubeconfig path, a stack name), it runs the one command it names, with
each value intact as one argument, and nothing else.

The commands run under bash with ``curl``, ``kubectl``, ``aws``, ``pulumi`` and ``python3`` replaced by a recorder that
writes its argv to a file; a command that interpolated a value unquoted would run the value's ``touch``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
from pathlib import Path

from stacks.config.stack import KubeconfigCluster
from stacks.serving import build_plan, parse
from stacks.serving.outputs import follow_commands, kubectl_for, next_steps

EVIL = "m'; touch PWNED1; echo '$(touch PWNED2)`touch PWNED3`\"; touch PWNED4 #"
# Records its argv; as ``pulumi config get`` it answers as a secret config value would (a JSON object of keys).
RECORDER = """#!/usr/bin/env python3
import json, os, sys
open("argv.jsonl", "a").write(json.dumps(sys.argv[1:]) + "\\n")
if os.path.basename(sys.argv[0]) == "pulumi":
    print(json.dumps({"team": "a-key"}))
"""


def _plan_with_model(model: str):
    plan = build_plan(parse({"target": "lightning-vllm-disagg-h100-dspark"}))
    dgd = copy.deepcopy(plan.dgd)
    for comp in dgd["spec"]["components"]:
        for c in comp["podTemplate"]["spec"]["containers"]:
            args = c.get("args") or []
            for i, a in enumerate(args[:-1]):
                if a == "--served-model-name":
                    args[i + 1] = model
    return dataclasses.replace(plan, dgd=dgd)


def _run(tmp_path: Path, cmd: str) -> list[list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("curl", "kubectl", "aws", "pulumi"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "argv.jsonl").unlink(missing_ok=True)
    subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, timeout=60)
    assert not list(tmp_path.glob("PWNED*")), f"the command ran a value: {cmd}"
    log = tmp_path / "argv.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_next_steps_and_follow_commands_keep_every_value_one_argument(tmp_path):
    kubeconfig = f"{tmp_path}/a b/$(touch PWNED5)/kubeconfig"
    kubectl = kubectl_for(KubeconfigCluster(mode="kubeconfig", kubeconfigPath=kubeconfig))
    plan = _plan_with_model(EVIL)
    out = {**next_steps(plan, kubectl), **follow_commands(plan, kubectl=kubectl)}
    commands = {k: v for k, v in out.items() if isinstance(v, str) and v.split(" ", 1)[0] in ("kubectl", "curl")}
    assert {"portForward", "smokeTest", "followDownload", "watchDgd"} <= set(commands)
    for key, cmd in commands.items():
        (argv,) = _run(tmp_path, cmd)
        if key == "smokeTest":
            body = json.loads(argv[argv.index("-d") + 1])
            assert body["model"] == EVIL, (key, argv)
        else:
            assert argv[:2] == ["--kubeconfig", kubeconfig], (key, argv)


def test_the_front_door_smoke_test_keeps_the_model_and_stack_intact(tmp_path):
    from stacks.config.front_door import FrontDoorConfig
    from stacks.layers.front_door import smoke_test

    door = FrontDoorConfig.model_validate({"enabled": True, "auth": {"mode": "apiKeys"}})
    plan = _plan_with_model(EVIL)
    cmd = smoke_test(door, {"a": "http://door.example/v1"}, [plan], "st'ack; touch PWNED6")
    calls = _run(tmp_path, cmd)
    pulumi_calls = [a for a in calls if "--path" in a]
    assert pulumi_calls and pulumi_calls[0][pulumi_calls[0].index("--stack") + 1] == "st'ack; touch PWNED6"
    streams = [a for a in calls if "-d" in a]
    assert streams, calls
    assert json.loads(streams[-1][streams[-1].index("-d") + 1])["model"] == EVIL
