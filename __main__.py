"""Pulumi program: stack config -> (EKS cluster, device plugins, Dynamo platform) -> serving for one recipe target."""
import os

import pulumi
import pulumi_kubernetes as k8s

from components.serving import Serving
from stacks.config import NS, ConfigError, parse
from stacks.outputs import next_steps
from stacks.providers import cluster_config
from stacks.pulumi_config import raw_config
from stacks.serving import build_plan

dynamo = pulumi.Config(NS)
try:  # every check runs before any resource is registered
    raw = raw_config()
    cfg = parse(raw)
    cluster = cluster_config(raw)
    cluster_plan = None
    if cluster.mode == "eks":
        from stacks.cluster import POOL_LABEL, build_cluster_plan, check_fabric_on_eks
        from stacks.serving import select_target

        check_fabric_on_eks(select_target(cfg), cfg.fabric_profile)
        cluster_plan = build_cluster_plan(pulumi.get_stack(), cluster, select_target(cfg))
        plan = build_plan(cfg, default_storage_class=cluster_plan.storage_class["metadata"]["name"], job_node_selector={POOL_LABEL: "system"})
    else:
        plan = build_plan(cfg)
    hf_token = None if cfg.hf_token_secret_name else dynamo.get_secret("hfToken")
    if not cfg.hf_token_secret_name and hf_token is None:
        raise ConfigError(f"{NS}:hfToken is not set: run `pulumi config set --secret {NS}:hfToken <token>` or set {NS}:hfTokenSecretName to an existing Secret")
except ConfigError as err:
    raise pulumi.RunError(str(err)) from None

cache_deps, graph_deps = [], []
if cluster.mode == "render":
    provider = k8s.Provider("render", render_yaml_to_directory=cluster.render_dir)
elif cluster.mode == "kubeconfig":
    kubeconfig = dynamo.get_secret("kubeconfig")
    if kubeconfig is None:
        path = cluster.kubeconfig_path or os.environ.get("KUBECONFIG")
        if not path:
            raise pulumi.RunError(f"{NS}:cluster.mode is kubeconfig but none of {NS}:kubeconfig (secret), {NS}:cluster.kubeconfigPath, KUBECONFIG is set")
        with open(os.path.expanduser(path)) as f:
            kubeconfig = pulumi.Output.secret(f.read())
    provider = k8s.Provider("cluster", kubeconfig=kubeconfig, context=cluster.context)
else:
    import pulumi_aws as aws

    from components.cluster import EksGpuCluster

    aws_provider = aws.Provider("aws", region=cluster.region)
    eks = EksGpuCluster("cluster", cluster_plan, opts=pulumi.ResourceOptions(provider=aws_provider))
    provider = k8s.Provider("eks", kubeconfig=eks.kubeconfig)
    sc = cluster_plan.storage_class
    storage_class = k8s.storage.v1.StorageClass(
        "model-cache",
        metadata=sc["metadata"],
        provisioner=sc["provisioner"],
        parameters=eks.storage_parameters,
        reclaim_policy=sc["reclaimPolicy"],
        volume_binding_mode=sc["volumeBindingMode"],
        opts=pulumi.ResourceOptions(provider=provider, depends_on=eks.addons + eks.mount_targets),
    )
    # The download starts as soon as storage and the system nodes exist, in parallel with the GPU node group.
    cache_deps = [storage_class, eks.system_nodes]
    graph_deps = [eks.gpu_nodes]
    pulumi.export("clusterName", eks.cluster_name)
    pulumi.export("kubeconfig", eks.kubeconfig)

if cluster.mode != "render" and (cluster.mode == "eks" or cluster.install_device_plugins or cluster.platform_wanted()):
    # Helm releases need a real cluster, so render mode shows the serving layer only.
    from components.platform import DevicePlugins, DynamoPlatform

    k8s_opts = pulumi.ResourceOptions(provider=provider)
    if cluster.mode == "eks" or cluster.install_device_plugins:
        plugins = DevicePlugins(
            "device-plugins",
            fabric=cfg.fabric_profile or plan.target.fabric if cluster.mode != "eks" else ("aws-efa" if cluster_plan.efa else "none"),
            nvidia=cluster.nvidia_stack,
            opts=pulumi.ResourceOptions(provider=provider, depends_on=graph_deps),
        )
        graph_deps = graph_deps + plugins.ready
    platform = DynamoPlatform("dynamo-platform", skip=not cluster.platform_wanted(), opts=pulumi.ResourceOptions(provider=provider, depends_on=cache_deps))
    graph_deps = graph_deps + platform.ready

serving = Serving(
    "serving",
    plan,
    hf_token=hf_token,
    protect_cache=cfg.storage.protect,
    opts=pulumi.ResourceOptions(provider=provider),
    depends_on=cache_deps,
    graph_depends_on=graph_deps,
    redact_secrets=cluster.mode == "render",
)
for key, value in next_steps(plan).items():
    pulumi.export(key, value)
