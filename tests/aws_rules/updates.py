"""Update rules (``UPDATE_RULES``): what the program registers on one `up` (before) and on the next (after), for the
resources both hold (same name): the request the provider sends to AWS for the change, checked against what the AWS
API accepts on update. Each guards the area of the resource it updates; with them, the one-graph rule that a GPU node
group replaces its nodes without spare GPUs (``AREA_UPDATES``)."""

from __future__ import annotations

import ipaddress
import re
from typing import Optional

from stacks.cluster import pack
from stacks.registry.gpus import INSTANCES

from . import (
    ACCESS_POLICY_ASSOCIATION,
    AREA_CAPACITY_BLOCKS,
    AREA_CLUSTER_ACCESS,
    AREA_FSX_LUSTRE,
    AREA_KUBERNETES_VERSION,
    AREA_LOAD_BALANCER,
    AREA_NODE_COUNT,
    AREA_NODE_CREDENTIALS,
    AREA_NODE_GROUP_SIZES,
    AREA_RETENTION,
    AREA_ULTRASERVERS_AND_ZONES,
    AREA_UPDATES,
    COMPUTE_DOMAIN,
    EKS,
    ENVOY_PROXY,
    FSX,
    HELM,
    HTTP_ROUTE,
    IAM_ROLE,
    NODEGROUP,
    SUBNET,
    Graph,
    Res,
    _assigned,
    _efa_devices,
    _get,
    _ignored,
    _instance_type,
    _launch_template,
    _pairs,
    rule,
    update_rule,
)
from .load_balancer import LBC_CHART, _nlb_services


# --------------------------------------------------------------------------- node group sizes


def _scaling(ng: Res) -> tuple[int, int, int]:
    sc = ng.inputs.get("scalingConfig") or {}
    return int(sc.get("minSize", 0)), int(sc.get("desiredSize", 0)), int(sc.get("maxSize", 0))


def sent_scaling(before: Res, after: Res) -> Optional[tuple[int, int, int]]:
    """The (min, desired, max) UpdateNodegroupConfig carries when ``after`` replaces ``before``'s inputs, None when the
    scalingConfig does not change. An ignored path keeps its old value (Pulumi ``ignoreChanges``: the old input is
    used), and the provider sends the whole block (terraform-provider-aws node_group.go update)."""
    lo, want, hi = _scaling(after)
    if any(k in ("scalingConfig", "scalingConfig.desiredSize") for k in after.ignore_changes):
        want = _scaling(before)[1]
    if "scalingConfig" in after.ignore_changes:
        lo, hi = _scaling(before)[0], _scaling(before)[2]
    return None if (lo, want, hi) == _scaling(before) else (lo, want, hi)


@update_rule(AREA_NODE_GROUP_SIZES)
def node_group_update_keeps_min_desired_max(before: Graph, after: Graph) -> list[str]:
    """UpdateNodegroupConfig is refused unless the scaling it carries has min <= desired <= max: "Minimum capacity N
    can't be greater than desired size M" (a scale-up whose new minimum meets the old desired size) and "desiredSize
    can't be greater than maxSize" (a scale-down whose new maximum meets it). Source: EKS API ``UpdateNodegroupConfig``
    / ``NodegroupScalingConfig``; terraform-aws-eks issues 748, 2030, 3683 (scale-up), 944; ministryofjustice/
    cloud-platform-infrastructure PR 4595 (the maxSize error); terraform-provider-aws internal/service/eks/node_group.go."""
    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        sent = sent_scaling(old, new)
        if sent is None:
            continue
        lo, want, hi = sent
        if lo > want:
            out.append(f"{new.name}: InvalidParameterException: Minimum capacity {lo} can't be greater than desired size {want}")
        if want > hi:
            out.append(f"{new.name}: InvalidParameterException: desiredSize {want} can't be greater than maxSize {hi}")
    return out


@update_rule(AREA_NODE_GROUP_SIZES)
def node_group_update_runs_the_size_asked_for(before: Graph, after: Graph) -> list[str]:
    """After the update a node group runs the desired size the new graph names (``dynamo:cluster.gpuNodes`` or what the
    replicas need): EKS keeps the desired size the request carried, or the old one when the request leaves it out or
    carries the old one. Source: EKS API ``NodegroupScalingConfig`` ("desiredSize: the current number of nodes that
    the managed node group should maintain"); terraform-provider-aws internal/service/eks/node_group.go."""
    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        sent = sent_scaling(old, new)
        runs = sent[1] if sent else _scaling(old)[1]
        if runs != _scaling(new)[1]:
            out.append(f"{new.name}: runs {runs} node(s) after the update, the stack asks for {_scaling(new)[1]}")
    return out


@update_rule(AREA_NODE_GROUP_SIZES, AREA_NODE_COUNT)
def node_group_update_reaches_the_nodes_the_dgds_need(before: Graph, after: Graph) -> list[str]:
    """After the update a GPU node group keeps the desired size the request carried (or its old one when no request
    changes it), and that is the node count EKS runs: it must hold every GPU worker of the new DGDs, or the new pods
    stay Pending and the DGD waits out ``dgdTimeout`` (a Capacity Block group with min 0 accepts a larger maximum and
    adds nothing). Source: EKS API ``NodegroupScalingConfig`` ("desiredSize: the current number of nodes that the
    managed node group should maintain"); Kubernetes scheduling of extended resources."""
    out = []
    assigned, _ = _assigned(after)
    for old, new in _pairs(before, after, NODEGROUP):
        if new.name not in assigned:
            continue
        sent = sent_scaling(old, new)
        runs = sent[1] if sent else _scaling(old)[1]
        shape = INSTANCES[_instance_type(after, new)]
        cap = {"nvidia.com/gpu": shape.gpus_per_node}
        if _efa_devices(_launch_template(after, new)):
            cap["vpc.amazonaws.com/efa"] = _efa_devices(_launch_template(after, new))
        needed, _ = pack({"spec": {"components": assigned[new.name]}}, cap)
        if runs < needed:
            out.append(f"{new.name}: keeps {runs} node(s) after the update, the DGDs need {needed} {shape.instance_type}")
    return out


# --------------------------------------------------------------------------- node versions: GPU node replacement, Capacity Blocks, AMI releases


# Launch template inputs whose change makes the provider create a new launch template version (everything but the
# template's own tags and default-version settings: terraform-provider-aws internal/service/ec2/ec2_launch_template.go,
# resourceLaunchTemplateUpdate ``updateKeys``); the node group then moves to that version (its launchTemplate.version
# is the template's latest_version, components/cluster.py).
_LT_NOT_VERSIONED = ("tags", "tagsAll", "defaultVersion", "updateDefaultVersion", "name", "namePrefix")


def _version_changes(before: Graph, after: Graph, old: Res, new: Res) -> list[str]:
    """What makes the provider send UpdateNodegroupVersion for ``old`` -> ``new``: a new Kubernetes ``version``, a new
    ``releaseVersion`` (AMI), a new ``launchTemplate.version``, or a change to the launch template's data (a new
    version of the same template). A different launch template id or name replaces the group (ForceNew), no update."""
    out = []
    for key, what in (("version", "Kubernetes version"), ("releaseVersion", "AMI release version")):
        a, b = old.inputs.get(key), new.inputs.get(key)
        if b is not None and a != b and not _ignored(new, key):
            out.append(f"{what} {a} -> {b}")
    if _ignored(new, "launchTemplate"):
        return out
    a, b = _get(old.inputs, "launchTemplate", "version"), _get(new.inputs, "launchTemplate", "version")
    if a is not None and b is not None and str(a) != str(b) and not _ignored(new, "launchTemplate.version"):
        out.append(f"launch template version {a} -> {b}")
    lt_old, lt_new = _launch_template(before, old), _launch_template(after, new)
    if lt_old is not None and lt_new is not None and lt_old.name == lt_new.name:
        a_data, b_data = ({k: v for k, v in lt.inputs.items() if k not in _LT_NOT_VERSIONED} for lt in (lt_old, lt_new))
        changed = sorted(k for k in set(a_data) | set(b_data) if a_data.get(k) != b_data.get(k))
        if changed and not any(s.startswith("launch template version") for s in out):
            out.append(f"launch template {lt_new.name} changes ({', '.join(changed)}): a new launch template version")
    return out


@update_rule(AREA_CAPACITY_BLOCKS, AREA_NODE_GROUP_SIZES)
def capacity_block_group_updates_its_version_at_zero_nodes(before: Graph, after: Graph) -> list[str]:
    """A Capacity Block node group's version (its launch template version, AMI release version or Kubernetes version)
    is updated only while its desired size is 0: "When upgrading managed node groups with Capacity Blocks, make sure
    that the desired size of the node group is set to 0". The size EKS has when the update starts is the group's desired
    size before it: the provider sends UpdateNodegroupVersion first ("Do any version update first") and the new scaling
    after it in UpdateNodegroupConfig, so an update that both pauses the group and changes its version is refused too:
    pause in one ``up``, change the version in the next, resume in a third. On-demand and reserved groups are not
    concerned. Sources: EKS user guide "Create a managed node group with Capacity Blocks for ML" (capacity-blocks-mng,
    Considerations); hashicorp/terraform-provider-aws internal/service/eks/node_group.go @012e0a32 (resourceNodeGroupUpdate;
    launch_template id and name ForceNew, version in place) and internal/service/ec2/ec2_launch_template.go
    (resourceLaunchTemplateUpdate: CreateLaunchTemplateVersion on a change of the template's data)."""
    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        if old.inputs.get("capacityType") != "CAPACITY_BLOCK":
            continue
        running = _scaling(old)[1]
        changes = _version_changes(before, after, old, new)
        if changes and running > 0:
            then = (
                " (this update also pauses it, but the version update goes out first)"
                if (sent_scaling(old, new) or _scaling(old))[1] == 0
                else ""
            )
            out.append(
                f"{new.name}: {'; '.join(changes)} while the Capacity Block group runs {running} node(s){then}: EKS updates "
                "a Capacity Block group's version only at desired size 0. First pause it (dynamo:paused: true, or paused: "
                "true on every dynamo:serve entry of this pool) and run `pulumi up`; then make this change and `pulumi up`; "
                'then resume (docs/deploy-aws.md, "Capacity Block groups: pause, update, resume")'
            )
    return out


def _gpu_group(ng: Res) -> bool:
    return "NVIDIA" in str(ng.inputs.get("amiType", ""))


def _strategy_problem(ng: Res) -> Optional[str]:
    cfg = ng.inputs.get("updateConfig") or {}
    if cfg.get("updateStrategy") != "MINIMAL" or int(cfg.get("maxUnavailable") or 0) < 1:
        return (
            f"updateConfig {cfg}: a launch template or version change replaces every GPU node with EKS's DEFAULT "
            "strategy, which first launches up to twice the zones' count of new nodes (GPUs a reservation sized to the "
            "group does not have); use updateStrategy MINIMAL with maxUnavailable 1"
        )
    return None


@rule(AREA_UPDATES)
def gpu_node_groups_update_without_spare_gpus(g: Graph) -> list[str]:
    """Every GPU managed node group replaces its nodes with the MINIMAL strategy: terminate, then launch, one node at a
    time. Source: EKS API reference, NodegroupUpdateConfig.updateStrategy ("The default strategy ... launches the new
    instances first, before terminating the old instances. The minimal strategy ... terminates the old instances before
    launching the new instances ... useful in scenarios where you are constrained to resources or costs (for example,
    with hardware accelerators such as GPUs)"); EKS user guide "Understand each phase of node updates" (the default
    surge: up to twice the number of Availability Zones)."""
    return [f"{ng.name}: {m}" for ng in g.of(NODEGROUP) if _gpu_group(ng) and (m := _strategy_problem(ng))]


@update_rule(AREA_UPDATES)
def gpu_launch_template_change_needs_no_spare_gpus(before: Graph, after: Graph) -> list[str]:
    """An update that gives a GPU node group a new launch template version (EFA, reservation, user data, disk,
    placement), AMI or Kubernetes version replaces every node of the group; with the DEFAULT strategy EKS first launches
    new nodes beside the old ones, which on a reservation sized to the group cannot start. Sources: as
    ``gpu_node_groups_update_without_spare_gpus``; hashicorp/terraform-provider-aws internal/service/eks/node_group.go
    (resourceNodeGroupUpdate: "Do any version update first", UpdateNodegroupVersion, then UpdateNodegroupConfig with
    updateConfig: a strategy set in the same update comes too late for its version update)."""
    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        if not _gpu_group(new):
            continue
        changes = _version_changes(before, after, old, new)
        # The provider sends UpdateNodegroupVersion before UpdateNodegroupConfig: the replacement runs with the strategy
        # the group had before this update (set MINIMAL in an `up` of its own first, or with `aws eks
        # update-nodegroup-config --update-config updateStrategy=MINIMAL,maxUnavailable=1`).
        problem = _strategy_problem(new) or (
            _strategy_problem(old)
            and (
                "the group gets MINIMAL in this same update, but the provider sends the version update first, so the nodes are "
                "replaced under the old strategy: " + _strategy_problem(old)
            )
        )
        if changes and problem:
            out.append(f"{new.name}: {'; '.join(changes)} replaces every node: {problem}")
    return out


@update_rule(AREA_KUBERNETES_VERSION, AREA_UPDATES)
def ami_release_never_moves_back(before: Graph, after: Graph) -> list[str]:
    """A node group's ``releaseVersion`` only moves forward: "You cannot roll back a node group to an earlier Kubernetes
    version or AMI version" (EKS API reference, UpdateNodegroupVersion); the update would fail mid-`up`. Source: EKS
    API reference, UpdateNodegroupVersion."""
    from stacks.config.eks import _release_order

    out = []
    for old, new in _pairs(before, after, NODEGROUP):
        a, b = old.inputs.get("releaseVersion"), new.inputs.get("releaseVersion")
        if a and b and _release_order(b) < _release_order(a) and not _ignored(new, "releaseVersion"):
            out.append(f"{new.name}: releaseVersion {a} -> {b} rolls the group back to an earlier AMI, which EKS refuses")
    return out


# --------------------------------------------------------------------------- the cluster: access, Secrets encryption, version, IAM role names


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _bootstrap(c: Res) -> bool:
    return bool(_get(c.inputs, "accessConfig", "bootstrapClusterCreatorAdminPermissions", default=True))


def _secrets_key(g: Graph, c: Res) -> Optional[str]:
    """The name of the stack's KMS key a cluster's encryptionConfig uses (the key the cluster waits for), or None
    without encryptionConfig."""
    if not c.inputs.get("encryptionConfig"):
        return None
    return next((_urn_name(u) for u in c.dependencies if "$aws:kms/key:Key::" in u), "<a key outside the stack>")


@update_rule(AREA_CLUSTER_ACCESS)
def eks_update_keeps_the_creator_bootstrap(before: Graph, after: Graph) -> list[str]:
    """``accessConfig.bootstrapClusterCreatorAdminPermissions`` acts only when EKS creates the cluster and the provider
    replaces the cluster when it changes, so an update carries the value the cluster was created with: the program
    keeps it with ``ignoreChanges`` (the old input, from the state; the new value only on create). A replaced cluster
    takes every node, add-on and workload with it. Sources: EKS API CreateAccessConfigRequest ("set as a cluster admin
    access entry during cluster creation time"); terraform-provider-aws internal/service/eks/cluster.go
    (bootstrap_cluster_creator_admin_permissions ForceNew); opendatacube/datacube-k8s-eks#303 (the same change
    recreating existing clusters); Pulumi docs, "Resource option: ignoreChanges"."""
    out = []
    for old, new in _pairs(before, after, EKS):
        sent = _bootstrap(old) if _ignored(new, "accessConfig.bootstrapClusterCreatorAdminPermissions") else _bootstrap(new)
        if sent != _bootstrap(old):
            out.append(
                f"{new.name}: bootstrapClusterCreatorAdminPermissions {_bootstrap(old)} -> {sent} replaces the cluster "
                "(create-only); keep it in ignoreChanges so an existing cluster keeps its value"
            )
    return out


@update_rule(AREA_CLUSTER_ACCESS)
def eks_update_never_removes_secrets_encryption(before: Graph, after: Graph) -> list[str]:
    """Secrets envelope encryption cannot be removed from a cluster ("You can't disable secrets encryption after enabling
    it. This action is irreversible"): an update without the ``encryptionConfig`` the cluster has makes the provider
    replace the cluster, and adding one is an in-place AssociateEncryptionConfig. Its key cannot be swapped either: the
    provider sends nothing for a changed key (it associates only when there was none), so the cluster keeps using the
    old key, which the stack would then delete. Sources: EKS user guide enable-kms (the warning); terraform-provider-aws
    internal/service/eks/cluster.go (``ForceNewIfChange("encryption_config", ...)`` from one to none;
    AssociateEncryptionConfig only from none to one); EKS API AssociateEncryptionConfig."""
    out = []
    for old, new in _pairs(before, after, EKS):
        had, has = _secrets_key(before, old), (None if _ignored(new, "encryptionConfig") else _secrets_key(after, new))
        if _ignored(new, "encryptionConfig"):
            has = had
        if had and not has:
            out.append(
                f"{new.name}: Secrets envelope encryption (key {had}) removed from an existing cluster: EKS cannot disable it "
                "and the provider replaces the cluster; keep dynamo:cluster.secretsEncryption: true on this stack"
            )
        elif had and has and had != has:
            out.append(
                f"{new.name}: Secrets key {had} -> {has}: EKS keeps the key a cluster was given, and {had} would be deleted"
            )
    return out


@update_rule(AREA_CLUSTER_ACCESS)
def eks_update_authentication_mode_only_moves_to_api(before: Graph, after: Graph) -> list[str]:
    """The authentication mode moves CONFIG_MAP -> API_AND_CONFIG_MAP -> API and never back ("you can't change the
    authentication mode back to a mode that removes the EKS API and access entries"). Sources: EKS user guide "Change
    authentication mode to use access entries" (setting-up-access-entries); EKS API UpdateAccessConfigRequest."""
    order = {m: i for i, m in enumerate(("CONFIG_MAP", "API_AND_CONFIG_MAP", "API"))}
    out = []
    for old, new in _pairs(before, after, EKS):
        a = _get(old.inputs, "accessConfig", "authenticationMode", default="CONFIG_MAP")
        b = _get(new.inputs, "accessConfig", "authenticationMode", default=a)
        if order.get(b, -1) < order.get(a, -1):
            out.append(f"{new.name}: authenticationMode {a} -> {b}: EKS cannot move back from access entries")
    return out


@update_rule(AREA_KUBERNETES_VERSION)
def eks_update_moves_one_minor_version(before: Graph, after: Graph) -> list[str]:
    """An existing control plane moves one Kubernetes minor version per update and never back: UpdateClusterVersion to
    a version two minors ahead, or an older one, is refused by EKS after the `up` has started (the program looks the
    running version up first: components/cluster_source.py). Sources: EKS user guide "Update existing cluster to new
    Kubernetes version" (update-cluster: "update to the next minor version only", "You can't downgrade");
    terraform-provider-aws internal/service/eks/cluster.go (a changed ``version`` is one UpdateClusterVersion, in place)."""
    out = []
    for old, new in _pairs(before, after, EKS):
        a, b = (re.fullmatch(r"1\.(\d+)", str(r.inputs.get("version"))) for r in (old, new))
        if not a or not b:
            continue
        if int(b[1]) < int(a[1]):
            out.append(
                f"{new.name}: version {old.inputs.get('version')} -> {new.inputs.get('version')}: EKS cannot downgrade a cluster"
            )
        elif int(b[1]) - int(a[1]) > 1:
            out.append(
                f"{new.name}: version {old.inputs.get('version')} -> {new.inputs.get('version')}: EKS upgrades one minor "
                f"version per UpdateClusterVersion"
            )
    return out


@update_rule(AREA_CLUSTER_ACCESS)
def access_policy_association_is_replaced_delete_first(before: Graph, after: Graph) -> list[str]:
    """An access policy association whose scope changes (a namespace added to an entry) is replaced: its access scope,
    principal and policy are ForceNew in the provider. EKS keys an association by (cluster, principal, policy):
    AssociateAccessPolicy on an existing pair updates that one association, and the old resource's delete then
    disassociates the same pair, leaving the principal with no policy. The replacement must delete first
    (``deleteBeforeReplace``). Sources: EKS API AssociateAccessPolicy / DisassociateAccessPolicy (principalArn +
    policyArn identify the association); hashicorp/terraform-provider-aws internal/service/eks/access_policy_association.go
    (access_scope, policy_arn, principal_arn ForceNew; the id is cluster#principal#policy)."""
    out = []
    for old, new in _pairs(before, after, ACCESS_POLICY_ASSOCIATION):
        keys = ("accessScope",)  # a new principal or policy is another (principal, policy) pair: create-first is safe
        changed = [k for k in keys if old.inputs.get(k) != new.inputs.get(k)]
        if changed and not new.delete_before_replace:
            out.append(
                f"{new.name}: {', '.join(changed)} change replaces the association create-first; the delete of the old one then "
                f"disassociates the same (principal, policy) pair and leaves {new.inputs.get('principalArn')} without "
                f"{new.inputs.get('policyArn')}: replace it with deleteBeforeReplace"
            )
    return out


@update_rule(AREA_NODE_CREDENTIALS, AREA_UPDATES)
def named_iam_roles_keep_their_names(before: Graph, after: Graph) -> list[str]:
    """A role's name is replace-only (IAM has no rename; the provider's ``name`` is ForceNew), and a replaced Karpenter
    node role is a new role: nodes launched with the old one's instance profile lose their credentials when it is
    deleted. So a role whose planned name differs from the one it was created with keeps its name (``ignoreChanges:
    name``). Sources: IAM API (no UpdateRole field for the name); hashicorp/terraform-provider-aws
    internal/service/iam/role.go (``name`` ForceNew)."""
    out = []
    for old, new in _pairs(before, after, IAM_ROLE):
        a, b = old.inputs.get("name"), new.inputs.get("name")
        if a and b and a != b and not _ignored(new, "name"):
            out.append(
                f"{new.name}: role name {a} -> {b} replaces the role (IAM cannot rename one); keep the name (ignoreChanges: name)"
            )
    return out


# --------------------------------------------------------------------------- replace-only objects: immutable specs, subnets, the FSx cache's subnet


# Custom resource kinds whose CRD makes the whole spec immutable (x-kubernetes-validations ``self == oldSelf`` on spec):
# an update that changes it is refused by the API server mid-`up`. ComputeDomain: kubernetes-sigs/dra-driver-nvidia-gpu
# deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml ("A computeDomain.spec is immutable").
IMMUTABLE_SPEC_KINDS = (COMPUTE_DOMAIN,)


@update_rule(AREA_UPDATES, AREA_ULTRASERVERS_AND_ZONES)
def immutable_specs_never_change_in_place(before: Graph, after: Graph) -> list[str]:
    """An object whose CRD declares its spec immutable keeps the spec it was created with across every update (a
    replica or node-count change must not reach it). Source: the CRDs named in ``IMMUTABLE_SPEC_KINDS``; Kubernetes
    "CustomResourceDefinition validation rules" (transition rules: ``self == oldSelf`` refuses any change)."""
    out = []
    for typ in IMMUTABLE_SPEC_KINDS:
        for old, new in _pairs(before, after, typ):
            if old.inputs.get("spec") != new.inputs.get("spec") and not _ignored(new, "spec"):
                out.append(
                    f"{new.name}: spec {old.inputs.get('spec')} -> {new.inputs.get('spec')}: the API server refuses it "
                    f"({typ.rsplit(':', 1)[-1]}.spec is immutable)"
                )
    return out


@update_rule(AREA_UPDATES, AREA_ULTRASERVERS_AND_ZONES)
def subnets_are_never_re_cut(before: Graph, after: Graph) -> list[str]:
    """A subnet keeps its CIDR block across every update, and a new subnet takes a block no existing one holds: EC2 has no
    call that changes a subnet's block (ModifySubnetAttribute changes attributes only), so the provider replaces the
    subnet, create-first, and CreateSubnet refuses a block that overlaps an existing subnet's (InvalidSubnet.Conflict);
    the old subnet cannot be deleted first while nodes' and the cache's interfaces sit in it. So adding a zone or a
    Local Zone must leave every other subnet where it is. Sources: EC2 API reference, CreateSubnet ("The CIDR block of a
    subnet can't overlap ... other subnets in the VPC") and ModifySubnetAttribute; hashicorp/terraform-provider-aws
    internal/service/ec2/vpc_subnet.go (cidr_block and availability_zone ForceNew: a subnet that keeps its block but
    moves to another zone, as when a zone is removed from the middle of the list, is replaced the same way)."""
    out = []
    old = {r.name: str(r.inputs.get("cidrBlock")) for r in before.of(SUBNET)}
    for o, n in _pairs(before, after, SUBNET):
        for key in ("cidrBlock", "availabilityZone"):
            if str(o.inputs.get(key)) != str(n.inputs.get(key)) and not _ignored(n, key):
                out.append(
                    f"{n.name}: {key} {o.inputs.get(key)} -> {n.inputs.get(key)} replaces the subnet, with its nodes' and "
                    "the cache's network interfaces"
                )
    for n in after.of(SUBNET):
        if n.name in old:
            continue
        block = ipaddress.ip_network(str(n.inputs.get("cidrBlock")))
        clash = sorted(name for name, c in old.items() if ipaddress.ip_network(c).overlaps(block))
        if clash:
            out.append(
                f"{n.name}: new subnet {block} overlaps {', '.join(f'{c} ({old[c]})' for c in clash)}: CreateSubnet refuses it"
            )
    return out


@update_rule(AREA_UPDATES, AREA_ULTRASERVERS_AND_ZONES)
def gpu_node_groups_keep_their_subnets(before: Graph, after: Graph) -> list[str]:
    """A GPU node group keeps its subnets across every update: ``subnetIds`` is replace-only (CreateNodegroup takes them,
    UpdateNodegroupConfig has no field for them), and the program's groups are auto-named, so the replacement is created
    first: a second group of the same size launches beside the first (twice the GPU bill while both run, and on a
    reservation or Capacity Block in the old zone, no capacity for the new group). Moving ``gpuAvailabilityZone`` does
    it; adding or removing other zones does not (the GPU groups use the GPU zone's subnet only). Sources: EKS API
    reference, CreateNodegroup ``subnets`` and UpdateNodegroupConfig (no subnets); hashicorp/terraform-provider-aws
    internal/service/eks/node_group.go (subnet_ids ForceNew)."""
    out = []
    for o, n in _pairs(before, after, NODEGROUP):
        if _gpu_group(n) and o.inputs.get("subnetIds") != n.inputs.get("subnetIds") and not _ignored(n, "subnetIds"):
            out.append(
                f"{n.name}: subnetIds {o.inputs.get('subnetIds')} -> {n.inputs.get('subnetIds')} replaces the GPU node group, "
                "create-first: a second group of the same size runs beside it until the first is deleted"
            )
    return out


@update_rule(AREA_FSX_LUSTRE, AREA_RETENTION)
def fsx_cache_stays_in_its_subnet(before: Graph, after: Graph) -> list[str]:
    """The FSx for Lustre cache keeps its subnet across every update: ``subnetIds`` is replace-only, so a move (the GPU
    zone moved, and the cache follows it unless cacheAvailabilityZone is set) creates a new, empty file system and
    deletes the old one, or with storage.protect leaves it outside the stack, still billed. Sources: FSx API reference,
    CreateFileSystem SubnetIds (no UpdateFileSystem field changes it); hashicorp/terraform-provider-aws
    internal/service/fsx/lustre_file_system.go (subnet_ids ForceNew)."""
    out = []
    for o, n in _pairs(before, after, FSX):
        if o.inputs.get("subnetIds") != n.inputs.get("subnetIds") and not _ignored(n, "subnetIds"):
            out.append(
                f"{n.name}: subnetIds {o.inputs.get('subnetIds')} -> {n.inputs.get('subnetIds')} replaces the file system: a "
                "new, empty cache; keep its zone with cacheAvailabilityZone"
            )
    return out


# --------------------------------------------------------------------------- the front door's load balancer


@update_rule(AREA_LOAD_BALANCER)
def front_door_update_keeps_its_load_balancer(before: Graph, after: Graph) -> list[str]:
    """An update that keeps the front door keeps its NLB and the controller that manages it: the gateway's EnvoyProxy
    (whose Service the NLB belongs to) and the controller's release are the same resources after the update. Deleting
    the EnvoyProxy deletes the NLB, and its successor gets a new DNS name (clients of ``frontDoorUrl`` break); deleting
    the controller while the Service stays leaves the NLB unmanaged (its finalizer then blocks the Service's delete).
    Closing the door (no route left) deletes them as asked. Sources: AWS Load Balancer Controller docs v2 "Network
    Load Balancer" (the NLB's lifecycle follows the Service's) and "Installation" (uninstall: delete the Services of
    type LoadBalancer first)."""
    out = []
    door_stays = bool(after.of(HTTP_ROUTE))
    new_eps = {ep.name for ep, _ in _nlb_services(after)}
    for ep, _ in _nlb_services(before):
        if (
            door_stays
            and ep.name not in new_eps
            and not any(r.type == ENVOY_PROXY and r.name == ep.name for r in after.resources)
        ):
            out.append(
                f"{ep.name}: the update deletes (or renames) the gateway's EnvoyProxy while the front door's routes stay: "
                "its NLB is deleted and a new one gets a new DNS name"
            )
    if _nlb_services(after):
        new_rels = {h.name for h in after.of(HELM) if h.inputs.get("chart") == LBC_CHART}
        for h in before.of(HELM):
            if h.inputs.get("chart") == LBC_CHART and h.name not in new_rels:
                out.append(
                    f"{h.name}: the AWS Load Balancer Controller release is deleted or renamed while the front door keeps its NLB"
                )
    return out
