"""Catalog data: ids, axes, perf rows against the upstream perf tables, GPU counts."""

import re

import pytest

from stacks import catalog
from stacks.cli import fidelity
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


# --------------------------------------------------------------------------- python -m stacks targets


def _targets_cli(capsys, *argv):
    from stacks.__main__ import main

    assert main(["targets", *argv]) == 0
    return capsys.readouterr().out


def test_targets_default_output_is_id_tab_upstream(capsys):
    """The fidelity hook and scripts split each line on the first tab: ID, then the upstream path."""
    lines = _targets_cli(capsys).splitlines()
    assert len(lines) == len(TARGETS)
    for line in lines:
        tid, up = line.split("\t", 1)
        assert up == (TARGETS[tid].upstream or "-")


def test_targets_long_and_json_show_what_a_target_needs(capsys):
    import json

    rows = {r["id"]: r for r in json.loads(_targets_cli(capsys, "--json"))}
    assert set(rows) == set(TARGETS)
    r = rows["ultra-vllm-disagg-h200-agentic-256K"]
    assert (r["model"], r["gpu"], r["topology"], r["shape"], r["gpus"], r["nodes"], r["instance_type"]) == (
        "nemotron-3-ultra",
        "h200",
        "disagg",
        "1P2D",
        24,
        3,
        "p5en.48xlarge",
    )
    assert (
        r["reference"] == "dynamo-next"
        and r["renamed_from"] == ["ultra-vllm-disagg-h200-agentic-256k-1p2d"]
        and r["successor"] is None
    )
    day0 = rows["ultra-vllm-disagg-b200-agentic-256k-1p1d"]
    assert day0["successor"] == "ultra-vllm-disagg-b200-agentic-256K" and day0["reference"] == "dynamo-recipes"
    r = rows["lightning-vllm-agg-h100-dspark"]
    assert (r["gpus"], r["nodes"], r["instance_type"]) == (1, 1, "p5.48xlarge")
    assert r["perf"]["concurrency"] == 20 and r["perf"]["output_tok_s_per_gpu"] == 1878.11
    table = _targets_cli(capsys, "--long").splitlines()
    assert table[0].split()[:4] == ["ID", "MODEL", "GPU", "TOPOLOGY"] and "PUBLISHED PERF" in table[0]
    line = next(l for l in table if l.startswith("lightning-vllm-agg-h100-dspark "))
    assert "p5.48xlarge" in line and "c=20 ttft 238.64ms 1878.11 tok/s/GPU 93.91 tok/s/user" in line


def test_no_import_cycle_between_lightning_modules():
    import ast
    from pathlib import Path

    src = Path(catalog.__file__).parent
    imports = {}
    for name in ("lightning", "lightning_trtllm", "lightning_base"):
        tree = ast.parse((src / f"{name}.py").read_text())
        imports[name] = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module}
    assert "lightning" not in imports["lightning_trtllm"] and "lightning" not in imports["lightning_base"]
    assert "lightning_trtllm" not in imports["lightning_base"]


# --------------------------------------------------------------------------- ids upstream renamed or dropped

from stacks.config.keys import ConfigError, deprecation_warnings, parse  # noqa: E402
from stacks.serving.serve import RENAMED_COMPONENTS, build_entries  # noqa: E402


@pytest.mark.parametrize("old", sorted(catalog.renamed()))
def test_renamed_id_resolves_to_its_successor_and_warns_with_the_new_names(old):
    new = TARGETS[catalog.renamed()[old]]
    assert old not in list(TARGETS) and TARGETS[old] is new  # not a target of its own, but a stack naming it still works
    cfg = parse({"target": old})
    (warning,) = deprecation_warnings(cfg)
    assert f"'{old}' was renamed upstream to '{new.id}'" in warning and repr(new.dgd_name) in warning
    assert ", ".join(catalog.component_names(new)) in warning
    assert catalog.recipe_objects(TARGETS[old]) == catalog.recipe_objects(new)
    assert deprecation_warnings(parse({"target": new.id})) == []


@pytest.mark.parametrize("tid", sorted(t.id for t in TARGETS.values() if t.successor))
def test_deprecated_target_renders_its_last_file_and_warns_naming_its_successor(tid):
    t = TARGETS[tid]
    succ = TARGETS[t.successor]
    assert succ.successor is None and (succ.model, succ.gpu, succ.topology) == (t.model, t.gpu, t.topology)
    assert t.reference == "dynamo-recipes" and t.upstream.split("/")[2] in tid
    (warning,) = deprecation_warnings(parse({"target": tid}))
    assert f"'{tid}' is deprecated" in warning and f"successor is '{succ.id}'" in warning


def test_selecting_a_renamed_profile_by_its_axes_warns_that_the_dgd_changes():
    """Pulumi.ultra-b200-agg.yaml selects by model/gpu/topology/context: the same choice now lands on the final name."""
    cfg = parse({"model": "nemotron-3-ultra", "gpu": "b200", "topology": "agg", "context": "256k"})
    (warning,) = deprecation_warnings(cfg)
    old = next(o for o, n in catalog.renamed().items() if n == "ultra-vllm-agg-b200-agentic-256K-kv-router")
    assert (
        "ultra-vllm-agg-b200-agentic-256K-kv-router" in warning and old in warning and "ultra-agg-b200-256k-kv-router" in warning
    )
    assert deprecation_warnings(parse({"target": "lightning-vllm-agg-h100-dspark"})) == []


def _final_with(component: str) -> str:
    return next(
        t.id
        for t in TARGETS.values()
        if t.successor is None and component in catalog.component_names(t) and t.model == "nemotron-3-ultra"
    )


@pytest.mark.parametrize("old,new", sorted(RENAMED_COMPONENTS.items()))
def test_override_keyed_by_a_pre_1_6_component_name_names_the_new_key(old, new):
    tid = _final_with(new)
    for raw, key in (
        ({"target": tid, "overrides": {old: {"env": {"X": "1"}}}}, "dynamo.overrides"),
        ({"serve": [{"name": "a", "target": tid, "overrides": {old: {"env": {"X": "1"}}}}]}, "dynamo:serve[0].overrides"),
    ):
        with pytest.raises(ConfigError) as e:
            build_entries(raw)
        assert f"{key}.{old}: component '{old}' was renamed '{new}' in Dynamo 1.6" in str(
            e.value
        ) and f"key the override '{new}'" in str(e.value)
    (entry,) = build_entries({"target": tid, "overrides": {new: {"env": {"X": "1"}}}})
    assert new in [c["name"] for c in entry.plan.dgd["spec"]["components"]]


def test_deprecated_day0_target_keeps_its_pre_1_6_component_names_for_overrides():
    tid = next(t.id for t in TARGETS.values() if t.successor and t.topology == "disagg")
    (entry,) = build_entries({"target": tid, "overrides": {"VllmDecodeWorker": {"env": {"X": "1"}}}})
    comp = next(c for c in entry.plan.dgd["spec"]["components"] if c["name"] == "VllmDecodeWorker")
    assert {"name": "X", "value": "1"} in comp["podTemplate"]["spec"]["containers"][0]["env"]


def test_render_of_an_old_id_warns_on_stderr_and_prints_the_successor(capsys):
    from stacks.__main__ import main

    old, new = next(iter(sorted(catalog.renamed().items())))
    assert main(["render", "--target", old]) == 0
    out = capsys.readouterr()
    assert f"warning: target '{old}' was renamed upstream to '{new}'" in out.err
    assert f"name: {TARGETS[new].dgd_name}" in out.out
    assert main(["render", "--target", new]) == 0 and "warning" not in capsys.readouterr().err


def test_no_two_target_ids_differ_only_by_case():
    """render writes <id>.yaml; on a case-insensitive file system two ids equal but for case keep one file."""
    ids = list(catalog.targets())
    assert len({i.lower() for i in ids}) == len(ids)
    # upstream's two directories that differ only by case both stay reachable, each by its own id
    upstream = {t.upstream for t in catalog.targets().values()}
    assert {
        "nemotron-3-ultra/vllm/disagg-b200-agentic-256k/deploy.yaml",
        "nemotron-3-ultra/vllm/disagg-b200-agentic-256K/deploy.yaml",
    } <= upstream


def test_the_old_spelling_of_a_respelled_id_still_names_its_target_with_a_warning():
    old = "ultra-vllm-disagg-b200-agentic-256k"
    t, warning = catalog.resolve(old)
    assert t.id == "ultra-vllm-disagg-b200-agentic-256k-1p1d" and t.upstream.endswith("/disagg-b200-agentic-256k/deploy.yaml")
    assert f"target {old!r} is now {t.id!r}" in warning and t.dgd_name in warning
    assert "deprecated" in warning and "ultra-vllm-disagg-b200-agentic-256K" in warning  # still says what replaces it upstream
    assert catalog.targets()[old] is t and old not in catalog.renamed()  # not an upstream rename
