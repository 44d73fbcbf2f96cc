"""Test-wide set-up, and the rule that nothing passes unchecked.

Strict run (``CI=true``, as GitHub Actions sets it): a test that cannot run because its set-up is missing (the
upstream reference tree, a tool such as ``pulumi``/``kubectl``/``go``, the local control plane) FAILS, with the
set-up step to take. A missing reference stops the run at collection with one message. Only the skips listed in
``CONDITIONAL_SKIPS`` (facts of the environment, not a set-up step) may stand.

Other runs: the same tests are skipped, and the end of the run lists every skipped test with its reason under
"not checked". When ``$GITHUB_STEP_SUMMARY`` is set, the list also goes to the job summary.
"""

import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")

STRICT = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _no_source_positions_under_mocks() -> None:
    """In the test processes, resources register without their Python source position. The SDK computes one for every
    resource (pulumi/runtime/resource.py ``_get_stack_trace``: ``traceback.extract_stack`` and a file URI per frame)
    only for the engine's diagnostics and state; the mocks the unit tests run programs under never read it, and it was
    a quarter of their CPU time (tests/test_cluster_mocks.py: 24.5 s of user CPU with it, 18.1 s without). Pulumi
    programs the engine tests start run in their own processes and keep it."""
    from pulumi.runtime import resource
    from pulumi.runtime.proto import source_pb2

    resource._get_stack_trace = source_pb2.StackTrace


_no_source_positions_under_mocks()

# Skips that are a fact of the environment rather than a missing set-up step; a strict run lets them stand.
CONDITIONAL_SKIPS = (
    "moto offers p5.48xlarge in every region",  # tests/test_preflight.py: depends on moto's offering data
)

REFERENCE_SETUP = (
    "put the upstream reference data at ../shared/reference beside the clone, or set "
    "DYNAMO_REFERENCE=/path/to/reference (it holds dynamo-recipes/ and crds/); in GitHub Actions set "
    "the DYNAMO_SHARED_REPO variable (docs/ci.md)"
)
TOOLCHAIN_SETUP = "run `make test` (it builds the pinned toolchain into .tools/bin) or `make setup`"
TOOL_SETUP = {
    "pulumi": TOOLCHAIN_SETUP + "; tools/toolchain.sh builds pulumi",
    "kubectl": TOOLCHAIN_SETUP + "; tools/kube-local.sh build builds kubectl",
    "go": "install Go (the toolchain builds every binary from the Go module proxy); see tools/pulumi/go.mod for the version",
}


def missing(what: str, setup: str):
    """A test's set-up is absent: fail under CI=true, skip (listed at the end) otherwise."""
    if STRICT:
        pytest.fail(f"CI=true: {what}. Set-up: {setup}", pytrace=False)
    pytest.skip(f"{what} (set-up: {setup})")


def need_tool(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        missing(f"{tool} not on PATH", TOOL_SETUP.get(tool, TOOLCHAIN_SETUP))
    return path


def reference_file(relative: str):
    """A file of the reference data (``$DYNAMO_REFERENCE``, else ../shared/reference): its path, or the test is marked
    missing (skipped, a failure under CI=true) naming the file and the set-up."""
    from stacks.cli import fidelity

    path = fidelity.reference_root() / relative
    if not path.exists():
        missing(f"no {relative} in the reference data ({path})", REFERENCE_SETUP)
    return path


def _reference_problems(needs_recipes: bool, needs_crds: bool) -> list[str]:
    from stacks.cli import fidelity

    problems = []
    recipes = fidelity.recipes_dir()
    if needs_recipes and not recipes.is_dir():
        problems.append(
            f"no upstream recipe tree at {recipes} (DYNAMO_REFERENCE={os.environ.get('DYNAMO_REFERENCE', '')!r}, "
            f"DYNAMO_RECIPES_DIR={os.environ.get('DYNAMO_RECIPES_DIR', '')!r})"
        )
    crds = fidelity.reference_root() / "crds"
    if needs_crds and not crds.is_dir():
        problems.append(f"no Dynamo CRDs at {crds} (the local control plane installs them)")
    return problems


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_reference: needs the upstream reference tree (dynamo-recipes/)")


def _needs(item) -> tuple[bool, bool]:
    """(needs the recipes, needs the CRDs) for a collected test: engine tests install the CRDs."""
    return item.get_closest_marker("needs_reference") is not None, item.get_closest_marker("engine") is not None


def pytest_collection_finish(session):
    """Strict run: a missing reference stops the run here, naming the tests that need it and the set-up step."""
    if not STRICT:
        return
    wanted = [(item, *_needs(item)) for item in session.items]
    users = [item for item, recipes, crds in wanted if recipes or crds]
    if not users:
        return
    problems = _reference_problems(needs_recipes=any(r for _, r, _ in wanted), needs_crds=any(c for _, _, c in wanted))
    if problems:
        files = sorted({item.nodeid.split("::")[0] for item in users})
        pytest.exit(
            f"CI=true and the reference data is missing: {'; '.join(problems)}. "
            f"{len(users)} collected tests need it ({', '.join(files)}). Set-up: {REFERENCE_SETUP}.",
            returncode=1,
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    recipes, crds = _needs(item)
    if recipes or crds:
        problems = _reference_problems(recipes, crds)
        if problems:
            missing("; ".join(problems), REFERENCE_SETUP)
    if item.get_closest_marker("engine") is not None:
        for tool in ("pulumi", "kubectl"):
            need_tool(tool)


def _skip_reason(rep) -> str:
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2]).removeprefix("Skipped: ")
    return str(lr)


def _fail_strict_skip(rep, what: str) -> None:
    """Strict run: turn a skipped report into a failure naming ``what`` would have been skipped and why (conditional
    skips excepted)."""
    if not (STRICT and rep.skipped) or hasattr(rep, "wasxfail"):
        return
    reason = _skip_reason(rep)
    if any(c in reason for c in CONDITIONAL_SKIPS):
        return
    rep.outcome = "failed"
    rep.longrepr = (
        f"CI=true: {what} would have been skipped ({reason}); under CI a skip is a failure. "
        f"Set-up: {TOOLCHAIN_SETUP}, with the reference data in place ({REFERENCE_SETUP})."
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Strict run: any other skip (a test's own pytest.skip, an empty parameter set, importorskip) is a failure."""
    outcome = yield
    _fail_strict_skip(outcome.get_result(), "this test")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Strict run: a module that skips itself at import (``pytest.skip(..., allow_module_level=True)``, a module-level
    ``importorskip``) collects no test at all, so the test hook above never sees it: its collection fails instead."""
    outcome = yield
    _fail_strict_skip(outcome.get_result(), f"{collector.nodeid}, whole,")


def pytest_terminal_summary(terminalreporter):
    """List what was not checked, grouped by reason (and in the GitHub job summary when there is one)."""
    skipped = terminalreporter.stats.get("skipped", [])
    reasons = Counter(_skip_reason(r) for r in skipped)
    if not reasons:
        return
    terminalreporter.section(f"not checked: {len(skipped)} skipped test(s)")
    for reason, n in reasons.most_common():
        terminalreporter.write_line(f"{n:4d}  {reason}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(f"\n#### Not checked: {len(skipped)} skipped test(s)\n\n")
            f.writelines(f"- {n} × {reason}\n" for reason, n in reasons.most_common())
