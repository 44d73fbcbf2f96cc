"""Where a stack's Kubernetes objects go, behind one small interface (``ClusterSource``):

- ``provider``: the Kubernetes provider every serving, observability and benchmark object uses;
- ``storage_ready``: what the model cache and its download wait for (a storage class, the system nodes);
- ``gpu_ready``: what GPU workloads (the DGDs) wait for (GPU node groups or NodePools, the pools' capacity
  check; the shell adds the layers the graphs wait for: device plugins, the Dynamo platform);
- ``kubeconfig_file``/``context``: a kubeconfig file a failed wait can read with kubectl (else None);
- ``exports()``: the stack outputs of the cluster layer.

One strategy per ``dynamo:cluster.mode`` (``stacks.config.ClusterSource``): ``RenderSource``, ``KubeconfigSource``,
``StackSource`` (the cluster of a cluster-only stack, through a StackReference) and ``EksSource`` (the EKS cluster this
stack creates). They are plain classes, not components: the resources keep the names and parents (the stack) they
always had, so no URN moves. ``cluster_source(program)`` picks one (``SOURCES``, the shell's one choice by mode name); the
platform layer (device plugins and the Dynamo operator) is one of the program's layers (stacks/layers/platform.py); what
a mode means to the plans is its ``stacks.modes.ClusterMode`` (``program.mode``).
"""

from __future__ import annotations

import datetime

from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime import config as rc

from components.credentials import cluster_storage_classes, credentials_problem, mocked, storage_class_warnings
from stacks.cluster import ClusterPlan, ClusterStackPlan, capacity_shortfall, node_pools
from stacks.config.keys import NS
from stacks.config.stack import EksCluster, KubeconfigCluster, RenderCluster, StackCluster
from stacks.modes import cluster_as
from stacks.cluster.access import check_upgrade_policy
from stacks.config.eks import (
    LiveNodeGroup,
    LiveSubnet,
    check_ami_release,
    check_capacity_block_launch_templates,
    check_cache_zone,
    check_node_groups_for_step,
    check_running_version,
    check_subnet_layout,
    node_group_changes,
)
from stacks.cluster.pools import LAUNCH_TEMPLATE_DIGEST_TAG, POOL_LABEL, launch_template_digest
from stacks.program import ProgramPlan


def _eks_plan(program: ProgramPlan) -> ClusterPlan:
    """The cluster plan of ``mode: eks`` (stacks/modes/eks.py plans the cluster this stack creates)."""
    plan = program.cluster_plan
    assert isinstance(plan, ClusterPlan), "mode eks plans its cluster"
    return plan


def _stack_plan(program: ProgramPlan) -> ClusterStackPlan:
    """The cluster plan of ``mode: stack`` (stacks/modes/stack.py: what the referenced cluster is checked against)."""
    plan = program.cluster_plan
    assert isinstance(plan, ClusterStackPlan), "mode stack plans against the referenced cluster"
    return plan


class ClusterSource:
    """The Kubernetes side of a cluster source (see the module docstring)."""

    provider: k8s.Provider
    kubeconfig_file: Optional[str] = None
    context: Optional[str] = None

    def __init__(self, program: ProgramPlan):
        self.program = program
        self.storage_ready: list = []
        self.gpu_ready: list = []
        self.layers_ready: list = []  # what the optional layers wait for (on EKS the AWS Load Balancer Controller)
        # What cluster-wide DaemonSets and controllers wait for before they install (on EKS the system nodes, where the
        # charts' Deployments run): not the GPU nodes, whose pods a DaemonSet starts as each node joins.
        self.nodes_ready: list = []

    def exports(self) -> dict[str, Any]:
        return {}


class RenderSource(ClusterSource):
    """``mode: render``: YAML written to ``renderDir``; no cluster, so nothing to wait for and no Helm charts."""

    def __init__(self, program: ProgramPlan):
        super().__init__(program)
        self.provider = k8s.Provider("render", render_yaml_to_directory=cluster_as(program.cluster, RenderCluster).render_dir)


class KubeconfigSource(ClusterSource):
    """``mode: kubeconfig``: an existing cluster, from the secret ``dynamo:kubeconfig`` or the kubeconfig file
    (``cluster.kubeconfigPath`` or KUBECONFIG, found by ``stacks.config.kubeconfig_path``), read as a Pulumi secret."""

    def __init__(self, program: ProgramPlan):
        super().__init__(program)
        # The secret's value in this process only, for the check below (never logged; the provider gets it as a secret).
        text, source = rc.get_config(f"{NS}:kubeconfig"), f"{NS}:kubeconfig"
        if text is None:
            path = program.spec.kubeconfig_file
            assert path is not None, "without dynamo:kubeconfig, stacks.config finds the kubeconfig file"
            self.kubeconfig_file = source = path
            with open(path) as f:
                text = f.read()
        self.context = cluster_as(program.cluster, KubeconfigCluster).context
        # A cache claim that can never bind is said now, not when its wait times out minutes later.
        claims = [
            (
                e.key,
                f"{e.plan.dgd['metadata']['namespace']}/{e.plan.claim_name}",
                e.plan.cache_pvc["spec"].get("storageClassName"),
            )
            for e in program.entries
            if e.plan.cache_pvc is not None
        ]
        classes = None if mocked() or not claims else cluster_storage_classes(self.kubeconfig_file, text, self.context)
        # Before any resource, also when nothing would change. A StorageClass list that answered was itself an
        # authenticated read, so the discovery read runs only when there was none or it failed (one kubectl run per
        # program run instead of two; a list refused by RBAC is not a credentials problem, the discovery read decides).
        problem = (
            None
            if mocked() or classes is not None
            else credentials_problem(text, self.context, source, path=self.kubeconfig_file)
        )
        if problem:
            raise pulumi.RunError(problem)
        for warning in storage_class_warnings(claims, classes) if classes is not None else []:
            pulumi.log.warn(warning)
        self.provider = k8s.Provider(
            "cluster", kubeconfig=pulumi.Output.secret(text), context=self.context, enable_secret_mutable=True
        )


class StackSource(ClusterSource):
    """``mode: stack``: the cluster of a cluster-only stack. Its kubeconfig (kept secret), storage class and GPU pools
    are Outputs, so the checks run when they resolve: a storage class other than the claim's fails before the claim,
    a shortfall of the pools before anything GPU-related (the DGDs depend on the check, as on the download's checks)."""

    def __init__(self, program: ProgramPlan):
        super().__init__(program)
        stack = cluster_as(program.cluster, StackCluster).stack
        assert stack is not None, "StackCluster requires cluster.stack"
        self.ref = pulumi.StackReference(stack)
        self.provider = k8s.Provider(
            "cluster", kubeconfig=pulumi.Output.secret(self.ref.require_output("kubeconfig")), enable_secret_mutable=True
        )
        self.storage_ready = [self.ref.require_output("storageClassName").apply(self.check_storage_class)]
        self.gpu_ready = [self.ref.require_output("nodePools").apply(self.check_capacity)]

    def check_storage_class(self, name: str) -> None:
        refs = _stack_plan(self.program)
        if refs.storage_class and name != refs.storage_class:
            raise pulumi.RunError(
                f"{NS}:storage.className: the cache claim asks for {refs.storage_class!r}, but the cluster of "
                f"{refs.stack} has storage class {name!r} (its storageClassName output); set {NS}:storage.className: {name}"
            )

    def check_capacity(self, pools: Any) -> None:
        """The entries as configured, then the autoscaled ones at their maxReplicas (ProgramPlan.autoscaling_shortfall),
        against the referenced pools: both before any DGD."""
        refs = _stack_plan(self.program)
        msg = capacity_shortfall(refs.requirements, pools, refs.stack) or self.program.autoscaling_shortfall(pools)
        if msg:
            raise pulumi.RunError(msg)


class EksSource(ClusterSource):
    """``mode: eks``: the EKS cluster (``components.cluster.EksGpuCluster``), the model cache's StorageClass (EFS) or
    PersistentVolume (FSx for Lustre), the NVIDIA DRA driver for ComputeDomains, and the outputs serving stacks on this
    cluster read (``cluster.mode: stack``)."""

    def __init__(self, program: ProgramPlan):
        import pulumi_aws as aws

        from components.cluster import EksGpuCluster

        super().__init__(program)
        plan, cluster = _eks_plan(program), cluster_as(program.cluster, EksCluster)
        aws_provider = aws.Provider("aws", region=cluster.region)
        # Before any AWS resource: the version the cluster runs, so that a skip or a downgrade is refused now and not by
        # UpdateClusterVersion halfway through the `up`.
        try:
            running = running_cluster_version(plan.name, aws_provider)
            check_running_version(running, plan.kubernetes_version, plan.name)
            if running is not None:
                groups = live_node_groups(plan.name, aws_provider)
                release = plan.system_nodegroup["release_version"]
                check_node_groups_for_step(running, plan.kubernetes_version, groups, plan.name, release=release)
                if running == plan.kubernetes_version:  # after a step the groups move to the new version's releases
                    check_ami_release(groups, release, plan.name)
                for warning in node_group_changes(
                    groups, release, plan.system_nodegroup["disk_size"], plan.system_disk_set, plan.name
                ):
                    pulumi.log.warn(warning)
                digests = {p.name: launch_template_digest(p) for p in plan.gpu_pools if p.capacity != "karpenter"}
                for warning in check_capacity_block_launch_templates(groups, digests, plan.name):
                    pulumi.log.warn(warning)
                check_subnet_layout(
                    live_subnets(plan.name, aws_provider),
                    [*plan.public_subnets, *plan.private_subnets, *([plan.gpu_subnet] if plan.gpu_subnet else [])],
                    plan.name,
                )
                if plan.storage.get("kind") == "fsx-lustre":
                    check_cache_zone(
                        live_cache_zone(plan.name, aws_provider),
                        plan.storage["availability_zone"],
                        cluster.cache_availability_zone is not None,
                        plan.name,
                    )
                check_upgrade_policy(
                    running, (plan.control_plane or {}).get("upgrade_policy", "STANDARD"), datetime.date.today(), plan.name
                )
        except ValueError as e:
            raise pulumi.RunError(str(e)) from None
        self.eks = eks = EksGpuCluster("cluster", plan, opts=pulumi.ResourceOptions(provider=aws_provider))
        self.provider = k8s.Provider(
            "eks",
            kubeconfig=eks.kubeconfig,
            enable_secret_mutable=True,
            opts=pulumi.ResourceOptions(depends_on=list(eks.access_policies)),
        )
        sc = plan.storage_class
        storage: pulumi.CustomResource
        if sc:  # EFS: access points provisioned per claim
            storage = k8s.storage.v1.StorageClass(
                "model-cache",
                metadata=sc["metadata"],
                provisioner=sc["provisioner"],
                parameters=eks.storage_parameters,
                reclaim_policy=sc["reclaimPolicy"],
                volume_binding_mode=sc["volumeBindingMode"],
                opts=pulumi.ResourceOptions(provider=self.provider, depends_on=[*eks.addons, *eks.mount_targets]),
            )
        else:  # FSx for Lustre: the stack's file system, bound statically to the cache claim
            static_pv, pv_source = plan.static_pv, eks.static_pv_source
            assert static_pv is not None and pv_source is not None, "an FSx cache has its static PersistentVolume"
            storage = k8s.core.v1.PersistentVolume(
                "model-cache",
                metadata=static_pv["metadata"],
                spec=pv_source.apply(self._pv_spec),
                opts=pulumi.ResourceOptions(provider=self.provider, depends_on=eks.addons, retain_on_delete=plan.protect_cache),
            )
        # The download starts as soon as storage and the system nodes exist, in parallel with the GPU node group.
        self.storage_ready = [storage, eks.system_nodes]
        self.nodes_ready = [eks.system_nodes]
        self.gpu_ready = (
            list(eks.gpu_node_groups) + eks.karpenter_node_pools
        )  # Karpenter pools: their NodePools exist before the DGDs
        # the front door's Service becomes an NLB only once the controller (and its webhook) runs
        self.layers_ready = [eks.load_balancer_controller] if eks.load_balancer_controller else []

    def _pv_spec(self, csi: dict) -> dict:
        static_pv = _eks_plan(self.program).static_pv
        assert static_pv is not None, "an FSx cache has its static PersistentVolume"
        return {**static_pv["spec"], "csi": csi}

    def exports(self) -> dict[str, Any]:
        plan = _eks_plan(self.program)
        out = {
            "clusterName": self.eks.cluster_name,
            "kubeconfig": self.eks.kubeconfig,
            # What a serving stack on this cluster reads (cluster.mode: stack): the GPU pools and the cache storage class.
            "nodePools": node_pools(plan),
            "storageClassName": plan.cache_class_name,
            "region": plan.region,
            # The next `up` that changes the version sets dynamo:cluster.currentKubernetesVersion to this (one minor step at a time).
            "kubernetesVersion": plan.kubernetes_version,
        }
        if self.program.serving is None:  # a cluster-only stack has no serving commands to follow; the kubeconfig one still helps
            out["followKubeconfig"] = f"aws eks update-kubeconfig --region {plan.region} --name {plan.name}"
        return out


# The provider's answer when DescribeCluster finds no cluster of that name: terraform-provider-aws
# internal/service/eks (findClusterByName turns ResourceNotFoundException, and a ClientException "No cluster found for
# name:", into a retry.NotFoundError, whose message is "couldn't find resource"; the data source reports
# "reading EKS Cluster (<name>): couldn't find resource").
CLUSTER_NOT_FOUND = "couldn't find resource"


def running_cluster_version(name: str, provider: pulumi.ProviderResource) -> Optional[str]:
    """The Kubernetes version EKS cluster ``name`` runs (``aws.eks.get_cluster``, a synchronous invoke through the
    stack's AWS provider), or None when there is no such cluster yet. Any other failure (credentials, throttling, a
    Region without EKS) is raised: the version jump it would hide is what this lookup is for."""
    import pulumi_aws as aws

    try:
        found = aws.eks.get_cluster(name=name, opts=pulumi.InvokeOptions(provider=provider))
    except Exception as e:  # the SDK raises a plain Exception carrying the provider's message
        if CLUSTER_NOT_FOUND in str(e):
            return None
        raise pulumi.RunError(
            f"could not read EKS cluster {name!r} to check {NS}:cluster.kubernetesVersion against the version it runs: {e}"
        ) from None
    return str(found.version)


def live_node_groups(cluster: str, provider: pulumi.ProviderResource) -> list[LiveNodeGroup]:
    """The cluster's managed node groups as EKS reports them (ListNodegroups, then DescribeNodegroup for each, through
    ``aws.eks.get_node_groups`` / ``get_node_group``). A failed lookup stops the `up`: a control-plane step is exactly
    what it guards."""
    import pulumi_aws as aws

    opts = pulumi.InvokeOptions(provider=provider)
    try:
        out = []
        for ng in sorted(aws.eks.get_node_groups(cluster_name=cluster, opts=opts).names or []):
            found = aws.eks.get_node_group(cluster_name=cluster, node_group_name=ng, opts=opts)
            desired = sum(int(sc.desired_size) for sc in (found.scaling_configs or []))
            out.append(
                LiveNodeGroup(
                    ng,
                    str(found.version),
                    str(found.capacity_type),
                    desired,
                    release_version=str(found.release_version) if found.release_version else None,
                    disk_size=int(found.disk_size) if found.disk_size else None,
                    pool=(found.labels or {}).get(POOL_LABEL),
                    launch_template_digest=(found.tags or {}).get(LAUNCH_TEMPLATE_DIGEST_TAG),
                )
            )
        return out
    except Exception as e:
        raise pulumi.RunError(
            f"could not read the node groups of EKS cluster {cluster!r} to check {NS}:cluster.kubernetesVersion against them: {e}"
        ) from None


CLUSTER_TAG = "dynamo.nvidia.com/cluster"  # every AWS resource of the cluster carries it (components.cluster)
CACHE_SG_DESCRIPTION = "model cache from the VPC"  # the cache's security group (components.cluster)


def live_subnets(cluster: str, provider: pulumi.ProviderResource) -> list[LiveSubnet]:
    """The subnets the stack made for the cluster (tagged with it), as EC2 reports them (``aws.ec2.get_subnets`` by tag,
    then ``get_subnet``). A failed lookup stops the `up`: a re-cut it would hide replaces every subnet."""
    import pulumi_aws as aws

    opts = pulumi.InvokeOptions(provider=provider)
    try:
        ids = aws.ec2.get_subnets(filters=[{"name": f"tag:{CLUSTER_TAG}", "values": [cluster]}], opts=opts).ids or []
        return [
            LiveSubnet(i, str(sn.availability_zone), str(sn.cidr_block))
            for i in sorted(ids)
            for sn in [aws.ec2.get_subnet(id=i, opts=opts)]
        ]
    except Exception as e:
        raise pulumi.RunError(
            f"could not read the subnets of EKS cluster {cluster!r} to check the zones against them: {e}"
        ) from None


def live_cache_zone(cluster: str, provider: pulumi.ProviderResource) -> Optional[str]:
    """The zone of the cluster's FSx for Lustre cache: the zone of a network interface in the cache's security group
    (the file system's own interfaces; ``aws.ec2.get_security_groups`` by tag and description, then
    ``get_network_interfaces`` / ``get_network_interface``). None when there is no cache yet."""
    import pulumi_aws as aws

    opts = pulumi.InvokeOptions(provider=provider)
    try:
        sgs = (
            aws.ec2.get_security_groups(
                filters=[
                    {"name": f"tag:{CLUSTER_TAG}", "values": [cluster]},
                    {"name": "description", "values": [CACHE_SG_DESCRIPTION]},
                ],
                opts=opts,
            ).ids
            or []
        )
        if not sgs:
            return None
        enis = aws.ec2.get_network_interfaces(filters=[{"name": "group-id", "values": sorted(sgs)}], opts=opts).ids or []
        return str(aws.ec2.get_network_interface(id=sorted(enis)[0], opts=opts).availability_zone) if enis else None
    except Exception as e:
        raise pulumi.RunError(
            f"could not read where the model cache of EKS cluster {cluster!r} is, to check "
            f"{NS}:cluster.cacheAvailabilityZone against it: {e}"
        ) from None


SOURCES = {"render": RenderSource, "kubeconfig": KubeconfigSource, "stack": StackSource, "eks": EksSource}


def cluster_source(program: ProgramPlan) -> ClusterSource:
    """The mode's cluster source. The platform layer (device plugins, the Dynamo operator) is a layer of the program
    (stacks/layers/platform.py), created before the serving objects (components/layer.py ``create_layers``)."""
    return SOURCES[program.cluster.mode](program)
