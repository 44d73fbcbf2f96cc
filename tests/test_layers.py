"""The optional layers in the one layer shape (stacks/layers, components/layer.py): observability, the benchmark, the
platform layer (device plugins, the Dynamo platform) and KEDA. Their LayerPlans are the program's (``ProgramPlan.layers``,
so ``render --stack`` lists their objects), and the generic component creates them with the URNs, parents, dependencies
and order their own components had (tests/golden pins no stack with observability, the benchmark, KEDA, the GPU
Operator or installDevicePlugins on); KEDA's release, top-level before, moves under its component by an alias."""

from harness import run_program

from stacks.program import build_program

TARGET = "lightning-vllm-disagg-h100-dspark"
OBS = "dynamo:observability:Observability$"
# A URN is the resource's identity in state: these are the ones live stacks hold, so none may change.
URNS = {
    f"{OBS}kubernetes:core/v1:Namespace::observability-namespace": [],
    f"{OBS}kubernetes:rbac.authorization.k8s.io/v1:Role::observability-role-grafana-sidecar-configmaps": [
        "observability-namespace"
    ],
    f"{OBS}kubernetes:rbac.authorization.k8s.io/v1:RoleBinding::observability-rolebinding-grafana-sidecar-configmaps": [
        "observability-namespace"
    ],
    f"{OBS}kubernetes:helm.sh/v3:Release::observability-kube-prometheus-stack": [
        "observability-namespace",
        "observability-role-grafana-sidecar-configmaps",
        "observability-rolebinding-grafana-sidecar-configmaps",
    ],
    f"{OBS}kubernetes:helm.sh/v3:Release::observability-dcgm-exporter": [
        "observability-kube-prometheus-stack",
        "observability-namespace",
        "observability-role-grafana-sidecar-configmaps",
        "observability-rolebinding-grafana-sidecar-configmaps",
    ],
    f"{OBS}kubernetes:core/v1:ConfigMap::observability-dynamo-gpu-dashboard": ["observability-namespace"],
    f"{OBS}kubernetes:core/v1:ConfigMap::observability-dynamo-serving-dashboard": ["observability-namespace"],
    f"{OBS}kubernetes:monitoring.coreos.com/v1:PodMonitor::observability-podmonitor-vllm-disagg-h100-dspark-frontend": [
        "observability-kube-prometheus-stack",
        "observability-namespace",
    ],
    f"{OBS}kubernetes:monitoring.coreos.com/v1:PodMonitor::observability-podmonitor-vllm-disagg-h100-dspark-worker": [
        "observability-kube-prometheus-stack",
        "observability-namespace",
    ],
    f"{OBS}kubernetes:monitoring.coreos.com/v1:PrometheusRule::observability-prometheusrule-dynamo-alerts": [
        "observability-kube-prometheus-stack",
        "observability-namespace",
    ],
    "dynamo:benchmark:Benchmark$kubernetes:batch/v1:Job::benchmark-aiperf-vllm-disagg-h100-dspark": [],
    "pulumi:pulumi:Stack$dynamo:observability:Observability::observability": [],
    "pulumi:pulumi:Stack$dynamo:benchmark:Benchmark::benchmark": [],
}
CFG = {"target": TARGET, "cluster": {"mode": "eks"}, "observability": {"enabled": True}, "benchmark": {"enabled": True}}


def test_observability_and_benchmark_keep_their_urns_and_order():
    run = run_program(CFG, {"hfToken": "hf_x"}, stack="layers")
    comps = {r.urn for r in run.resources if r.type in ("dynamo:observability:Observability", "dynamo:benchmark:Benchmark")}
    mine = [r for r in run.resources if r.urn in comps or r.parent in comps]
    by_urn = {r.urn: r for r in run.resources}
    got = {
        r.urn.split("::dynamo::", 1)[1]: sorted(by_urn[d].name for d in r.dependencies if by_urn[d].parent == r.parent)
        for r in mine
    }
    assert got == URNS
    # Observability waits for the cluster's GPU capacity, not the serving objects; the Job waits for the DGD.
    dgd = run.one("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
    job = next(r for r in run.by_type("kubernetes:batch/v1:Job") if r.name.startswith("benchmark-"))
    assert job.dependencies == [dgd.urn]
    ns = next(r for r in mine if r.name == "observability-namespace")
    ours = [
        r
        for r in mine
        if r.type not in ("dynamo:observability:Observability", "dynamo:benchmark:Benchmark") and r is not ns and r is not job
    ]
    assert all(dgd.urn not in r.dependencies for r in ours)
    assert all(any(by_urn[d].name == "cluster-gpu" for d in r.dependencies) for r in ours)
    kps = next(r for r in mine if r.name == "observability-kube-prometheus-stack")
    assert kps.inputs["createNamespace"] is False  # the layer's Namespace, with its Pod Security labels, is the one


def test_render_lists_their_objects_through_the_program_layers():
    program = build_program({**CFG, "cluster": {"mode": "render"}}, "t", frozenset({"hfToken"}))
    assert [layer.key for layer in program.layers] == ["observability", "benchmark"]
    objects = program.objects()
    tail = [o for layer in program.layers for o in layer.objects]
    assert objects[-len(tail) :] == tail
    assert program.layers[1].objects == [program.benchmark.job]
    assert program.layers[0].charts == []  # a render provider installs no chart
    kinds = [o["kind"] for o in program.layers[0].objects]
    assert kinds[0] == "Namespace" and "PrometheusRule" in kinds and "PodMonitor" in kinds


# ---------------------------------------------------------------------------- the platform layer and KEDA

PLUGINS = "dynamo:platform:DevicePlugins$"
PLATFORM = "dynamo:platform:DynamoPlatform$"
STACK = "pulumi:pulumi:Stack$"
# The URNs the device plugins' and the Dynamo platform's own components registered (live stacks hold them), each with
# every resource it depends on: the components wait for the nodes or storage, their children for nothing more.
KUBE_PLATFORM_URNS = {
    f"{STACK}dynamo:platform:DevicePlugins::device-plugins": [],
    f"{STACK}dynamo:platform:DynamoPlatform::dynamo-platform": [],
    f"{PLUGINS}kubernetes:helm.sh/v3:Release::device-plugins-nvidia-device-plugin": [],
    f"{PLUGINS}kubernetes:node.k8s.io/v1:RuntimeClass::device-plugins-nvidia-runtimeclass": [],
    f"{PLUGINS}kubernetes:core/v1:ConfigMap::device-plugins-rdma-devices-configmap": [],
    f"{PLUGINS}kubernetes:apps/v1:DaemonSet::device-plugins-rdma-shared-dp-ds-daemonset": [
        "device-plugins-rdma-devices-configmap"
    ],
    f"{PLUGINS}kubernetes:apps/v1:DaemonSet::device-plugins-aws-efa-k8s-device-plugin-daemonset": [
        "device-plugins-rdma-devices-configmap"
    ],
    f"{PLATFORM}kubernetes:core/v1:Namespace::dynamo-platform-namespace": [],
    f"{PLATFORM}kubernetes:helm.sh/v3:Release::dynamo-platform-release": ["dynamo-platform-namespace"],
}
EKS_PLATFORM_URNS = {
    f"{STACK}dynamo:platform:DevicePlugins::device-plugins": ["cluster-system"],
    # the operator waits for the system nodes it runs on, not the model cache (stacks/layers/platform.py)
    f"{STACK}dynamo:platform:DynamoPlatform::dynamo-platform": ["cluster-system"],
    f"{PLUGINS}kubernetes:helm.sh/v3:Release::device-plugins-gpu-operator": [],
    f"{PLUGINS}kubernetes:apps/v1:DaemonSet::device-plugins-aws-efa-k8s-device-plugin-daemonset": [],
    f"{PLATFORM}kubernetes:core/v1:Namespace::dynamo-platform-namespace": [],
    f"{PLATFORM}kubernetes:helm.sh/v3:Release::dynamo-platform-release": ["dynamo-platform-namespace"],
}


def _fabric_target(fabric: str) -> str:
    from stacks import catalog

    return next(t for t, x in sorted(catalog.targets().items()) if x.fabric == fabric and x.topology == "disagg")


def _platform(run) -> dict[str, list[str]]:
    comps = {r.urn for r in run.resources if r.type.startswith("dynamo:platform:")}
    by_urn = {r.urn: r for r in run.resources}
    return {
        r.urn.split("::dynamo::", 1)[1]: sorted(by_urn[d].name for d in r.dependencies)
        for r in run.resources
        if r.urn in comps or r.parent in comps
    }


def test_the_platform_layer_keeps_its_urns_and_the_graphs_wait_for_it():
    from harness import MOCK_KUBECONFIG

    cfg = {
        "cluster": {"mode": "kubeconfig", "installDevicePlugins": True, "installPlatform": True},
        "serve": [
            {"target": _fabric_target("infiniband"), "namespace": "ns0"},
            {"target": _fabric_target("aws-efa"), "namespace": "ns1"},
        ],
    }
    run = run_program(cfg, {"hfToken": "hf_x", "kubeconfig": MOCK_KUBECONFIG}, stack="layers")
    assert _platform(run) == KUBE_PLATFORM_URNS
    ready = {
        "device-plugins-nvidia-device-plugin",
        "device-plugins-nvidia-runtimeclass",
        "dynamo-platform-release",
        "device-plugins-rdma-shared-dp-ds-daemonset",
        "device-plugins-aws-efa-k8s-device-plugin-daemonset",
    }
    by_urn = {r.urn: r for r in run.resources}
    for dgd in run.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"):
        names = {by_urn[d].name for d in dgd.dependencies}
        assert ready <= names and not names & {"device-plugins-rdma-devices-configmap", "dynamo-platform-namespace"}
    outputs: dict = {}
    for raw in run.raw_outputs:
        if "nvidiaRelease" in raw:
            outputs = raw
    assert (
        outputs
        == {
            "nvidiaRelease": "nvidia-device-plugin",
            "plugins": ["k8s-rdma-shared-dev-plugin", "aws-efa-k8s-device-plugin"],
            "resources": sorted(outputs["resources"]),
        }
        and outputs["resources"]
    )


def test_the_platform_layer_on_eks_with_the_gpu_operator_keeps_its_urns():
    run = run_program(
        {
            "gpu": "h100",
            "topology": "disagg",
            "cluster": {"mode": "eks", "nvidiaStack": "gpu-operator"},
            "observability": {"enabled": True},
        },
        {"hfToken": "hf_x"},
        stack="layers",
    )
    assert _platform(run) == EKS_PLATFORM_URNS
    release = next(r for r in run.resources if r.name == "dynamo-platform-release")
    # the operator learns observability's Prometheus
    assert release.inputs["values"]["dynamo-operator"]["dynamo"]["metrics"]["prometheusEndpoint"]


def test_keda_moves_under_its_layer_with_the_alias_of_its_top_level_urn():
    """KEDA's release was top-level (parent: the stack); under the ``dynamo:keda:Keda`` component it carries the alias
    whose URN is the old one (same type and name, parent the stack), so Pulumi moves it and replaces nothing; every
    ScaledObject waits for it."""
    agg = "lightning-vllm-agg-h100-dspark"
    from stacks.serving.autoscaling import gpus_per_replica

    comp = next(
        c["name"] for c in build_program({"target": agg}, "a").entries[0].plan.dgd["spec"]["components"] if gpus_per_replica(c)
    )
    cfg = {
        "imagePullSecrets": ["ngc-secret"],
        "observability": {"enabled": True, "prometheus": "existing", "prometheusEndpoint": "http://prom.obs.svc:9090"},
        "cluster": {"mode": "eks", "region": "us-east-1", "gpuNodes": 2},
        "serve": [
            {
                "name": n,
                "target": agg,
                "namespace": n,
                "autoscaling": {comp: {"maxReplicas": 4, "metric": "queue-depth", "target": 2}},
            }
            for n in ("a", "b")
        ],
    }
    run = run_program(cfg, {"hfToken": "hf_x", "ngcApiKey": "nvapi-x"}, stack="layers")
    layer = run.one("dynamo:keda:Keda")
    (keda,) = [r for r in run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("chart") == "keda"]
    assert keda.parent == layer.urn and keda.name == "keda"
    # the alias's parent is the stack resource, the one the layer has (as a top-level resource's parent: the SDK's
    # default); the engine builds the old URN from it, the type and the name: <prefix>::pulumi:pulumi:Stack$<type>::keda
    assert keda.aliases == [{"parentUrn": layer.parent}] and layer.parent.rsplit("::", 2)[1] == "pulumi:pulumi:Stack"
    assert keda.urn.endswith("::dynamo::dynamo:keda:Keda$kubernetes:helm.sh/v3:Release::keda")
    assert keda.dependencies == []
    scaled = run.by_type("kubernetes:keda.sh/v1alpha1:ScaledObject")
    assert len(scaled) == 2 and all(keda.urn in so.dependencies for so in scaled)


def test_dra_driver_moves_under_its_layer_with_the_alias_of_its_top_level_urn():
    """The NVIDIA DRA driver's release was a top-level resource of the EKS cluster source; as the platform's
    ``dynamo:platform:DraDriver`` layer it carries the alias of that URN (same type and name, parent the stack), waits
    for the system nodes only (not the GPU nodes: its kubelet plugin starts on each GPU node as it joins), and every
    DGD waits for it (the ComputeDomain claims need it)."""
    from test_urns import CASES

    run = run_program(CASES["eks-gb200"], {"hfToken": "hf_x"}, stack="golden")
    layer = run.one("dynamo:platform:DraDriver")
    (dra,) = [r for r in run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("chart") == "dra-driver-nvidia-gpu"]
    assert dra.parent == layer.urn and dra.name == "nvidia-dra-driver-gpu"
    assert dra.aliases == [{"parentUrn": layer.parent}] and layer.parent.rsplit("::", 2)[1] == "pulumi:pulumi:Stack"
    system = [r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-system")]
    gpu = [r for r in run.by_type("aws:eks/nodeGroup:NodeGroup") if r.name.endswith("-gpu")]
    assert len(system) == 1 and gpu
    waits = set(dra.dependencies) | set(layer.dependencies)
    assert system[0].urn in waits and not {g.urn for g in gpu} & waits
    dgds = run.by_type("kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment") or run.by_type(
        "kubernetes:nvidia.com/v1alpha1:DynamoGraphDeployment"
    )
    assert dgds and all(dra.urn in d.dependencies for d in dgds)


def test_render_lists_the_platform_layers_objects():
    program = build_program(
        {"gpu": "h100", "topology": "disagg", "cluster": {"mode": "eks", "region": "us-east-1"}}, "t", frozenset({"hfToken"})
    )
    assert [layer.kind for layer in program.layers[:2]] == ["DevicePlugins", "DynamoPlatform"]
    names = {(o["kind"], o["metadata"]["name"]) for o in program.objects()}
    assert {("RuntimeClass", "nvidia"), ("DaemonSet", "aws-efa-k8s-device-plugin"), ("Namespace", "dynamo-system")} <= names
    assert [c.chart for layer in program.layers[:2] for c in layer.charts] == ["nvidia-device-plugin", "dynamo-platform"]
