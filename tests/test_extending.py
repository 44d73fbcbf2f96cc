"""Adding a model and a GPU, as docs/adding-a-model-or-gpu.md says, keeps every path honest.

A throwaway model (data only, below) and a throwaway GPU registered without instance data ("existing clusters
only") are added to a temporary registry (monkeypatched entries of ``stacks.registry``; the committed registry is
not edited). Then: its targets render through the same serving plan as every stack; the scheduling check and
``simulate``'s pure parts (node shapes, operator pods) place them on an existing cluster; a kubeconfig stack plans
them; every EKS plan (a single stack, a GPU pool, a serving stack on a cluster stack) refuses the GPU naming it and
the missing instance data; and no existing target renders differently for the addition.
"""

import json

import pytest

from stacks import catalog, registry
from stacks.registry import versions
from stacks.catalog import k8s
from stacks.catalog.builders import Cache, Component, DownloadJob, Recipe, shm
from stacks.catalog.model import ModelFamily, Target
from stacks.config.keys import ConfigError
from stacks.program.render import render_config

# ---- the throwaway model and GPU, as data (what docs/adding-a-model-or-gpu.md asks a contributor to write)
MODEL = "throwaway-7b"
GPU = "throwaway-gpu"
LABEL = "NVIDIA-Throwaway-GPU-96GB"  # the nvidia.com/gpu.product label GPU Feature Discovery would set
REPO = "example/Throwaway-7B"
IMAGE = versions.image("lightning-vllm")  # a new model adds its own key to stacks/registry/versions.yaml; a manifest image here
CACHE = Cache(claim="throwaway-model-cache", mount="/models", size="40Gi")
HF_ENV = {"HF_HOME": "/models", "HF_HUB_OFFLINE": "1"}
WORKER = dict(
    cache=CACHE,
    affinity="{gpu}",
    tolerations=(k8s.GPU_TOLERATION,),
    requests={"memory": "64Gi"},
    shm="16Gi",
    volumes=(shm("16Gi"),),
    startup_probe=k8s.http_probe("/live", 9090, 30, 20, 60),
)
FRONTEND = Component("Frontend", "frontend", "{image}", args=("-m", "dynamo.frontend"), env=HF_ENV, cache=CACHE)
ENGINE = ("--model", "{repo}", "--served-model-name", "{repo}", "--tensor-parallel-size", "{gpus}")
AGG = Recipe(
    "vllm",
    (
        FRONTEND,
        Component(
            "VllmWorker",
            "worker",
            "{image}",
            ("python3", "-m", "dynamo.vllm"),
            ENGINE,
            HF_ENV,
            replicas="{workers}",
            gpus="{gpus}",
            **WORKER,
        ),
    ),
    vars={"repo": REPO},
)
DISAGG = Recipe(
    "vllm",
    (FRONTEND,)
    + tuple(
        Component(
            name,
            kind,
            "{image}",
            ("python3", "-m", "dynamo.vllm"),
            ENGINE + ("--disaggregation-mode", kind),
            HF_ENV,
            gpus="{gpus}",
            devices={"rdma/ib": "1"},
            **WORKER,
        )
        for name, kind in (("VllmPrefillWorker", "prefill"), ("VllmDecodeWorker", "decode"))
    ),
    vars={"repo": REPO},
)
DOWNLOAD = DownloadJob(
    "throwaway-model-download",
    versions.image("motif3-download"),
    'hf download "$MODEL_NAME"',
    CACHE,
    ("sh", "-c"),
    env={"MODEL_NAME": REPO, "HF_HOME": "/models"},
)
COMMON = dict(upstream=None, model=MODEL, runtime="vllm", spec="none", image=IMAGE, cache_jobs=(DOWNLOAD.name,))
TARGETS = (
    Target(
        id=f"throwaway-vllm-agg-{GPU}",
        gpu=GPU,
        topology="agg",
        routing="round-robin",
        precision="nvfp4",
        fabric="none",
        family="vllm-agg",
        dgd_name="throwaway-agg",
        params={"gpus": 2, "workers": 6},
        **COMMON,
    ),
    Target(
        id=f"throwaway-vllm-disagg-{GPU}",
        gpu=GPU,
        topology="disagg",
        shape="1P1D",
        routing="single",
        precision="nvfp4",
        fabric="infiniband",
        family="vllm-disagg",
        dgd_name="throwaway-disagg",
        params={"gpus": 4},
        **COMMON,
    ),
    Target(
        id="throwaway-vllm-agg-h100",
        gpu="h100",
        topology="agg",
        routing="round-robin",
        precision="nvfp4",
        fabric="none",
        family="vllm-agg",
        dgd_name="throwaway-agg-h100",
        params={"gpus": 1, "workers": 1},
        **COMMON,
    ),
)
FAMILY = ModelFamily(
    id=MODEL,
    short="throwaway",
    served_model=REPO,
    cache=CACHE,
    builders={"vllm-agg": AGG, "vllm-disagg": DISAGG},
    cache_job_builders={DOWNLOAD.name: DOWNLOAD},
    targets=TARGETS,
    defaults={"gpu": GPU, "runtime": "vllm", "topology": "agg"},
)
# ---- end of the data

AGG_ID, DISAGG_ID, H100_ID = (t.id for t in TARGETS)


def _render_all() -> str:
    return json.dumps(
        {tid: catalog.recipe_objects(t) + catalog.cache_objects(t) for tid, t in sorted(catalog.targets().items())},
        sort_keys=True,
    )


@pytest.fixture
def extended(monkeypatch):
    """The temporary registry: one ``Gpu`` entry without instance data and one ``Model`` entry naming this module."""
    monkeypatch.setitem(registry.GPUS, GPU, registry.Gpu(GPU, LABEL, None))
    monkeypatch.setitem(registry.MODELS, MODEL, registry.Model(MODEL, __name__, "Throwaway 7B"))
    catalog.reload()
    yield
    monkeypatch.undo()
    catalog.reload()


def _objs(objs, kind):
    return [o for o in objs if o["kind"] == kind]


def _dgd(objs):
    (dgd,) = _objs(objs, "DynamoGraphDeployment")
    return dgd


def test_the_additions_are_data_only():
    """The throwaway model and GPU are written as data: no function, lambda or class of their own."""
    import inspect

    src = inspect.getsource(__import__(__name__))
    block = src[src.index("# ---- the throwaway model and GPU") : src.index("# ---- end of the data")]
    for word in ("def ", "lambda", "class "):
        assert word not in block, f"the throwaway model defines code: {word!r}"


def test_registering_adds_the_targets_and_changes_no_existing_render(monkeypatch):
    before_ids, before = set(catalog.targets()), _render_all()
    monkeypatch.setitem(registry.GPUS, GPU, registry.Gpu(GPU, LABEL, None))
    monkeypatch.setitem(registry.MODELS, MODEL, registry.Model(MODEL, __name__, "Throwaway 7B"))
    catalog.reload()
    try:
        assert set(catalog.targets()) == before_ids | {t.id for t in TARGETS}
        after = json.loads(_render_all())
        for tid in TARGETS:
            after.pop(tid.id)
        assert json.dumps(after, sort_keys=True) == before, "registering a model and a GPU changed an existing target's objects"
    finally:
        monkeypatch.undo()
        catalog.reload()
    assert set(catalog.targets()) == before_ids


def test_target_on_the_new_gpu_renders_the_serving_plan(extended):
    objs = render_config({"target": AGG_ID, "namespace": "throwaway"})
    assert [o["kind"] for o in objs] == ["Namespace", "Secret", "PersistentVolumeClaim", "Job", "DynamoGraphDeployment"]
    (pvc,) = _objs(objs, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == CACHE.claim and pvc["spec"]["resources"]["requests"]["storage"] == CACHE.size
    (job,) = _objs(objs, "Job")
    assert job["metadata"]["name"] == DOWNLOAD.name
    dgd = _dgd(objs)
    assert dgd["metadata"]["name"] == "throwaway-agg" and dgd["metadata"]["namespace"] == "throwaway"
    worker = dgd["spec"]["components"][1]
    pod = worker["podTemplate"]["spec"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0] == {"key": "nvidia.com/gpu.product", "operator": "In", "values": [LABEL]}
    main = pod["containers"][0]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "2"} and worker["replicas"] == 6
    assert catalog.gpus_needed(dgd) == 12


def test_no_engine_flag_comes_from_the_gpu(extended, monkeypatch):
    """A registry GPU entry carries no engine setting, and a target on a new GPU gets exactly the flags its data gives:
    Lightning's NVFP4 B200 recipe moved to the new GPU (with B200's profile row) keeps ``--quantization modelopt_fp4``
    only while the target names it (registering a GPU as Blackwell used to add it to every NVFP4 target on it)."""
    import dataclasses

    from stacks.catalog import lightning

    assert {f.name for f in dataclasses.fields(registry.Gpu)} == {"id", "label", "instance", "arch"}
    monkeypatch.setitem(lightning.GPU_PROFILE, GPU, lightning.GPU_PROFILE["b200"])
    b200 = catalog.targets()["lightning-vllm-agg-b200-dspark"]
    assert b200.precision == "nvfp4" and b200.params["quantization"] == "modelopt_fp4"

    def worker_args(t):
        return _dgd(catalog.recipe_objects(t))["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["args"]

    named = dataclasses.replace(b200, id="x", gpu=GPU)
    assert worker_args(named) == worker_args(b200)  # same data, same flags: only the GPU's label differs (affinity)
    unnamed = dataclasses.replace(named, params={k: v for k, v in b200.params.items() if k != "quantization"})
    args = worker_args(unnamed)
    assert "--quantization" not in args and args == [a for a in worker_args(b200) if a not in ("--quantization", "modelopt_fp4")]
    assert not any("quantization" in a for a in worker_args(catalog.targets()[AGG_ID]))


def test_scheduling_check_places_the_new_gpu_on_an_existing_cluster(extended):
    from stacks.cluster.scheduling import check_target, default_shapes

    for tid, per_gpu_devices in ((AGG_ID, {}), (DISAGG_ID, {"rdma/ib": 1000})):
        t = catalog.targets()[tid]
        system, gpu = default_shapes(t)
        assert gpu.labels["nvidia.com/gpu.product"] == LABEL
        assert gpu.capacity == {"nvidia.com/gpu": 8, **per_gpu_devices}
        assert gpu.count == -(-catalog.gpus_needed(_dgd(catalog.recipe_objects(t))) // 8)
        assert check_target(t) == []
    # The check can fail: one node too few for the six 2-GPU workers of the aggregated target.
    t = catalog.targets()[AGG_ID]
    system, gpu = default_shapes(t)
    gpu.count -= 1
    (problem,) = check_target(t, [system, gpu])
    assert "VllmWorker: replica 5 does not fit on 1 gpu node(s)" in problem


def test_simulate_shapes_and_pods_for_the_new_gpu(extended):
    from stacks.cli.simulate import default_groups, node_objects, operator_pod_intents, target_scenario

    t = catalog.targets()[DISAGG_ID]
    (system, gpu), runtime_classes = default_groups(t)
    assert gpu.labels["nvidia.com/gpu.product"] == LABEL and gpu.allocatable["nvidia.com/gpu"] == "8"
    assert gpu.allocatable["rdma/ib"] == "1000" and gpu.count == 1 and "existing infiniband cluster" in gpu.note
    sc = target_scenario(t)
    gpu_nodes = [n for n in sc.nodes if n["metadata"]["labels"].get("nvidia.com/gpu.product") == LABEL]
    assert len(gpu_nodes) == 1 and len(sc.nodes) == len(node_objects([system, gpu], "sim"))
    kinds = sorted(i.component for i in sc.intents)
    assert kinds == sorted(c["name"] for c in _dgd(catalog.recipe_objects(t))["spec"]["components"])
    agg = catalog.targets()[AGG_ID]
    (_, gpu), _ = default_groups(agg)
    assert gpu.count == 2 and "existing none cluster" in gpu.note  # twelve GPUs on 8-GPU nodes, no KV fabric
    assert len(operator_pod_intents(_dgd(catalog.recipe_objects(agg)))) == 1 + 6


KUBECONFIG = {"cluster": {"mode": "kubeconfig", "kubeconfigPath": __file__}}


def _program(raw):
    from stacks.program import build_program

    return build_program(raw, "throwaway", frozenset({"hfToken"}), env={})


def test_kubeconfig_and_render_stacks_plan_the_new_gpu(extended):
    for raw in (
        {**KUBECONFIG, "target": AGG_ID},
        {"cluster": {"mode": "render"}, "target": DISAGG_ID},
        {**KUBECONFIG, "serve": [{"target": AGG_ID, "namespace": "a"}, {"target": DISAGG_ID, "namespace": "b"}]},
    ):
        objs = _program(raw).objects()
        labels = [
            e["values"][0]
            for d in _objs(objs, "DynamoGraphDeployment")
            for c in d["spec"]["components"][1:]
            for e in c["podTemplate"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ][0]["matchExpressions"]
        ]
        assert labels and set(labels) == {LABEL}, raw


MISSING = "no EC2 instance data"


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"cluster": {"mode": "eks", "region": "us-east-1"}, "target": AGG_ID}, "dynamo:gpu"),
        (
            {
                "cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": "h100"}]},
                "serve": [{"target": H100_ID, "namespace": "a"}, {"target": AGG_ID, "namespace": "b"}],
            },
            r"dynamo:serve\[1\]\.gpu",
        ),
        (
            {"cluster": {"mode": "eks", "region": "us-east-1", "gpuPools": [{"gpu": GPU, "nodes": 1}]}},
            r"dynamo:cluster\.gpuPools\[0\]\.gpu",
        ),
        ({"cluster": {"mode": "stack", "stack": "org/throwaway/cluster"}, "target": AGG_ID}, "dynamo:gpu"),
    ],
    ids=["eks", "eks-serve-pools", "eks-cluster-only-pool", "cluster-stack"],
)
def test_every_eks_plan_refuses_the_gpu_naming_it_and_the_missing_data(extended, raw, key):
    with pytest.raises(ConfigError, match=rf"{key}: '?{GPU}'?.*{MISSING}.*stacks/registry/gpus.py INSTANCES"):
        _program(raw)


def test_the_efa_fabric_profile_refuses_the_gpu_on_any_cluster(extended):
    """EFA exists only on EC2 instances: the aws-efa profile needs the GPU's instance (EFA devices per GPU)."""
    for raw in (
        {"target": DISAGG_ID, "fabricProfile": "aws-efa"},
        {**KUBECONFIG, "target": DISAGG_ID, "fabricProfile": "aws-efa"},
    ):
        with pytest.raises(ConfigError, match=rf"dynamo:fabricProfile: 'aws-efa': GPU '{GPU}' has {MISSING}"):
            _program(raw) if "cluster" in raw else render_config(raw)


def test_the_eks_plan_still_takes_the_new_model_on_a_known_gpu(extended):
    plan = _program({"cluster": {"mode": "eks", "region": "us-east-1"}, "target": H100_ID})
    assert any(o["kind"] == "DynamoGraphDeployment" and o["metadata"]["name"] == "throwaway-agg-h100" for o in plan.objects())


def test_eks_default_shape_of_an_efa_target_refuses_the_gpu(extended):
    """An EFA target's default cluster is the EKS plan, which the scheduling check and simulate reuse: they refuse the
    GPU by name too (EFA exists only on EC2 instances)."""
    import dataclasses

    from stacks.cli.simulate import default_groups
    from stacks.cluster.scheduling import default_shapes

    efa = dataclasses.replace(catalog.targets()[DISAGG_ID], fabric="aws-efa")
    for f in (default_shapes, default_groups):
        with pytest.raises(ConfigError, match=f"GPU '{GPU}' has {MISSING}"):
            f(efa)


# ---- a throwaway optional layer, by docs/architecture.md "Adding an optional layer"


def test_a_throwaway_layer_follows_the_documented_steps(monkeypatch):
    """A planner in stacks.program.LAYER_PLANNERS is all a layer needs: render lists its objects, and under Pulumi
    mocks the generic component creates exactly them, with its type token and its outputs exported."""
    from harness import run_program

    from stacks import program as prog
    from stacks.layers import LayerPlan

    def plan_notes(spec, entries, mode):
        ns = entries[0].plan.dgd["metadata"]["namespace"]
        return LayerPlan(
            key="notes",
            kind="Notes",
            title="throwaway notes",
            objects=[
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "notes", "namespace": ns},
                    "data": {"hello": "world"},
                }
            ],
            outputs={"notesName": "notes"},
        )

    monkeypatch.setattr(prog, "LAYER_PLANNERS", [*prog.LAYER_PLANNERS, ("notes", plan_notes)])
    cfg = {"gpu": "h100", "topology": "agg", "namespace": "llm", "hfTokenSecretName": "hf", "createNamespace": False}
    program = prog.build_program(cfg, "t")
    assert any(o["kind"] == "ConfigMap" and o["metadata"]["name"] == "notes" for o in program.objects())
    assert "throwaway notes: 1 objects" in program.other_layers
    run = run_program(cfg, {}, stack="notes")
    (component,) = run.by_type("dynamo:notes:Notes")
    made = [r for r in run.resources if r.parent == component.urn]
    assert [(r.type, r.inputs["metadata"]["name"], r.inputs["data"]) for r in made] == [
        ("kubernetes:core/v1:ConfigMap", "notes", {"hello": "world"})
    ]
    assert run.outputs.get("notesName") == "notes"


# ---- a throwaway cluster mode, by docs/architecture.md "Adding a cluster mode"

THROWAWAY_SERVE = {
    "serve": [
        {"target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
        {"target": "lightning-vllm-disagg-h100-dspark", "namespace": "b"},
    ]
}


def _throwaway_mode():
    """Steps 1 and 2 of the documented ones: the mode's config variant and its ClusterMode (in a test, both here)."""
    from dataclasses import dataclass, field
    from typing import Literal

    from typing import Optional

    from stacks.config.keys import _Model
    from stacks.config.stack import ClusterVariant
    from stacks.modes import ClusterMode, ClusterPart, EntryPlan
    from stacks.serving import build_plan

    class ThrowawayCluster(ClusterVariant, _Model):  # step 1: its config variant, its own keys only (stacks/config/stack.py)
        mode: Literal["throwaway"]
        context: Optional[str] = None
        nvidia_stack: Optional[str] = None  # the device plugins' NVIDIA stack (None: the cluster has its own)

    @dataclass
    class ThrowawayPlan:  # a cluster plan: the pull Secrets this stack creates, and what the mode keeps track of
        entries: list[str]
        pull_secrets: list[dict] = field(default_factory=list)

    class ThrowawayMode(ClusterMode):  # step 2: what it means to the plans and the tools (stacks/modes/throwaway.py)
        name = "throwaway"
        installs_charts = True
        redacts_secrets = False
        creates_cluster = False
        labels_gpu_nodes = False
        installs_load_balancer_controller = False
        lacks_load_balancer_controller = True
        internal_load_balancer = False
        kubeconfig_for_tools = None
        unchecked_by_render = ("the throwaway cluster's nodes",)

        def plan_entry(self, spec, entry, door):
            return EntryPlan(spec.cluster, entry.key, build_plan(entry.config, **door))

        def plan_cluster(self, spec, entries, planned):
            return ClusterPart(spec.cluster, ThrowawayPlan([p.cluster_plan for p in planned]), ["throwaway cluster"])

        def plan_cluster_only(self, spec):
            return ClusterPart(spec.cluster, ThrowawayPlan([]), ["throwaway cluster"])

        def installs_device_plugins(self, cluster):
            return True

        def installs_platform(self, cluster):
            return True

        def device_plugin_fabrics(self, cluster_plan, entries):
            return ["infiniband"]

        def pod_security_version(self, cluster):
            return "v1.99"

        def plan_load_balancer(self, cluster_plan):
            return None

        def pause_pools(self, cluster_plan, entries):
            return None

        def autoscaling_pools(self, cluster, cluster_plan):
            return None

        def autoscaling_shortfall(self, cluster, entries, node_pools):
            return "the throwaway pools are full"

        def retained_after_destroy(self, cluster_plan):
            return [{"kind": "throwaway disk", "name": "disk", "why": "kept", "delete": "by hand", "adopt": "no"}]

    return ThrowawayCluster, ThrowawayMode


def test_a_throwaway_cluster_mode_follows_the_documented_steps(monkeypatch):
    """A config variant, a ClusterMode and one registry entry are all a mode needs: the program plans every entry on
    it, keeps its cluster plan and layers, and asks it for the Pod Security version, the device plugins, the platform,
    what destroy keeps and what render cannot check. (A call site that compared mode names would plan it as none of
    the four modes it knows, and these asserts would fail.)"""
    from stacks.config import parse_spec
    from stacks.modes import registry
    from stacks.program import plan_program, retained_after_destroy

    cluster_cls, mode_cls = _throwaway_mode()
    monkeypatch.setitem(registry.CLUSTER_MODES, "throwaway", mode_cls())  # step 3: one entry in the registry
    # The variant joins the ClusterSource union in stacks/config/stack.py; here it replaces a parsed spec's cluster.
    parsed = parse_spec(THROWAWAY_SERVE, "t", frozenset({"hfToken"}))
    spec = parsed.model_copy(update={"cluster": cluster_cls.model_construct(mode="throwaway")})
    program = plan_program(spec)

    assert program.mode is registry.CLUSTER_MODES["throwaway"]
    assert program.cluster_plan.entries == [e.key for e in program.entries] == ["dynamo:serve[0]", "dynamo:serve[1]"]
    assert program.other_layers[0] == "throwaway cluster"
    assert [x.split(":")[0] for x in program.other_layers[1:3]] == ["device plugins", "Dynamo platform (charts"]
    assert program.device_plugin_fabrics() == ["infiniband"]
    assert [layer.kind for layer in program.layers[:2]] == ["DevicePlugins", "DynamoPlatform"]
    assert program.autoscaling_shortfall([]) == "the throwaway pools are full"
    versions = {
        v
        for o in program.objects()
        if o["kind"] == "Namespace"
        for k, v in o["metadata"]["labels"].items()
        if k.endswith("-version")
    }
    assert versions == {"v1.99"}
    assert retained_after_destroy(program)[-1]["kind"] == "throwaway disk"
    assert program.mode.unchecked_by_render == ("the throwaway cluster's nodes",)
    # The same spec on the render mode it was parsed with: none of the throwaway's answers.
    plain = plan_program(parsed)
    assert plain.cluster_plan is None and "throwaway cluster" not in plain.other_layers
    assert {
        v
        for o in plain.objects()
        if o["kind"] == "Namespace"
        for k, v in o["metadata"]["labels"].items()
        if k.endswith("-version")
    } == {"latest"}


def test_every_registered_mode_implements_the_whole_interface():
    """Each mode sets every attribute ``ClusterMode`` documents and implements every method (the base class raises)."""
    from stacks.modes import ClusterMode
    from stacks.modes.registry import CLUSTER_MODES

    methods = [n for n, v in vars(ClusterMode).items() if callable(v) and not n.startswith("_")]
    assert len(methods) >= 10
    for name, mode in [*CLUSTER_MODES.items(), ("throwaway", _throwaway_mode()[1]())]:
        assert mode.name == name
        assert [a for a in ClusterMode.__annotations__ if not hasattr(mode, a)] == [], name
        assert [m for m in methods if getattr(type(mode), m) is getattr(ClusterMode, m)] == [], name
