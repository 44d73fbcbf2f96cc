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
