"""Every in-scope upstream recipe file is reproduced exactly by the catalog render.

The upstream tree: $DYNAMO_RECIPES_DIR, else $DYNAMO_REFERENCE/dynamo-recipes, else
../shared/reference/dynamo-recipes. Renders use a configured storage class and pull
secret, which stand for upstream's placeholders.
"""
import pytest

from stacks import catalog, fidelity
from stacks.render import render_config

REF = fidelity.recipes_dir()
SCOPE = fidelity.in_scope_files(REF) if REF.is_dir() else []
BY_UPSTREAM = {t.upstream: t for t in catalog.targets().values() if t.upstream}
STORAGE_CLASS = "fsx-lustre"
PULL = ("ngc-pull",)

pytestmark = pytest.mark.skipif(not REF.is_dir(), reason=f"no upstream recipes at {REF}")


def _render(tid):
    return render_config({"target": tid, "storage": {"className": STORAGE_CLASS}, "imagePullSecrets": list(PULL)})


def test_scope_is_the_seed_recipes():
    models = {p.split("/")[0] for p in SCOPE}
    assert models == {"nemotron-3.5-lightning", "nemotron-3-ultra", "motif-3"}
    assert len(SCOPE) >= 60


@pytest.mark.parametrize("path", SCOPE)
def test_upstream_file_rendered_exactly(path):
    t = BY_UPSTREAM.get(path)
    assert t is not None, f"no catalog target for {path}"
    diffs = fidelity.compare_file(fidelity.load_docs(REF / path), _render(t.id), storage_class=STORAGE_CLASS, pull_secrets=PULL)
    assert not diffs, f"{path} vs {t.id}:\n" + "\n".join(diffs)


def test_model_cache_objects_rendered_exactly():
    report = fidelity.compare_model_cache(REF, _render, storage_class=STORAGE_CLASS, pull_secrets=PULL)
    bad = {path: lines for per_model in report.values() for path, lines in per_model.items() if lines}
    assert not bad, "\n".join(f"{p}:\n  " + "\n  ".join(l) for p, l in bad.items())
    assert sum(len(v) for v in report.values()) >= 8


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
