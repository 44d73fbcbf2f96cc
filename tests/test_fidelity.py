"""Every in-scope upstream recipe file is reproduced exactly by the catalog render.

The upstream tree: $DYNAMO_RECIPES_DIR, else $DYNAMO_REFERENCE/dynamo-recipes, else
../shared/reference/dynamo-recipes. Renders use a configured storage class and pull
secret, which stand for upstream's placeholders.
"""

import re

import pytest

from conftest import REFERENCE_SETUP, missing
from stacks import catalog, registry
from stacks.cli import fidelity
from stacks.program.render import render_config

REF = fidelity.recipes_dir()
# Each snapshot a target follows (Target.reference), with the in-scope files of its tree. Without a tree the
# parametrized test still exists (one "<snapshot>-missing" case), so that tests/conftest.py fails it under CI=true and
# lists it as skipped otherwise, instead of pytest's silent empty parameter set.
FOLLOWED = [s for s in fidelity.SNAPSHOTS if any(t.reference == s for t in catalog.targets().values())]
SCOPE = [
    pytest.param(s, p, id=f"{s}:{p}")
    for s in FOLLOWED
    if fidelity.snapshot_dir(s).is_dir()
    for p in fidelity.in_scope_files(fidelity.snapshot_dir(s))
]
SCOPE += [pytest.param(s, "", id=f"{s}-missing") for s in FOLLOWED if not fidelity.snapshot_dir(s).is_dir()]
BY_UPSTREAM = {(t.reference, t.upstream): t for t in catalog.targets().values() if t.upstream}
STORAGE_CLASS = "fsx-lustre"
PULL = ("ngc-pull",)

# Tests that read the upstream tree: tests/conftest.py fails them under CI=true when it is missing, skips otherwise.
needs_reference = pytest.mark.needs_reference


def _tree(snapshot: str):
    """A snapshot's tree; conftest checks only dynamo-recipes, so the others are checked here the same way."""
    ref = fidelity.snapshot_dir(snapshot)
    if not ref.is_dir():
        missing(f"no {snapshot} reference tree at {ref}", REFERENCE_SETUP)
    return ref


def _upstream_names_pull_secrets(tid) -> bool:
    t = catalog.targets()[tid]
    up = fidelity.snapshot_dir(t.reference) / t.upstream if t.upstream else None
    return up is not None and up.is_file() and "imagePullSecrets" in up.read_text()


def _render(tid):
    """The configured pull secret stands for upstream's placeholder; recipes that name none are rendered
    without one (a configured pull secret reaches their pods too: tests/test_config_errors.py)."""
    pull = {"imagePullSecrets": list(PULL)} if _upstream_names_pull_secrets(tid) else {}
    return render_config({"target": tid, "storage": {"className": STORAGE_CLASS}, **pull})


@needs_reference
def test_scope_is_the_seed_recipes():
    models = {p.values[1].split("/")[0] for p in SCOPE if p.values[0] == "dynamo-recipes"}
    followed = {t.upstream.split("/")[0] for t in catalog.targets().values() if t.reference == "dynamo-recipes" and t.upstream}
    assert (
        models == followed and len(followed) >= 3
    )  # the model directories the catalog's targets follow, the three seeds at least
    assert len([p for p in SCOPE if p.values[0] == "dynamo-recipes"]) >= 56


@needs_reference
@pytest.mark.parametrize("snapshot,path", SCOPE)
def test_upstream_file_rendered_exactly(snapshot, path):
    ref = _tree(snapshot)
    t = BY_UPSTREAM.get((snapshot, path))
    assert t is not None, f"no catalog target follows {snapshot}/{path}"
    diffs = fidelity.compare_file(fidelity.load_docs(ref / path), _render(t.id), storage_class=STORAGE_CLASS, pull_secrets=PULL)
    assert not diffs, f"{snapshot}/{path} vs {t.id}:\n" + "\n".join(diffs)


@needs_reference
@pytest.mark.parametrize("snapshot", FOLLOWED)
def test_model_cache_objects_rendered_exactly(snapshot):
    ref = _tree(snapshot)
    report = fidelity.compare_model_cache(ref, _render, storage_class=STORAGE_CLASS, pull_secrets=PULL, snapshot=snapshot)
    bad = {path: lines for per_model in report.values() for path, lines in per_model.items() if lines}
    assert not bad, "\n".join(f"{p}:\n  " + "\n  ".join(l) for p, l in bad.items())
    models = {t.model for t in catalog.targets().values() if t.reference == snapshot}
    assert sum(len(v) for v in report.values()) >= len(models)


# --------------------------------------------------------------------------- Nemotron-3-Ultra: the final (Dynamo 1.6) profiles

ULTRA = [t for t in catalog.targets().values() if t.model == "nemotron-3-ultra"]
FINAL = [t for t in ULTRA if t.successor is None]


def test_ultra_final_profiles_are_one_per_gpu_context_and_topology_and_follow_dynamo_next():
    """12 final targets: every Ultra GPU x 256K/1M x agg/disagg, named like their upstream directories."""
    gpus = {t.gpu for t in ULTRA}
    assert gpus <= set(registry.GPUS) and len(gpus) >= 3  # the seed's three GPUs at least; a new one adds its four profiles
    want = {(g, c, top) for g in gpus for c in registry.CONTEXTS for top in registry.TOPOLOGIES}
    assert {(t.gpu, t.context, t.topology) for t in FINAL} == want and len(FINAL) == len(want)
    for t in FINAL:
        ctx = {"256k": "256K", "1m": "1M"}[t.context]
        assert (
            t.upstream
            == f"nemotron-3-ultra/vllm/{t.topology}-{t.gpu}-agentic-{ctx}{'-kv-router' if t.topology == 'agg' else ''}/deploy.yaml"
        )
        assert (
            t.reference == "dynamo-next" and t.source and t.upstream in t.source and len(t.source.split("@ ")[1].split()[0]) == 40
        )


@needs_reference
@pytest.mark.parametrize("tid", sorted(t.id for t in FINAL))
def test_ultra_final_profile_uses_the_1_6_component_names_and_its_sources_env(tid):
    ref = _tree("dynamo-next")
    t = catalog.targets()[tid]
    dgd = next(d for d in _render(tid) if d["kind"] == "DynamoGraphDeployment")
    names = [c["name"] for c in dgd["spec"]["components"]]
    assert names == (["Frontend", "worker"] if t.topology == "agg" else ["Frontend", "prefill", "decode"])
    env = {e["name"] for e in dgd["spec"]["env"]}
    fork = "yueying-AIHorizon/dynamo" in t.source
    # The fork files keep the env var ai-dynamo's own versions dropped; the render follows the file either way.
    assert (
        ("DYN_VLLM_APPEND_PREFILL_OUTPUT_TOKENS" in env)
        == fork
        == ("DYN_VLLM_APPEND_PREFILL_OUTPUT_TOKENS" in (ref / t.upstream).read_text())
    )
    if fork:
        assert "checked against ai-dynamo/dynamo@7a1734c5395eb0b3782a0d0bfe687ddb3f53716f" in t.source


@needs_reference
def test_renamed_upstream_files_are_claimed_by_no_target_and_their_ids_resolve_to_the_renamed_target():
    paths = fidelity.renamed_paths()
    assert len(paths) == 12
    in_scope = set(fidelity.in_scope_files(REF))
    for old, new in paths.items():
        assert (REF / old).is_file() and old not in in_scope
        assert (fidelity.snapshot_dir("dynamo-next") / new).is_file()
        assert not any(t.upstream == old for t in catalog.targets().values())
    for old, new in catalog.renamed().items():
        t, warning = catalog.resolve(old)
        assert t.id == new and new in warning and t.dgd_name in warning


@needs_reference
def test_compare_reports_each_difference():
    """The comparison itself can fail: a changed flag and a removed env var are both listed."""
    up = fidelity.load_docs(REF / "nemotron-3.5-lightning/vllm/agg-h100-dspark/deploy.yaml")
    got = _render("lightning-vllm-agg-h100-dspark")
    dgd = next(d for d in got if d["kind"] == "DynamoGraphDeployment")
    main = dgd["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]
    main["args"][main["args"].index("--max-num-seqs") + 1] = "256"
    main["env"] = [e for e in main["env"] if e["name"] != "PYTHONHASHSEED"]
    diffs = fidelity.compare_file(up, got, storage_class=STORAGE_CLASS, pull_secrets=PULL)
    assert any("upstream '512' != rendered '256'" in d for d in diffs)
    assert any(".env: list length" in d for d in diffs)


# --------------------------------------------------------------------------- the command tells the truth


def _fidelity(monkeypatch, capsys, *argv, recipes=None, reference=None):
    from stacks.__main__ import main

    # The reference root stays the one the tests use ($DYNAMO_REFERENCE, else ../shared/reference; its other snapshots,
    # e.g. dynamo-next, are still read) unless the test names another; ``recipes`` overrides the recipe tree only.
    root = fidelity.reference_root() if reference is None else reference
    monkeypatch.delenv("DYNAMO_RECIPES_DIR", raising=False)
    monkeypatch.setenv("DYNAMO_REFERENCE", str(root))
    if recipes is not None:
        monkeypatch.setenv("DYNAMO_RECIPES_DIR", str(recipes))
    rc = main(["fidelity", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_missing_reference_tree_fails_with_a_clear_message(monkeypatch, capsys, tmp_path):
    rc, out, err = _fidelity(monkeypatch, capsys, reference=tmp_path / "nonexistent")
    assert rc == 2 and "exact" not in out
    assert "no upstream recipe tree at" in err and "DYNAMO_REFERENCE" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out, err = _fidelity(monkeypatch, capsys, recipes=empty)
    assert rc == 2 and "holds no upstream deploy file" in err


def test_nonexistent_reference_from_the_shell_exits_non_zero():
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "DYNAMO_RECIPES_DIR"}
    out = subprocess.run(
        [sys.executable, "-m", "stacks", "fidelity"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**env, "DYNAMO_REFERENCE": "/nonexistent"},
    )
    assert out.returncode != 0 and "no upstream recipe tree at /nonexistent/dynamo-recipes" in out.stderr


def _partial_tree(tmp_path, keep: str):
    """A reference tree holding one upstream deploy file (and that model's model-cache files)."""
    import shutil

    dst = tmp_path / "recipes"
    (dst / keep).parent.mkdir(parents=True)
    shutil.copy(REF / keep, dst / keep)
    model = keep.split("/")[0]
    shutil.copytree(REF / model / "model-cache", dst / model / "model-cache")
    return dst


@needs_reference
def test_missing_upstream_file_of_a_target_fails_and_target_reports_only_that_target(monkeypatch, capsys, tmp_path):
    keep = "nemotron-3.5-lightning/vllm/agg-h100-dspark/deploy.yaml"
    tree = _partial_tree(tmp_path, keep)
    rc, out, _ = _fidelity(monkeypatch, capsys, recipes=tree)
    assert rc == 1
    assert (
        "MISSING upstream file nemotron-3-ultra/vllm/agg-b200-agentic-256k-mtp/deploy.yaml for target ultra-vllm-agg-b200-agentic-256k-mtp"
        in out
    )
    total = len([t for t in catalog.targets().values() if t.reference == "dynamo-recipes" and t.upstream])
    assert f"fidelity: 1/{total} upstream deploy files exact" in out

    rc, out, _ = _fidelity(monkeypatch, capsys, "--target", "lightning-vllm-agg-h100-dspark", recipes=tree)
    assert rc == 0, out
    assert out.splitlines() == [
        "compile caches on the model-cache volume: 1 vLLM worker container(s) in 1 upstream file(s) exact "
        "but for VLLM_CACHE_ROOT and TRITON_CACHE_DIR (and, where the cache is mounted read-only, its "
        "compile-cache mount, and the read-only claim source it releases) of stacks.serving.compile_cache",
        "with dynamo:modelRevision: 1 download Job(s) exact but for the recorded revision pin "
        "(MODEL_REVISION and the script edits of builders.RevisionPin): "
        "nemotron-3.5-lightning/model-cache/model-download.yaml#Job/model-download",
        "fidelity (lightning-vllm-agg-h100-dspark): 1/1 upstream deploy files exact, "
        "2/2 model-cache objects exact; skipped: none",
    ]
    rc, out, _ = _fidelity(monkeypatch, capsys, "--target", "lightning-vllm-agg-h200-dspark", recipes=tree)
    assert rc == 1 and "lightning-vllm-agg-h100-dspark" not in out
    assert out.splitlines()[0] == (
        "MISSING upstream file nemotron-3.5-lightning/vllm/agg-h200-dspark/deploy.yaml for target lightning-vllm-agg-h200-dspark"
    )
    assert out.splitlines()[-1].startswith("fidelity (lightning-vllm-agg-h200-dspark): 0/1 upstream deploy files exact")


def test_unknown_target_suggests_the_closest_id(monkeypatch, capsys):
    rc, out, err = _fidelity(monkeypatch, capsys, "--target", "lightning-vllm-agg-h100-dspak")
    assert rc == 2 and "did you mean 'lightning-vllm-agg-h100-dspark'?" in err


@needs_reference
def test_targets_of_our_own_are_reported_as_skipped_not_exact(monkeypatch):
    from dataclasses import replace

    t = catalog.targets()["lightning-vllm-agg-h100-dspark"]
    own = replace(t, id="lightning-vllm-agg-h100-dspark-ours", upstream=None)
    monkeypatch.setitem(catalog.targets(), own.id, own)
    report = fidelity.check(
        lambda tid: _render(tid if tid != own.id else t.id), REF, storage_class=STORAGE_CLASS, pull_secrets=PULL
    )
    ours = sorted(tid for tid, x in catalog.targets().items() if x.reference == "dynamo-recipes" and not x.upstream)
    assert own.id in ours and report.skipped == ours and own.id not in str(report.exact)
    assert report.ok and f"skipped {len(ours)} target(s) without an upstream file: {', '.join(ours)}" in report.summary()


@needs_reference
@pytest.mark.parametrize("snapshot", FOLLOWED)
def test_full_check_is_exact(snapshot):
    ref = _tree(snapshot)
    report = fidelity.check(_render, ref, storage_class=STORAGE_CLASS, pull_secrets=PULL, snapshot=snapshot)
    assert report.ok, report.summary()
    followers = [t for t in catalog.targets().values() if t.reference == snapshot and t.upstream]
    assert len(report.exact) == len([p for p in SCOPE if p.values[0] == snapshot]) == len(followers)
    ours = sorted(t.id for t in catalog.targets().values() if t.reference == snapshot and not t.upstream)  # targets of our own
    assert report.cache_exact and report.skipped == ours
    # the compile caches: the one recorded departure of the DGDs, on every vLLM worker container, counted in the report
    workers = sum(
        1
        for t in followers
        if t.runtime == "vllm"
        for comp in next(d for d in catalog.recipe_objects(t) if d["kind"] == "DynamoGraphDeployment")["spec"]["components"]
        for c in comp["podTemplate"]["spec"]["containers"]
        if (c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu")
    )
    assert workers and sum(report.compile_cache.values()) == workers
    assert f"compile caches on the model-cache volume: {workers} vLLM worker container(s)" in report.departures()


# --------------------------------------------------------------------------- dynamo:modelRevision: the one recorded departure of the download Jobs


def _render_pinned(tid):
    pull = {"imagePullSecrets": list(PULL)} if _upstream_names_pull_secrets(tid) else {}
    return render_config(
        {"target": tid, "storage": {"className": STORAGE_CLASS}, "modelRevision": fidelity.PROBE_REVISION, **pull}
    )


def _pinned_jobs(ref):
    """Every upstream model-cache Job in the tree whose catalog download Job takes a revision (from the catalog data)."""
    out = []
    for fam in catalog.families().values():
        pinned = {name for name, b in fam.cache_job_builders.items() if getattr(b, "revision", None) is not None}
        for f in sorted((ref / fam.id / "model-cache").glob("*.yaml")):
            out += [
                f"{fam.id}/model-cache/{f.name}#Job/{d['metadata']['name']}"
                for d in fidelity.load_docs(f)
                if d.get("kind") == "Job" and d["metadata"]["name"] in pinned
            ]
    return sorted(out)


@needs_reference
@pytest.mark.parametrize("snapshot", FOLLOWED)
def test_revision_pin_is_exact_but_for_the_recorded_departure_and_named(snapshot):
    ref = _tree(snapshot)
    report = fidelity.check(
        _render, ref, storage_class=STORAGE_CLASS, pull_secrets=PULL, snapshot=snapshot, render_pinned=_render_pinned
    )
    assert report.ok, (report.summary(), report.pinned_different)
    followed = {t.model for t in catalog.targets().values() if t.reference == snapshot and t.upstream}
    want = [n for n in _pinned_jobs(ref) if n.split("/")[0] in followed]
    assert want and sorted(report.pinned_exact) == want
    assert report.departures().endswith(", ".join(report.pinned_exact)) and "MODEL_REVISION" in report.departures()


@needs_reference
@pytest.mark.parametrize(
    "tid,path",
    [
        ("lightning-vllm-agg-h100-dspark", "nemotron-3.5-lightning/model-cache/model-download.yaml"),
        ("motif3-vllm-agg-b200-chat", "motif-3/model-cache/model-download.yaml"),
    ],
)
def test_the_revision_departure_is_exactly_the_env_var_and_the_listed_script_edit(monkeypatch, tid, path):
    up = fidelity.load_docs(REF / path)
    pinned = _render_pinned(tid)
    assert not fidelity.compare_file(up, pinned, storage_class=STORAGE_CLASS, pull_secrets=PULL)
    # not taken out, the pin is exactly two fields: the script and one env entry
    with monkeypatch.context() as m:
        m.setattr(fidelity, "without_revision_pin", lambda rendered, upstream: rendered)
        diffs = fidelity.compare_file(up, pinned, storage_class=STORAGE_CLASS, pull_secrets=PULL)
    assert sorted(d.split(":")[0] for d in diffs) == sorted(
        ["Job/model-download.spec.template.spec.containers[0].args[0]", "Job/model-download.spec.template.spec.containers[0].env"]
    )
    # anything else beside the pin stays a difference
    job = next(o for o in pinned if o["kind"] == "Job")
    c = job["spec"]["template"]["spec"]["containers"][0]
    c["args"] = [c["args"][0] + "echo extra\n"]
    assert fidelity.compare_file(up, pinned, storage_class=STORAGE_CLASS, pull_secrets=PULL)


# --------------------------------------------------------------------------- compile caches: the one recorded departure of the DGD's workers


@needs_reference
@pytest.mark.parametrize(
    "snapshot,tid",
    [
        ("dynamo-recipes", "lightning-vllm-agg-h100-dspark"),  # replaced in the container
        ("dynamo-recipes", "ultra-vllm-agg-b200-agentic-256k-mtp"),  # over spec.env, read-only cache
        ("dynamo-next", "ultra-vllm-disagg-h200-agentic-256K"),  # over spec.env, two workers
        ("dynamo-recipes", "motif3-vllm-agg-b200-chat"),
    ],
)  # added
def test_the_compile_cache_departure_is_taken_out_exactly_and_counted(monkeypatch, snapshot, tid):
    from stacks.serving import compile_cache as cc

    t = catalog.targets()[tid]
    up = fidelity.load_docs(_tree(snapshot) / t.upstream)
    got = _render(tid)
    dgd = next(d for d in got if d["kind"] == "DynamoGraphDeployment")
    workers = [
        (comp["name"], c)
        for comp in dgd["spec"]["components"]
        for c in comp["podTemplate"]["spec"]["containers"]
        if (c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu")
    ]
    compiled: dict = {}
    assert not fidelity.compare_file(up, got, storage_class=STORAGE_CLASS, pull_secrets=PULL, compiled=compiled)
    assert compiled == {f"DynamoGraphDeployment/{dgd['metadata']['name']}": len(workers)} and workers
    # not taken out, the departure is exactly the workers' env (and, on a read-only cache, their mounts)
    with monkeypatch.context() as m:
        m.setattr(fidelity, "without_compile_cache", lambda rendered, upstream, objects: (rendered, 0))
        raw = fidelity.compare_file(up, got, storage_class=STORAGE_CLASS, pull_secrets=PULL)
    fields = {re.search(r"\.(?:containers\[\d+\]\.(env|volumeMounts)\b|(volumes)\[)", d.split(":")[0]).group(1, 2) for d in raw}
    fields = {f for pair in fields for f in pair if f}
    read_only = any(m.get("readOnly") for _, c in workers for m in c["volumeMounts"])
    # upstream's read-only claim source, dropped so that the compile-cache mount is writable (compile_cache.py)
    released = any(
        (v.get("persistentVolumeClaim") or {}).get("readOnly") is True
        for d in up
        if d.get("kind") == "DynamoGraphDeployment"
        for comp in d["spec"]["components"]
        for v in comp["podTemplate"]["spec"].get("volumes") or []
    )
    want = {"env"} | ({"volumeMounts"} if read_only else set()) | ({"volumes"} if released else set())
    assert raw and fields == want, raw
    # a wrong path is not the step's: it stays a difference, and nothing is counted
    for _, c in workers[:1]:
        e = next(e for e in c["env"] if e["name"] == cc.VLLM_VAR)
        e["value"] = e["value"].replace("/compile-cache/", "/compile-cache/x-")
    compiled = {}
    diffs = fidelity.compare_file(up, got, storage_class=STORAGE_CLASS, pull_secrets=PULL, compiled=compiled)
    assert diffs and all(".env" in d or ".volumeMounts" in d or ".volumes[" in d for d in diffs)
    assert sum(compiled.values()) == len(workers) - 1  # the other workers' additions are still the step's
    # the step's exact additions beside another change: the change still fails, and only it
    got = _render(tid)
    dgd = next(d for d in got if d["kind"] == "DynamoGraphDeployment")
    comp = next(comp for comp in dgd["spec"]["components"] if comp["name"] == workers[0][0])
    comp["podTemplate"]["spec"]["containers"][0]["tty"] = True
    diffs = fidelity.compare_file(up, got, storage_class=STORAGE_CLASS, pull_secrets=PULL)
    assert len(diffs) == 1 and ".tty: not upstream" in diffs[0], diffs
    # an env entry beside them changes the key the additions must have: nothing is taken out, the file differs
    comp["podTemplate"]["spec"]["containers"][0].pop("tty")
    comp["podTemplate"]["spec"]["containers"][0]["env"].append({"name": "EXTRA", "value": "1"})
    assert fidelity.compare_file(up, got, storage_class=STORAGE_CLASS, pull_secrets=PULL)
