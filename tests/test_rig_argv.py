"""The serving rig starts a worker with the command line the kubelet would run: ``$(VAR)`` references in a container's
command and args expanded from its env (Kubernetes API reference, Container ``args``: "Variable references
$(VAR_NAME) are expanded using the container's environment. If a variable cannot be resolved, the reference in the
input string will be unchanged. Double $$ are reduced to a single $, which allows for escaping the $(VAR_NAME)
syntax")."""

from __future__ import annotations

import pytest

import rig
from stacks import catalog
from stacks.program.render import render_target


@pytest.mark.parametrize(
    "text, env, want",
    [
        ("--speculative-config=$(SPEC)", {"SPEC": '{"n": 3}'}, '--speculative-config={"n": 3}'),
        ("$(SPEC)", {}, "$(SPEC)"),  # unresolved: unchanged
        ("$$(SPEC)", {"SPEC": "x"}, "$(SPEC)"),  # escaped: the literal, whether or not SPEC exists
        ("a$$b", {}, "a$b"),
        ("$HOME/$(A)-$(B)", {"A": "1", "B": "2"}, "$HOME/1-2"),  # a lone $ stays; shell syntax is the shell's
        ("$(A", {"A": "1"}, "$(A"),  # an incomplete reference is kept
        ("end$", {}, "end$"),
    ],
)
def test_expand_follows_the_kubelet(text, env, want):
    assert rig.expand(text, env) == want


def test_env_values_expand_with_the_variables_before_them():
    c = {
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "$(A)-$(C)"},
            {"name": "C", "value": "3"},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ]
    }
    assert rig.container_env(c) == {"A": "1", "B": "1-$(C)", "C": "3"}


def _worker_with_flag(flag: str):
    """A catalog worker component whose args carry ``flag`` with a value, and the value's index."""
    for tid in sorted(catalog.targets()):
        dgd = next(o for o in render_target(tid) if o["kind"] == "DynamoGraphDeployment")
        for comp in dgd["spec"]["components"]:
            c = comp["podTemplate"]["spec"]["containers"][0]
            args = [str(a) for a in c.get("args") or []]
            if flag in args[:-1]:
                return tid, comp, args.index(flag) + 1
    return None


@pytest.mark.parametrize("flag", rig.SHARED_ENGINE_FLAGS)
def test_the_rig_passes_a_worker_the_engine_flags_the_kubelet_would(flag):
    """An engine flag written as a reference to the container's env (as a new family's recipe may write it) reaches
    the rig's worker with the env's value; ``$$`` keeps the literal."""
    found = _worker_with_flag(flag)
    if found is None:
        pytest.skip(f"no catalog worker sets {flag}")
    tid, comp, at = found
    c = comp["podTemplate"]["spec"]["containers"][0]
    value = str(c["args"][at])
    c["args"][at] = "$(RIG_ARGV_VALUE)"
    c["env"] = [*(c.get("env") or []), {"name": "RIG_ARGV_VALUE", "value": value}]
    assert rig._flag(rig._argv(comp), flag) == value, tid
    c["args"][at] = "$$(RIG_ARGV_VALUE)"
    assert rig._flag(rig._argv(comp), flag) == "$(RIG_ARGV_VALUE)", tid
