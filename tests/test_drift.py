"""`python -m stacks drift --upstream DIR` on the two reference snapshots and on edited copies of one."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stacks import catalog
from stacks.cli import fidelity
from stacks.cli import drift
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.needs_reference
NEXT = fidelity.snapshot_dir("dynamo-next")
FROZEN = fidelity.recipes_dir()


def _run(upstream) -> tuple[int, list[str]]:
    out = subprocess.run(
        [sys.executable, "-m", "stacks", "drift", "--upstream", str(upstream)], cwd=ROOT, capture_output=True, text=True
    )
    return out.returncode, (out.stdout + out.stderr).splitlines()


def _kind(lines, prefix):
    return [l for l in lines if l.startswith(prefix)]


@pytest.fixture(scope="module")
def next_tree():
    if not NEXT.is_dir():
        from conftest import REFERENCE_SETUP, missing

        missing(f"no dynamo-next reference tree at {NEXT}", REFERENCE_SETUP)
    return NEXT


def test_against_the_snapshot_ultra_follows_nothing_drifts(next_tree):
    rc, lines = _run(next_tree)
    assert rc == 0, "\n".join(lines)
    for kind in ("ADDED", "REMOVED", "RENAMED", "CHANGED"):
        assert not _kind(lines, kind), lines
    final = sorted(t.id for t in catalog.targets().values() if t.reference == "dynamo-next")
    deprecated = sorted(t.id for t in catalog.targets().values() if t.successor and t.model == "nemotron-3-ultra")
    assert [l.split(": ")[1] for l in _kind(lines, "deprecated (not drift)")] == deprecated
    assert lines[0].endswith("(model folders compared: nemotron-3-ultra)")
    assert lines[-1] == (
        f"drift: no drift: 0 added, 0 removed, 0 renamed, 0 changed, 0 unsure, {len(final)} exact; "
        f"{len(deprecated)} deprecated, 0 legacy and 0 known renames listed (not drift)"
    )


def test_against_the_frozen_snapshot_the_final_ultra_profiles_it_lacks_are_reported():
    rc, lines = _run(FROZEN)
    assert rc == 1
    final = {t.id: t.upstream for t in catalog.targets().values() if t.reference == "dynamo-next"}
    removed = {l.split()[3]: l.split()[5].rstrip(",") for l in _kind(lines, "REMOVED")}
    assert removed == final and len(final) >= 12  # the seed's twelve at least (an added GPU adds its profiles)
    assert not _kind(lines, "ADDED") and not _kind(lines, "CHANGED") and not _kind(lines, "RENAMED")
    known = _kind(lines, "renamed, already followed (not drift)")
    assert len(known) == len(fidelity.renamed_paths()) == len(catalog.renamed())


def test_identical_copy_reports_nothing_and_edits_are_each_reported(next_tree, tmp_path):
    tree = tmp_path / "recipes"
    shutil.copytree(next_tree / "nemotron-3-ultra", tree / "nemotron-3-ultra")
    assert _run(tree)[0] == 0
    vllm = tree / "nemotron-3-ultra" / "vllm"
    # renamed: same file under a new directory and DGD name
    (vllm / "agg-b200-agentic-1M-kv-router").rename(vllm / "agg-b200-agentic-1M-router")
    f = vllm / "agg-b200-agentic-1M-router" / "deploy.yaml"
    f.write_text(f.read_text().replace("name: ultra-agg-b200-1m-kv-router", "name: ultra-agg-b200-1m-router"))
    # changed: one engine flag
    g = vllm / "agg-h200-agentic-256K-kv-router" / "deploy.yaml"
    g.write_text(g.read_text().replace("--max-num-seqs 256", "--max-num-seqs 128"))
    # removed: a file gone; added: a new recipe unlike any target
    shutil.rmtree(vllm / "disagg-h200-agentic-1M")
    new = vllm / "agg-b300-chat" / "deploy.yaml"
    new.parent.mkdir()
    new.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "nvidia.com/v1beta1",
                "kind": "DynamoGraphDeployment",
                "metadata": {"name": "ultra-agg-b300-chat"},
                "spec": {"components": []},
            }
        )
    )
    rc, lines = _run(tree)
    assert rc == 1
    assert _kind(lines, "RENAMED") == [
        "RENAMED upstream: target ultra-vllm-agg-b200-agentic-1M-kv-router: nemotron-3-ultra/vllm/agg-b200-agentic-1M-kv-router/deploy.yaml"
        " -> nemotron-3-ultra/vllm/agg-b200-agentic-1M-router/deploy.yaml; 1 field(s) differ: DynamoGraphDeployment/ultra-agg-b200-1m-router.metadata.name"
    ]
    (changed,) = _kind(lines, "CHANGED")
    assert changed.startswith(
        "CHANGED ultra-vllm-agg-h200-agentic-256K-kv-router (nemotron-3-ultra/vllm/agg-h200-agentic-256K-kv-router/deploy.yaml)"
    )
    assert "spec.components[1].podTemplate.spec.containers[0].args[0]" in changed
    assert _kind(lines, "REMOVED") == [
        f"REMOVED upstream: target ultra-vllm-disagg-h200-agentic-1M follows "
        f"nemotron-3-ultra/vllm/disagg-h200-agentic-1M/deploy.yaml, which {tree} lacks"
    ]
    assert _kind(lines, "ADDED") == ["ADDED upstream, no target: nemotron-3-ultra/vllm/agg-b300-chat/deploy.yaml"]


def test_a_missing_or_foreign_directory_is_an_error_not_a_pass(tmp_path):
    rc, lines = _run(tmp_path / "nope")
    assert rc == 2 and "no such directory" in lines[-1]
    (tmp_path / "other-model").mkdir()
    rc, lines = _run(tmp_path)
    assert rc == 2 and "holds none of the catalog's model folders" in lines[-1]


def test_field_paths_name_each_field_once():
    diffs = [
        "A/x.spec.a: upstream 1 != rendered 2",
        "A/x.spec.a: upstream 3 != rendered 4",
        "A/x.spec.b: not upstream, rendered 1",
        "A/x: not rendered",
        "A/x.spec.c: list length 1 != 2: upstream [] vs rendered []",
    ]
    assert drift.field_paths(diffs) == ["A/x.spec.a", "A/x.spec.b", "A/x", "A/x.spec.c"]


def test_platform_pins_are_the_chart_and_subcharts_of_dynamo_next(next_tree):
    """versions.yaml's dynamo-platform pin, and the Grove and kai-scheduler versions beside it, are what the newest
    platform Chart.yaml names (the subcharts install at those versions with the chart)."""
    from stacks.cluster.platform import dynamo_platform
    from stacks.registry.charts import chart_pin

    chart = yaml_text.load((next_tree / "platform" / "dynamo-platform-Chart.yaml").read_text())
    deps = {d.get("alias") or d["name"]: d["version"] for d in chart["dependencies"]}
    pin = chart_pin("dynamo-platform")
    assert (pin["version"], pin["grove"], pin["kai-scheduler"]) == (chart["version"], deps["grove"], deps["kai-scheduler"])
    spec = dynamo_platform(grove=True, kai_scheduler=True)
    assert spec.version == chart["version"] and spec.values["global"]["grove"]["install"] is True


# --------------------------------------------------------------------------- upstream main: legacy targets and renames


def _upstream_main(tmp_path: Path, next_tree: Path) -> Path:
    """Upstream main as the reference data reconstructs it: the frozen snapshot without the files its INDEX.md marks as
    deleted or renamed by the later upstream PR (their copies are the first layout's), with dynamo-next's model folders
    in place of the frozen ones."""
    tree = tmp_path / "recipes"
    shutil.copytree(FROZEN, tree)
    status = fidelity.index_status(FROZEN)
    gone = [p for p, st in status.items() if "by PR #13370" in st]
    assert gone, "the frozen snapshot's INDEX.md names the files upstream main dropped or renamed"
    for p in gone:
        (tree / p).unlink()
    for model in (d for d in next_tree.iterdir() if d.is_dir() and (FROZEN / d.name).is_dir()):
        for f in model.rglob("deploy*.yaml"):
            dest = tree / f.relative_to(next_tree)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, dest)
    return tree, gone


def test_against_upstream_main_the_legacy_targets_are_listed_and_nothing_drifts(next_tree, tmp_path):
    tree, gone = _upstream_main(tmp_path, next_tree)
    report = drift.compare(tree, __import__("stacks.program.render", fromlist=["render_target"]).render_target)
    legacy = {tid for tid, _, _ in report.legacy}
    marked = {t.id for t in catalog.targets().values() if t.legacy}
    # the targets whose file upstream main no longer has are exactly the ones the catalog marks legacy
    assert legacy == marked == {t.id for t in catalog.targets().values() if t.upstream in gone}
    assert not report.drifted, "\n".join(report.lines(None))
    rc, lines = _run(tree)
    assert rc == 0 and len(_kind(lines, "legacy (not drift): ")) == len(marked), "\n".join(lines)


def test_a_legacy_target_warns_at_render_and_up():
    t = next(t for t in catalog.targets().values() if t.legacy)
    _, warning = catalog.resolve(t.id)
    assert warning and t.legacy in warning and "legacy" in warning
    out = subprocess.run([sys.executable, "-m", "stacks", "render", "--target", t.id], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "warning:" in out.stderr and t.legacy in out.stderr


def test_a_same_folder_file_for_another_gpu_is_not_taken_for_a_rename(tmp_path):
    """A removed target and an added file of its folder pair only when GPU, topology, speculative method and context
    agree: the file of another GPU (product label changed) is a candidate of an UNSURE entry, never its rename."""
    tree = tmp_path / "recipes"
    shutil.copytree(FROZEN, tree)
    t = next(
        t
        for t in catalog.targets().values()
        if t.upstream
        and not t.legacy
        and not t.successor
        and t.reference == "dynamo-recipes"
        and t.upstream.startswith("nemotron-3.5-lightning/vllm/")
        and t.gpu == "h100"
    )
    src = tree / t.upstream
    moved = src.parent.parent / (src.parent.name + "-renamed") / src.name
    moved.parent.mkdir()
    text = src.read_text()
    src.unlink()
    # the same recipe under a new folder name: a rename
    moved.write_text(text)
    r = drift.compare(tree, __import__("stacks.program.render", fromlist=["render_target"]).render_target)
    assert [(tid, new) for tid, _, new, _ in r.renamed] == [(t.id, str(moved.relative_to(tree)))], "\n".join(r.lines(None))
    # the same file for another GPU product: not a rename
    assert "NVIDIA-H100-80GB-HBM3" in text
    moved.write_text(text.replace("NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"))
    r = drift.compare(tree, __import__("stacks.program.render", fromlist=["render_target"]).render_target)
    assert not r.renamed and [(tid, c) for tid, _, c in r.unsure] == [(t.id, [str(moved.relative_to(tree))])], "\n".join(
        r.lines(None)
    )
    assert r.drifted
