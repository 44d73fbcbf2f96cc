"""The pods the program adds (model download / validate Jobs, the AIPerf benchmark Job) run hardened, the DGD's
workers keep exactly upstream's settings, and the fidelity comparison of the model-cache Jobs allows exactly the
hardening additions (stacks/serving/hardening.py) and nothing else."""

import copy

import pytest

from conftest import REFERENCE_SETUP, missing
from stacks import catalog
from stacks.cli import fidelity
from stacks.serving.benchmark import METHODS, build_benchmark
from stacks.config.keys import BenchmarkConfig, parse
from stacks.serving.hardening import without_hardening
from stacks.serving import build_plan

TARGETS = catalog.targets()
# The settings, spelled here (the Pod Security Standards "restricted" controls plus a read-only root filesystem).
POD = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}


def _added_pods(tid: str):
    plan = build_plan(parse({"target": tid}))
    pods = [(j["metadata"]["name"], j["spec"]["template"]["spec"]) for j in plan.jobs]
    if plan.target.model not in METHODS:  # a model without a published benchmark method has no benchmark Job
        return plan, pods
    bench = build_benchmark(plan, BenchmarkConfig.model_validate({"enabled": True}))
    return plan, pods + [(bench.job_name, bench.job["spec"]["template"]["spec"])]


def _assert_hardened(name: str, pod: dict):
    sc = pod.get("securityContext") or {}
    assert {k: sc.get(k) for k in POD} == POD, name
    tmp = [v["name"] for v in pod["volumes"] if v.get("emptyDir") == {}]
    for c in pod["containers"]:
        csc = c.get("securityContext") or {}
        assert {k: csc.get(k) for k in CONTAINER} == CONTAINER, f"{name}/{c['name']}"
        # A read-only root needs somewhere to write: /tmp on an emptyDir, HOME there (pip's user install, caches).
        assert any(m["mountPath"] == "/tmp" and m["name"] in tmp for m in c["volumeMounts"]), f"{name}/{c['name']}"
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        assert env.get("HOME") == "/tmp", f"{name}/{c['name']}"
        script = " ".join((c.get("command") or []) + (c.get("args") or []))
        if c["image"].startswith("python:") and " hf " in f" {script} ":
            assert env["PATH"].startswith("/tmp/.local/bin:"), "the hf command pip installs for the user is on PATH"


@pytest.mark.parametrize("tid", sorted(TARGETS)[::3] + ["ultra-vllm-agg-b200-chat-256k-mtp", "motif3-vllm-agg-b200-chat"])
def test_every_job_pod_the_program_adds_is_hardened(tid):
    _, pods = _added_pods(tid)
    assert len(pods) >= 1 + (TARGETS[tid].model in METHODS)  # a download Job and the benchmark Job at least
    for name, pod in pods:
        _assert_hardened(name, pod)


@pytest.mark.parametrize("tid", sorted(TARGETS)[::3])
def test_dgd_workers_keep_exactly_the_recipes_pod_settings(tid):
    plan, _ = _added_pods(tid)
    recipe = next(o for o in catalog.recipe_objects(TARGETS[tid]) if o["kind"] == "DynamoGraphDeployment")
    for got, want in zip(plan.dgd["spec"]["components"], recipe["spec"]["components"]):
        gpod, wpod = got["podTemplate"]["spec"], want["podTemplate"]["spec"]
        assert gpod.get("securityContext") == wpod.get("securityContext")
        assert [c.get("securityContext") for c in gpod["containers"]] == [c.get("securityContext") for c in wpod["containers"]]
        # the volumes are the recipe's, but for a read-only claim source released for the compile-cache mount
        # (stacks/serving/compile_cache.py: a read-only source makes every mount of it read-only)
        want_volumes = copy.deepcopy(wpod.get("volumes"))
        for v in want_volumes or []:
            source = v.get("persistentVolumeClaim") or {}
            if source.get("readOnly") and any(
                m["name"] == v["name"] and m.get("subPath", "").startswith("compile-cache/")
                for c in gpod["containers"]
                for m in c.get("volumeMounts") or []
            ):
                del source["readOnly"]
        assert gpod.get("volumes") == want_volumes


def _upstream_cache_jobs():
    ref = fidelity.recipes_dir()
    if not ref.is_dir():
        missing(f"no dynamo-recipes reference tree at {ref}", REFERENCE_SETUP)
    out = []
    for f in sorted(ref.glob("*/model-cache/*.yaml")):
        out += [(f"{f.parent.parent.name}/{f.name}", d) for d in fidelity.load_docs(f) if d.get("kind") == "Job"]
    assert out, f"no model-cache Job under {ref}"
    return out


def _rendered_job(name: str, model: str, pulls: list[str]) -> dict:
    for t in TARGETS.values():
        if t.upstream and t.upstream.split("/")[0] == model:
            for j in build_plan(parse({"target": t.id, "imagePullSecrets": pulls, "storage": {"className": "fsx-lustre"}})).jobs:
                if j["metadata"]["name"] == name:
                    return fidelity.normalize(j)
    raise AssertionError(f"no target of {model} renders Job {name}")


@pytest.mark.needs_reference
def test_fidelity_allows_exactly_the_hardening_of_the_model_cache_jobs():
    """Against each upstream model-cache Job: the raw differences are only the listed hardening fields; with them
    taken out the Job is exact; any other change (or a hardening field with another value) still differs."""
    allowed = (
        {f".spec.template.spec.securityContext.{k}" for k in POD}
        | {".spec.template.spec.securityContext", ".spec.template.spec.volumes"}
        | {f".spec.template.spec.containers[0].securityContext.{k}" for k in CONTAINER}
        | {
            ".spec.template.spec.containers[0].securityContext",
            ".spec.template.spec.containers[0].volumeMounts",
            ".spec.template.spec.containers[0].env",
        }
    )
    for where, up in _upstream_cache_jobs():
        pulls = ["ngc-pull"] if "imagePullSecrets" in str(up) else []  # upstream's placeholder stands for them
        want = fidelity.normalize(fidelity.substitute_placeholders(up, "fsx-lustre", pulls))
        got = _rendered_job(up["metadata"]["name"], where.split("/")[0], pulls)
        raw = fidelity.differences(want, got)
        assert raw, f"{where}: the rendered Job carries the hardening"
        fields = {d.split(":")[0].split(" ")[0] for d in raw}
        assert fields <= allowed, f"{where}: differences beyond the hardening: {sorted(fields - allowed)}"
        assert fidelity.differences(want, without_hardening(got, want)) == [], where
        # Something the hardening does not list is not hidden...
        extra = copy.deepcopy(got)
        extra["spec"]["template"]["spec"]["hostNetwork"] = True
        assert fidelity.differences(want, without_hardening(extra, want)) != []
        # ...nor is a listed field with another value (root).
        root = copy.deepcopy(got)
        root["spec"]["template"]["spec"]["securityContext"]["runAsUser"] = 0
        assert any("runAsUser" in d for d in fidelity.differences(want, without_hardening(root, want)))
