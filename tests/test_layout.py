"""The pure core (stacks/*.py, stacks/catalog/) never imports the command-line tools (stacks/cli/), and
components/ import only the core: a newcomer can read the core without the tools."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def test_core_and_components_never_import_the_cli():
    core = [p for p in (ROOT / "stacks").rglob("*.py") if "cli" not in p.relative_to(ROOT).parts and p.name != "__main__.py"]
    core += list((ROOT / "components").glob("*.py")) + [ROOT / "__main__.py"]
    assert len(core) > 15
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if m.startswith("stacks.cli"))
                 for p in core}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_cli_modules_live_under_stacks_cli():
    names = {p.stem for p in (ROOT / "stacks" / "cli").glob("*.py")}
    assert {"review", "preflight", "simulate", "bench_report", "timeline"} <= names
    assert not any((ROOT / "stacks" / f"{n}.py").exists() for n in ("review", "preflight", "simulate", "bench_report", "timeline"))


# --------------------------------------------------------------------------- no tracker numbers in the tree
# A reader of the code cannot open our tracker, so code, comments, test names and docs say what and why instead of
# citing an issue or finding by number. A public upstream issue stays citable when its repository is named right
# before it; the tree writes those as ``owner/repo#N`` or a URL, which this never matches.

import re  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

TRACKER_REF = re.compile(r"\b(?:issues?|findings?)[ \t-]*#?[ \t]*\d+", re.IGNORECASE)
UPSTREAM_PROJECTS = {"eksctl", "vllm", "terraform-aws-eks", "pulumi", "pulumi-kubernetes", "kubernetes", "karpenter",
                     "kwok", "helm", "dynamo"}
SCANNED_SUFFIXES = (".py", ".yaml", ".md", ".sh")


def tracker_references(text: str) -> list[tuple[int, str]]:
    """(line number, reference) for every issue/finding number not preceded (by whitespace only) by a repository:
    a token with a slash (``owner/repo``, a URL) or a known upstream project name."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in TRACKER_REF.finditer(line):
            before = re.search(r"(\S+)[ \t]+$", line[: m.start()])
            repo = before.group(1).lstrip("([{'\"`").lower() if before else ""
            if "/" in repo or repo in UPSTREAM_PROJECTS:
                continue
            out.append((n, m.group(0)))
    return out


def _words(s: str) -> str:
    """The examples below spell the words as ~i (issue), ~I (Issue), ~f (finding) so this file passes its own scan."""
    return s.replace("~i", "issue").replace("~I", "Issue").replace("~f", "finding")


@pytest.mark.parametrize("text, found", [
    ("# One GPU node group per pool (~i 11): the first", ["~i 11"]),
    ('"""~I 9 ~f 2: a render stack', ["~I 9", "~f 2"]),
    ("the ~i-9 acceptance line; before ~i #8 it did not", ["~i-9", "~i #8"]),
    ("~i 8 ~fs 5, 6: sized from the final DGD", ["~i 8", "~fs 5"]),
    ("aws/karpenter-provider-aws ~i 9071, about v1.11.0 and later; ~i 6296", ["~i 6296"]),
    ("sassoftware/viya4-iac-aws ~i 298 and eksctl ~i 8748 (vllm ~is #19824, #34399)", []),
    ("terraform-aws-eks #748, pulumi/pulumi#21797, github.com/ai-dynamo/dynamo/~is/10596", []),
    ("no t~i 5, re~i 3 or ~is without a number", []),
])
def test_tracker_reference_detector(text, found):
    assert [ref for _, ref in tracker_references(_words(text))] == [_words(f) for f in found]


def test_no_tracker_numbers_in_tracked_files():
    try:
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout: {e}")
    scanned = [f for f in files if f.endswith(SCANNED_SUFFIXES) or Path(f).name == "Makefile"]
    assert len(scanned) > 50
    found = [f"{f}:{n}: {ref}" for f in scanned if (ROOT / f).is_file()
             for n, ref in tracker_references((ROOT / f).read_text(errors="replace"))]
    print("\n".join(found))
    assert found == [], f"{len(found)} tracker references (say what and why instead, or name the upstream repo):\n" + "\n".join(found)
