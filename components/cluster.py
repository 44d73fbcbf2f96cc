"""EKS cluster with a system node group and one GPU node group per pool, EFA, placement and capacity options, model-cache storage.

Thin shell over ``stacks.cluster.build_cluster_plan``: every setting comes from the plan.
"""
from __future__ import annotations

import json
from typing import Optional

import pulumi
import pulumi_aws as aws

from stacks.cluster import SECRETS_KEY_ACTIONS, ClusterPlan
from stacks.cluster.pools import LAUNCH_TEMPLATE_DIGEST_TAG, launch_template_digest, update_timeout_minutes
from stacks.cluster.storage import efs_file_system_policy
from stacks.cluster.karpenter import DISCOVERY_TAG, SERVICE_ACCOUNT as KARPENTER_SERVICE_ACCOUNT, fill

ASSUME_EKS = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"]}]})
ASSUME_EC2 = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]})
ASSUME_POD_IDENTITY = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"]}]})


def kubeconfig_for(name: pulumi.Input[str], endpoint: pulumi.Input[str], ca: pulumi.Input[str], region: str) -> pulumi.Output[str]:
    return pulumi.Output.all(name, endpoint, ca).apply(
        lambda a: json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": a[0], "cluster": {"server": a[1], "certificate-authority-data": a[2]}}],
                "contexts": [{"name": a[0], "context": {"cluster": a[0], "user": a[0]}}],
                "current-context": a[0],
                "users": [{"name": a[0], "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
                                                              "args": ["eks", "get-token", "--cluster-name", a[0], "--region", region]}}}],
            }
        )
    )


class EksGpuCluster(pulumi.ComponentResource):
    """VPC, EKS control plane, add-ons, system and GPU node groups, and the model-cache file system."""

    cluster_name: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    storage_class_name: pulumi.Output[str]

    def __init__(self, name: str, plan: ClusterPlan, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("dynamo:cluster:EksGpuCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {"dynamo.nvidia.com/cluster": plan.name}
        # Karpenter pools find their subnets and security groups by this tag (EC2NodeClass selector terms); stacks
        # without Karpenter keep their tags unchanged.
        discovery = {DISCOVERY_TAG: plan.name} if plan.karpenter else {}

        # ---- network
        # A protected FSx cache keeps the network it sits in (its ENIs hold the subnet, the security group and the VPC):
        # retaining those lets `pulumi destroy` finish; EFS mount targets are deleted, so EFS needs nothing retained.
        keep_network = plan.protect_cache and plan.storage["kind"] == "fsx-lustre"
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=keep_network)
        self.vpc = aws.ec2.Vpc(f"{name}-vpc", **plan.vpc, tags={**tags, "Name": plan.name}, opts=kept)
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, tags=tags, opts=child)
        public_rt = aws.ec2.RouteTable(f"{name}-public", vpc_id=self.vpc.id, routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}], tags=tags, opts=child)
        self.public_subnets = []
        for i, s in enumerate(plan.public_subnets):
            sn = aws.ec2.Subnet(f"{name}-public-{i}", vpc_id=self.vpc.id, map_public_ip_on_launch=True, **s,
                                tags={**tags, "kubernetes.io/role/elb": "1"}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-public-{i}", subnet_id=sn.id, route_table_id=public_rt.id, opts=child)
            self.public_subnets.append(sn)
        # NAT gateways (plan.network nat_zones: the first zone, or every zone) and one private route table per NAT; the
        # first keeps the single-NAT names ({name}-nat, {name}-private), so the default layout's URNs do not change.
        net = plan.network or {"nat_zones": [plan.public_subnets[0]["availability_zone"]], "s3_gateway_endpoint": False,
                               "interface_endpoints": [], "public_access_cidrs": ["0.0.0.0/0"], "warnings": []}
        public_by_zone = {s["availability_zone"]: sn for s, sn in zip(plan.public_subnets, self.public_subnets)}
        private_rts = {}
        for j, zone in enumerate(net["nat_zones"]):
            sfx = "" if j == 0 else f"-{j}"
            eip = aws.ec2.Eip(f"{name}-nat{sfx}", domain="vpc", tags=tags, opts=child)
            nat = aws.ec2.NatGateway(f"{name}-nat{sfx}", subnet_id=public_by_zone[zone].id, allocation_id=eip.id, tags=tags, opts=child)
            private_rts[zone] = aws.ec2.RouteTable(f"{name}-private{sfx}", vpc_id=self.vpc.id,
                                                   routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}], tags=tags, opts=child)
        private_rt = private_rts[net["nat_zones"][0]]
        self.private_subnets = {}
        cache_zone = plan.storage.get("availability_zone")
        for i, s in enumerate(plan.private_subnets):
            keep = keep_network and s["availability_zone"] == cache_zone
            sn = aws.ec2.Subnet(f"{name}-private-{i}", vpc_id=self.vpc.id, **s, tags={**tags, "kubernetes.io/role/internal-elb": "1", **discovery},
                                opts=kept if keep else child)
            rt = private_rts.get(s["availability_zone"], private_rt)
            aws.ec2.RouteTableAssociation(f"{name}-private-{i}", subnet_id=sn.id, route_table_id=rt.id, opts=child)
            self.private_subnets[s["availability_zone"]] = sn
        private_ids = [sn.id for sn in self.private_subnets.values()]
        # A GPU Local Zone (GB200 UltraServers) gets its own subnet, for the GPU node group only: never an EKS cluster subnet.
        self.gpu_subnet = None
        if plan.gpu_subnet:
            self.gpu_subnet = aws.ec2.Subnet(f"{name}-gpu-local-zone", vpc_id=self.vpc.id, **plan.gpu_subnet, tags={**tags, **discovery}, opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-gpu-local-zone", subnet_id=self.gpu_subnet.id, route_table_id=private_rt.id, opts=child)
        # S3 gateway endpoint on every private route table: S3 traffic (ECR image layers, S3 reads) leaves the NAT's per-GB
        # charge (no charge of its own). ECR interface endpoints (ecr.api, ecr.dkr) in every zone's private subnet.
        self.vpc_endpoints = []
        if net["s3_gateway_endpoint"]:
            self.vpc_endpoints.append(aws.ec2.VpcEndpoint(
                f"{name}-s3", vpc_id=self.vpc.id, service_name=f"com.amazonaws.{plan.region}.s3", vpc_endpoint_type="Gateway",
                route_table_ids=[rt.id for rt in private_rts.values()], tags=tags, opts=child))
        if net["interface_endpoints"]:
            endpoint_sg = aws.ec2.SecurityGroup(
                f"{name}-endpoints", vpc_id=self.vpc.id, description="VPC interface endpoints: HTTPS from the VPC",
                ingress=[{"protocol": "tcp", "from_port": 443, "to_port": 443, "cidr_blocks": [plan.vpc["cidr_block"]]}],
                egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}], tags=tags, opts=child)
            for svc in net["interface_endpoints"]:
                self.vpc_endpoints.append(aws.ec2.VpcEndpoint(
                    f"{name}-{svc.replace('.', '-')}", vpc_id=self.vpc.id, service_name=f"com.amazonaws.{plan.region}.{svc}",
                    vpc_endpoint_type="Interface", private_dns_enabled=True, subnet_ids=[sn.id for sn in self.private_subnets.values()],
                    security_group_ids=[endpoint_sg.id], tags=tags, opts=child))
        for w in net["warnings"]:
            pulumi.log.warn(w, resource=self)

        # ---- control plane
        cluster_role = aws.iam.Role(f"{name}-cluster", assume_role_policy=ASSUME_EKS, opts=child)
        cluster_deps = [aws.iam.RolePolicyAttachment(f"{name}-cluster", role=cluster_role.name,
                                                     policy_arn="arn:aws:iam::aws:policy/AmazonEKSClusterPolicy", opts=child)]
        # Secrets envelope encryption and control-plane logs (stacks.cluster.control_plane_plan): the KMS key and the
        # cluster role's use of it, and the log group with its retention, all before the cluster.
        cp = plan.control_plane or {"secrets_encryption": False, "logs": None}
        encryption = None
        self.secrets_key = None
        if cp["secrets_encryption"]:
            self.secrets_key = aws.kms.Key(f"{name}-secrets", description=f"{plan.name}: envelope encryption of Kubernetes Secrets",
                                           enable_key_rotation=True, tags=tags, opts=child)
            cluster_deps.append(aws.iam.RolePolicy(
                f"{name}-cluster-secrets-key", role=cluster_role.id,
                policy=self.secrets_key.arn.apply(lambda arn: json.dumps({"Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow", "Action": list(SECRETS_KEY_ACTIONS), "Resource": arn}]})),
                opts=child))
            encryption = {"provider": {"key_arn": self.secrets_key.arn}, "resources": ["secrets"]}
        self.log_group = None
        if cp["logs"]:
            self.log_group = aws.cloudwatch.LogGroup(f"{name}-control-plane-logs", name=cp["logs"]["log_group"],
                                                     retention_in_days=cp["logs"]["retention_in_days"], tags=tags, opts=child)
            cluster_deps.append(self.log_group)
            aws.iam.RolePolicy(f"{name}-cluster-no-log-group", role=cluster_role.id, policy=json.dumps(cp["logs"]["cluster_role_policy"]),
                               opts=child)
        access = plan.access or {"authentication_mode": "API", "bootstrap_creator_admin": True, "entries": [], "warnings": []}
        self.cluster = aws.eks.Cluster(
            f"{name}-eks",
            name=plan.name,
            version=plan.kubernetes_version,
            role_arn=cluster_role.arn,
            # Private-only: no publicAccessCidrs sent (the provider keeps the computed value; sending [] would diff forever).
            vpc_config={"subnet_ids": private_ids + [sn.id for sn in self.public_subnets],
                        "endpoint_public_access": net.get("endpoint_public_access", True), "endpoint_private_access": True,
                        **({"public_access_cidrs": net["public_access_cidrs"]} if net.get("endpoint_public_access", True) else {})},
            access_config={"authentication_mode": access["authentication_mode"],
                           "bootstrap_cluster_creator_admin_permissions": access["bootstrap_creator_admin"]},
            encryption_config=encryption,
            enabled_cluster_log_types=cp["logs"]["types"] if cp["logs"] else None,
            upgrade_policy={"support_type": cp.get("upgrade_policy", "STANDARD")},  # always sent: the API's default is EXTENDED
            tags=tags,
            # The bootstrap flag acts only on CreateCluster and the provider replaces the cluster when it changes
            # (stacks.cluster.access_plan): an existing cluster keeps the value it was created with.
            opts=pulumi.ResourceOptions(parent=self, depends_on=cluster_deps,
                                        ignore_changes=["accessConfig.bootstrapClusterCreatorAdminPermissions"]),
        )
        for w in [*access["warnings"], *cp.get("support_warnings", [])]:
            pulumi.log.warn(w, resource=self)
        # A private-only endpoint is reached from the networks the cluster security group admits on 443.
        self.endpoint_ingress = [
            aws.vpc.SecurityGroupIngressRule(f"{name}-api-from-{cidr.replace('.', '-').replace('/', '-')}", security_group_id=self.cluster.vpc_config.cluster_security_group_id,
                                             cidr_ipv4=cidr, ip_protocol="tcp", from_port=443, to_port=443,
                                             description="Kubernetes API (private endpoint) from a connected network", tags=tags, opts=child)
            for cidr in net.get("private_access_cidrs", [])
        ]
        self.access_entries: list[aws.eks.AccessEntry] = []
        self.access_policies: list[aws.eks.AccessPolicyAssociation] = []
        for e in access["entries"]:
            entry = aws.eks.AccessEntry(f"{name}-{e['name']}", cluster_name=self.cluster.name, principal_arn=e["principal_arn"], opts=child)
            self.access_entries.append(entry)
            self.access_policies.append(aws.eks.AccessPolicyAssociation(f"{name}-{e['name']}", cluster_name=self.cluster.name, principal_arn=e["principal_arn"],
                                            policy_arn=e["policy_arn"], access_scope=e["access_scope"],
                                            # EKS keys an association by (principal, policy): a create-first replacement
                                            # would be undone by the old one's delete (tests/aws_rules/updates.py
                                            # access_policy_association_is_replaced_delete_first)
                                            opts=pulumi.ResourceOptions(parent=self, depends_on=[entry], delete_before_replace=True)))

        # ---- nodes: the node roles hold only what a kubelet needs (stacks/cluster/identity.py)
        node_role = aws.iam.Role(f"{name}-node", assume_role_policy=ASSUME_EC2, opts=child)
        node_policies = [
            aws.iam.RolePolicyAttachment(f"{name}-node-{p}", role=node_role.name, policy_arn=f"arn:aws:iam::aws:policy/{p}", opts=child)
            for p in plan.node_policies
        ]
        self.addons = [self._addon(name, plan, addon, []) for addon in plan.addons_before_nodes]
        # The model cache's security group first: the EFA group admits Lustre traffic from it (stacks.cluster.network).
        kind = plan.storage["kind"]
        nfs_sg = aws.ec2.SecurityGroup(f"{name}-cache", vpc_id=self.vpc.id, description="model cache from the VPC",
                                       ingress=[{"protocol": "tcp", "from_port": 988 if kind == "fsx-lustre" else 2049,
                                                 "to_port": 1023 if kind == "fsx-lustre" else 2049, "cidr_blocks": [plan.vpc["cidr_block"]]}],
                                       egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}], tags=tags,
                                       opts=kept)
        efa_rules = net.get("efa_security_group") or {"ingress": [{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}],
                                                       "egress": [{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}]}

        def sg_rule(r: dict) -> dict:
            r = dict(r)
            if r.pop("from_cache", False):
                r["security_groups"] = [nfs_sg.id]
            return r
        efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa",
            vpc_id=self.vpc.id,
            description="EFA: all traffic to and from itself; cluster traffic",
            ingress=[sg_rule(r) for r in efa_rules["ingress"]],
            egress=[sg_rule(r) for r in efa_rules["egress"]],
            tags={**tags, **discovery},
            opts=child,
        )
        node_deps = pulumi.ResourceOptions(parent=self, depends_on=[*node_policies, *self.addons])
        self.system_nodes = aws.eks.NodeGroup(
            f"{name}-system", cluster_name=self.cluster.name, node_role_arn=node_role.arn, subnet_ids=private_ids, **plan.system_nodegroup, tags=tags,
            # EKS cannot change a group's disk (the provider replaces the group): a running group keeps its disk unless
            # dynamo:cluster.systemDiskGib asks for another (stacks.config.eks.node_group_changes says so at preview).
            opts=node_deps if plan.system_disk_set else pulumi.ResourceOptions.merge(node_deps, pulumi.ResourceOptions(ignore_changes=["diskSize"]))
        )
        # One GPU node group per pool (cluster.gpuPools): the first keeps the single-target names (cluster-gpu), the others
        # carry their GPU (cluster-gpu-b200).
        self.gpu_node_groups: list[aws.eks.NodeGroup] = []
        self.launch_templates: list[aws.ec2.LaunchTemplate] = []
        self.placement_groups: list[aws.ec2.PlacementGroup] = []
        for pool in plan.gpu_pools:
            if pool.capacity == "karpenter":  # a NodePool launches its nodes (below): no node group, launch template or placement group
                continue
            rname = f"{name}-{pool.name}"
            lt_args = dict(pool.launch_template)
            lt_args["network_interfaces"] = [
                {**ni, "security_groups": [efa_sg.id, self.cluster.vpc_config.cluster_security_group_id]} for ni in pool.launch_template["network_interfaces"]
            ]
            if pool.placement_group:
                pg = aws.ec2.PlacementGroup(rname, **pool.placement_group, tags=tags, opts=child)
                self.placement_groups.append(pg)
                lt_args["placement"] = {"group_name": pg.name}
            lt = aws.ec2.LaunchTemplate(rname, **lt_args, tags=tags, opts=child)
            self.launch_templates.append(lt)
            gpu = dict(pool.nodegroup)
            zone = gpu.pop("availability_zone")
            gpu_subnet = self.gpu_subnet if (plan.gpu_subnet and zone == plan.gpu_subnet["availability_zone"]) else self.private_subnets[zone]
            # The program owns the desired size (stacks.cluster.scaling_config): no ignoreChanges, so a resize sends the
            # new min, desired and max together and EKS accepts it; with the desired size ignored, the old one went with
            # the new bounds and EKS refused ("Minimum capacity N can't be greater than desired size M").
            self.gpu_node_groups.append(aws.eks.NodeGroup(
                rname,
                cluster_name=self.cluster.name,
                node_role_arn=node_role.arn,
                subnet_ids=[gpu_subnet.id],
                launch_template={"id": lt.id, "version": lt.latest_version.apply(str)},
                **gpu,
                # what its launch template is made of, which `up` reads back from a running Capacity Block group
                tags={**tags, LAUNCH_TEMPLATE_DIGEST_TAG: launch_template_digest(pool)},
                opts=pulumi.ResourceOptions.merge(node_deps, pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(
                    update=f"{update_timeout_minutes(gpu['scaling_config']['max_size'])}m"))),
            ))
        self.gpu_nodes = self.gpu_node_groups[0] if self.gpu_node_groups else None
        self.launch_template = self.launch_templates[0] if self.launch_templates else None
        self.placement_group = self.placement_groups[0] if plan.gpu_pools[0].placement_group and self.placement_groups else None

        # ---- the other add-ons, once the system nodes run their pods
        self.addons += [self._addon(name, plan, addon, [self.system_nodes]) for addon in plan.addons if addon not in plan.addons_before_nodes]

        # ---- model-cache file system
        st = dict(plan.storage)
        st.pop("kind")
        # The file system follows dynamo:storage.protect, like the claim on it.
        fs_opts = pulumi.ResourceOptions(parent=self, retain_on_delete=plan.protect_cache)
        self.storage_parameters = None
        self.static_pv_source = None
        if kind == "efs":
            self.file_system = aws.efs.FileSystem(f"{name}-cache", **st, tags={**tags, "Name": f"{plan.name}-model-cache"}, opts=fs_opts)
            # TLS only (stacks.cluster.storage.efs_file_system_policy); kept with the file system when it is kept.
            self.file_system_policy = aws.efs.FileSystemPolicy(
                f"{name}-cache-policy", file_system_id=self.file_system.id,
                policy=self.file_system.arn.apply(lambda arn: json.dumps(efs_file_system_policy(arn))), opts=fs_opts)
            self.mount_targets = [
                aws.efs.MountTarget(f"{name}-cache-{i}", file_system_id=self.file_system.id, subnet_id=sn.id, security_groups=[nfs_sg.id], opts=child)
                for i, sn in enumerate(self.private_subnets.values())
            ]
            self.storage_parameters = self.file_system.id.apply(lambda i: {"provisioningMode": "efs-ap", "directoryPerms": "700", "fileSystemId": i})
        else:
            zone = st.pop("availability_zone")
            # pulumi-aws 7.x: subnet_ids is one subnet id (a string): FSx for Lustre lives in one subnet.
            self.file_system = aws.fsx.LustreFileSystem(f"{name}-cache", subnet_ids=self.private_subnets[zone].id, security_group_ids=[nfs_sg.id],
                                                        **st, tags={**tags, "Name": f"{plan.name}-model-cache"}, opts=fs_opts)
            self.mount_targets = []
            self.static_pv_source = pulumi.Output.all(self.file_system.id, self.file_system.dns_name, self.file_system.mount_name).apply(
                lambda a: {"driver": "fsx.csi.aws.com", "volumeHandle": a[0], "volumeAttributes": {"dnsname": a[1], "mountname": a[2]}})

        self.cluster_name = self.cluster.name
        # Everything that uses the kubeconfig waits for the access entries: with accessEntries set the identity that runs
        # `up` reaches the Kubernetes API through its own entry, not through the creator's bootstrap admin. The wait is an
        # ordering (``provider_opts``: depends_on the associations), not data: an association replaced delete-first makes
        # the engine re-diff what takes data from it with that data unknown, and a Kubernetes provider whose kubeconfig
        # is unknown is replaced, with every object it manages.
        self.kubeconfig = pulumi.Output.secret(kubeconfig_for(self.cluster.name, self.cluster.endpoint,
                                                              self.cluster.certificate_authority.data, plan.region))
        self.storage_class_name = pulumi.Output.from_input(plan.cache_class_name)
        # ---- Karpenter (GPU pools with capacity: karpenter): after the kubeconfig, which its Helm release and objects use
        self.karpenter_node_pools: list[pulumi.Resource] = []
        if plan.karpenter:
            self._karpenter(name, plan, tags, child)
        # ---- the AWS Load Balancer Controller, when the front door has a load balancer
        self.load_balancer_controller: Optional[pulumi.Resource] = None
        if plan.load_balancer_controller:
            self._load_balancer_controller(name, plan, tags, child)
        self.register_outputs({"clusterName": self.cluster_name, "kubeconfig": self.kubeconfig, "storageClassName": self.storage_class_name})

    def _load_balancer_controller(self, name: str, plan: ClusterPlan, tags: dict, child: pulumi.ResourceOptions) -> None:
        """stacks/cluster/load_balancer.py: its role through EKS Pod Identity with the upstream policy, then the chart
        (region and VPC in its values: no instance metadata needed)."""
        import pulumi_kubernetes as k8s

        lb = plan.load_balancer_controller
        # A running cluster keeps the name its role was created with (stacks.cluster.identity.role_name).
        keep_name = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["name"]))
        role = aws.iam.Role(f"{name}-lb-controller", name=lb.role_name, assume_role_policy=ASSUME_POD_IDENTITY, tags=tags, opts=keep_name)
        policy = aws.iam.Policy(f"{name}-lb-controller", policy=json.dumps(lb.policy), tags=tags, opts=child)
        attach = aws.iam.RolePolicyAttachment(f"{name}-lb-controller", role=role.name, policy_arn=policy.arn, opts=child)
        assoc = aws.eks.PodIdentityAssociation(f"{name}-lb-controller", cluster_name=self.cluster.name, namespace=lb.helm.namespace,
                                               service_account=lb.service_account, role_arn=role.arn, opts=child)
        provider = k8s.Provider(f"{name}-lb-controller", kubeconfig=self.kubeconfig, opts=self.provider_opts())
        spec = lb.helm
        self.load_balancer_controller = k8s.helm.v3.Release(
            f"{name}-lb-controller", name=spec.name, chart=spec.chart, version=spec.version, namespace=spec.namespace,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=spec.repo), values={**spec.values, "vpcId": self.vpc.id}, timeout=900,
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[self.system_nodes, assoc, attach, *self.addons]))

    def provider_opts(self, **kw) -> pulumi.ResourceOptions:
        """Options of a Kubernetes provider on this cluster: after the access entries' policy associations (an ordering
        only; see the kubeconfig above)."""
        return pulumi.ResourceOptions(parent=kw.pop("parent", self), depends_on=list(self.access_policies), **kw)

    def _addon(self, name: str, plan: ClusterPlan, addon: str, after: list) -> aws.eks.Addon:
        """One EKS add-on at its pinned version, with its own Pod Identity role when it calls AWS and its configuration
        values (stacks/cluster/identity.py)."""
        child = pulumi.ResourceOptions(parent=self)
        assoc = None
        if addon in plan.addon_identities:
            sa, policy = plan.addon_identities[addon]
            role = aws.iam.Role(f"{name}-{addon}", assume_role_policy=ASSUME_POD_IDENTITY, opts=child)
            aws.iam.RolePolicyAttachment(f"{name}-{addon}", role=role.name, policy_arn=f"arn:aws:iam::aws:policy/{policy}", opts=child)
            assoc = [{"role_arn": role.arn, "service_account": sa}]
        config = plan.addon_configuration.get(addon)
        return aws.eks.Addon(
            f"{name}-{addon}", cluster_name=self.cluster.name, addon_name=addon, addon_version=plan.addon_versions.get(addon),
            pod_identity_associations=assoc, configuration_values=json.dumps(config, sort_keys=True) if config else None,
            # a pinned-version bump is an UpdateAddon; the program owns these add-ons' settings (EKS API UpdateAddon resolveConflicts)
            resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(parent=self, depends_on=after))

    def _karpenter(self, name: str, plan: ClusterPlan, tags: dict, child: pulumi.ResourceOptions) -> None:
        """Karpenter for the Karpenter pools (stacks/cluster/karpenter.py): the node role and its EC2_LINUX access entry (the
        managed node groups' role already has one, and one principal has one access entry: EKS CreateAccessEntry),
        the controller role through EKS Pod Identity, the interruption queue and its EventBridge rules, the discovery
        tag on the cluster security group, the chart, then each pool's EC2NodeClass and NodePool."""
        import pulumi_kubernetes as k8s

        kp = plan.karpenter
        # A running cluster keeps the names its roles were created with (stacks.cluster.identity.role_name): the
        # EC2NodeClasses name the node role by its live name.
        keep_name = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["name"]))
        node_role = aws.iam.Role(f"{name}-karpenter-node", name=kp.node_role_name, assume_role_policy=ASSUME_EC2, tags=tags, opts=keep_name)
        node_policies = [aws.iam.RolePolicyAttachment(f"{name}-karpenter-node-{p}", role=node_role.name,
                                                      policy_arn=f"arn:aws:iam::aws:policy/{p}", opts=child) for p in plan.node_policies]
        access = aws.eks.AccessEntry(f"{name}-karpenter-node", cluster_name=self.cluster.name, principal_arn=node_role.arn, type="EC2_LINUX",
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=node_policies))
        # The cluster security group (EKS creates it; the node groups' launch templates name it) and the EFA group both
        # carry the discovery tag the EC2NodeClass selects on.
        cluster_sg_tag = aws.ec2.Tag(f"{name}-cluster-sg-discovery", resource_id=self.cluster.vpc_config.cluster_security_group_id,
                                     key=DISCOVERY_TAG, value=plan.name, opts=child)
        queue = aws.sqs.Queue(f"{name}-karpenter", **kp.queue, tags=tags, opts=child)
        aws.sqs.QueuePolicy(f"{name}-karpenter", queue_url=queue.url,
                            policy=queue.arn.apply(lambda arn: json.dumps(fill(kp.queue_policy, {"<queue-arn>": str(arn)}))), opts=child)
        rules = []
        for r in kp.rules:
            rule = aws.cloudwatch.EventRule(f"{name}-karpenter-{r['name']}", name=r["rule_name"], event_pattern=r["event_pattern"], tags=tags, opts=child)
            rules.append(aws.cloudwatch.EventTarget(f"{name}-karpenter-{r['name']}", rule=rule.name, target_id="KarpenterInterruptionQueueTarget",
                                                    arn=queue.arn, opts=child))
        controller = aws.iam.Role(f"{name}-karpenter", name=kp.controller_role_name, assume_role_policy=ASSUME_POD_IDENTITY, tags=tags, opts=keep_name)
        policy_doc = pulumi.Output.all(queue.arn, node_role.arn, controller.arn).apply(
            lambda a: json.dumps(fill(kp.controller_policy, {"<queue-arn>": str(a[0]), "<node-role-arn>": str(a[1]),
                                                            "<account-id>": str(a[2]).split(":")[4] if str(a[2]).count(":") >= 5 else "*"})))
        policy = aws.iam.Policy(f"{name}-karpenter", policy=policy_doc, tags=tags, opts=child)
        attach = aws.iam.RolePolicyAttachment(f"{name}-karpenter", role=controller.name, policy_arn=policy.arn, opts=child)
        assoc = aws.eks.PodIdentityAssociation(f"{name}-karpenter", cluster_name=self.cluster.name, namespace=kp.helm.namespace,
                                               service_account=KARPENTER_SERVICE_ACCOUNT, role_arn=controller.arn, opts=child)
        provider = k8s.Provider(f"{name}-karpenter", kubeconfig=self.kubeconfig, opts=self.provider_opts())
        # OCI charts: Helm pulls oci://<repo>/<chart> at the version (no repository index). The CRDs first, from
        # karpenter-crd (templates, so a bump upgrades them); the controller's chart then skips its crds/.
        crds = kp.crd_helm
        crd_release = k8s.helm.v3.Release(
            f"{name}-karpenter-crd", name=crds.name, chart=f"{crds.repo}/{crds.chart}", version=crds.version, namespace=crds.namespace,
            timeout=900, opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[self.system_nodes]))
        spec = kp.helm
        release = k8s.helm.v3.Release(
            f"{name}-karpenter", name=spec.name, chart=f"{spec.repo}/{spec.chart}", version=spec.version, namespace=spec.namespace,
            values=spec.values, skip_crds=True, timeout=900,
            opts=pulumi.ResourceOptions(parent=self, provider=provider,
                                        depends_on=[crd_release, self.system_nodes, assoc, attach, access, cluster_sg_tag, *rules, *self.addons]))
        after_chart = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[release])
        classes = {}
        for pool in kp.pools:
            nc = pool.ec2nodeclass
            classes[pool.name] = k8s.apiextensions.CustomResource(
                f"{name}-karpenter-{pool.name}-nodeclass", api_version=nc["apiVersion"], kind=nc["kind"], metadata=nc["metadata"],
                spec={**nc["spec"], "role": node_role.name}, opts=after_chart)
        for pool in kp.pools:
            np = pool.nodepool
            self.karpenter_node_pools.append(k8s.apiextensions.CustomResource(
                f"{name}-karpenter-{pool.name}-nodepool", api_version=np["apiVersion"], kind=np["kind"], metadata=np["metadata"],
                spec=np["spec"], opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[release, classes[pool.name]])))
        self.karpenter_release = release
