"""The README is a user guide a newcomer can follow on a fresh clone: short, every link resolves, and every command it
shows names a real subcommand (with options the real parser accepts), a real make target, a committed stack and a
catalog target; the pins it states are the ones stacks/registry/versions.yaml holds."""

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
from pathlib import Path
from unittest import mock

import pytest

from stacks import catalog
from stacks.__main__ import main as stacks_main
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 150

# A command of the project's CLI, as the README writes it: the module (any python) or the console script.
CLI = re.compile(r"(?:python -m stacks|dynamo-stacks)((?:[ \t]+[^\s`|;&#)]+)*)")


def _text(path: Path) -> str:
    return path.read_text()


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _code(text: str) -> list[str]:
    """Every command-like piece of text: the lines of fenced blocks (comments cut) and the inline code spans."""
    out = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        out += [re.sub(r"\s+#\s.*$", "", line) for line in block.splitlines()]
    out += re.findall(r"`([^`\n]+)`", _without_code_blocks(text))
    return [s.strip() for s in out if s.strip()]


# --------------------------------------------------------------------------- the real parser, without running anything
class _Parsed(BaseException):  # BaseException: a CLI that turns every Exception into an error line cannot swallow it
    def __init__(self, parser, namespace, extras):
        super().__init__()
        self.parser, self.namespace, self.extras = parser, namespace, extras


def parse(argv: list[str]):
    """(namespace, parser) from the CLI's own argparse parser for argv, without running the command: the top-level
    parse is stopped once argparse has read every argument. An argument the CLI refuses (argparse's error, an unknown
    option, a misspelt subcommand) becomes AssertionError with the CLI's message."""
    real = argparse.ArgumentParser.parse_known_args
    depth = 0

    def parse_only(self, args=None, namespace=None):
        nonlocal depth
        depth += 1
        try:
            result = real(self, args, namespace)
        finally:
            depth -= 1
        if depth == 0:  # the top-level parser (a subcommand's parser is read inside it)
            raise _Parsed(self, *result)
        return result

    err = io.StringIO()
    with (
        mock.patch.object(argparse.ArgumentParser, "parse_known_args", parse_only),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        try:
            code = stacks_main(argv)
        except _Parsed as p:
            assert not p.extras, f"{argv}: unknown arguments {p.extras}"
            return p.namespace, p.parser
        except SystemExit as e:
            code = e.code
    raise AssertionError(f"{argv}: exit {code}: {err.getvalue().strip()}")


def subcommands() -> set[str]:
    _, parser = parse(["targets"])
    return {name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices}


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", _text(ROOT / "Makefile"), flags=re.M))


def cli_commands(text: str) -> list[list[str]]:
    """The arguments of every CLI command the text shows (placeholders such as `...` dropped)."""
    out = []
    for piece in _code(text):
        for m in CLI.finditer(piece):
            args = [a for a in shlex.split(m.group(1)) if a not in ("...", "[...]")]
            args = [a for a in args if not (a.startswith("[") or a.endswith("]"))]  # optional parts, as [-v]
            if args:
                out.append(args)
    return out


# --------------------------------------------------------------------------- the tests
def test_readme_is_short():
    n = len(_text(README).splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; at most {MAX_README_LINES} (move detail to docs/)"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", h).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in re.findall(r"^#{1,6}\s+(.*)$", _without_code_blocks(_text(path)), flags=re.M):
        s = _slug(h)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def links(path: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", _without_code_blocks(_text(path)))


@pytest.mark.parametrize("doc", [README] + DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    bad = []
    for link in links(doc):
        if re.match(r"[a-z][a-z+.-]*:", link):  # https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        dest = (doc.parent / target).resolve() if target else doc
        if not dest.exists():
            bad.append(f"{link}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{link}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert bad == [], f"{doc.relative_to(ROOT)}: broken links:\n" + "\n".join(bad)


def test_link_check_finds_a_broken_link(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("# Title\n[ok](#title) [gone](missing.md) [web](https://example.com)\n```\n[in code](nowhere.md)\n```\n")
    assert links(doc) == ["#title", "missing.md", "https://example.com"]
    assert anchors(doc) == {"title"}
    assert _slug("Reference data and drift from upstream") == "reference-data-and-drift-from-upstream"
    assert _slug("4. Following a long `up`") == "4-following-a-long-up"


def test_readme_cli_commands_parse_with_the_real_parser():
    text = _text(README)
    commands = cli_commands(text)
    subs = subcommands()
    assert len(commands) >= 8, commands  # the README shows the CLI; a regex that finds nothing must not pass
    shown = set()
    for args in commands:
        if args == ["--help"]:  # the CLI's own help: exit 0
            with contextlib.redirect_stdout(io.StringIO()) as out:
                assert stacks_main(["--help"]) == 0 and "targets" in out.getvalue()
            continue
        assert args[0] in subs, f"README shows `{' '.join(args)}`: no subcommand {args[0]!r}; the CLI has {sorted(subs)}"
        ns, _ = parse(args)
        shown.add(args[0])
        stack, target = getattr(ns, "stack", None), getattr(ns, "target", None)
        if stack and stack != stack.upper():  # NAME is a placeholder; a real name is a committed stack
            assert (ROOT / f"Pulumi.{stack}.yaml").exists(), f"README shows `{' '.join(args)}`: no Pulumi.{stack}.yaml"
        if target and target != target.upper() and target != "ID":
            assert target in catalog.targets(), f"README shows `{' '.join(args)}`: {target!r} is not a catalog target"
    assert {"targets", "render"} <= shown


def test_docs_cli_commands_name_real_subcommands():
    subs = subcommands()
    bad = [
        f"{d.relative_to(ROOT)}: {' '.join(a)}"
        for d in DOCS
        for a in cli_commands(_text(d))
        if not a[0].startswith("-") and a[0] not in subs
    ]
    assert bad == []


def test_cli_check_refuses_what_the_parser_refuses():
    with pytest.raises(AssertionError, match="targets"):
        parse(["tragets"])
    with pytest.raises(AssertionError, match="--bogus"):
        parse(["render", "--target", "x", "--bogus"])
    assert cli_commands(
        "```bash\n.venv/bin/python -m stacks render --stack dev   # note\n```\nand `dynamo-stacks targets --long`"
    ) == [["render", "--stack", "dev"], ["targets", "--long"]]


@pytest.mark.parametrize("doc", [README] + DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_make_targets_shown_exist(doc):
    targets = make_targets()
    assert {"up", "test"} <= targets
    shown = {m for piece in _code(_text(doc)) for m in re.findall(r"(?:^|[;&|(]\s*)make ([a-z][\w-]*)", piece)}
    assert shown - targets == set(), f"{doc.relative_to(ROOT)} shows make targets the Makefile lacks"


def test_readme_commands_need_no_uv_on_the_path():
    """After `make up`, uv is in the toolchain cache, not on the PATH: the README never tells the user to run it."""
    assert [c for c in _code(_text(README)) if re.match(r"(?:\S+/)?uv\s+\S", c) and "not found" not in c] == []
    assert "uv run" not in _text(README)


def test_readme_states_the_two_commands_ci_runs():
    text = _text(README)
    assert re.search(r"^make up\b", text, flags=re.M) and re.search(r"^make test\b", text, flags=re.M)
    assert "make test" in _text(ROOT / ".ci" / "run")


def test_readme_pins_are_the_versions_manifest():
    v = yaml_text.load(_text(ROOT / "stacks" / "registry" / "versions.yaml"))
    section = _text(README).split("## Upgrading Dynamo", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("|")]
    platform = v["charts"]["dynamo-platform"]
    want = {
        "dynamo-platform": [platform["version"], platform["grove"], platform["kai-scheduler"]],
        "Pulumi CLI": [v["toolchain"]["pulumi"], v["toolchain"]["pulumi-kubernetes"]],
        "kube-prometheus-stack": [v["charts"][c]["version"] for c in ("kube-prometheus-stack", "keda", "karpenter")],
        "ai-dynamo": [v["rig"]["ai-dynamo"]],
    }
    for label, pins in want.items():
        row = next((r for r in rows if label in r), None)
        assert row is not None, f"README 'Upgrading Dynamo' has no pin row for {label}"
        for pin in pins:
            assert re.search(rf"(?<![\w.]){re.escape(pin)}(?![\w.])", row), f"README pin row {row!r} lacks {pin}"
    images = v["images"]
    for key in ("ultra-vllm-refresh", "ultra-vllm-day0"):
        name = images[key].split("/")[-1].split("@")[0]
        assert name in section, f"README 'Upgrading Dynamo' does not name {key}'s image {name}"


def test_readme_shell_setup_puts_the_pinned_pulumi_on_the_path():
    """The README's `eval "$(tools/toolchain.sh --env)"` gives the pinned pulumi from .tools/bin (make's set-up)."""
    if not (ROOT / ".tools" / "bin" / "pulumi").exists():
        pytest.skip("no toolchain built (make up / make test build it)")
    line = next(c for c in _code(_text(README)) if c.startswith("eval ") and "toolchain.sh --env" in c)
    # The user's PATH as set-up needs it (Go, which toolchain.sh checks for), without the toolchain already on it.
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if ".tools" not in d and ".venv" not in d)
    r = subprocess.run(
        ["bash", "-c", f"cd {shlex.quote(str(ROOT))} && {line} 2>/dev/null && command -v pulumi && pulumi version"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": path, "HOME": str(Path.home())},
    )
    assert r.returncode == 0, r.stderr
    where, version = r.stdout.split()[:2]
    assert where == str(ROOT / ".tools" / "bin" / "pulumi")
    assert version == yaml_text.load(_text(ROOT / "stacks" / "registry" / "versions.yaml"))["toolchain"]["pulumi"]


def _section(text: str, heading: str) -> str:
    assert f"\n## {heading}\n" in text, f"README has no '## {heading}' section"
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_says_how_to_check_a_deployment():
    """A user checking a new deployment finds, in the README: the smoke test, how to reach Grafana and log in, the
    benchmark and what each bench-report exit code means, with the key speculative rows need."""
    section = _section(_text(README), "Checking a deployment")
    for needed in (
        "smokeTest",
        "portForward",
        "svc/kube-prometheus-stack-grafana",
        "admin-password",
        "bench-report",
        "**0**",
        "**1**",
        "**2**",
        "benchmark.syntheticAcceptance",
        "prefill and decode",
    ):
        assert needed in section, f"README 'Checking a deployment' does not mention {needed}"


def test_readme_deploying_explains_node_groups_vs_karpenter_and_shows_cost():
    """The EKS part of the README says what a managed node group and a Karpenter pool bill, names the committed
    Karpenter example and shows `cost` on it; pause and autoscaling are in 'Operating'."""
    text = _text(README)
    deploying = _section(text, "Deploying")
    assert "capacity: karpenter" in deploying and "managed node group" in deploying
    example = next(a for a in cli_commands(deploying) if a[0] == "cost")
    stack = example[example.index("--stack") + 1]
    assert "karpenter" in yaml_text.load(_text(ROOT / f"Pulumi.{stack}.yaml"))["config"]["dynamo:cluster"].__repr__()
    operating = _section(text, "Operating")
    assert "dynamo:paused" in operating and "dynamo:autoscaling" in operating and "404" in operating


def test_docs_and_stack_files_spell_the_command_line_one_way():
    """Users copy commands from the docs and the stack files' comments: one spelling, ``.venv/bin/dynamo-stacks`` (the
    README alone also names the module form once, as the alternative)."""
    import re

    other = re.compile(r"(?:uv run |\.venv/bin/)?python -m stacks\b")
    files = sorted(ROOT.glob("docs/*.md")) + sorted(ROOT.glob("Pulumi.*.yaml"))
    assert files
    found = {str(f.relative_to(ROOT)): other.findall(f.read_text()) for f in files}
    assert {k: v for k, v in found.items() if v} == {}
