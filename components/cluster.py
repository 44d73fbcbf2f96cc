"""EKS cluster with a system node group and one GPU node group per pool, EFA, placement and capacity options, model-cache storage.

Thin shell over ``stacks.cluster.build_cluster_plan``: every setting comes from the plan.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
import pulumi_aws as aws

from stacks.cluster import ClusterPlan
from stacks.cluster.access import ENCRYPTED_RESOURCES, secrets_key_policy
from stacks.cluster.pools import LAUNCH_TEMPLATE_DIGEST_TAG, GpuPool, launch_template_digest, update_timeout_minutes
from stacks.cluster.storage import efs_class_parameters, efs_file_system_policy, fsx_volume_source
from stacks.cluster.karpenter import (
    DISCOVERY_TAG,
    SERVICE_ACCOUNT as KARPENTER_SERVICE_ACCOUNT,
    KarpenterPlan,
    controller_policy_values,
    fill,
)
from stacks.cluster.load_balancer import LoadBalancerControllerPlan

ASSUME_EKS = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"]}
        ],
    }
)
ASSUME_EC2 = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}],
    }
)
ASSUME_POD_IDENTITY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }
)


def kubeconfig_for(
    name: pulumi.Input[str], endpoint: pulumi.Input[str], ca: pulumi.Input[str], region: str
) -> pulumi.Output[str]:
    return pulumi.Output.all(name, endpoint, ca).apply(
        lambda a: json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": a[0], "cluster": {"server": a[1], "certificate-authority-data": a[2]}}],
                "contexts": [{"name": a[0], "context": {"cluster": a[0], "user": a[0]}}],
                "current-context": a[0],
                "users": [
                    {
                        "name": a[0],
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1beta1",
                                "command": "aws",
                                "args": ["eks", "get-token", "--cluster-name", a[0], "--region", region],
                            }
                        },
                    }
                ],
            }
        )
    )


class EksGpuCluster(pulumi.ComponentResource):
    """VPC, EKS control plane, add-ons, system and GPU node groups, and the model-cache file system.

    Each step below creates one part, in the order the engine registers them; every setting, rule and policy comes
    from the plan (stacks/cluster)."""

    cluster_name: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    storage_class_name: pulumi.Output[str]

    def __init__(self, name: str, plan: ClusterPlan, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("dynamo:cluster:EksGpuCluster", name, None, opts)
        self._network(name, plan)
        self._control_plane(name, plan)
        self._api_access(name, plan)
        node_role, node_policies = self._node_role(name, plan)
        self.addons = [self._addon(name, plan, addon, []) for addon in plan.addons_before_nodes]
        self.addons_before_nodes = list(self.addons)  # the CNI and the Pod Identity agent: what any pod needs first
        cache_sg, efa_sg = self._security_groups(name, plan)
        node_deps = pulumi.ResourceOptions(parent=self, depends_on=[*node_policies, *self.addons])
        self._system_nodes(name, plan, node_role, node_deps)
        self._gpu_node_groups(name, plan, node_role, node_deps, efa_sg)
        # the other add-ons, once the system nodes run their pods
        self.addons += [self._addon(name, plan, addon, [self.system_nodes]) for addon in plan.addons_after_nodes]
        self._cache_file_system(name, plan, cache_sg)
        self._outputs(plan)
        # Karpenter (GPU pools with capacity: karpenter): after the kubeconfig, which its Helm release and objects use
        self.karpenter_node_pools: list[pulumi.Resource] = []
        if plan.karpenter:
            self._karpenter(name, plan, plan.karpenter)
        # the AWS Load Balancer Controller, when the front door has a load balancer
        self.load_balancer_controller: Optional[pulumi.Resource] = None
        if plan.load_balancer_controller:
            self._load_balancer_controller(name, plan, plan.load_balancer_controller)
        self.register_outputs(
            {"clusterName": self.cluster_name, "kubeconfig": self.kubeconfig, "storageClassName": self.storage_class_name}
        )

    def _child(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self)

    def _kept(self, plan: ClusterPlan) -> pulumi.ResourceOptions:
        """Options of what a protected FSx cache's network keeps (``ClusterPlan.keep_network``)."""
        return pulumi.ResourceOptions(parent=self, retain_on_delete=plan.keep_network)

    # ---- network

    def _network(self, name: str, plan: ClusterPlan) -> None:
        """The VPC and everything in it: subnets, gateways, route tables and VPC endpoints (``plan.network``)."""
        self.vpc = aws.ec2.Vpc(f"{name}-vpc", **plan.vpc, tags={**plan.tags, "Name": plan.name}, opts=self._kept(plan))
        self._public_subnets(name, plan)
        private_rts = self._nat_gateways(name, plan)
        self._private_subnets(name, plan, private_rts)
        self._vpc_endpoints(name, plan, private_rts)
        for w in plan.network["warnings"]:
            pulumi.log.warn(w, resource=self)

    def _public_subnets(self, name: str, plan: ClusterPlan) -> None:
        """The internet gateway, the public route table and one public subnet per zone."""
        child, tags = self._child(), plan.tags
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, tags=tags, opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public",
            vpc_id=self.vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
            tags=tags,
            opts=child,
        )
        self.public_subnets: list[aws.ec2.Subnet] = []
        for i, s in enumerate(plan.public_subnets):
            sn = aws.ec2.Subnet(
                f"{name}-public-{i}",
                vpc_id=self.vpc.id,
                map_public_ip_on_launch=True,
                **s,
                tags={**tags, "kubernetes.io/role/elb": "1"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(f"{name}-public-{i}", subnet_id=sn.id, route_table_id=public_rt.id, opts=child)
            self.public_subnets.append(sn)

    def _nat_gateways(self, name: str, plan: ClusterPlan) -> dict[str, aws.ec2.RouteTable]:
        """A NAT gateway in each of ``nat_zones`` (the first zone, or every zone) and one private route table per NAT;
        returns the route tables by zone. The first keeps the single-NAT names ({name}-nat, {name}-private), so the
        default layout's URNs do not change."""
        child, tags = self._child(), plan.tags
        public_by_zone = {s["availability_zone"]: sn for s, sn in zip(plan.public_subnets, self.public_subnets)}
        private_rts = {}
        for j, zone in enumerate(plan.network["nat_zones"]):
            sfx = "" if j == 0 else f"-{j}"
            eip = aws.ec2.Eip(f"{name}-nat{sfx}", domain="vpc", tags=tags, opts=child)
            nat = aws.ec2.NatGateway(
                f"{name}-nat{sfx}", subnet_id=public_by_zone[zone].id, allocation_id=eip.id, tags=tags, opts=child
            )
            private_rts[zone] = aws.ec2.RouteTable(
                f"{name}-private{sfx}",
                vpc_id=self.vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                tags=tags,
                opts=child,
            )
        return private_rts

    def _private_subnets(self, name: str, plan: ClusterPlan, private_rts: dict[str, aws.ec2.RouteTable]) -> None:
        """The EKS cluster's private subnets, each on its zone's NAT (or the first one's), and the GPU Local Zone subnet
        (GB200 UltraServers), for the GPU node group only: never an EKS cluster subnet. A protected FSx cache keeps the
        subnet it sits in."""
        child, tags, discovery = self._child(), plan.tags, plan.discovery_tags
        private_rt = private_rts[plan.network["nat_zones"][0]]
        cache_zone = plan.storage.get("availability_zone")
        self.private_subnets: dict[str, aws.ec2.Subnet] = {}
        for i, s in enumerate(plan.private_subnets):
            keep = plan.keep_network and s["availability_zone"] == cache_zone
            sn = aws.ec2.Subnet(
                f"{name}-private-{i}",
                vpc_id=self.vpc.id,
                **s,
                tags={**tags, "kubernetes.io/role/internal-elb": "1", **discovery},
                opts=self._kept(plan) if keep else child,
            )
            rt = private_rts.get(s["availability_zone"], private_rt)
            aws.ec2.RouteTableAssociation(f"{name}-private-{i}", subnet_id=sn.id, route_table_id=rt.id, opts=child)
            self.private_subnets[s["availability_zone"]] = sn
        self.gpu_subnet: Optional[aws.ec2.Subnet] = None
        self.node_subnets = dict(self.private_subnets)  # zone -> the subnet a GPU node group of that zone uses
        if plan.gpu_subnet:
            self.gpu_subnet = aws.ec2.Subnet(
                f"{name}-gpu-local-zone", vpc_id=self.vpc.id, **plan.gpu_subnet, tags={**tags, **discovery}, opts=child
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-gpu-local-zone", subnet_id=self.gpu_subnet.id, route_table_id=private_rt.id, opts=child
            )
            self.node_subnets[plan.gpu_subnet["availability_zone"]] = self.gpu_subnet

    def _vpc_endpoints(self, name: str, plan: ClusterPlan, private_rts: dict[str, aws.ec2.RouteTable]) -> None:
        """The S3 gateway endpoint on every private route table (S3 traffic, ECR image layers included, leaves the NAT's
        per-GB charge; no charge of its own) and the ECR interface endpoints (ecr.api, ecr.dkr) in every zone's private
        subnet, behind their own security group."""
        child, tags, net = self._child(), plan.tags, plan.network
        self.vpc_endpoints: list[aws.ec2.VpcEndpoint] = []
        if net["s3_gateway_endpoint"]:
            self.vpc_endpoints.append(
                aws.ec2.VpcEndpoint(
                    f"{name}-s3",
                    vpc_id=self.vpc.id,
                    service_name=f"com.amazonaws.{plan.region}.s3",
                    vpc_endpoint_type="Gateway",
                    route_table_ids=[rt.id for rt in private_rts.values()],
                    tags=tags,
                    opts=child,
                )
            )
        if not net["interface_endpoints"]:
            return
        rules = net["endpoint_security_group"]
        endpoint_sg = aws.ec2.SecurityGroup(
            f"{name}-endpoints",
            vpc_id=self.vpc.id,
            description="VPC interface endpoints: HTTPS from the VPC",
            ingress=rules["ingress"],
            egress=rules["egress"],
            tags=tags,
            opts=child,
        )
        for svc in net["interface_endpoints"]:
            self.vpc_endpoints.append(
                aws.ec2.VpcEndpoint(
                    f"{name}-{svc.replace('.', '-')}",
                    vpc_id=self.vpc.id,
                    service_name=f"com.amazonaws.{plan.region}.{svc}",
                    vpc_endpoint_type="Interface",
                    private_dns_enabled=True,
                    subnet_ids=[sn.id for sn in self.private_subnets.values()],
                    security_group_ids=[endpoint_sg.id],
                    tags=tags,
                    opts=child,
                )
            )

    # ---- control plane

    def _control_plane(self, name: str, plan: ClusterPlan) -> None:
        """The cluster role, the Secrets key and the log group (``plan.control_plane``), then the EKS cluster."""
        child, cp, net, access = self._child(), plan.control_plane, plan.network, plan.access
        cluster_role = aws.iam.Role(f"{name}-cluster", assume_role_policy=ASSUME_EKS, opts=child)
        cluster_deps: list[pulumi.Resource] = [
            aws.iam.RolePolicyAttachment(
                f"{name}-cluster", role=cluster_role.name, policy_arn=plan.cluster_policy_arn, opts=child
            )
        ]
        cluster_deps += self._secrets_key(name, plan, cluster_role)
        cluster_deps += self._log_group(name, plan, cluster_role)
        self.cluster = aws.eks.Cluster(
            f"{name}-eks",
            name=plan.name,
            version=plan.kubernetes_version,
            role_arn=cluster_role.arn,
            vpc_config={
                "subnet_ids": [sn.id for sn in self.private_subnets.values()] + [sn.id for sn in self.public_subnets],
                **net["api_endpoint"],
            },
            access_config={
                "authentication_mode": access["authentication_mode"],
                "bootstrap_cluster_creator_admin_permissions": access["bootstrap_creator_admin"],
            },
            encryption_config={"provider": {"key_arn": self.secrets_key.arn}, "resources": list(ENCRYPTED_RESOURCES)}
            if self.secrets_key
            else None,
            enabled_cluster_log_types=cp["logs"]["types"] if cp["logs"] else None,
            upgrade_policy={"support_type": cp["upgrade_policy"]},  # always sent: the API's default is EXTENDED
            tags=plan.tags,
            # The bootstrap flag acts only on CreateCluster and the provider replaces the cluster when it changes
            # (stacks.cluster.access_plan): an existing cluster keeps the value it was created with.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=cluster_deps, ignore_changes=["accessConfig.bootstrapClusterCreatorAdminPermissions"]
            ),
        )
        for w in [*access["warnings"], *cp["support_warnings"]]:
            pulumi.log.warn(w, resource=self)

    def _secrets_key(self, name: str, plan: ClusterPlan, cluster_role: aws.iam.Role) -> list[pulumi.Resource]:
        """Secrets envelope encryption: the KMS key and the cluster role's use of it, which the cluster waits for."""
        self.secrets_key: Optional[aws.kms.Key] = None
        if not plan.control_plane["secrets_encryption"]:
            return []
        child = self._child()
        self.secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"{plan.name}: envelope encryption of Kubernetes Secrets",
            enable_key_rotation=True,
            tags=plan.tags,
            opts=child,
        )
        return [
            aws.iam.RolePolicy(
                f"{name}-cluster-secrets-key",
                role=cluster_role.id,
                policy=self.secrets_key.arn.apply(lambda arn: json.dumps(secrets_key_policy(arn))),
                opts=child,
            )
        ]

    def _log_group(self, name: str, plan: ClusterPlan, cluster_role: aws.iam.Role) -> list[pulumi.Resource]:
        """The control-plane log group with its retention, which the cluster waits for, and the cluster role's denial of
        re-creating it."""
        self.log_group: Optional[aws.cloudwatch.LogGroup] = None
        logs = plan.control_plane["logs"]
        if not logs:
            return []
        child = self._child()
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=logs["log_group"],
            retention_in_days=logs["retention_in_days"],
            tags=plan.tags,
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-cluster-no-log-group", role=cluster_role.id, policy=json.dumps(logs["cluster_role_policy"]), opts=child
        )
        return [self.log_group]

    def _api_access(self, name: str, plan: ClusterPlan) -> None:
        """Who reaches the Kubernetes API: the networks a private endpoint admits on 443 (the cluster security group's
        rules) and the access entries with their policy associations (``plan.access``)."""
        child = self._child()
        self.endpoint_ingress = [
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-{r['name']}",
                security_group_id=self.cluster.vpc_config.cluster_security_group_id,
                **{k: v for k, v in r.items() if k != "name"},
                tags=plan.tags,
                opts=child,
            )
            for r in plan.network["api_ingress"]
        ]
        self.access_entries: list[aws.eks.AccessEntry] = []
        self.access_policies: list[aws.eks.AccessPolicyAssociation] = []
        for e in plan.access["entries"]:
            entry = aws.eks.AccessEntry(
                f"{name}-{e['name']}", cluster_name=self.cluster.name, principal_arn=e["principal_arn"], opts=child
            )
            self.access_entries.append(entry)
            self.access_policies.append(
                aws.eks.AccessPolicyAssociation(
                    f"{name}-{e['name']}",
                    cluster_name=self.cluster.name,
                    principal_arn=e["principal_arn"],
                    policy_arn=e["policy_arn"],
                    access_scope=e["access_scope"],
                    # EKS keys an association by (principal, policy): a create-first replacement would be undone by the
                    # old one's delete (tests/aws_rules/updates.py access_policy_association_is_replaced_delete_first)
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[entry], delete_before_replace=True),
                )
            )

    # ---- nodes

    def _node_role(self, name: str, plan: ClusterPlan) -> tuple[aws.iam.Role, list[aws.iam.RolePolicyAttachment]]:
        """The managed node groups' role, holding only what a kubelet needs (stacks/cluster/identity.py)."""
        child = self._child()
        role = aws.iam.Role(f"{name}-node", assume_role_policy=ASSUME_EC2, opts=child)
        return role, [
            aws.iam.RolePolicyAttachment(f"{name}-node-{p}", role=role.name, policy_arn=arn, opts=child)
            for p, arn in plan.node_policy_arns.items()
        ]

    def _security_groups(self, name: str, plan: ClusterPlan) -> tuple[aws.ec2.SecurityGroup, aws.ec2.SecurityGroup]:
        """The model cache's security group, then the EFA group on every GPU node's interfaces, which admits Lustre
        traffic from it (stacks.cluster.network: ``{"self": True}`` is the EFA group, ``{"from_cache": True}`` the
        cache's)."""
        net = plan.network
        cache = net["cache_security_group"]
        cache_sg = aws.ec2.SecurityGroup(
            f"{name}-cache",
            vpc_id=self.vpc.id,
            description="model cache from the VPC",
            ingress=cache["ingress"],
            egress=cache["egress"],
            tags=plan.tags,
            opts=self._kept(plan),
        )

        def rule(r: dict) -> Any:  # a pulumi-aws ingress/egress rule dict
            r = dict(r)
            if r.pop("from_cache", False):
                r["security_groups"] = [cache_sg.id]
            return r

        efa = net["efa_security_group"]
        efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa",
            vpc_id=self.vpc.id,
            description="EFA: all traffic to and from itself; cluster traffic",
            ingress=[rule(r) for r in efa["ingress"]],
            egress=[rule(r) for r in efa["egress"]],
            tags={**plan.tags, **plan.discovery_tags},
            opts=self._child(),
        )
        return cache_sg, efa_sg

    def _system_nodes(self, name: str, plan: ClusterPlan, node_role: aws.iam.Role, node_deps: pulumi.ResourceOptions) -> None:
        """The system node group, in the private subnets. EKS cannot change a group's disk (the provider replaces the
        group): a running group keeps its disk unless dynamo:cluster.systemDiskGib asks for another
        (stacks.config.eks.node_group_changes says so at preview)."""
        self.system_nodes = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=self.cluster.name,
            node_role_arn=node_role.arn,
            subnet_ids=[sn.id for sn in self.private_subnets.values()],
            **plan.system_nodegroup,
            tags=plan.tags,
            opts=node_deps
            if plan.system_disk_set
            else pulumi.ResourceOptions.merge(node_deps, pulumi.ResourceOptions(ignore_changes=["diskSize"])),
        )

    def _gpu_node_groups(
        self,
        name: str,
        plan: ClusterPlan,
        node_role: aws.iam.Role,
        node_deps: pulumi.ResourceOptions,
        efa_sg: aws.ec2.SecurityGroup,
    ) -> None:
        """One GPU node group per pool (cluster.gpuPools) that is not on Karpenter (a NodePool launches those nodes: no
        node group, launch template or placement group). The first keeps the single-target names (cluster-gpu), the
        others carry their GPU (cluster-gpu-b200)."""
        self.gpu_node_groups: list[aws.eks.NodeGroup] = []
        self.launch_templates: list[aws.ec2.LaunchTemplate] = []
        self.placement_groups: list[aws.ec2.PlacementGroup] = []
        for pool in plan.gpu_pools:
            if pool.capacity != "karpenter":
                self._gpu_node_group(name, plan, pool, node_role, node_deps, efa_sg)
        self.gpu_nodes = self.gpu_node_groups[0] if self.gpu_node_groups else None
        self.launch_template = self.launch_templates[0] if self.launch_templates else None
        self.placement_group = self.placement_groups[0] if plan.gpu_pools[0].placement_group and self.placement_groups else None

    def _gpu_node_group(
        self,
        name: str,
        plan: ClusterPlan,
        pool: GpuPool,
        node_role: aws.iam.Role,
        node_deps: pulumi.ResourceOptions,
        efa_sg: aws.ec2.SecurityGroup,
    ) -> None:
        """A pool's placement group (when it has one), its launch template (every interface in the EFA and the cluster
        security groups) and its managed node group."""
        child, tags = self._child(), plan.tags
        rname = f"{name}-{pool.name}"
        lt_args = dict(pool.launch_template)
        lt_args["network_interfaces"] = [
            {**ni, "security_groups": [efa_sg.id, self.cluster.vpc_config.cluster_security_group_id]}
            for ni in pool.launch_template["network_interfaces"]
        ]
        if pool.placement_group:
            pg = aws.ec2.PlacementGroup(rname, **pool.placement_group, tags=tags, opts=child)
            self.placement_groups.append(pg)
            lt_args["placement"] = {"group_name": pg.name}
        lt = aws.ec2.LaunchTemplate(rname, **lt_args, tags=tags, opts=child)
        self.launch_templates.append(lt)
        gpu = dict(pool.nodegroup)
        zone = gpu.pop("availability_zone")
        # The program owns the desired size (stacks.cluster.scaling_config): no ignoreChanges, so a resize sends the
        # new min, desired and max together and EKS accepts it; with the desired size ignored, the old one went with
        # the new bounds and EKS refused ("Minimum capacity N can't be greater than desired size M").
        self.gpu_node_groups.append(
            aws.eks.NodeGroup(
                rname,
                cluster_name=self.cluster.name,
                node_role_arn=node_role.arn,
                subnet_ids=[self.node_subnets[zone].id],
                launch_template={"id": lt.id, "version": lt.latest_version.apply(str)},
                **gpu,
                # what its launch template is made of, which `up` reads back from a running Capacity Block group
                tags={**tags, LAUNCH_TEMPLATE_DIGEST_TAG: launch_template_digest(pool)},
                opts=pulumi.ResourceOptions.merge(
                    node_deps,
                    pulumi.ResourceOptions(
                        custom_timeouts=pulumi.CustomTimeouts(
                            update=f"{update_timeout_minutes(gpu['scaling_config']['max_size'])}m"
                        )
                    ),
                ),
            )
        )

    # ---- model-cache file system

    def _cache_file_system(self, name: str, plan: ClusterPlan, cache_sg: aws.ec2.SecurityGroup) -> None:
        """The model cache's file system, kept when dynamo:storage.protect keeps the claim on it: EFS (with what the
        cache StorageClass needs) or FSx for Lustre (with what the static PersistentVolume needs)."""
        self.storage_parameters: Optional[pulumi.Output] = None
        self.static_pv_source: Optional[pulumi.Output] = None
        self.file_system: aws.efs.FileSystem | aws.fsx.LustreFileSystem
        self.mount_targets: list[aws.efs.MountTarget] = []
        if plan.storage["kind"] == "efs":
            self._efs(name, plan, cache_sg)
        else:
            self._fsx(name, plan, cache_sg)

    def _efs(self, name: str, plan: ClusterPlan, cache_sg: aws.ec2.SecurityGroup) -> None:
        """The EFS file system, its TLS-only policy (kept with it when it is kept) and a mount target per private subnet."""
        fs_opts = pulumi.ResourceOptions(parent=self, retain_on_delete=plan.protect_cache)
        self.file_system = aws.efs.FileSystem(
            f"{name}-cache", **plan.file_system_args, tags={**plan.tags, "Name": f"{plan.name}-model-cache"}, opts=fs_opts
        )
        self.file_system_policy = aws.efs.FileSystemPolicy(
            f"{name}-cache-policy",
            file_system_id=self.file_system.id,
            policy=self.file_system.arn.apply(lambda arn: json.dumps(efs_file_system_policy(arn))),
            opts=fs_opts,
        )
        self.mount_targets += [
            aws.efs.MountTarget(
                f"{name}-cache-{i}",
                file_system_id=self.file_system.id,
                subnet_id=sn.id,
                security_groups=[cache_sg.id],
                opts=self._child(),
            )
            for i, sn in enumerate(self.private_subnets.values())
        ]
        self.storage_parameters = self.file_system.id.apply(efs_class_parameters)

    def _fsx(self, name: str, plan: ClusterPlan, cache_sg: aws.ec2.SecurityGroup) -> None:
        """The FSx for Lustre file system, in its zone's private subnet."""
        fs_opts = pulumi.ResourceOptions(parent=self, retain_on_delete=plan.protect_cache)
        # pulumi-aws 7.x: subnet_ids is one subnet id (a string): FSx for Lustre lives in one subnet.
        fs = aws.fsx.LustreFileSystem(
            f"{name}-cache",
            subnet_ids=self.private_subnets[plan.storage["availability_zone"]].id,
            security_group_ids=[cache_sg.id],
            **plan.file_system_args,
            tags={**plan.tags, "Name": f"{plan.name}-model-cache"},
            opts=fs_opts,
        )
        self.file_system = fs
        self.static_pv_source = pulumi.Output.all(fs.id, fs.dns_name, fs.mount_name).apply(lambda a: fsx_volume_source(*a))

    def _outputs(self, plan: ClusterPlan) -> None:
        """The component's outputs. Everything that uses the kubeconfig waits for the access entries: with accessEntries
        set the identity that runs `up` reaches the Kubernetes API through its own entry, not through the creator's
        bootstrap admin. The wait is an ordering (``provider_opts``: depends_on the associations), not data: an
        association replaced delete-first makes the engine re-diff what takes data from it with that data unknown, and a
        Kubernetes provider whose kubeconfig is unknown is replaced, with every object it manages."""
        self.cluster_name = self.cluster.name
        self.kubeconfig = pulumi.Output.secret(
            kubeconfig_for(self.cluster.name, self.cluster.endpoint, self.cluster.certificate_authority.data, plan.region)
        )
        self.storage_class_name = pulumi.Output.from_input(plan.cache_class_name)

    # ---- add-ons and controllers

    def _load_balancer_controller(self, name: str, plan: ClusterPlan, lb: LoadBalancerControllerPlan) -> None:
        """stacks/cluster/load_balancer.py: its role through EKS Pod Identity with the upstream policy, then the chart
        (region and VPC in its values: no instance metadata needed)."""
        import pulumi_kubernetes as k8s

        child, tags = self._child(), plan.tags
        # A running cluster keeps the name its role was created with (stacks.cluster.identity.role_name).
        keep_name = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["name"]))
        role = aws.iam.Role(
            f"{name}-lb-controller", name=lb.role_name, assume_role_policy=ASSUME_POD_IDENTITY, tags=tags, opts=keep_name
        )
        policy = aws.iam.Policy(f"{name}-lb-controller", policy=json.dumps(lb.policy), tags=tags, opts=child)
        attach = aws.iam.RolePolicyAttachment(f"{name}-lb-controller", role=role.name, policy_arn=policy.arn, opts=child)
        assoc = aws.eks.PodIdentityAssociation(
            f"{name}-lb-controller",
            cluster_name=self.cluster.name,
            namespace=lb.helm.namespace,
            service_account=lb.service_account,
            role_arn=role.arn,
            opts=child,
        )
        provider = k8s.Provider(f"{name}-lb-controller", kubeconfig=self.kubeconfig, opts=self.provider_opts())
        spec = lb.helm
        self.load_balancer_controller = k8s.helm.v3.Release(
            f"{name}-lb-controller",
            name=spec.name,
            chart=spec.chart,
            version=spec.version,
            namespace=spec.namespace,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=spec.repo),
            values={**spec.values, "vpcId": self.vpc.id},
            timeout=900,
            opts=pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=[self.system_nodes, assoc, attach, *self.addons]
            ),
        )

    def provider_opts(self, **kw: Any) -> pulumi.ResourceOptions:
        """Options of a Kubernetes provider on this cluster: after the access entries' policy associations (an ordering
        only; see ``_outputs``)."""
        return pulumi.ResourceOptions(parent=kw.pop("parent", self), depends_on=list(self.access_policies), **kw)

    def _addon(self, name: str, plan: ClusterPlan, addon: str, after: list[pulumi.Resource]) -> aws.eks.Addon:
        """One EKS add-on at its pinned version, with its own Pod Identity role when it calls AWS and its configuration
        values (stacks/cluster/identity.py)."""
        child = self._child()
        assoc: Any = None  # the add-on's pod_identity_associations
        if addon in plan.addon_roles:
            sa, policy_arn = plan.addon_roles[addon]
            role = aws.iam.Role(f"{name}-{addon}", assume_role_policy=ASSUME_POD_IDENTITY, opts=child)
            aws.iam.RolePolicyAttachment(f"{name}-{addon}", role=role.name, policy_arn=policy_arn, opts=child)
            assoc = [{"role_arn": role.arn, "service_account": sa}]
        config = plan.addon_configuration.get(addon)
        return aws.eks.Addon(
            f"{name}-{addon}",
            cluster_name=self.cluster.name,
            addon_name=addon,
            addon_version=plan.addon_versions.get(addon),
            pod_identity_associations=assoc,
            configuration_values=json.dumps(config, sort_keys=True) if config else None,
            # a pinned-version bump is an UpdateAddon; the program owns these add-ons' settings (EKS API UpdateAddon resolveConflicts)
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(parent=self, depends_on=after),
        )

    # ---- Karpenter

    def _karpenter(self, name: str, plan: ClusterPlan, kp: KarpenterPlan) -> None:
        """Karpenter for the Karpenter pools (stacks/cluster/karpenter.py): the node role and its access entry, the
        discovery tag on the cluster security group, the interruption queue, the controller role, the charts, then each
        pool's EC2NodeClass and NodePool, then the pools' capacity placeholders."""
        import pulumi_kubernetes as k8s

        node_role, access = self._karpenter_node_role(name, plan, kp)
        # The cluster security group (EKS creates it; the node groups' launch templates name it) and the EFA group both
        # carry the discovery tag the EC2NodeClass selects on.
        cluster_sg_tag = aws.ec2.Tag(
            f"{name}-cluster-sg-discovery",
            resource_id=self.cluster.vpc_config.cluster_security_group_id,
            key=DISCOVERY_TAG,
            value=plan.name,
            opts=self._child(),
        )
        queue, rules = self._karpenter_interruption_queue(name, plan, kp)
        assoc, attach = self._karpenter_controller_role(name, plan, kp, queue, node_role)
        provider = k8s.Provider(f"{name}-karpenter", kubeconfig=self.kubeconfig, opts=self.provider_opts())
        release = self._karpenter_charts(name, kp, provider, [assoc, attach, access, cluster_sg_tag, *rules])
        self._karpenter_pools(name, kp, provider, release, node_role)
        self.karpenter_release = release

    def _karpenter_node_role(self, name: str, plan: ClusterPlan, kp: KarpenterPlan) -> tuple[aws.iam.Role, aws.eks.AccessEntry]:
        """The Karpenter nodes' role with the node policies, and its EC2_LINUX access entry (the managed node groups'
        role already has one, and one principal has one access entry: EKS CreateAccessEntry). A running cluster keeps
        the name the role was created with (stacks.cluster.identity.role_name): the EC2NodeClasses name it by its live
        name."""
        child = self._child()
        keep_name = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["name"]))
        node_role = aws.iam.Role(
            f"{name}-karpenter-node", name=kp.node_role_name, assume_role_policy=ASSUME_EC2, tags=plan.tags, opts=keep_name
        )
        node_policies = [
            aws.iam.RolePolicyAttachment(f"{name}-karpenter-node-{p}", role=node_role.name, policy_arn=arn, opts=child)
            for p, arn in plan.node_policy_arns.items()
        ]
        access = aws.eks.AccessEntry(
            f"{name}-karpenter-node",
            cluster_name=self.cluster.name,
            principal_arn=node_role.arn,
            type="EC2_LINUX",
            opts=pulumi.ResourceOptions(parent=self, depends_on=node_policies),
        )
        return node_role, access

    def _karpenter_interruption_queue(
        self, name: str, plan: ClusterPlan, kp: KarpenterPlan
    ) -> tuple[aws.sqs.Queue, list[aws.cloudwatch.EventTarget]]:
        """The interruption queue, its policy, and the EventBridge rules that send to it."""
        child, tags = self._child(), plan.tags
        queue = aws.sqs.Queue(f"{name}-karpenter", **kp.queue, tags=tags, opts=child)
        aws.sqs.QueuePolicy(
            f"{name}-karpenter",
            queue_url=queue.url,
            policy=queue.arn.apply(lambda arn: json.dumps(fill(kp.queue_policy, {"<queue-arn>": str(arn)}))),
            opts=child,
        )
        rules = []
        for r in kp.rules:
            rule = aws.cloudwatch.EventRule(
                f"{name}-karpenter-{r['name']}", name=r["rule_name"], event_pattern=r["event_pattern"], tags=tags, opts=child
            )
            rules.append(
                aws.cloudwatch.EventTarget(
                    f"{name}-karpenter-{r['name']}",
                    rule=rule.name,
                    target_id="KarpenterInterruptionQueueTarget",
                    arn=queue.arn,
                    opts=child,
                )
            )
        return queue, rules

    def _karpenter_controller_role(
        self, name: str, plan: ClusterPlan, kp: KarpenterPlan, queue: aws.sqs.Queue, node_role: aws.iam.Role
    ) -> tuple[aws.eks.PodIdentityAssociation, aws.iam.RolePolicyAttachment]:
        """The controller's role through EKS Pod Identity, with its policy filled from the queue's and roles' ARNs."""
        child, tags = self._child(), plan.tags
        keep_name = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["name"]))
        controller = aws.iam.Role(
            f"{name}-karpenter", name=kp.controller_role_name, assume_role_policy=ASSUME_POD_IDENTITY, tags=tags, opts=keep_name
        )
        policy_doc = pulumi.Output.all(queue.arn, node_role.arn, controller.arn).apply(
            lambda a: json.dumps(fill(kp.controller_policy, controller_policy_values(str(a[0]), str(a[1]), str(a[2]))))
        )
        policy = aws.iam.Policy(f"{name}-karpenter", policy=policy_doc, tags=tags, opts=child)
        attach = aws.iam.RolePolicyAttachment(f"{name}-karpenter", role=controller.name, policy_arn=policy.arn, opts=child)
        assoc = aws.eks.PodIdentityAssociation(
            f"{name}-karpenter",
            cluster_name=self.cluster.name,
            namespace=kp.helm.namespace,
            service_account=KARPENTER_SERVICE_ACCOUNT,
            role_arn=controller.arn,
            opts=child,
        )
        return assoc, attach

    def _karpenter_charts(
        self, name: str, kp: KarpenterPlan, provider: pulumi.ProviderResource, after: list[pulumi.Resource]
    ) -> pulumi.Resource:
        """OCI charts: Helm pulls oci://<repo>/<chart> at the version (no repository index). The CRDs first, from
        karpenter-crd (templates, so a bump upgrades them); the controller's chart then skips its crds/. Returns the
        controller's release, which waits for the system nodes it runs on and the add-ons created before them (the CNI;
        the Pod Identity agent its role needs), not for those created after them (the managed CoreDNS and kube-proxy, the
        CSI driver): EKS bootstraps CoreDNS and kube-proxy at cluster creation ("If you set this value to False when
        creating a cluster, the default networking add-ons will not be installed. The default networking add-ons
        include vpc-cni, coredns, and kube-proxy": EKS API CreateCluster ``bootstrapSelfManagedAddons``, left at its
        default), and the GPU nodes it launches wait for nothing more."""
        import pulumi_kubernetes as k8s

        crds, spec = kp.crd_helm, kp.helm
        crd_release = k8s.helm.v3.Release(
            f"{name}-karpenter-crd",
            name=crds.name,
            chart=f"{crds.repo}/{crds.chart}",
            version=crds.version,
            namespace=crds.namespace,
            timeout=900,
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[self.system_nodes]),
        )
        return k8s.helm.v3.Release(
            f"{name}-karpenter",
            name=spec.name,
            chart=f"{spec.repo}/{spec.chart}",
            version=spec.version,
            namespace=spec.namespace,
            values=spec.values,
            skip_crds=True,
            timeout=900,
            opts=pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=[crd_release, self.system_nodes, *after, *self.addons_before_nodes]
            ),
        )

    def _karpenter_pools(
        self, name: str, kp: KarpenterPlan, provider: pulumi.ProviderResource, release: pulumi.Resource, node_role: aws.iam.Role
    ) -> None:
        """Each Karpenter pool's EC2NodeClass (naming the node role), then its NodePool, after the chart."""
        import pulumi_kubernetes as k8s

        after_chart = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[release])
        classes = {}
        for pool in kp.pools:
            nc = pool.ec2nodeclass
            classes[pool.name] = k8s.apiextensions.CustomResource(
                f"{name}-karpenter-{pool.name}-nodeclass",
                api_version=nc["apiVersion"],
                kind=nc["kind"],
                metadata=nc["metadata"],
                spec={**nc["spec"], "role": node_role.name},
                opts=after_chart,
            )
        nodepools: dict[str, pulumi.Resource] = {}
        for pool in kp.pools:
            np = pool.nodepool
            nodepools[pool.name] = k8s.apiextensions.CustomResource(
                f"{name}-karpenter-{pool.name}-nodepool",
                api_version=np["apiVersion"],
                kind=np["kind"],
                metadata=np["metadata"],
                spec=np["spec"],
                opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[release, classes[pool.name]]),
            )
            self.karpenter_node_pools.append(nodepools[pool.name])
        self._karpenter_placeholders(name, kp, provider, nodepools)

    def _karpenter_placeholders(
        self, name: str, kp: KarpenterPlan, provider: pulumi.ProviderResource, nodepools: dict[str, pulumi.Resource]
    ) -> None:
        """The capacity placeholders (stacks/cluster/karpenter.py ``capacity_placeholder``): their PriorityClass, then
        each pool's Job once its NodePool exists, so Karpenter launches the pool's nodes while the platform and the
        serving objects are still being created. A Job is created once: its spec is not updated (a changed count or
        image would replace it and hold nodes for another deadline), and it goes when its pool has no unpaused entry."""
        import pulumi_kubernetes as k8s

        if kp.priority_class is None:
            return
        pc = kp.priority_class
        priority = k8s.scheduling.v1.PriorityClass(
            f"{name}-karpenter-placeholder-priority",
            metadata=pc["metadata"],
            value=pc["value"],
            global_default=pc["globalDefault"],
            preemption_policy=pc["preemptionPolicy"],
            description=pc["description"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        for pool in kp.pools:
            job = pool.placeholder
            if job is None:
                continue
            k8s.batch.v1.Job(
                f"{name}-karpenter-{pool.name}-placeholder",
                metadata=job["metadata"],
                spec=job["spec"],
                opts=pulumi.ResourceOptions(
                    parent=self, provider=provider, depends_on=[nodepools[pool.name], priority], ignore_changes=["spec"]
                ),
            )
