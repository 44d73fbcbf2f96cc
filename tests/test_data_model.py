"""A new model is a data module: a small family defined below only as data (no function of its own),
registered in stacks.registry, selected by the config axes, rendered with its download Job; and a new
GPU is one registry entry. Also: ``storage.existingClaim`` renames every reference to the model's own
cache claim on every family, whatever the claim is called (a model whose claim was not called
``shared-model-cache`` once silently kept mounting its own claim)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stacks import catalog, registry
from stacks.catalog import k8s
from stacks.catalog.builders import Cache, Component, DownloadJob, Recipe, shm
from stacks.catalog.model import ModelFamily, Target
from stacks.program.render import render_config

ROOT = Path(__file__).resolve().parent.parent

# ---- model data: begin (docs/adding-a-model-or-gpu.md "Adding a model"; no def/lambda/class in here, at most 60 lines)
MODEL = "example-qwen3-0.6b"  # test-only ids (model, targets, GPU): a real Qwen3 or RTX PRO addition keeps its own
REPO = "Qwen/Qwen3-0.6B"
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.9.0"
CACHE = Cache(claim="qwen3-model-cache", mount="/models", size="20Gi")
HF_ENV = {"HF_HOME": "/models", "HF_HUB_OFFLINE": "1"}
AGG = Recipe("vllm", (
    Component("Frontend", "frontend", "{image}", args=("-m", "dynamo.frontend", "--router-mode", "{routing}"), env=HF_ENV,
              cache=CACHE, startup_probe=k8s.http_probe("/health", 8000, 10, 60, 60)),
    Component("VllmWorker", "worker", "{image}", ("python3", "-m", "dynamo.vllm"),
              ("--model", "{repo}", "--served-model-name", "{repo}", "--tensor-parallel-size", "{gpus}", "--max-model-len", "32768"),
              HF_ENV, replicas="{workers}", gpus="{gpus}", requests={"memory": "64Gi"}, shm="16Gi", volumes=(shm("16Gi"),),
              cache=CACHE, affinity="{gpu}", tolerations=(k8s.GPU_TOLERATION,),
              startup_probe=k8s.http_probe("/live", 9090, 30, 20, 60)),
), vars={"repo": REPO})
DOWNLOAD = DownloadJob("qwen3-model-download", IMAGE, 'hf download "$MODEL_NAME"', CACHE, ("sh", "-c"),
                       env={"MODEL_NAME": REPO, "HF_HOME": "/models"},
                       security={"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}})
TARGETS = tuple(
    Target(id=f"example-qwen3-vllm-agg-{gpu}" + ("-kv" if routing == "kv" else ""), upstream=None, model=MODEL, runtime="vllm", gpu=gpu,
           topology="agg", spec="none", routing=routing, precision="bf16", fabric="none", family="vllm-agg",
           dgd_name=f"qwen3-agg-{gpu}" + ("-kv" if routing == "kv" else ""), image=IMAGE, cache_jobs=(DOWNLOAD.name,),
           params={"gpus": 1, "workers": 2 if routing == "kv" else 1})
    for gpu in registry.GPUS
    for routing in ("round-robin", "kv")
)
FAMILY = ModelFamily(id=MODEL, short="qwen3", served_model=REPO, cache=CACHE, builders={"vllm-agg": AGG},
                     cache_job_builders={DOWNLOAD.name: DOWNLOAD}, targets=TARGETS,
                     defaults={"runtime": "vllm", "topology": "agg", "gpu": "h100", "routing": "round-robin"})
# ---- model data: end

# One line in stacks/registry/__init__.py MODELS registers the model (its data module: this file).
MODEL_ENTRY = f"        Model({MODEL!r}, {Path(__file__).stem!r}, 'Qwen3 0.6B'),\n"
# One line in stacks/registry/__init__.py GPUS adds a GPU (served on existing clusters: no EC2 instance type).
GPU_ENTRY = '        Gpu("example-rtx-pro-6000", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", None),\n'


def _data_block() -> list[str]:
    lines = Path(__file__).read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("# ---- model data: begin"))
    end = next(i for i, l in enumerate(lines) if l.startswith("# ---- model data: end"))
    return lines[start + 1:end]


def test_the_model_is_data_only_and_short():
    block = _data_block()
    assert len(block) <= 60, f"{len(block)} lines of model data"
    code = "\n".join(block)
    for word in ("def ", "lambda", "class "):
        assert word not in code, f"the model data defines code: {word!r}"


@pytest.fixture
def registered(monkeypatch):
    """The family registered as stacks.registry would have it (this module is its data module)."""
    monkeypatch.setitem(registry.MODELS, MODEL, registry.Model(MODEL, __name__, "Qwen3 0.6B"))
    catalog.reload()
    yield
    monkeypatch.undo()
    catalog.reload()


def _objs(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def test_data_model_renders_its_targets_and_download_job(registered):
    assert {t.id for t in TARGETS} <= set(catalog.targets())
    objs = render_config({"target": "example-qwen3-vllm-agg-b200-kv", "storage": {"className": "fsx"}})
    (pvc,) = _objs(objs, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == "qwen3-model-cache" and pvc["spec"]["storageClassName"] == "fsx"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "20Gi"
    (job,) = _objs(objs, "Job")
    assert job["metadata"]["name"] == "qwen3-model-download"
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "qwen3-model-cache", "persistentVolumeClaim": {"claimName": "qwen3-model-cache"}},
                              {"name": "tmp", "emptyDir": {}}]  # the hardened pod's /tmp (stacks/serving/hardening.py)
    assert pod["containers"][0]["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]
    (dgd,) = _objs(objs, "DynamoGraphDeployment")
    fe, worker = dgd["spec"]["components"]
    assert fe["podTemplate"]["spec"]["containers"][0]["args"] == ["-m", "dynamo.frontend", "--router-mode", "kv"]
    main = worker["podTemplate"]["spec"]["containers"][0]
    assert main["args"][:4] == ["--model", REPO, "--served-model-name", REPO] and main["image"] == IMAGE
    assert worker["replicas"] == 2 and main["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    # Offline (HF_HUB_OFFLINE=1), but HF_HOME is the cache mount and no HF_MODULES_CACHE is set: transformers writes the
    # model's remote code under $HF_HOME/modules, on the volume, so the mount stays as the model's data says
    # (stacks/serving/compile_cache.py model_read_only).
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in main["env"] and {"name": "HF_HOME", "value": "/models"} in main["env"]
    assert main["volumeMounts"][0] == {"name": "qwen3-model-cache", "mountPath": "/models"}
    affinity = worker["podTemplate"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert affinity["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["NVIDIA-B200"]
    assert catalog.gpus_needed(dgd) == 2


def _claims(objs) -> list[str]:
    out = []

    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("persistentVolumeClaim"), dict):
                out.append(x["persistentVolumeClaim"]["claimName"])
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(objs)
    return out


def _every_family_target():
    return [pytest.param(tid, id=tid) for tid in sorted(catalog.targets())] + [pytest.param(t.id, id=t.id) for t in TARGETS[:2]]


@pytest.mark.parametrize("tid", _every_family_target())
def test_existing_claim_renames_every_reference_whatever_the_claim_is_called(tid, registered):
    t = catalog.targets()[tid]
    own = catalog.cache_claim(t)
    default = render_config({"target": tid})
    refs = _claims(default).count(own)
    assert refs >= 2, f"{tid}: the Jobs and the DGD should mount {own}"
    reused = render_config({"target": tid, "storage": {"existingClaim": "team-cache"}})
    assert own not in _claims(reused), f"{tid}: still points at its own claim {own}"
    assert _claims(reused).count("team-cache") == refs
    assert not _objs(reused, "PersistentVolumeClaim")
    others = [c for c in _claims(default) if c != own]  # e.g. Ultra's artifacts claim: not the model cache, kept
    assert [c for c in _claims(reused) if c != "team-cache"] == others


def _with_registry(tmp_path: Path, *entries: tuple[str, str]) -> Path:
    """A copy of the ``stacks`` package whose registry.py has ``entries`` inserted (after the line starting with each
    anchor): the edit a contributor makes. Returns the copy's root; the diff is one line per entry."""
    import shutil

    shutil.copytree(ROOT / "stacks", tmp_path / "stacks", ignore=shutil.ignore_patterns("__pycache__"))
    reg = tmp_path / "stacks" / "registry" / "__init__.py"
    lines = reg.read_text().splitlines(keepends=True)
    for anchor, line in entries:
        at = next(i for i, l in enumerate(lines) if l.startswith(anchor))
        lines.insert(at + 1, line)
    reg.write_text("".join(lines))
    before, after = (ROOT / "stacks" / "registry" / "__init__.py").read_text().splitlines(), reg.read_text().splitlines()
    assert len(after) - len(before) == len(entries) and set(before) <= set(after)
    return tmp_path


def _run(root: Path, code: str) -> dict:
    """Run ``code`` in a fresh interpreter on the package copy at ``root`` (and this test module's directory)."""
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{ROOT / 'tests'}"}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


MODELS_ANCHOR = "    for m in ("  # the first line of the MODELS entries (not any model: the list may change)
GPUS_ANCHOR = "    for g in ("


def test_a_model_is_selected_by_the_config_axes_once_registered(tmp_path):
    root = _with_registry(tmp_path, (MODELS_ANCHOR, MODEL_ENTRY))
    got = _run(root, f"""
import json
from stacks.program.render import render_config
objs = render_config({{"model": {MODEL!r}, "gpu": "h200", "routing": "kv"}})
dgd = [o for o in objs if o["kind"] == "DynamoGraphDeployment"][0]
print(json.dumps({{"dgd": dgd["metadata"]["name"], "kinds": [o["kind"] for o in objs]}}))
""")
    assert got["dgd"] == "qwen3-agg-h200-kv"
    assert got["kinds"] == ["Namespace", "Secret", "PersistentVolumeClaim", "Job", "DynamoGraphDeployment"]


def test_adding_a_gpu_is_one_registry_entry(tmp_path):
    """One ``Gpu`` entry: the config accepts it (and suggests it), the catalog axes, the GPU catalog's default
    instance and the README rows list it, and a family whose targets range over the registry renders it."""
    root = _with_registry(tmp_path, (MODELS_ANCHOR, MODEL_ENTRY), (GPUS_ANCHOR, GPU_ENTRY))
    got = _run(root, f"""
import json
from stacks.registry import gpus
from stacks import registry
from stacks.catalog.model import AXES
from stacks.config.keys import ConfigError, parse
from stacks.program.render import render_config
try:
    parse({{"model": {MODEL!r}, "gpu": "example-rtx-pro-600"}})
    err = ""
except ConfigError as e:
    err = str(e)
objs = render_config({{"model": {MODEL!r}, "gpu": "example-rtx-pro-6000"}})
dgd = [o for o in objs if o["kind"] == "DynamoGraphDeployment"][0]
aff = dgd["spec"]["components"][1]["podTemplate"]["spec"]["affinity"]["nodeAffinity"]
label = aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0]
try:
    gpus.shape_for("example-rtx-pro-6000")
    eks = ""
except ValueError as e:
    eks = str(e)
print(json.dumps({{"axes": list(AXES["gpu"]), "err": err, "label": label, "eks": eks,
                  "readme": [r for r in registry.readme_rows() if r.startswith("| `gpu`")][0]}}))
""")
    assert "example-rtx-pro-6000" in got["axes"] and set(registry.GPUS) < set(got["axes"])
    assert "did you mean 'example-rtx-pro-6000'" in got["err"]
    assert got["label"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    assert "`example-rtx-pro-6000`" in got["readme"]
    assert "example-rtx-pro-6000" in got["eks"] and "no EC2 instance data" in got["eks"]


# The docs that show the "Adding a model" snippet: the step-by-step guide and the development notes.
SNIPPET_DOCS = ("docs/adding-a-model-or-gpu.md", "docs/development.md")


@pytest.mark.parametrize("doc", [d for d in SNIPPET_DOCS if (ROOT / d).is_file() and "## Adding a model" in (ROOT / d).read_text()])
def test_docs_adding_a_model_example_builds(doc, monkeypatch):
    """The "Adding a model" snippet of each doc is valid data for the same builders, run as the module it would be
    (``stacks.catalog.qwen3``: its relative imports resolve) with its image key added to the versions manifest."""
    import re
    import textwrap

    from stacks.registry import versions

    monkeypatch.setitem(versions.versions()["images"], "qwen3-vllm", IMAGE)
    text = (ROOT / doc).read_text()
    section = text[text.index("## Adding a model"):]
    code = textwrap.dedent(re.search(r"```python\n(.*?)```", section, re.S).group(1))  # indented in a list item
    ns = {"__name__": "stacks.catalog.qwen3", "__package__": "stacks.catalog", "Cache": Cache, "Component": Component,
          "DownloadJob": DownloadJob, "Recipe": Recipe, "Target": Target, "ModelFamily": ModelFamily, "k8s": k8s,
          "registry": registry, "IMAGE": IMAGE}
    exec(compile(code, doc, "exec"), ns)
    fam = ns["FAMILY"]
    t = fam.targets[0]
    cm_and_dgd = fam.builders[t.family](t)
    dgd = cm_and_dgd[-1]
    assert dgd["metadata"]["name"] == "qwen3-agg-h100" and catalog.gpus_needed(dgd) == 1
    assert dgd["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["image"] == IMAGE
    assert fam.cache_job_builders["qwen3-model-download"]()["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == \
        {"claimName": "qwen3-model-cache"}
