"""Pulumi program: stack config -> (EKS cluster, device plugins, Dynamo platform) -> serving for its recipe targets.

A cluster-only stack (``dynamo:serve: []``) stops after the platform and exports what serving stacks on it read
(``cluster.mode: stack``, a StackReference): kubeconfig (secret), nodePools, storageClassName, clusterName, region."""
import os

import pulumi
import pulumi_kubernetes as k8s

from components.serving import Serving, kubectl_probe
from stacks.config import NS, ConfigError
from stacks.outputs import next_steps
from stacks.program import build_program, kubeconfig_path
from stacks.pulumi_config import raw_config, secret_config_keys

dynamo = pulumi.Config(NS)
try:  # every check runs before any resource is registered, in the same function `render --stack` uses
    program = build_program(raw_config(), pulumi.get_stack(), secret_config_keys(), env=dict(os.environ),
                            aws_region=pulumi.Config("aws").get("region"))
except ConfigError as err:
    raise pulumi.RunError(str(err)) from None
cfg, cluster, cluster_plan, plan = program.cfg, program.cluster, program.cluster_plan, program.serving
hf_token = dynamo.get_secret("hfToken") if any(e.plan.hf_secret for e in program.entries) else None

cache_deps, graph_deps = [], []
kubeconfig_file = None  # a kubeconfig file lets a failed wait say what it saw last (kubectl get)
if cluster.mode == "render":
    provider = k8s.Provider("render", render_yaml_to_directory=cluster.render_dir)
elif cluster.mode == "kubeconfig":
    kubeconfig = dynamo.get_secret("kubeconfig")
    if kubeconfig is None:
        kubeconfig_file = kubeconfig_path(cluster, secret_config_keys(), dict(os.environ))
        with open(kubeconfig_file) as f:
            kubeconfig = pulumi.Output.secret(f.read())
    provider = k8s.Provider("cluster", kubeconfig=kubeconfig, context=cluster.context)
elif cluster.mode == "stack":
    from stacks.cluster import capacity_shortfall

    # The cluster of a cluster-only stack: its kubeconfig (kept secret), storage class and GPU pools are Outputs, so the
    # checks run when they resolve: a storage class other than the claim's fails before the claim, a shortfall of the
    # pools before anything GPU-related (the DGDs depend on the check, as on the download's checks).
    ref = pulumi.StackReference(cluster.stack)
    provider = k8s.Provider("cluster", kubeconfig=pulumi.Output.secret(ref.require_output("kubeconfig")))
    refs = cluster_plan

    def _storage_check(name):
        if refs.storage_class and name != refs.storage_class:
            raise pulumi.RunError(f"{NS}:storage.className: the cache claim asks for {refs.storage_class!r}, but the cluster of "
                                  f"{refs.stack} has storage class {name!r} (its storageClassName output); set {NS}:storage.className: {name}")
        return None

    def _capacity_check(pools):
        msg = capacity_shortfall(refs.requirements, pools, refs.stack)
        if msg:
            raise pulumi.RunError(msg)
        return None

    cache_deps = [ref.require_output("storageClassName").apply(_storage_check)]
    graph_deps = [ref.require_output("nodePools").apply(_capacity_check)]
else:
    import pulumi_aws as aws

    from components.cluster import EksGpuCluster

    aws_provider = aws.Provider("aws", region=cluster.region)
    eks = EksGpuCluster("cluster", cluster_plan, opts=pulumi.ResourceOptions(provider=aws_provider))
    provider = k8s.Provider("eks", kubeconfig=eks.kubeconfig)
    sc = cluster_plan.storage_class
    if sc:  # EFS: access points provisioned per claim
        storage_class = k8s.storage.v1.StorageClass(
            "model-cache",
            metadata=sc["metadata"],
            provisioner=sc["provisioner"],
            parameters=eks.storage_parameters,
            reclaim_policy=sc["reclaimPolicy"],
            volume_binding_mode=sc["volumeBindingMode"],
            opts=pulumi.ResourceOptions(provider=provider, depends_on=eks.addons + eks.mount_targets),
        )
    else:  # FSx for Lustre: the stack's file system, bound statically to the cache claim
        pv = cluster_plan.static_pv
        storage_class = k8s.core.v1.PersistentVolume(
            "model-cache",
            metadata=pv["metadata"],
            spec=eks.static_pv_source.apply(lambda csi: {**pv["spec"], "csi": csi}),
            opts=pulumi.ResourceOptions(provider=provider, depends_on=eks.addons, retain_on_delete=cluster_plan.protect_cache),
        )
    # The download starts as soon as storage and the system nodes exist, in parallel with the GPU node group.
    cache_deps = [storage_class, eks.system_nodes]
    graph_deps = list(eks.gpu_node_groups) + eks.karpenter_node_pools  # Karpenter pools: their NodePools exist before the DGDs
    if cluster_plan.dra_driver:  # GB200: ComputeDomains (IMEX) through the NVIDIA DRA driver
        from components.platform import helm_release
        from stacks.cluster import dra_driver_spec

        graph_deps.append(helm_release("nvidia-dra-driver-gpu", dra_driver_spec(), pulumi.ResourceOptions(provider=provider, depends_on=[eks.gpu_nodes])))
    pulumi.export("clusterName", eks.cluster_name)
    pulumi.export("kubeconfig", eks.kubeconfig)
    # What a serving stack on this cluster reads (cluster.mode: stack): the GPU pools and the cache storage class.
    from stacks.cluster import node_pools

    pulumi.export("nodePools", node_pools(cluster_plan))
    pulumi.export("storageClassName", cluster_plan.cache_class_name)
    pulumi.export("region", cluster_plan.region)
    # The next `up` that changes the version sets dynamo:cluster.currentKubernetesVersion to this (one minor step at a time).
    pulumi.export("kubernetesVersion", cluster_plan.kubernetes_version)
    if plan is None:  # a cluster-only stack has no serving commands to follow; the kubeconfig one still helps
        pulumi.export("followKubeconfig", f"aws eks update-kubeconfig --region {cluster_plan.region} --name {cluster_plan.name}")

if cluster.mode != "render" and (cluster.mode == "eks" or cluster.install_device_plugins or cluster.platform_wanted()):
    # Helm releases need a real cluster, so render mode shows the serving layer only.
    from components.platform import DevicePlugins, DynamoPlatform
    from stacks.platform import GPU_PRESENT_LABELS

    k8s_opts = pulumi.ResourceOptions(provider=provider)
    if cluster.mode == "eks" or cluster.install_device_plugins:
        plugins = DevicePlugins(
            "device-plugins",
            fabric=cfg.fabric_profile or plan.target.fabric if cluster.mode != "eks" else ("aws-efa" if cluster_plan.efa else "none"),
            nvidia=cluster.nvidia_stack,
            opts=pulumi.ResourceOptions(provider=provider, depends_on=graph_deps),
            # EKS: our GPU node groups carry nvidia.com/gpu.present=true; pods naming RuntimeClass nvidia land only there.
            runtime_class_node_selector=dict(GPU_PRESENT_LABELS) if cluster.mode == "eks" else None,
        )
        graph_deps = graph_deps + plugins.ready
    from stacks.platform import dynamo_platform  # the operator learns the Prometheus URL (Planner, autoscaling)

    platform_spec = dynamo_platform(prometheus_endpoint=program.observability.prometheus_endpoint) if program.observability else None
    platform = DynamoPlatform("dynamo-platform", skip=not cluster.platform_wanted(), opts=pulumi.ResourceOptions(provider=provider, depends_on=cache_deps),
                              spec=platform_spec)
    graph_deps = graph_deps + platform.ready

# The DGD waits for the image pull secrets (on a cluster this `up` creates, its pods would otherwise fail
# ErrImagePull before the stack's Secrets exist). They need the namespace Serving creates, so each is
# a dependency that resolves to the Secret registered just below: the program body runs to its end before any
# registration is sent, so the Secret exists by then.
created_pull_secrets: dict = {}
if cluster.mode in ("eks", "stack") and cluster_plan.notes.get("pull_secrets"):
    async def _pull_secret(key):
        return created_pull_secrets[key]

    graph_deps = graph_deps + [pulumi.Output.from_input(_pull_secret((o["metadata"]["namespace"], o["metadata"]["name"])))
                               for o in cluster_plan.notes["pull_secrets"]]

# One Serving per namespace: its namespace, HF token Secret, model cache and download (built from the first entry
# there; entries of one namespace share one checkpoint), and one DynamoGraph per entry. Names follow the namespace
# and the entry, never the entries' order, so adding or removing an entry touches only its own objects. A
# single-target stack keeps its one Serving named "serving"; the first namespace of a `dynamo:serve` list takes
# over its URNs (aliases).
spaces: dict[str, list] = {}
for entry in program.entries:
    spaces.setdefault(entry.plan.dgd["metadata"]["namespace"], []).append(entry)
servings: dict[str, Serving] = {}
for index, (ns, entries) in enumerate(spaces.items()):
    first = entries[0]
    servings[ns] = Serving(
        f"serving-{ns}" if program.multi else "serving",
        first.plan,
        hf_token=hf_token,
        protect_cache=first.cfg.storage.protect,
        opts=pulumi.ResourceOptions(provider=provider, aliases=[pulumi.Alias(name="serving")] if program.multi and index == 0 else None),
        depends_on=cache_deps,
        graph_depends_on=graph_deps,
        redact_secrets=cluster.mode == "render",
        probe=kubectl_probe(kubeconfig_file, cluster.context) if kubeconfig_file else None,
        graphs=[(f"graph-{e.name}", e.plan) for e in entries] if program.multi else None,
        first_graph_alias="serving-graph" if program.multi and index == 0 else None,
    )
serving = next(iter(servings.values()), None)  # None: a cluster-only stack
if cluster.mode in ("eks", "stack"):
    # Secrets and claims in the serving namespaces that only this stack can create on its new cluster.
    def ns_deps(ns: str) -> list:
        s = servings.get(ns)
        return [s.ns.resource] if s is not None and s.ns.resource else []

    if cluster_plan.notes.get("pull_secrets"):
        from stacks.cluster import dockerconfigjson

        pull = dynamo.get_secret("imagePullSecret") or dynamo.get_secret("ngcApiKey").apply(dockerconfigjson)
        for obj in cluster_plan.notes["pull_secrets"]:
            md = obj["metadata"]
            # The first namespace keeps the single-target name; others are named by namespace too.
            rname = f"pull-secret-{md['name']}" if md["namespace"] == next(iter(servings)) else f"pull-secret-{md['namespace']}-{md['name']}"
            created_pull_secrets[(md["namespace"], md["name"])] = k8s.core.v1.Secret(
                rname, metadata=md, type=obj["type"],
                string_data={".dockerconfigjson": pulumi.Output.secret(pull)},
                opts=pulumi.ResourceOptions(provider=provider, depends_on=ns_deps(md["namespace"]), additional_secret_outputs=["stringData", "data"]))
    if getattr(cluster_plan, "compute_domain", None):
        cd = cluster_plan.compute_domain
        k8s.apiextensions.CustomResource("compute-domain", api_version=cd["apiVersion"], kind=cd["kind"], metadata=cd["metadata"], spec=cd["spec"],
                                         opts=pulumi.ResourceOptions(provider=provider, depends_on=ns_deps(cd["metadata"]["namespace"]) + graph_deps))
# Renamed or deprecated catalog ids (upstream renamed or dropped the recipe): the warning names the successor.
from stacks.config import deprecation_warnings  # noqa: E402

for _entry in program.entries or ():
    for _warning in deprecation_warnings(_entry.cfg):
        pulumi.log.warn(f"{_entry.key}: {_warning}" if program.multi else _warning)
if program.multi:
    pulumi.export("entries", {e.name: next_steps(e.plan) for e in program.entries})
for key, value in (next_steps(plan).items() if not program.multi and plan is not None else ()):
    pulumi.export(key, value)

# Commands to follow the `up` (logged now, before any resource is created, and exported), then the optional
# observability layer and the benchmark Job (both off by default; stacks/program.py optional_layers builds them).
from stacks.outputs import follow_commands  # noqa: E402

for key, value in (follow_commands(plan, cluster_plan if cluster.mode == "eks" else None, program.benchmark).items() if plan is not None else ()):
    pulumi.log.info(f"{key}: {value}")
    pulumi.export(key, value)
if program.observability is not None:
    from components.observability import Observability

    Observability("observability", program.observability, opts=pulumi.ResourceOptions(provider=provider),
                  depends_on=cache_deps + graph_deps)
if program.benchmark is not None:
    from components.benchmark import Benchmark

    Benchmark("benchmark", program.benchmark, opts=pulumi.ResourceOptions(provider=provider), depends_on=[serving.graph.dgd])
