"""What ``render`` prints: a committed stack's objects (``render --stack``: ``Pulumi.<stack>.yaml`` read as the Pulumi
CLI reads it, through the same ``build_program`` as ``up``), a target's (``render_target``), as multi-document YAML
for people (``to_yaml``: key order kept, multi-line strings as block literals)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from stacks.config.keys import NS, ConfigError
from stacks.program import stack_yaml

# Re-exported (their callers read them here): the YAML writer is the registry's, the target renders the serving layer's,
# so `render --target` and `render --all` load neither this module nor the program package around it.
from stacks.registry.yaml_text import to_yaml  # noqa: F401
from stacks.serving import render_config, render_target  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[2]


def load_stack_yaml(text: str) -> Any:
    """``Pulumi.<stack>.yaml`` as the Pulumi CLI decodes it (stacks/program/stack_yaml.py: yaml.v3's scalars, duplicate
    keys refused)."""
    return stack_yaml.load(text)


def stack_file(name: str, root: Path = REPO_ROOT) -> Path:
    return root / f"Pulumi.{name}.yaml"


def stack_raw_config(name: str, root: Path = REPO_ROOT) -> dict[str, Any]:
    """The ``dynamo:`` keys of a committed stack, namespace stripped; secure values left encrypted."""
    path = stack_file(name, root)
    if not path.is_file():
        stacks = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        from stacks.registry import did_you_mean

        raise ConfigError(f"stack {name!r} has no {path.name}{did_you_mean(name, stacks)}; committed stacks: {', '.join(stacks)}")
    try:
        data = load_stack_yaml(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path.name} is not valid YAML: {e}") from None
    except ConfigError as e:  # a value the Pulumi CLI refuses (NaN, infinity): say in which file
        raise ConfigError(f"{path.name}: {e}") from None
    cfg = data.get("config") if isinstance(data, dict) else data
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise ConfigError(
            f"{path.name}: {'config' if isinstance(data, dict) else 'the file'} is a {type(cfg).__name__}, not a mapping; "
            f"write `config:` followed by `  {NS}:<key>: <value>` lines"
        )
    from stacks.config.keys import check_config_namespaces

    check_config_namespaces(cfg)  # a misspelt project prefix (dyanmo:gpu) would be ignored silently
    out = {}
    for k, v in cfg.items():
        if isinstance(k, str) and k.startswith(NS + ":"):
            out[k[len(NS) + 1 :]] = stack_yaml.config_value(v)  # the value up's program reads (text, or decoded JSON)
    return out


def split_secrets(raw: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """Stack-file keys as the Pulumi runtime sees them: ``{secure: ...}`` values are secret keys
    (their ciphertext is never needed), the rest are plain config."""
    secret = frozenset(k for k, v in raw.items() if isinstance(v, dict) and set(v) == {"secure"})
    return {k: v for k, v in raw.items() if k not in secret}, secret


def program_for_stack(name: str, root: Path = REPO_ROOT):
    """The same ``build_program`` that ``pulumi up`` runs, from the committed stack file."""
    from stacks.program import build_program

    plain, secret = split_secrets(stack_raw_config(name, root))
    return build_program(plain, name, secret, aws_region=stack_aws_region(name, root))


def stack_aws_region(name: str, root: Path = REPO_ROOT):
    """The stack's ``aws:region`` (the AWS provider's region), which ``dynamo:cluster.region`` must agree with."""
    data = load_stack_yaml(stack_file(name, root).read_text()) or {}
    cfg = data.get("config") if isinstance(data, dict) else None
    return cfg.get("aws:region") if isinstance(cfg, dict) else None


def render_stack(name: str, root: Path = REPO_ROOT) -> list[dict]:
    return program_for_stack(name, root).objects()


def skipped_checks(name: str, program: Any, root: Path = REPO_ROOT) -> list[str]:
    """What ``render --stack`` cannot check that ``pulumi up`` does, so the output says so instead of implying it
    passed: secret values (the file holds ciphertext), the kubeconfig file (the deploying machine's), and what only the
    live cluster knows (its storage classes, whether a default class exists)."""
    _, secret = split_secrets(stack_raw_config(name, root))
    notes = []
    if secret:
        notes.append(f"the values of the secrets {', '.join(sorted(secret))} (ciphertext here; `up` checks their shape)")
    notes += program.mode.unchecked_by_render
    return notes
