"""Catalog data: ids, axes, perf rows against the upstream perf tables, GPU counts."""
import re

import pytest

from stacks import catalog, fidelity
from stacks.catalog.model import AXES

TARGETS = catalog.targets()


def test_ids_are_unique_and_upstream_paths_distinct():
    ups = [t.upstream for t in TARGETS.values() if t.upstream]
    assert len(ups) == len(set(ups))


@pytest.mark.parametrize("tid", sorted(TARGETS))
def test_axes_use_known_values(tid):
    t = TARGETS[tid]
    for axis, values in AXES.items():
        v = t.axis(axis)
        assert v is None or v in values, f"{tid}: {axis}={v!r}"


@pytest.mark.parametrize("tid", sorted(TARGETS))
def test_dgd_name_and_configmap_follow_target(tid):
    docs = catalog.recipe_objects(TARGETS[tid])
    dgd = next(d for d in docs if d["kind"] == "DynamoGraphDeployment")
    assert dgd["metadata"]["name"] == TARGETS[tid].dgd_name
    assert dgd["apiVersion"] == "nvidia.com/v1beta1"
    assert catalog.gpus_needed(dgd) >= 1


def _perf_rows():
    path = fidelity.recipes_dir() / "perf-tables.md"
    rows = {}
    if not path.is_file():
        return rows
    header = None
    for line in path.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(cells[0]) <= set("-: "):
            continue
        row = dict(zip(header, cells))
        recipe = next((c for c in cells if c.startswith("`") and c.endswith(".yaml`")), None)
        if recipe:
            rows.setdefault(recipe.strip("`"), []).append(row)
    return rows


PERF = _perf_rows()


@pytest.mark.parametrize("tid", sorted(t.id for t in TARGETS.values() if t.perf))
def test_perf_row_matches_an_upstream_table_row(tid):
    t = TARGETS[tid]
    if not PERF:
        pytest.skip("no perf-tables.md")
    rel = t.perf.recipe or t.upstream.split("/", 1)[1]  # perf tables name recipes relative to the model directory
    candidates = PERF.get(rel, []) + PERF.get(t.upstream, [])
    assert candidates, f"{tid}: no perf row for {rel}"

    def num(row, *names):
        for n in names:
            for k, v in row.items():
                if k.lower().startswith(n.lower()):
                    try:
                        return float(re.sub(r"[^0-9.]", "", v))
                    except ValueError:
                        pass
        return None

    ok = any(
        num(r, "Concurrency") == t.perf.concurrency
        and (t.perf.ttft_p50_ms is None or num(r, "TTFT p50") == pytest.approx(t.perf.ttft_p50_ms))
        and num(r, "Output tok/s/GPU", "System output tok/s/GPU") == pytest.approx(t.perf.output_tok_s_per_gpu)
        and num(r, "Tok/s/user", "User output tok/s") == pytest.approx(t.perf.tok_s_per_user)
        for r in candidates
    )
    assert ok, f"{tid}: {t.perf} not among {candidates}"
