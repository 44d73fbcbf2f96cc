"""The pure core (stacks/*.py, stacks/catalog/) never imports the command-line tools (stacks/cli/), and
components/ import only the core: a newcomer can read the core without the tools."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path, pkg: str | None = None, runtime_only: bool = False) -> set[str]:
    """The names a module imports (relative imports resolved against ``pkg``, by default the file's package);
    ``runtime_only`` leaves out ``if TYPE_CHECKING:`` blocks, which only type checkers read."""
    tree = ast.parse(path.read_text())
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
    out = set()
    if pkg is None:
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
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if m.startswith("stacks.cli")) for p in core}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_program_never_imports_the_aws_rules():
    """The AWS rules are test code (tests/aws_rules/, run on the graphs the program registers under mocks): nothing the
    program or the policy pack runs imports them, and no copy lives among the plans."""
    shipped = list((ROOT / "stacks").rglob("*.py")) + list((ROOT / "components").glob("*.py")) + [ROOT / "__main__.py"]
    shipped += list((ROOT / "policy").rglob("*.py"))
    offenders = {
        str(p.relative_to(ROOT)): sorted(m for m in imported_modules(p) if "aws_rules" in m.split("."))
        for p in shipped
        if "__pycache__" not in p.parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert (ROOT / "tests" / "aws_rules" / "__init__.py").is_file()
    assert not list((ROOT / "stacks").rglob("aws_rules*.py"))


def test_cli_modules_live_under_stacks_cli():
    names = {p.stem for p in (ROOT / "stacks" / "cli").glob("*.py")}
    assert {"review", "preflight", "simulate", "bench_report", "timeline"} <= names
    assert not any(
        (ROOT / "stacks" / f"{n}.py").exists() for n in ("review", "preflight", "simulate", "bench_report", "timeline")
    )


def test_the_command_line_knows_which_module_adds_each_command():
    """``stacks.__main__.COMMANDS`` names the module that adds each command, so a run of one command imports that
    module alone: every command is there, in the order `dynamo-stacks --help` lists them, and a run of one has every
    command's name but only its own module's parsers."""
    from stacks.__main__ import COMMANDS, build_parser
    from stacks.cli import shell

    listed = [name for _, _, names in COMMANDS for name in names]
    assert listed == list(shell.subcommands(build_parser()))
    for _, _, names in COMMANDS:
        for name in names:
            parsers = shell.subcommands(build_parser(name))
            assert list(parsers) == listed  # the others by name
            assert [n for n, p in parsers.items() if p.get_default("fn")] == list(names)  # its module's, with arguments


# --------------------------------------------------------------------------- the layer order
# Each module sits in one layer, and no module imports from a later one (a call back up the stack would make the
# config flow climb back and forth). The order is registry -> catalog -> config -> plans -> program -> shells
# (components/ and the command line) -> __main__.py. The config sits after the catalog because parsing a stack checks
# its target against the catalog (stacks.config.keys.select_target: an unknown id or an unqualified combination is
# refused while parsing, naming the valid choices), and the catalog needs nothing of the config (its modules read the
# registry only). A module's layer is its package's: a new module is checked by where it is put, without touching this
# test, and no module lives loose in stacks/.

LAYERS = ("registry", "catalog", "config", "plans", "program", "shells", "main")
PACKAGES = {
    "stacks.registry": "registry",  # the data everything reads: models, GPUs, instances, pins, prices
    "stacks.catalog": "catalog",  # every upstream recipe target, as data
    "stacks.config": "config",  # the config, parsed once
    "stacks.serving": "plans",  # plans: Kubernetes and AWS objects as data
    "stacks.cluster": "plans",
    "stacks.observe": "plans",
    "stacks.layers": "plans",  # the optional layers in the one layer shape (LayerPlan)
    "stacks.modes": "plans",  # the cluster modes (ClusterMode), one module per dynamo:cluster.mode
    "stacks.program": "program",  # spec -> plans, for `up` and `render --stack`
    "stacks.cli": "shells",
    "components": "shells",
}
# The catalog's table for `targets` packs a target onto its instance (stacks.cluster.pack): it is a view built from the
# plans, and nothing in the catalog imports it.
PLACED = {"stacks": "registry", "stacks.__main__": "shells", "stacks.catalog.view": "plans"}
# Names a module may take from a later layer, and why: none. (The EKS keys, EksConfig, are the config layer's own
# stacks/config/eks.py; the EKS plan reads them from there.)
ALLOWED_UP: dict[str, set[str]] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__main__"


def layer_of(module: str) -> str:
    if module in PLACED:
        return PLACED[module]
    if module == "__main__":
        return "main"
    for pkg, layer in PACKAGES.items():
        if module == pkg or module.startswith(pkg + "."):
            return layer
    raise AssertionError(f"{module} is in no layer package: put it in one of {', '.join(PACKAGES)}")


def test_every_module_lives_in_a_layer_package():
    loose = sorted(p.name for p in (ROOT / "stacks").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == []
    for pkg in PACKAGES:
        init = ROOT.joinpath(*pkg.split("."), "__init__.py")
        if init.exists():  # components/ is a plain directory of modules
            assert ast.get_docstring(ast.parse(init.read_text())), f"{pkg} says what it owns and may import"


def project_modules() -> dict[str, Path]:
    files = list((ROOT / "stacks").rglob("*.py")) + list((ROOT / "components").glob("*.py")) + [ROOT / "__main__.py"]
    return {module_name(p): p for p in files if "__pycache__" not in p.parts}


def _resolve(name: str, known) -> str | None:
    """The project module an imported name belongs to (``stacks.config.keys.NS`` -> ``stacks.config.keys``), or None."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in known:
            return ".".join(parts[:n])
    return None


def runtime_imports(module: str, path: Path) -> set[str]:
    """The names ``module`` imports when it runs (function-level imports included)."""
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return imported_modules(path, pkg, runtime_only=True)


def layer_violations(modules: dict[str, Path]) -> list[str]:
    out = []
    for mod, path in sorted(modules.items()):
        rank = LAYERS.index(layer_of(mod))
        for name in sorted(runtime_imports(mod, path)):
            target = _resolve(name, modules)
            if target is None or target == mod or name in ALLOWED_UP.get(mod, ()):
                continue
            if LAYERS.index(layer_of(target)) > rank:
                out.append(f"{mod} ({layer_of(mod)}) imports {name} ({layer_of(target)})")
    return out


def test_every_layer_has_its_modules():
    layers = {layer_of(m) for m in project_modules()}
    assert layers == set(LAYERS)
    assert {"stacks.config", "stacks.config.keys"} <= {m for m in project_modules() if layer_of(m) == "config"}
    assert layer_of("stacks.config.eks") == "config"
    assert layer_of("stacks.cluster") == layer_of("stacks.serving.serve") == layer_of("stacks.serving.a_new_module") == "plans"
    with pytest.raises(AssertionError, match="no layer package"):
        layer_of("stacks.a_loose_module")
    assert layer_of("components.cluster_source") == layer_of("stacks.cli.review") == "shells"


def test_no_module_imports_from_a_later_layer():
    assert layer_violations(project_modules()) == []


def test_the_layer_check_catches_a_climb_back(tmp_path):
    """A spec module that imports a plan builder, or a plan builder that imports the program, is reported."""
    spec, plans = tmp_path / "spec.py", tmp_path / "serve.py"
    spec.write_text("from ..serving import build_plan\nfrom .eks import EksConfig\n")
    plans.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cli import review\n"
        "def f():\n    from stacks.program import build_program\n"
    )
    modules = {**project_modules(), "stacks.config.stack": spec, "stacks.serving.serve": plans}
    found = layer_violations(modules)
    assert "stacks.config.stack (config) imports stacks.serving.build_plan (plans)" in found
    assert "stacks.serving.serve (plans) imports stacks.program.build_program (program)" in found
    assert not any("EksConfig" in f or "review" in f for f in found)


# --------------------------------------------------------------------------- no import circles
# Plans flow one way inside a layer too: a module never imports, even from inside a function, a module that imports it
# back (directly or through others). ``from pkg import mod`` counts as an import of ``pkg.mod`` alone; a package's
# ``__init__`` that gathers its modules' names imports each of them.


def import_edges(module: str, path: Path, known) -> set[str]:
    """The project modules ``module`` imports when it runs (function-level imports included, TYPE_CHECKING blocks not)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        out |= {t for t in (_resolve(n, known) for n in names) if t and t != module}
    return out


def import_circles(modules: dict[str, Path]) -> list[list[str]]:
    """Every set of modules that import each other in a circle (strongly connected components of more than one)."""
    graph = {m: import_edges(m, p, modules) for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert import_circles(project_modules()) == []


def test_the_circle_check_catches_a_function_level_import_back(tmp_path):
    outputs, bench = tmp_path / "outputs.py", tmp_path / "bench.py"
    outputs.write_text("from stacks.serving.bench import local_command\n")
    bench.write_text("def f():\n    from stacks.serving.outputs import served\n")
    modules = {**project_modules(), "stacks.serving.outputs": outputs, "stacks.serving.bench": bench}
    assert ["stacks.serving.bench", "stacks.serving.outputs"] in import_circles(modules)
    bench.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stacks.serving.outputs import served\n")
    assert import_circles(modules) == []


def test_main_is_a_few_component_calls():
    text = (ROOT / "__main__.py").read_text()
    tree = ast.parse(text)
    assert len(text.splitlines()) <= 60
    assert not [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    first_code = next(i for i, n in enumerate(tree.body) if not isinstance(n, (ast.Import, ast.ImportFrom, ast.Expr)))
    assert not [n for n in tree.body[first_code:] if isinstance(n, (ast.Import, ast.ImportFrom))], "imports mid-file"
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]


# --------------------------------------------------------------------------- no tracker numbers in the tree
# A reader of the code cannot open our tracker, so code, comments, test names and docs say what and why instead of
# citing an issue or finding by number. A public upstream issue stays citable when its repository is named right
# before it; the tree writes those as ``owner/repo#N`` or a URL, which this never matches.

import re  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

TRACKER_REF = re.compile(r"\b(?:issues?|findings?)[ \t-]*#?[ \t]*\d+", re.IGNORECASE)
UPSTREAM_PROJECTS = {
    "eksctl",
    "vllm",
    "terraform-aws-eks",
    "pulumi",
    "pulumi-kubernetes",
    "kubernetes",
    "karpenter",
    "kwok",
    "helm",
    "dynamo",
}
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


@pytest.mark.parametrize(
    "text, found",
    [
        ("# One GPU node group per pool (~i 11): the first", ["~i 11"]),
        ('"""~I 9 ~f 2: a render stack', ["~I 9", "~f 2"]),
        ("the ~i-9 acceptance line; before ~i #8 it did not", ["~i-9", "~i #8"]),
        ("~i 8 ~fs 5, 6: sized from the final DGD", ["~i 8", "~fs 5"]),
        ("aws/karpenter-provider-aws ~i 9071, about v1.11.0 and later; ~i 6296", ["~i 6296"]),
        ("sassoftware/viya4-iac-aws ~i 298 and eksctl ~i 8748 (vllm ~is #19824, #34399)", []),
        ("terraform-aws-eks #748, pulumi/pulumi#21797, github.com/ai-dynamo/dynamo/~is/10596", []),
        ("no t~i 5, re~i 3 or ~is without a number", []),
    ],
)
def test_tracker_reference_detector(text, found):
    assert [ref for _, ref in tracker_references(_words(text))] == [_words(f) for f in found]


def test_no_tracker_numbers_in_tracked_files():
    try:
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"not a git checkout: {e}")
    scanned = [f for f in files if f.endswith(SCANNED_SUFFIXES) or Path(f).name == "Makefile"]
    assert len(scanned) > 50
    found = [
        f"{f}:{n}: {ref}"
        for f in scanned
        if (ROOT / f).is_file()
        for n, ref in tracker_references((ROOT / f).read_text(errors="replace"))
    ]
    print("\n".join(found))
    assert found == [], f"{len(found)} tracker references (say what and why instead, or name the upstream repo):\n" + "\n".join(
        found
    )


def test_plans_carry_typed_fields_not_side_channel_dicts():
    """A plan's data is a named, typed field: no ``notes: dict`` (or ``dict[str, Any]``) bag that other modules fill
    and read by string key."""
    bags = []
    for path in (ROOT / "stacks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "notes":
                if ast.unparse(node.annotation).startswith(("dict", "Dict")):
                    bags.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert bags == []


# --------------------------------------------------------------------------- one module per cluster mode
# What a cluster mode means lives in its module (stacks/modes/<mode>.py, one ClusterMode each); everything else asks
# the stack's mode (``program.mode.installs_charts``) instead of comparing ``cluster.mode`` with a mode name. The one
# choice by name is the registry (stacks.modes.registry.CLUSTER_MODES, a lookup) and the Pulumi shell's one component
# class per mode (components/cluster_source.py SOURCES, a lookup too); pydantic's discriminator Literals are
# annotations, not comparisons.

MODE_NAMES = {"render", "kubeconfig", "stack", "eks"}


def _names_a_mode(node: ast.expr) -> bool:
    """An expression ending in ``mode`` (``cluster.mode``, ``program.cluster.mode``, a variable ``mode``)."""
    return (isinstance(node, ast.Attribute) and node.attr == "mode") or (isinstance(node, ast.Name) and node.id == "mode")


def _mode_literals(node: ast.expr) -> set[str]:
    """The mode names a comparison's other side holds: a string constant, or a tuple, list or set of them."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)} & MODE_NAMES


def mode_comparisons(text: str) -> list[int]:
    """Line numbers of comparisons of a mode with a mode name (``==``, ``!=``, ``in``, ``not in``, either side)."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_mode(s) for s in sides) and any(_mode_literals(s) for s in sides):
                out.append(node.lineno)
    return out


def test_the_mode_comparison_check_catches_a_planted_one():
    planted = (
        'if program.cluster.mode == "eks":\n    pass\n'
        'x = cluster.mode in ("eks", "stack")\n'
        'y = "render" != mode\n'
        'z = mode not in {"kubeconfig"}\n'
        'ok = door.tls.mode == "none" or spec.mode == "prefill" or mode == other\n'
        "also_ok = CLUSTER_MODES[cluster.mode]\n"
    )
    assert mode_comparisons(planted) == [1, 3, 4, 5]


def test_no_cluster_mode_is_compared_with_a_mode_name_outside_stacks_modes():
    files = [p for p in (ROOT / "stacks").rglob("*.py") if "modes" not in p.relative_to(ROOT / "stacks").parts[:1]]
    files += list((ROOT / "components").glob("*.py")) + [ROOT / "__main__.py"]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files if "__pycache__" not in p.parts for n in mode_comparisons(p.read_text())]
    assert found == [], "ask the stack's ClusterMode (stacks/modes) instead of comparing mode names: " + ", ".join(found)
    assert {p.stem for p in (ROOT / "stacks" / "modes").glob("*.py")} >= MODE_NAMES
