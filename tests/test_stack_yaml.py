"""``render --stack`` reads ``Pulumi.<stack>.yaml`` as the real Pulumi CLI hands it to ``up``'s program.

The expected values come from the real CLI (the pinned toolchain's ``pulumi``): a Python program run by
``pulumi preview`` writes what ``stacks.config.pulumi_config.raw_config`` reads (what ``parse_spec`` gets on ``up``), and
``stacks.program.render.stack_raw_config`` must read the same stack file to the same values. The file holds the plain
scalars where YAML 1.1 (PyYAML) and gopkg.in/yaml.v3 (the CLI) disagree, at the top level and nested.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from stacks.config.keys import ConfigError
from stacks.program import stack_yaml
from stacks.program.render import stack_raw_config

ROOT = Path(__file__).resolve().parent.parent

# Values on which the two YAML readers disagree (or nearly do), each at the top level and inside a mapping and a list.
SCALARS = [
    "yes",
    "on",
    "off",
    "y",
    "1e3",
    "1.5e-7",
    "0o17",
    "0777",
    "08",
    "1:30",
    "1_000",
    "0x1F",
    "-0b11",
    ".5",
    "2.50",
    "1.0",
    "2026-01-01",
    "2026-1-2",
    "2026-01-01T10:00:00Z",
    "2026-01-01t10:00:00.25+02:00",
    "2026-01-01 10:00:00.5",
    "2026-02-30",
    "123",
    "-7",
    "+12",
    "~",
    "Null",
    "True",
    "FALSE",
    "'quoted 1e3'",
    '"2026-01-01"',
    "9223372036854775808",
    "18446744073709551616",
    "9007199254740993",
    "1e400",
    "hf-token",
]
PROGRAM = """\
import json, os
from stacks.config.pulumi_config import raw_config
with open(os.environ["STACK_YAML_OUT"], "w") as f:
    json.dump(raw_config(), f)
"""


def stack_file_text() -> str:
    lines = ["config:"]
    for i, scalar in enumerate(SCALARS):
        lines.append(f"  dynamo:top{i}: {scalar}")
    lines.append("  dynamo:nested:")
    for i, scalar in enumerate(SCALARS):
        lines.append(f"    key{i}: {scalar}")
    lines.append("  dynamo:listed: [" + ", ".join(SCALARS) + "]")
    lines.append("  dynamo:empty:")
    return "\n".join(lines) + "\n"


def cli_project(tmp_path: Path, name: str, program: str = PROGRAM) -> tuple[Path, dict]:
    work = tmp_path / "project"
    work.mkdir()
    venv = Path(sys.executable).resolve().parent.parent
    (work / "Pulumi.yaml").write_text(f"name: dynamo\nruntime:\n  name: python\n  options:\n    virtualenv: {ROOT / '.venv'}\n")
    (work / "__main__.py").write_text(program)
    backend = tmp_path / "state"
    backend.mkdir()
    env = {
        "PULUMI_BACKEND_URL": f"file://{backend}",
        "PULUMI_CONFIG_PASSPHRASE": "stack-yaml-test",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PYTHONPATH": str(ROOT),
        "STACK_YAML_OUT": str(tmp_path / "seen.json"),
        "VIRTUAL_ENV": str(venv),
    }
    return work, env


def stack_with_file(work: Path, env: dict, name: str, text: str):
    from pulumi import automation as auto

    stack = auto.create_stack(
        stack_name=name, work_dir=str(work), opts=auto.LocalWorkspaceOptions(work_dir=str(work), env_vars=env)
    )
    path = work / f"Pulumi.{name}.yaml"
    path.write_text(path.read_text() + text)  # after the passphrase salt `stack init` wrote
    return stack


@pytest.mark.engine
def test_render_reads_the_stack_file_as_the_pulumi_cli_hands_it_to_the_program(tmp_path):
    work, env = cli_project(tmp_path, "tricky")
    text = stack_file_text()
    stack = stack_with_file(work, env, "tricky", text)
    stack.preview(on_output=None)
    seen = json.loads((tmp_path / "seen.json").read_text())
    rendered = stack_raw_config("tricky", work)
    assert set(seen) == set(rendered)
    assert {k: v for k, v in rendered.items() if seen[k] != v} == {}, {k: seen[k] for k in rendered if seen[k] != rendered[k]}
    # The file holds the cases this test is for: values the YAML 1.1 reader alone would have read otherwise.
    assert len([s for i, s in enumerate(SCALARS) if yaml_1_1(s) != seen[f"top{i}"]]) >= 8


def yaml_1_1(scalar: str) -> str:
    """What a program would have got from PyYAML's reading (YAML 1.1) of the top-level value, or why it could not."""
    try:
        value = yaml.safe_load(f"k: {scalar}")["k"]
    except ValueError as e:  # 2026-02-30: PyYAML's timestamp pattern matches, its date constructor fails
        return f"error: {e}"
    return "" if value is None else str(value)


@pytest.mark.engine
def test_a_number_json_cannot_hold_is_refused_by_both(tmp_path):
    """``.inf`` at any depth: the CLI cannot hand it over (JSON has no infinity) and ``up`` stops before the program;
    ``render --stack`` refuses it too, naming the key."""
    from pulumi import automation as auto

    work, env = cli_project(tmp_path, "inf")
    stack = stack_with_file(work, env, "inf", "config:\n  dynamo:storage:\n    size: .inf\n")
    with pytest.raises(auto.CommandError):
        stack.preview(on_output=None)
    assert not (tmp_path / "seen.json").exists()
    with pytest.raises(ConfigError, match=r"dynamo:storage\.size: '\.inf'"):
        stack_raw_config("inf", work)


@pytest.mark.parametrize(
    "scalar, value",
    [
        ("yes", "yes"),
        ("1e3", 1000.0),
        ("0o17", 15),
        ("1:30", "1:30"),
        ("08", 8.0),
        ("2026-01-01", "2026-01-01 00:00:00 +0000 UTC"),
        ("0777", 511),
        ("1_000", 1000),
    ],
)
def test_plain_scalars_resolve_as_yaml_v3_resolves_them(scalar, value):
    """A few of yaml.v3's resolutions (gopkg.in/yaml.v3 v3.0.1 resolve.go), pinned for a reader without the CLI."""
    assert stack_yaml.load(f"k: {scalar}\n")["k"] == value


def test_a_key_given_twice_is_refused():
    with pytest.raises(Exception, match="given twice"):
        stack_yaml.load("config:\n  dynamo:gpu: h100\n  dynamo:gpu: b200\n")
