"""The nodes: GPU node software on the EKS NVIDIA AMI (``AREA_GPU_NODE_SOFTWARE``), EFA interfaces (``AREA_EFA``),
GPU node count and node group sizes (``AREA_NODE_COUNT``, ``AREA_NODE_GROUP_SIZES``), Kubernetes and AMI versions
(``AREA_KUBERNETES_VERSION``), and what a pod can reach of the node's AWS credentials (``AREA_NODE_CREDENTIALS``)."""

from __future__ import annotations

import re

from stacks.cluster import kubernetes_versions, pack
from stacks.registry.gpus import INSTANCES

from . import (
    AREA_EFA,
    AREA_GPU_NODE_SOFTWARE,
    AREA_KUBERNETES_VERSION,
    AREA_NODE_COUNT,
    AREA_NODE_CREDENTIALS,
    AREA_NODE_GROUP_SIZES,
    AREA_UPDATES,
    DGD,
    EC2NODECLASS,
    EKS,
    FSX,
    HELM,
    IAM_ROLE,
    JOB,
    LAUNCH_TEMPLATE,
    NETWORK_POLICY,
    NODEGROUP,
    RUNTIME_CLASS,
    SECURITY_GROUP,
    Graph,
    Res,
    _addon,
    _assigned,
    _attached,
    _efa_devices,
    _get,
    _gpu_nodegroups,
    _instance_type,
    _launch_template,
    _node_labels,
    pod_requests_efa,
    rule,
    _selects,
)


# --------------------------------------------------------------------------- GPU node software


@rule(AREA_GPU_NODE_SOFTWARE)
def gpu_operator_leaves_driver_and_toolkit_to_the_ami(g: Graph) -> list[str]:
    """On the EKS AL2023 NVIDIA AMI the GPU Operator installs neither the driver nor the NVIDIA Container Toolkit: the
    AMI ships both (the chart's defaults install both). Source: EKS user guide "Use P6e-GB200 UltraServers with Amazon
    EKS" ("you must disable the operator installation of the driver and toolkit"; gpu-operator-values.yaml
    driver.enabled false, toolkit.enabled false); gpu-operator v26.7.0 values.yaml (driver/toolkit enabled: true)."""
    out = []
    nvidia_ami = any(str(ng.inputs.get("amiType", "")).endswith("_NVIDIA") for ng in g.of(NODEGROUP))
    if not nvidia_ami:
        return out
    for rel in g.of(HELM):
        if rel.inputs.get("chart") != "gpu-operator":
            continue
        values = rel.inputs.get("values") or {}
        for part in ("driver", "toolkit"):
            if _get(values, part, "enabled") is not False:
                out.append(f"{rel.name}: {part}.enabled is not false on the AL2023 NVIDIA AMI, which ships the {part}")
    return out


def _pods_naming(g: Graph, runtime_class: str) -> list[tuple[str, dict]]:
    """(``dgd/component`` or Job name, pod spec) of every DGD component and Job pod that names ``runtime_class``."""
    out = [
        (f"{d.name}/{c['name']}", c["podTemplate"]["spec"])
        for d in g.of(DGD)
        for c in _get(d.inputs, "spec", "components", default=[])
    ]
    out += [(j.name, _get(j.inputs, "spec", "template", "spec", default={}) or {}) for j in g.of(JOB)]
    return [(n, p) for n, p in out if p.get("runtimeClassName") == runtime_class]


@rule(AREA_GPU_NODE_SOFTWARE)
def nvidia_runtime_class_selects_gpu_nodes(g: Graph) -> list[str]:
    """The ``nvidia`` RuntimeClass on an EKS cluster carries ``scheduling.nodeSelector`` labels that every GPU node group
    has and the system node group does not, so a pod naming the class lands only where the handler exists.

    On the GPU Operator path the program registers no RuntimeClass: the operator creates its own (``operator.runtimeClass``,
    default ``nvidia``), and no value of the chart gives it a node selector (the chart's values.yaml as read sets only its
    name; a node selector exists for the Kata runtime classes, ``kataManager.config.runtimeClasses[].nodeSelector``; the
    operator creates nvidia, nvidia-cdi and nvidia-legacy with no way to turn them off, NVIDIA/gpu-operator#2145). That
    class cannot be checked here, so the rule checks the pods instead: every DGD component or Job pod that names it
    requests ``nvidia.com/gpu`` (only GPU nodes advertise it) or selects no non-GPU node group. Unverified: the v26.7.0
    chart and operator this project pins were not read (the values.yaml read is NVIDIA/gpu-operator
    deployments/gpu-operator/values.yaml @d7413be9, an older release). Source: Kubernetes API node.k8s.io/v1
    ``Scheduling.nodeSelector`` (merged into the pod's nodeSelector at admission); awslabs/amazon-eks-ami nodeadm
    runtime_config.go (the nvidia runtime on the NVIDIA AMI only)."""
    out = []
    if not g.of(EKS):
        return out
    for rc in g.of(RUNTIME_CLASS):
        if rc.inputs.get("handler") != "nvidia":
            continue
        sel = _get(rc.inputs, "scheduling", "nodeSelector") or {}
        if not sel:
            out.append(
                f"{rc.name}: RuntimeClass nvidia without scheduling.nodeSelector (its pods may land on nodes without the nvidia runtime)"
            )
            continue
        for ng in g.of(NODEGROUP):
            labels = _node_labels(g, ng)
            carries = all(labels.get(k) == v for k, v in sel.items())
            if ng in _gpu_nodegroups(g) and not carries:
                out.append(f"{rc.name}: nodeSelector {sel} does not select GPU node group {ng.name}")
            if ng not in _gpu_nodegroups(g) and carries:
                out.append(f"{rc.name}: nodeSelector {sel} also selects non-GPU node group {ng.name}")
    registered = {_get(rc.inputs, "metadata", "name") for rc in g.of(RUNTIME_CLASS)}
    gpu_groups = _gpu_nodegroups(g)
    for rel in g.of(HELM):
        if rel.inputs.get("chart") != "gpu-operator":
            continue
        name = _get(rel.inputs, "values", "operator", "runtimeClass", default="nvidia")
        if name in registered:
            continue
        for who, pod in _pods_naming(g, name):
            if any(
                "nvidia.com/gpu"
                in {**((c.get("resources") or {}).get("requests") or {}), **((c.get("resources") or {}).get("limits") or {})}
                for c in pod.get("containers") or []
            ):
                continue
            elsewhere = [ng.name for ng in g.of(NODEGROUP) if ng not in gpu_groups and _selects(pod, _node_labels(g, ng))]
            if elsewhere:
                out.append(
                    f"{who}: names RuntimeClass {name}, which the GPU Operator ({rel.name}) creates without "
                    f"scheduling.nodeSelector, requests no nvidia.com/gpu and may land on non-GPU node group(s) {elsewhere}"
                )
    return out


# --------------------------------------------------------------------------- EFA per GPU, the launch template's interfaces


def _gpu_workers(g: Graph):
    for dgd in g.of(DGD):
        for comp in _get(dgd.inputs, "spec", "components", default=[]):
            for c in comp["podTemplate"]["spec"].get("containers", []):
                lim = (c.get("resources") or {}).get("limits") or {}
                if "nvidia.com/gpu" in lim:
                    yield comp, lim


@rule(AREA_EFA)
def efa_requests_follow_the_instance(g: Graph) -> list[str]:
    """A worker that requests EFA devices requests its GPU count times the instance's EFA devices per GPU:
    p5/p5e 32 EFA / 8 GPU = 4, p5en 16 / 8 = 2, p6-b200 8 / 8 = 1 (the EFA interfaces the launch template attaches).
    Source: EC2 user guide "Maximize network bandwidth on Amazon EC2 instances with multiple network cards"
    (efa-acc-inst-types); EKS user guide "Manage EFA devices on Amazon EKS"."""
    out = []
    for ng in _gpu_nodegroups(g):
        shape = INSTANCES[_instance_type(g, ng)]
        lt = _launch_template(g, ng)
        devices = _efa_devices(lt)
        if devices and devices != shape.efa_interfaces:
            out.append(
                f"{ng.name}: launch template attaches {devices} EFA interfaces, {shape.instance_type} has {shape.efa_interfaces}"
            )
        mine = {id(c) for c in _assigned(g)[0][ng.name]}
        for comp, lim in _gpu_workers(g):
            if id(comp) not in mine:
                continue
            if "vpc.amazonaws.com/efa" in lim:
                want = int(lim["nvidia.com/gpu"]) * devices // shape.gpus_per_node
                if int(lim["vpc.amazonaws.com/efa"]) != want:
                    out.append(
                        f"{comp['name']}: requests {lim['vpc.amazonaws.com/efa']} EFA for {lim['nvidia.com/gpu']} GPU(s); "
                        f"{shape.instance_type} gives {devices // shape.gpus_per_node} per GPU ({want})"
                    )
    return out


@rule(AREA_EFA)
def efa_only_is_never_the_primary_interface(g: Graph) -> list[str]:
    """The primary network interface (network card 0, device 0) is ENA or EFA (with ENA), never EFA-only; each
    network card carries at most one interface at device index 0. Source: EC2 user guide
    "Maximize network bandwidth on Amazon EC2 instances with multiple network cards" (efa-acc-inst-types)."""
    out = []
    for lt in g.of(LAUNCH_TEMPLATE):
        nis = lt.inputs.get("networkInterfaces") or []
        primary = [n for n in nis if n.get("networkCardIndex", 0) == 0 and n.get("deviceIndex", 0) == 0]
        if nis and (len(primary) != 1 or primary[0].get("interfaceType") == "efa-only"):
            out.append(f"{lt.name}: primary interface is {primary}")
        slots = [(n.get("networkCardIndex", 0), n.get("deviceIndex", 0)) for n in nis]
        if len(slots) != len(set(slots)):
            out.append(f"{lt.name}: two interfaces on the same network card and device index")
    return out


@rule(AREA_EFA)
def single_node_without_efa_workers_gets_no_efa(g: Graph) -> list[str]:
    """A GPU node group of one node whose DGD workers request no EFA device (an aggregated target on one node) gets
    no EFA interfaces and no placement group: EFA is OS-bypass networking with other instances and a cluster placement
    group minimises latency between instances, neither of which one instance uses. Source: AWS ParallelCluster user
    guide "Elastic Fabric Adapter" (docs.aws.amazon.com/parallelcluster/v2/ug/efa.html); EC2 user guide "Placement
    groups" (cluster: instances close together for low-latency traffic between them)."""
    out = []
    assigned, _ = _assigned(g)
    for ng in _gpu_nodegroups(g):
        comps = assigned[ng.name]
        if not comps or int(_get(ng.inputs, "scalingConfig", "maxSize", default=0)) != 1:
            continue  # no serving entry sizes it (a cluster stack's pool), or more than one node
        if any(pod_requests_efa(c) for c in comps):
            continue
        lt = _launch_template(g, ng)
        if _efa_devices(lt):
            out.append(f"{ng.name}: one node, no worker requests vpc.amazonaws.com/efa, yet {_efa_devices(lt)} EFA interfaces")
        if lt is not None and _get(lt.inputs, "placement", "groupName"):
            out.append(f"{ng.name}: one node in placement group {_get(lt.inputs, 'placement', 'groupName')}")
    return out


# --------------------------------------------------------------------------- node count, node group sizes


@rule(AREA_NODE_COUNT)
def gpu_node_group_holds_the_dgd(g: Graph) -> list[str]:
    """Each GPU node group's size holds every GPU and EFA device of the DGD workers that land on it, summed over all
    the stack's DGDs (replicas included); otherwise pods stay Pending and ``pulumi up`` waits out the DGD timeout.
    Every GPU worker lands on exactly one GPU node group (its nodeSelector/affinity against the groups' labels).
    Capacity per node: the instance's GPUs and the EFA interfaces its launch template attaches. Source: Kubernetes
    scheduling of extended resources ("Resource Management for Pods and Containers", "Assigning Pods to Nodes");
    EKS user guide "Manage EFA devices on Amazon EKS"."""
    assigned, out = _assigned(g)
    for ng in _gpu_nodegroups(g):
        shape = INSTANCES[_instance_type(g, ng)]
        cap = {"nvidia.com/gpu": shape.gpus_per_node}
        devices = _efa_devices(_launch_template(g, ng))
        if devices:
            cap["vpc.amazonaws.com/efa"] = devices
        size = int(_get(ng.inputs, "scalingConfig", "desiredSize", default=0))
        needed, too_big = pack({"spec": {"components": assigned[ng.name]}}, cap)
        out += [f"{ng.name}: {t}" for t in too_big]
        if needed > size or needed > int(_get(ng.inputs, "scalingConfig", "maxSize", default=0)):
            out.append(f"{ng.name}: desiredSize {size} < {needed} {shape.instance_type} nodes the DGDs need")
    return out


@rule(AREA_NODE_GROUP_SIZES)
def scaling_config_in_order(g: Graph) -> list[str]:
    """Every node group's scalingConfig has min <= desired <= max (CreateNodegroup refuses "minSize can't be greater
    than desiredSize" and "desiredSize can't be greater than maxSize"). Source: EKS API ``NodegroupScalingConfig``;
    the errors as AWS returns them in sassoftware/viya4-iac-aws#298 and ministryofjustice/cloud-platform-infrastructure PR 4595."""
    out = []
    for ng in g.of(NODEGROUP):
        sc = ng.inputs.get("scalingConfig") or {}
        lo, want, hi = (int(sc.get(k, 0)) for k in ("minSize", "desiredSize", "maxSize"))
        if not lo <= want <= hi:
            out.append(f"{ng.name}: scalingConfig min {lo}, desired {want}, max {hi} is not min <= desired <= max")
    return out


@rule(AREA_NODE_GROUP_SIZES)
def desired_size_sent_on_every_update(g: Graph) -> list[str]:
    """A GPU node group's desired size is never in ``ignoreChanges``: the provider sends the whole scalingConfig in one
    UpdateNodegroupConfig, so an ignored desired size goes out unchanged with the new bounds, and EKS refuses a new
    minimum above it ("Minimum capacity N can't be greater than desired size M") or a new maximum below it, while a
    Capacity Block group (min 0) accepts the new maximum and adds no node. Source: terraform-provider-aws
    internal/service/eks/node_group.go (update: ``expandNodegroupScalingConfig`` of the whole block);
    terraform-aws-eks issues 748, 2030 and 3683 (the error with ``ignore_changes = [scaling_config[0].desired_size]``)."""
    return [
        f"{ng.name}: scalingConfig.desiredSize is in ignoreChanges: a resize sends the old desired size with the new bounds"
        for ng in _gpu_nodegroups(g)
        if any(k in ("scalingConfig", "scalingConfig.desiredSize") for k in ng.ignore_changes)
    ]


# A Dynamo runtime image (vllm-runtime 12.2 GB in ai-dynamo/dynamo#1058, 2025), 1.5x on disk (compressed layers and the
# unpacked snapshot), on top of EKS's 20 GiB default: the least root disk a node that pulls one needs.
MIN_RUNTIME_NODE_DISK_GIB = 20 + 1.5 * 12.2


@rule(AREA_NODE_GROUP_SIZES)
def system_nodes_hold_a_runtime_image(g: Graph) -> list[str]:
    """A managed node group without a launch template of ours (the system group: the frontends and download Jobs pull
    the multi-GB Dynamo runtime image there) sets ``diskSize`` above EKS's default: "The default disk size is 20 GiB
    for Linux" (EKS API reference, CreateNodegroup diskSize), which one runtime image unpacked already fills (the vLLM
    runtime image was 12.2 GB in ai-dynamo/dynamo#1058; containerd keeps its layers and its snapshot). Sources: EKS API
    reference CreateNodegroup (diskSize); ai-dynamo/dynamo#1058 ("The resulting runtime container size is around 12.2 GB")."""
    out = []
    for ng in g.of(NODEGROUP):
        if ng.inputs.get("launchTemplate"):
            continue  # the launch template's block device mapping sizes the disk (500 GiB on the GPU groups)
        size = ng.inputs.get("diskSize")
        if size is None or float(size) < MIN_RUNTIME_NODE_DISK_GIB:
            out.append(
                f"{ng.name}: diskSize {size if size is not None else 'unset (EKS default 20 GiB)'}: its pods pull a Dynamo "
                f"runtime image, which needs at least {MIN_RUNTIME_NODE_DISK_GIB:.0f} GiB"
            )
    return out


# --------------------------------------------------------------------------- Kubernetes version, AMI release


@rule(AREA_KUBERNETES_VERSION)
def kubernetes_version_in_standard_support(g: Graph) -> list[str]:
    """The control plane runs a Kubernetes version in EKS standard support (14 months from release; extended
    support costs extra per cluster hour): 1.34 or newer today, pinned in stacks/registry/versions.yaml.
    Source: EKS user guide "Understand the Kubernetes version lifecycle on EKS" (kubernetes-versions)."""
    out = []
    for c in g.of(EKS):
        v = str(c.inputs.get("version"))
        ok = re.fullmatch(r"1\.(\d+)", v)
        if v not in kubernetes_versions() or not ok or int(ok[1]) < 34:
            out.append(f"{c.name}: version {v!r} is not in standard support ({', '.join(kubernetes_versions())})")
    return out


@rule(AREA_KUBERNETES_VERSION)
def upgrade_policy_is_sent(g: Graph) -> list[str]:
    """The cluster says what happens at the end of standard support (``upgradePolicy.supportType`` STANDARD or
    EXTENDED) on create and on every update: without it a cluster created through the API gets EXTENDED, and a
    version past standard support then bills the extended-support hour ($0.60 instead of $0.10) unseen. Setting it is
    an in-place update. Sources: EKS user guide "Enable EKS extended support" ("clusters created with the AWS API have
    extended support enabled"), "View current cluster upgrade policy"; EKS API UpgradePolicyRequest; CloudFormation
    AWS::EKS::Cluster UpgradePolicy ("Update requires: No interruption")."""
    out = []
    for c in g.of(EKS):
        st = _get(c.inputs, "upgradePolicy", "supportType")
        if st not in ("STANDARD", "EXTENDED"):
            out.append(
                f"{c.name}: upgradePolicy.supportType {st!r} is not sent (STANDARD or EXTENDED): EKS takes EXTENDED for an "
                "API-created cluster, billed at the extended-support price once the version leaves standard support"
            )
    return out


@rule(AREA_KUBERNETES_VERSION)
def node_groups_follow_the_control_plane_version(g: Graph) -> list[str]:
    """Every managed node group names its Kubernetes ``version``, the cluster's: a group without one stays on the
    version it was created with when the control plane moves (the provider sends no UpdateNodegroupVersion), and EKS
    then refuses the next control-plane step ("If your cluster has managed node groups attached to it, all of your node
    groups' Kubernetes versions must match the cluster's Kubernetes version in order to update the cluster to a new
    Kubernetes version"). ``version`` is valid with a launch template that names no AMI. Sources: EKS API reference,
    UpdateClusterVersion; CreateNodegroup ``version`` ("If you specify launchTemplate, and your launch template uses a
    custom AMI, then don't specify version")."""
    versions = {str(c.inputs.get("version")) for c in g.of(EKS) if c.inputs.get("version")}
    out = []
    for ng in g.of(NODEGROUP):
        v = ng.inputs.get("version")
        if not v:
            out.append(
                f"{ng.name}: no version: the group stays behind when the control plane moves, and EKS refuses the "
                f"next control-plane step while it is behind; set version to the cluster's ({', '.join(sorted(versions)) or '?'})"
            )
        elif versions and str(v) not in versions:
            out.append(f"{ng.name}: version {v} is not the cluster's ({', '.join(sorted(versions))})")
    return out


# An EKS AMI release version: <Kubernetes minor>.<patch>-<date> (awslabs/amazon-eks-ami CHANGELOG.md, "Release version").
_RELEASE_VERSION = re.compile(r"(1\.\d+)\.\d+-\d{8}")


@rule(AREA_KUBERNETES_VERSION, AREA_UPDATES)
def nodes_run_a_pinned_ami_release(g: Graph) -> list[str]:
    """Every managed node group names its AMI release (``releaseVersion``) of its own Kubernetes version, and every
    EC2NodeClass a dated AL2023 alias: without them EKS launches "the latest available AMI version for the node
    group's current Kubernetes version" (EKS API reference, CreateNodegroup releaseVersion), so a launch template change
    made for another reason also moves every node to a new AMI and NVIDIA driver; Karpenter's ``@latest`` drifts every
    node at each AMI release ("not recommended for production": karpenter.sh docs, Managing AMIs). Each release version
    belongs to one Kubernetes version, which it starts with (1.35.6-20260714 for 1.35). Sources: EKS API reference
    CreateNodegroup and UpdateNodegroupVersion (releaseVersion); awslabs/amazon-eks-ami CHANGELOG.md ("AMI Details":
    release version per Kubernetes version); karpenter.sh docs "Managing AMIs"."""
    out = []
    for ng in g.of(NODEGROUP):
        rel, version = ng.inputs.get("releaseVersion"), ng.inputs.get("version")
        m = _RELEASE_VERSION.fullmatch(str(rel or ""))
        if not m:
            out.append(
                f"{ng.name}: releaseVersion {rel!r}: the group takes EKS's newest AMI on every update; pin a release like 1.35.6-20260714"
            )
        elif version is not None and m[1] != str(version):
            out.append(f"{ng.name}: releaseVersion {rel} is an AMI release of Kubernetes {m[1]}, the group runs {version}")
    for nc in g.of(EC2NODECLASS):
        for term in _get(nc.inputs, "spec", "amiSelectorTerms", default=[]) or []:
            alias = str(term.get("alias") or "")
            if alias and not re.fullmatch(r"al2023@v\d{8}", alias):
                out.append(
                    f"{nc.name}: amiSelectorTerms alias {alias!r}: Karpenter drifts every node on each AMI release; "
                    "pin al2023@vYYYYMMDD"
                )
    return out


# --------------------------------------------------------------------------- what a pod can reach of AWS credentials


EC2_TRUST = "ec2.amazonaws.com"


def _node_roles(g: Graph) -> list[Res]:
    """The IAM roles EC2 instances assume (the node groups' and Karpenter's node roles)."""
    return [r for r in g.of(IAM_ROLE) if EC2_TRUST in str(r.inputs.get("assumeRolePolicy", ""))]


# AMI types whose EKS-made launch template requires IMDSv2 with hop limit 1 (see pods_cannot_reach_the_node_role).
EKS_DEFAULT_IMDS_HOP_1_AMI_PREFIX = "AL2023_"


def _named_roles(g: Graph) -> list[Res]:
    return [r for r in g.of(IAM_ROLE) if r.inputs.get("name")]


@rule(AREA_NODE_CREDENTIALS)
def named_iam_roles_carry_their_region(g: Graph) -> list[str]:
    """An IAM role the program names itself carries the cluster's Region in its name: IAM names are unique in the
    account, EKS cluster names only per Region, so ``dynamo-<stack>-karpenter`` of a stack in us-east-1 and one of the
    same name in us-west-2 would collide (the second CreateRole fails mid-`up` with EntityAlreadyExists). Sources: IAM
    user guide, "IAM identifiers" (friendly names unique within the account); EKS API CreateCluster (name unique in the
    Region); IAM API CreateRole (EntityAlreadyExists, RoleName at most 64 characters)."""
    # The Region the controllers that hold these roles are told (the load balancer controller's ``region``, Karpenter's
    # ``AWS_REGION``): the cluster's.
    regions = {str(_get(r.inputs, "values", "region")) for r in g.of(HELM) if _get(r.inputs, "values", "region")}
    regions |= {
        str(e.get("value"))
        for r in g.of(HELM)
        for e in (_get(r.inputs, "values", "controller", "env") or [])
        if isinstance(e, dict) and e.get("name") == "AWS_REGION"
    }
    out = []
    for r in _named_roles(g):
        name = str(r.inputs["name"])
        if len(name) > 64:
            out.append(f"{r.name}: role name {name!r} is longer than IAM's 64 characters")
        elif regions and not any(reg in name for reg in regions) and not re.search(r"-[0-9a-f]{6}$", name):
            out.append(
                f"{r.name}: role name {name!r} does not carry the cluster's Region ({', '.join(sorted(regions))}): a stack "
                "with the same cluster name in another Region would claim the same role"
            )
    return out


@rule(AREA_NODE_CREDENTIALS)
def pods_cannot_reach_the_node_role(g: Graph) -> list[str]:
    """Every GPU launch template and EC2NodeClass requires IMDSv2 with a PUT response hop limit of 1, so a token
    response cannot reach a pod's network namespace and no pod reads the node role's credentials; the node roles hold
    neither the VPC CNI's ENI policy nor anything account-wide beyond the worker and ECR read-only policies (SSM Session
    Manager only where asked for). Sources: EKS Best Practices Guide, security, "Restrict access to the instance
    profile assigned to the worker node" (IMDSv2, hop count 1); Karpenter v1 EC2NodeClass ``metadataOptions``
    (default ``httpPutResponseHopLimit: 1``, ``httpTokens: required``); EKS user guide "Configure the Amazon VPC CNI
    plugin to use IRSA" and "IAM roles for Amazon EKS add-ons" (the CNI policy on the add-on's own role, not the
    node's). A managed node group without a launch template of ours (the system group) runs on the launch template EKS
    makes for it, which has both only for an AL2023 AMI type: EKS user guide "Upgrade from Amazon Linux 2 to Amazon
    Linux 2023" ("AL2023 requires IMDSv2 by default"; "For IMDSv2, the default hop count for managed node groups is
    set to 1. This means that containers won't have access to the node's credentials using IMDS"), so such a group
    must name an AL2023 AMI type."""
    from stacks.cluster.identity import CNI_POLICY, NODE_POLICIES, SSM_POLICY

    out = []
    for ng in g.of(NODEGROUP):
        if not ng.inputs.get("launchTemplate") and not str(ng.inputs.get("amiType") or "").startswith(
            EKS_DEFAULT_IMDS_HOP_1_AMI_PREFIX
        ):
            out.append(
                f"{ng.name}: no launch template of ours and amiType {ng.inputs.get('amiType')!r}: EKS's own launch "
                f"template gives IMDSv2 with hop limit 1 only to {EKS_DEFAULT_IMDS_HOP_1_AMI_PREFIX}* AMI types, so a pod "
                "could take the node role"
            )
    for lt in g.of(LAUNCH_TEMPLATE):
        md = lt.inputs.get("metadataOptions") or {}
        if md.get("httpTokens") != "required" or md.get("httpPutResponseHopLimit") != 1:
            out.append(f"{lt.name}: metadataOptions {md}: a pod can take the node role (IMDSv2 required, hop limit 1)")
    for nc in g.of(EC2NODECLASS):
        md = _get(nc.inputs, "spec", "metadataOptions", default={}) or {}
        if md.get("httpTokens") != "required" or md.get("httpPutResponseHopLimit") != 1:
            out.append(f"{nc.name}: metadataOptions {md}: a pod can take the node role (IMDSv2 required, hop limit 1)")
    allowed = {f"arn:aws:iam::aws:policy/{p}" for p in (*NODE_POLICIES, SSM_POLICY)}
    for role in _node_roles(g):
        for arn in _attached(g, role):
            if arn.endswith("/" + CNI_POLICY):
                out.append(
                    f"{role.name}: node role holds {CNI_POLICY} (any ENI in the account); it belongs to the vpc-cni add-on's own role"
                )
            elif arn not in allowed:
                out.append(f"{role.name}: node role holds {arn}, beyond what a kubelet needs ({sorted(allowed)})")
    return out


@rule(AREA_NODE_CREDENTIALS)
def vpc_cni_has_its_own_identity_before_the_nodes(g: Graph) -> list[str]:
    """With the CNI policy off the node role, aws-node gets its credentials only through the EKS Pod Identity agent: the
    ``vpc-cni`` add-on carries a Pod Identity association for its service account ``aws-node`` to a role holding
    ``AmazonEKS_CNI_Policy``, and both it and ``eks-pod-identity-agent`` exist before any node group, or a new node's
    aws-node cannot assign pod IPs and the node never becomes Ready. Sources: EKS user guide "IAM roles for Amazon EKS
    add-ons" (Pod Identity association on the add-on; the agent must run), "Amazon VPC CNI" (service account aws-node);
    terraform-aws-modules/terraform-aws-eks v21 ``addons`` (``before_compute = true`` for vpc-cni and
    eks-pod-identity-agent)."""
    from stacks.cluster.identity import CNI_POLICY

    if not g.of(NODEGROUP) and not g.of(EC2NODECLASS):
        return []
    cni, agent = _addon(g, "vpc-cni"), _addon(g, "eks-pod-identity-agent")
    if cni is None or agent is None:
        return [
            f"the cluster's nodes need the vpc-cni and eks-pod-identity-agent add-ons (found: vpc-cni {cni is not None}, "
            f"eks-pod-identity-agent {agent is not None})"
        ]
    out = []
    assocs = cni.inputs.get("podIdentityAssociations") or []
    ours = [a for a in assocs if a.get("serviceAccount") == "aws-node"]
    if not ours:
        out.append(f"{cni.name}: no Pod Identity association for aws-node: the CNI would need the node role's {CNI_POLICY}")
    for a in ours:
        role = next(
            (r for r in g.of(IAM_ROLE) if str(a.get("roleArn", "")).endswith("/" + str(r.inputs.get("name") or r.name))), None
        )
        if role is None or not any(arn.endswith("/" + CNI_POLICY) for arn in _attached(g, role)):
            out.append(f"{cni.name}: aws-node's Pod Identity role {a.get('roleArn')} does not hold {CNI_POLICY}")
    for ng in g.of(NODEGROUP):
        for addon in (cni, agent):
            if addon.urn not in ng.dependencies:
                out.append(f"{ng.name}: created without waiting for the {addon.inputs.get('addonName')} add-on")
    return out


@rule(AREA_NODE_CREDENTIALS)
def network_policies_are_enforced(g: Graph) -> list[str]:
    """A NetworkPolicy the stack registers on EKS is enforced only when the VPC CNI add-on runs its network policy
    agent: configuration values ``{"enableNetworkPolicy": "true"}`` (VPC CNI >= 1.14). Source: EKS user guide
    "Restrict Pod network traffic with Kubernetes network policies" ("Enable the network policy parameter for the
    add-on")."""
    import json

    policies = g.of(NETWORK_POLICY)
    if not policies or not g.of(EKS):
        return []
    cni = _addon(g, "vpc-cni")
    raw = (cni.inputs.get("configurationValues") if cni else None) or "{}"
    if str(json.loads(raw).get("enableNetworkPolicy")) != "true":
        names = sorted({str(_get(p.inputs, "metadata", "name")) for p in policies})
        return [
            f"{len(names)} NetworkPolicies ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) are not enforced: "
            f'the vpc-cni add-on\'s configurationValues {raw} lack enableNetworkPolicy: "true"'
        ]
    return []


def _node_security_groups(g: Graph) -> list[Res]:
    """The security groups the stack puts on GPU nodes besides EKS's cluster group: those the launch templates' network
    interfaces name, and those an EC2NodeClass selects by tag."""
    ids = {
        sid
        for lt in g.of(LAUNCH_TEMPLATE)
        for ni in (lt.inputs.get("networkInterfaces") or [])
        for sid in (ni.get("securityGroups") or [])
    }
    terms = [
        t.get("tags") or {}
        for nc in g.of(EC2NODECLASS)
        for t in (_get(nc.inputs, "spec", "securityGroupSelectorTerms", default=[]) or [])
    ]
    return [
        sg
        for sg in g.of(SECURITY_GROUP)
        if sg.id in ids or any(t and all((sg.inputs.get("tags") or {}).get(k) == v for k, v in t.items()) for t in terms)
    ]


@rule(AREA_NODE_CREDENTIALS)
def gpu_node_security_group_admits_only_itself(g: Graph) -> list[str]:
    """The security group the GPU nodes carry for EFA admits and sends all traffic to and from itself only, plus,
    where the cache is FSx for Lustre, Lustre's client ports (TCP 988, 1018-1023) from the file system's security
    group. Every other path runs through EKS's cluster security group: a VPC-wide or internet rule here opens the
    nodes, and the model code on them, to every host of the VPC. Sources: EC2 user guide, "Prepare an EFA-enabled
    security group"; FSx for Lustre user guide, "File system access control with Amazon VPC" (Lustre client rules);
    EKS user guide, "View Amazon EKS security group requirements for clusters"."""
    from stacks.cluster.network import LUSTRE_CLIENT_PORTS

    cache_sgs = {sid for fs in g.of(FSX) for sid in (fs.inputs.get("securityGroupIds") or [])}
    out = []
    for sg in _node_security_groups(g):
        if _get(sg.inputs, "tags", default={}).get("aws:eks:cluster-name"):
            continue  # EKS's own cluster security group (not registered by the stack, listed for completeness)
        for direction in ("ingress", "egress"):
            for r in sg.inputs.get(direction) or []:
                lustre = (
                    direction == "ingress"
                    and r.get("protocol") == "tcp"
                    and (r.get("fromPort"), r.get("toPort")) in LUSTRE_CLIENT_PORTS
                    and set(r.get("securityGroups") or []) <= cache_sgs
                    and r.get("securityGroups")
                )
                only_self = (
                    r.get("self") is True
                    and not r.get("cidrBlocks")
                    and not r.get("ipv6CidrBlocks")
                    and not r.get("securityGroups")
                )
                if not (only_self or lustre):
                    out.append(
                        f"{sg.name}: {direction} rule {r}: the GPU nodes' EFA group admits only itself (and Lustre's client "
                        "ports from the cache's group); other traffic goes through the cluster security group"
                    )
    return out
