"""Multi-document YAML for people: key order kept, multi-line strings as block literals."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import yaml

from .config import NS, ConfigError, parse
from .serving import build_plan

REPO_ROOT = Path(__file__).resolve().parent.parent


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, s: str):
    if "\n" in s:
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", s)


_Dumper.add_representer(str, _str)


def to_yaml(objs: Iterable[dict]) -> str:
    return yaml.dump_all(list(objs), Dumper=_Dumper, sort_keys=False, width=4096, default_flow_style=False)


def stack_file(name: str, root: Path = REPO_ROOT) -> Path:
    return root / f"Pulumi.{name}.yaml"


def stack_raw_config(name: str, root: Path = REPO_ROOT) -> dict[str, Any]:
    """The ``dynamo:`` keys of a committed stack, namespace stripped; secure values left encrypted."""
    path = stack_file(name, root)
    if not path.is_file():
        stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        from .registry import did_you_mean

        raise ConfigError(f"stack {name!r} has no {path.name}{did_you_mean(name, stacks)}; committed stacks: {', '.join(stacks)}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path.name} is not valid YAML: {e}") from None
    cfg = data.get("config") if isinstance(data, dict) else data
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path.name}: {'config' if isinstance(data, dict) else 'the file'} is a {type(cfg).__name__}, not a mapping; "
                          f"write `config:` followed by `  {NS}:<key>: <value>` lines")
    out = {}
    for k, v in cfg.items():
        if isinstance(k, str) and k.startswith(NS + ":"):
            # Pulumi hands a top-level number to the program as text ("3"); objects keep their JSON types.
            out[k[len(NS) + 1:]] = str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
    return out


def render_config(raw: dict[str, Any]) -> list[dict]:
    return build_plan(parse(raw)).objects()


def render_target(target_id: str) -> list[dict]:
    return render_config({"target": target_id})


def split_secrets(raw: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """Stack-file keys as the Pulumi runtime sees them: ``{secure: ...}`` values are secret keys
    (their ciphertext is never needed), the rest are plain config."""
    secret = frozenset(k for k, v in raw.items() if isinstance(v, dict) and set(v) == {"secure"})
    return {k: v for k, v in raw.items() if k not in secret}, secret


def program_for_stack(name: str, root: Path = REPO_ROOT):
    """The same ``build_program`` that ``pulumi up`` runs, from the committed stack file."""
    from .program import build_program

    plain, secret = split_secrets(stack_raw_config(name, root))
    return build_program(plain, name, secret, aws_region=stack_aws_region(name, root))


def stack_aws_region(name: str, root: Path = REPO_ROOT):
    """The stack's ``aws:region`` (the AWS provider's region), which ``dynamo:cluster.region`` must agree with."""
    data = yaml.safe_load(stack_file(name, root).read_text()) or {}
    cfg = data.get("config") if isinstance(data, dict) else None
    return cfg.get("aws:region") if isinstance(cfg, dict) else None


def render_stack(name: str, root: Path = REPO_ROOT) -> list[dict]:
    return program_for_stack(name, root).objects()
