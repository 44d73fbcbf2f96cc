"""Karpenter pools (``capacity: karpenter``). The objects stacks/cluster/karpenter.py builds and components/cluster.py
registers: the NodePool and EC2NodeClass custom resources, the Karpenter release, its IAM, Pod Identity, interruption
queue and rules. The source of each constraint is in the rule's docstring; the constants come from
stacks/cluster/karpenter.py (sigs.k8s.io/karpenter@v1.13.0). tests/test_karpenter.py runs every ``karpenter_*`` rule
on a failing graph."""

from __future__ import annotations

from typing import Optional

from stacks.cluster import pack, tolerates
from stacks.registry.gpus import INSTANCES

from . import (
    ACCESS_ENTRY,
    AREA_EFA,
    AREA_NODE_CREDENTIALS,
    DGD,
    EC2_TAG,
    EC2NODECLASS,
    EKS,
    EVENT_RULE,
    EVENT_TARGET,
    HELM,
    IAM_POLICY,
    IAM_ROLE,
    NODEPOOL,
    POD_IDENTITY,
    SECURITY_GROUP,
    SQS_QUEUE,
    SQS_QUEUE_POLICY,
    SUBNET,
    Graph,
    Res,
    _addon,
    _get,
    _gpu_nodegroups,
    _node_labels,
    _nodepool_labels,
    pod_requests_efa,
    _requirements,
    rule,
    _selects,
)


def _karpenter_release(g: Graph) -> Optional[Res]:
    return next((r for r in g.of(HELM) if str(r.inputs.get("chart", "")).endswith("/karpenter")), None)


def _req_values(np: Res, key: str) -> list[str]:
    return [v for r in _requirements(np) if r.get("key") == key and r.get("operator") == "In" for v in r.get("values") or []]


def _nodeclass_of(g: Graph, np: Res) -> Optional[Res]:
    ref = _get(np.inputs, "spec", "template", "spec", "nodeClassRef", default={}) or {}
    return g.k8s(EC2NODECLASS, ref.get("name")) if ref.get("kind") == "EC2NodeClass" else None


def _policy_statements(g: Graph) -> list[dict]:
    import json

    out = []
    for p in g.of(IAM_POLICY):
        doc = p.inputs.get("policy")
        try:
            doc = json.loads(doc) if isinstance(doc, str) else doc
        except ValueError:
            continue
        out += (doc or {}).get("Statement") or []
    return out


def _actions(st: dict) -> list[str]:
    a = st.get("Action") or []
    return [a] if isinstance(a, str) else list(a)


def _resources(st: dict) -> list[str]:
    r = st.get("Resource") or []
    return [r] if isinstance(r, str) else list(r)


def _gpu_components(g: Graph) -> list[tuple[Res, dict]]:
    return [
        (dgd, comp)
        for dgd in g.of(DGD)
        for comp in _get(dgd.inputs, "spec", "components", default=[])
        if any(
            "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
            for c in comp["podTemplate"]["spec"].get("containers", [])
        )
    ]


def _on_nodepool(g: Graph, np: Res) -> list[tuple[Res, dict]]:
    """The GPU worker components whose pods can land on the NodePool's nodes: selected by their nodeSelector/affinity
    and tolerating its taints."""
    labels = _nodepool_labels(np)
    taints = _get(np.inputs, "spec", "template", "spec", "taints", default=[]) or []
    return [
        (d, c)
        for d, c in _gpu_components(g)
        if _selects(c["podTemplate"]["spec"], labels) and all(tolerates(c["podTemplate"]["spec"], t) for t in taints)
    ]


@rule()
def karpenter_nodepool_requirements_are_valid(g: Graph) -> list[str]:
    """Every NodePool requirement is one Karpenter accepts: operators In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte,
    In with values; ``karpenter.sh/capacity-type`` values from on-demand, spot, reserved; no other ``karpenter.sh``
    label key; ``karpenter.k8s.aws/capacity-reservation-type`` values default or capacity-block and only with reserved;
    the instance types are GPU instances this project knows; the nodeClassRef names a registered EC2NodeClass; taint
    effects NoSchedule, PreferNoSchedule or NoExecute. Source: sigs.k8s.io/karpenter@v1.13.0
    pkg/apis/crds/karpenter.sh_nodepools.yaml (requirements, taints) and pkg/apis/v1/labels.go (capacity types);
    aws/karpenter-provider-aws designs/capacity-block-support.md (capacity-reservation-type)."""
    from stacks.cluster.karpenter import (
        CAPACITY_TYPE_LABEL,
        CAPACITY_TYPES,
        REQUIREMENT_OPERATORS,
        RESERVATION_TYPE_LABEL,
        RESERVATION_TYPES,
    )

    out = []
    for np in g.of(NODEPOOL):
        for r in _requirements(np):
            key, op, values = r.get("key", ""), r.get("operator"), r.get("values") or []
            if op not in REQUIREMENT_OPERATORS:
                out.append(f"{np.name}: requirement {key} operator {op!r} not one of {list(REQUIREMENT_OPERATORS)}")
            if op == "In" and not values:
                out.append(f"{np.name}: requirement {key} In without values")
            if key.split("/")[0].endswith("karpenter.sh") and key != CAPACITY_TYPE_LABEL:
                out.append(f"{np.name}: requirement on restricted label {key}")
        ctypes = _req_values(np, CAPACITY_TYPE_LABEL)
        if not ctypes:
            out.append(f"{np.name}: no {CAPACITY_TYPE_LABEL} requirement (Karpenter would default to on-demand)")
        bad = [v for v in ctypes if v not in CAPACITY_TYPES]
        if bad:
            out.append(f"{np.name}: {CAPACITY_TYPE_LABEL} values {bad} not in {list(CAPACITY_TYPES)}")
        rtypes = _req_values(np, RESERVATION_TYPE_LABEL)
        if [v for v in rtypes if v not in RESERVATION_TYPES]:
            out.append(f"{np.name}: {RESERVATION_TYPE_LABEL} values {rtypes} not in {list(RESERVATION_TYPES)}")
        if rtypes and ctypes != ["reserved"]:
            out.append(
                f"{np.name}: {RESERVATION_TYPE_LABEL} {rtypes} with capacity types {ctypes} (reservation types exist only for reserved)"
            )
        its = _req_values(np, "node.kubernetes.io/instance-type")
        if not its or [t for t in its if t not in INSTANCES]:
            out.append(f"{np.name}: instance types {its} are not GPU instances of the catalog ({', '.join(sorted(INSTANCES))})")
        if _nodeclass_of(g, np) is None:
            out.append(
                f"{np.name}: nodeClassRef {_get(np.inputs, 'spec', 'template', 'spec', 'nodeClassRef')} names no registered EC2NodeClass"
            )
        for t in _get(np.inputs, "spec", "template", "spec", "taints", default=[]) or []:
            if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                out.append(f"{np.name}: taint {t.get('key')} effect {t.get('effect')!r}")
    return out


@rule()
def karpenter_reservation_selector_exactly_for_reserved(g: Graph) -> list[str]:
    """A NodePool launches ``reserved`` capacity only from the reservations its EC2NodeClass selects with
    ``capacityReservationSelectorTerms`` (a Capacity Block is a reservation too), so the terms are there exactly when
    the NodePool asks for reserved (on-demand pools must not consume a reservation they do not name); a Capacity Block
    pool also requires ``capacity-reservation-type: capacity-block``; with reserved pools the release enables the
    ReservedCapacity feature gate, and the controller may describe reservations and launch into them. Source:
    karpenter.sh/docs/tasks/odcrs (v1.3 reservations, v1.6 Capacity Blocks, ReservedCapacity gate); terraform-aws-eks
    PR 3510 and eksctl-io/eksctl#8748 (ec2:DescribeCapacityReservations); aws/karpenter-provider-aws PR 7801
    (capacity-reservation/* on RunInstances)."""
    from stacks.cluster.karpenter import CAPACITY_TYPE_LABEL, RESERVATION_TYPE_LABEL

    out, reserved = [], False
    for np in g.of(NODEPOOL):
        nc = _nodeclass_of(g, np)
        if nc is None:
            continue
        terms = _get(nc.inputs, "spec", "capacityReservationSelectorTerms", default=[]) or []
        wants = "reserved" in _req_values(np, CAPACITY_TYPE_LABEL)
        reserved |= wants
        if wants and not terms:
            out.append(f"{np.name}: capacity type reserved but EC2NodeClass {nc.name} selects no capacity reservation")
        if terms and not wants:
            out.append(
                f"{np.name}: EC2NodeClass {nc.name} selects reservations {terms} but the NodePool does not ask for reserved capacity"
            )
        if any(not (t.get("id") or t.get("tags")) for t in terms):
            out.append(f"{nc.name}: capacityReservationSelectorTerms {terms} name neither an id nor tags")
        if "capacity-block" in _req_values(np, RESERVATION_TYPE_LABEL) and not terms:
            out.append(f"{np.name}: capacity-block pool without a selected Capacity Block")
    if reserved:
        rel = _karpenter_release(g)
        if rel is None or _get(rel.inputs, "values", "settings", "featureGates", "reservedCapacity") is not True:
            out.append("reserved NodePools but the Karpenter release does not set settings.featureGates.reservedCapacity: true")
        sts = _policy_statements(g)
        if not any("ec2:DescribeCapacityReservations" in _actions(st) for st in sts):
            out.append("reserved NodePools but no controller policy allows ec2:DescribeCapacityReservations")
        if not any(
            "ec2:RunInstances" in _actions(st) and any(":capacity-reservation/" in r for r in _resources(st)) for st in sts
        ):
            out.append("reserved NodePools but no controller policy allows ec2:RunInstances on capacity-reservation/*")
    return out


@rule()
def karpenter_nodeclass_role_joins_the_cluster(g: Graph) -> list[str]:
    """The EC2NodeClass ``role`` is an IAM role the stack creates, trusted by EC2, with the node policies, and it has
    an EKS access entry of type EC2_LINUX (the cluster's authentication mode is API: a node whose role has no access
    entry cannot join); the controller may pass exactly that role to EC2 (Karpenter creates the instance profile from
    it). Source: EKS API CreateAccessEntry ("If the principalArn is for an IAM role that's used for self-managed Amazon
    EC2 nodes, specify EC2_LINUX"); Karpenter getting-started CloudFormation (KarpenterNodeRole, AllowPassingInstanceRole)."""
    import json

    out = []
    roles = {r.inputs.get("name"): r for r in g.of(IAM_ROLE) if r.inputs.get("name")}
    passable = [r for st in _policy_statements(g) if "iam:PassRole" in _actions(st) for r in _resources(st)]
    for nc in g.of(EC2NODECLASS):
        role = _get(nc.inputs, "spec", "role")
        r = roles.get(role)
        if r is None:
            out.append(f"{nc.name}: role {role!r} is not an IAM role of this stack")
            continue
        trust = r.inputs.get("assumeRolePolicy")
        trust = json.loads(trust) if isinstance(trust, str) else trust or {}
        if not any("ec2.amazonaws.com" in json.dumps(st.get("Principal")) for st in trust.get("Statement") or []):
            out.append(f"{nc.name}: role {role} is not trusted by ec2.amazonaws.com")
        if not any(
            e.inputs.get("type") == "EC2_LINUX" and str(e.inputs.get("principalArn", "")).endswith(f":role/{role}")
            for e in g.of(ACCESS_ENTRY)
        ):
            out.append(f"{nc.name}: role {role} has no EC2_LINUX access entry (its nodes cannot join the cluster)")
        if not any(str(p).endswith(f":role/{role}") for p in passable):
            out.append(f"{nc.name}: the controller may not iam:PassRole {role}")
    return out


@rule(AREA_EFA)
def karpenter_efa_pools_name_their_interfaces(g: Graph) -> list[str]:
    """A NodePool whose workers request ``vpc.amazonaws.com/efa`` uses an EC2NodeClass that names its network
    interfaces: the primary ``interface`` at card 0 / device 0, one ``efa-only`` interface per EFA card of the instance
    type, no two on one (card, device) slot and at most one ``efa-only`` per card. Without ``networkInterfaces``
    Karpenter launches an ENA+EFA interface on every card, each taking subnet IPs. Source: karpenter-provider-aws
    @v1.13.1 pkg/providers/launchtemplate/launchtemplate.go generateNetworkInterfaces (the EFACount path),
    pkg/providers/instancetype/types.go efas (EFA capacity = the count of efa-only interfaces),
    pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml (networkInterfaces enum and CEL rules),
    designs/efa-for-static-capacity.md ("IP optimized")."""
    out = []
    classes = {_get(nc.inputs, "metadata", "name"): nc for nc in g.of(EC2NODECLASS)}
    for np in g.of(NODEPOOL):
        its = _req_values(np, "node.kubernetes.io/instance-type")
        if len(its) != 1 or its[0] not in INSTANCES or not any(pod_requests_efa(c) for _, c in _on_nodepool(g, np)):
            continue
        shape = INSTANCES[its[0]]
        ref = _get(np.inputs, "spec", "template", "spec", "nodeClassRef", "name")
        nc = classes.get(ref)
        nis = (_get(nc.inputs, "spec", "networkInterfaces", default=None) or []) if nc is not None else []
        if not nis:
            out.append(
                f"{np.name}: EFA workers, but EC2NodeClass {ref!r} names no networkInterfaces (an ENA+EFA "
                f"interface on every card)"
            )
            continue
        primary = [n for n in nis if (n.get("networkCardIndex"), n.get("deviceIndex")) == (0, 0)]
        if [n.get("interfaceType") for n in primary] != ["interface"]:
            out.append(f"{ref}: the primary (card 0, device 0) is {primary}, not one 'interface'")
        slots = [(n.get("networkCardIndex"), n.get("deviceIndex")) for n in nis]
        if len(slots) != len(set(slots)):
            out.append(f"{ref}: two interfaces on one (card, device) slot")
        efa_cards = [n.get("networkCardIndex") for n in nis if n.get("interfaceType") == "efa-only"]
        if len(efa_cards) != len(set(efa_cards)):
            out.append(f"{ref}: more than one efa-only interface on a card")
        if sorted(efa_cards) != sorted(shape.efa_cards):
            out.append(
                f"{ref}: efa-only on cards {sorted(efa_cards)}, {shape.instance_type} has EFA on {sorted(shape.efa_cards)}"
            )
    return out


@rule()
def karpenter_node_limits_hold_the_dgds(g: Graph) -> list[str]:
    """A NodePool's ``limits`` (``nodes`` and ``nvidia.com/gpu``) hold every GPU worker that lands on it, packed on its
    instance type (GPU and EFA devices per node): past its limits Karpenter launches nothing and the workers stay
    Pending. Every GPU worker lands on exactly one GPU pool. Source: sigs.k8s.io/karpenter@v1.13.0
    karpenter.sh_nodepools.yaml ("Limits define a set of bounds for provisioning capacity"; ``nodes``:
    pkg/utils/resources/resources.go); Kubernetes scheduling of extended resources."""
    out = []
    nodepools = g.of(NODEPOOL)
    for np in nodepools:
        its = _req_values(np, "node.kubernetes.io/instance-type")
        if len(its) != 1 or its[0] not in INSTANCES:
            continue
        shape = INSTANCES[its[0]]
        comps = [c for _, c in _on_nodepool(g, np)]
        cap = {"nvidia.com/gpu": shape.gpus_per_node}
        if any(pod_requests_efa(c) for c in comps):
            cap["vpc.amazonaws.com/efa"] = shape.efa_interfaces
        needed, too_big = pack({"spec": {"components": comps}}, cap)
        limits = _get(np.inputs, "spec", "limits", default={}) or {}
        nodes = int(str(limits.get("nodes", 0)) or 0)
        gpus = int(str(limits.get("nvidia.com/gpu", 0)) or 0)
        if too_big:
            out.append(f"{np.name}: no {shape.instance_type} holds " + "; ".join(too_big))
        if needed > nodes:
            out.append(f"{np.name}: limits.nodes {nodes} < {needed} {shape.instance_type} the DGDs need")
        if needed * shape.gpus_per_node > gpus and needed:
            out.append(
                f"{np.name}: limits nvidia.com/gpu {gpus} < {needed * shape.gpus_per_node} on the {needed} nodes the DGDs need"
            )
    if nodepools:
        groups = _gpu_nodegroups(g)
        for d, c in _gpu_components(g):
            pod = c["podTemplate"]["spec"]
            n = sum(1 for np in nodepools if (d, c) in [(x, y) for x, y in _on_nodepool(g, np)])
            n += sum(1 for ng in groups if _selects(pod, _node_labels(g, ng)))
            if n != 1:
                out.append(
                    f"{d.name}/{c['name']}: lands on {n} GPU pools (select nvidia.com/gpu.product and tolerate its pool's taint)"
                )
    return out


@rule()
def karpenter_discovery_tags_match_the_selectors(g: Graph) -> list[str]:
    """Each EC2NodeClass finds subnets and security groups by tags: some subnet in every zone its NodePools require,
    and some security group, carry the selector's tags (a security group the stack does not create, the EKS cluster
    security group, through an ``aws.ec2.Tag``); the selected groups include the cluster security group, which lets the
    node reach the control plane. Source: karpenter.sh docs, NodeClasses (subnetSelectorTerms, securityGroupSelectorTerms:
    "select by tags"); EKS user guide "View Amazon EKS security group requirements for clusters"."""
    from stacks.cluster.karpenter import DISCOVERY_TAG

    out = []
    subnets = g.of(SUBNET)
    tags_of_sg = {sg.id: dict(sg.inputs.get("tags") or {}) for sg in g.of(SECURITY_GROUP)}
    for t in g.of(EC2_TAG):
        tags_of_sg.setdefault(t.inputs.get("resourceId"), {})[t.inputs.get("key")] = t.inputs.get("value")
    # The EKS cluster security group is created by EKS, not by the stack: the one group tagged here but not registered.
    cluster_sgs = {sid for sid in tags_of_sg if sid not in {sg.id for sg in g.of(SECURITY_GROUP)}}
    for nc in g.of(EC2NODECLASS):
        zones = {z for np in g.of(NODEPOOL) if _nodeclass_of(g, np) is nc for z in _req_values(np, "topology.kubernetes.io/zone")}
        for term in _get(nc.inputs, "spec", "subnetSelectorTerms", default=[]) or []:
            want = term.get("tags") or {}
            hit = [s for s in subnets if want and all((s.inputs.get("tags") or {}).get(k) == v for k, v in want.items())]
            if not hit:
                out.append(f"{nc.name}: no subnet carries {want}")
            missing = zones - {s.inputs.get("availabilityZone") for s in hit}
            if hit and missing:
                out.append(f"{nc.name}: no subnet tagged {want} in zones {sorted(missing)} its NodePools require")
        selected = set()
        for term in _get(nc.inputs, "spec", "securityGroupSelectorTerms", default=[]) or []:
            want = term.get("tags") or {}
            hit = {sid for sid, tags in tags_of_sg.items() if want and all(tags.get(k) == v for k, v in want.items())}
            if not hit:
                out.append(f"{nc.name}: no security group carries {want}")
            selected |= hit
        if selected and not selected & cluster_sgs:
            out.append(f"{nc.name}: the selected security groups do not include the cluster security group")
        for term in (_get(nc.inputs, "spec", "subnetSelectorTerms", default=[]) or []) + (
            _get(nc.inputs, "spec", "securityGroupSelectorTerms", default=[]) or []
        ):
            if DISCOVERY_TAG in (term.get("tags") or {}) and term["tags"][DISCOVERY_TAG] not in {
                c.inputs.get("name") for c in g.of(EKS)
            }:
                out.append(f"{nc.name}: {DISCOVERY_TAG}={term['tags'][DISCOVERY_TAG]} names no cluster of this stack")
    return out


@rule()
def karpenter_interruption_queue_is_wired(g: Graph) -> list[str]:
    """The Karpenter release reads its interruption queue (``settings.interruptionQueue``, the queue's name), the queue
    keeps messages 300 s with SSE, its policy lets EventBridge send, a rule for each message the controller parses (AWS
    Health events, Spot interruption warnings, rebalance recommendations, instance state changes, interruptible Capacity
    Reservation interruption warnings: ``stacks.cluster.karpenter.INTERRUPTION_RULES``, which tests/test_karpenter.py
    holds to the provider's parsers) targets it, and the controller may receive and delete its messages. Source:
    Karpenter getting-started CloudFormation (KarpenterInterruptionQueue, KarpenterInterruptionQueuePolicy with DenyHTTP,
    ScheduledChangeRule, SpotInterruptionRule, RebalanceRule, InstanceStateChangeRule, AllowInterruptionQueueActions)
    and github.com/aws/karpenter-provider-aws v1.13.1 pkg/controllers/interruption/messages."""
    import json

    from stacks.cluster.karpenter import INTERRUPTION_RULES

    rel = _karpenter_release(g)
    if rel is None:
        return []
    out = []
    name = _get(rel.inputs, "values", "settings", "interruptionQueue")
    queue = next((q for q in g.of(SQS_QUEUE) if q.inputs.get("name") == name), None)
    if queue is None:
        return [f"{rel.name}: settings.interruptionQueue {name!r} names no SQS queue of this stack"]
    arn = f":{name}"
    if int(queue.inputs.get("messageRetentionSeconds", 0)) != 300 or not queue.inputs.get("sqsManagedSseEnabled"):
        out.append(
            f"{queue.name}: messageRetentionSeconds {queue.inputs.get('messageRetentionSeconds')}, sqsManagedSseEnabled "
            f"{queue.inputs.get('sqsManagedSseEnabled')} (want 300, true)"
        )
    pols = [json.loads(p.inputs["policy"]) for p in g.of(SQS_QUEUE_POLICY) if isinstance(p.inputs.get("policy"), str)]
    if not any(
        "events.amazonaws.com" in json.dumps(st.get("Principal"))
        and "sqs:SendMessage" in _actions(st)
        and any(r.endswith(arn) for r in _resources(st))
        for p in pols
        for st in p.get("Statement") or []
    ):
        out.append(f"{queue.name}: no queue policy lets events.amazonaws.com send to it")
    if not any(
        st.get("Effect") == "Deny"
        and "sqs:*" in _actions(st)
        and any(r.endswith(arn) for r in _resources(st))
        and str(_get(st, "Condition", "Bool", "aws:SecureTransport")).lower() == "false"
        for p in pols
        for st in p.get("Statement") or []
    ):
        out.append(
            f"{queue.name}: its policy does not deny requests without TLS (DenyHTTP: sqs:* when aws:SecureTransport is false)"
        )
    targets = [t for t in g.of(EVENT_TARGET) if str(t.inputs.get("arn", "")).endswith(arn)]
    for _, src, detail in INTERRUPTION_RULES:
        rules = [
            r
            for r in g.of(EVENT_RULE)
            if json.loads(r.inputs.get("eventPattern") or "{}") == {"source": [src], "detail-type": [detail]}
        ]
        if (
            not any(
                t.inputs.get("rule") in {r.inputs.get("name", r.name) for r in rules} | {r.name for r in rules} for t in targets
            )
            or not rules
        ):
            out.append(f"no EventBridge rule for {src} {detail!r} targets the interruption queue {name}")
    if not any(
        {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= set(_actions(st)) and any(r.endswith(arn) for r in _resources(st))
        for st in _policy_statements(g)
    ):
        out.append(f"the controller policy does not allow sqs:ReceiveMessage and sqs:DeleteMessage on {name}")
    return out


@rule()
def karpenter_controller_has_its_identity(g: Graph) -> list[str]:
    """The controller's service account gets its IAM role through EKS Pod Identity: an association for the release's
    namespace and ``serviceAccount.name``, a role trusted by ``pods.eks.amazonaws.com`` (sts:AssumeRole, sts:TagSession)
    with the controller policy attached, and the eks-pod-identity-agent add-on. Source: EKS user guide "Learn how EKS
    Pod Identity grants pods access to AWS services" (trust policy, agent add-on); Karpenter getting-started
    (podIdentityAssociations for kube-system/karpenter)."""
    import json

    rel = _karpenter_release(g)
    if rel is None:
        return []
    out = []
    ns, sa = rel.inputs.get("namespace"), _get(rel.inputs, "values", "serviceAccount", "name")
    assoc = [a for a in g.of(POD_IDENTITY) if a.inputs.get("namespace") == ns and a.inputs.get("serviceAccount") == sa]
    if not assoc:
        return [f"{rel.name}: no Pod Identity association for {ns}/{sa}"]
    roles = {str(r.inputs.get("name")): r for r in g.of(IAM_ROLE)}
    for a in assoc:
        role = roles.get(str(a.inputs.get("roleArn", "")).rsplit("/", 1)[-1])
        trust = json.loads(role.inputs.get("assumeRolePolicy") or "{}") if role else {}
        if not any(
            "pods.eks.amazonaws.com" in json.dumps(st.get("Principal"))
            and {"sts:AssumeRole", "sts:TagSession"} <= set(_actions(st))
            for st in trust.get("Statement") or []
        ):
            out.append(
                f"{a.name}: role {a.inputs.get('roleArn')} is not trusted by pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession"
            )
    if _addon(g, "eks-pod-identity-agent") is None:
        out.append("no eks-pod-identity-agent add-on: the Pod Identity association gives the controller no credentials")
    return out


@rule(AREA_NODE_CREDENTIALS)
def karpenter_controller_knows_its_region(g: Graph) -> list[str]:
    """The controller is told the cluster's Region (``AWS_REGION`` in ``controller.env``): without it the controller
    asks the instance metadata service for it and exits when that fails, and the system nodes it runs on answer no pod
    (IMDSv2 with hop count 1). Source: karpenter-provider-aws v1.13.1 ``pkg/operator/operator.go`` (``if cfg.Region ==
    ""`` ... ``imds.NewFromConfig(cfg).GetRegion``, ``lo.Must0``) and ``charts/karpenter/values.yaml``
    (``controller.env``); EKS user guide "Upgrade from Amazon Linux 2 to Amazon Linux 2023" (managed node groups'
    default hop count 1)."""
    rel = _karpenter_release(g)
    if rel is None:
        return []
    env = {e.get("name"): e.get("value") for e in _get(rel.inputs, "values", "controller", "env", default=[]) or []}
    if not env.get("AWS_REGION"):
        return [
            f"{rel.name}: values.controller.env has no AWS_REGION: the controller would ask the instance metadata service, "
            "which hop count 1 keeps from its pod, and exit"
        ]
    return []


@rule()
def karpenter_serving_workers_are_not_disrupted(g: Graph) -> list[str]:
    """Every GPU worker that lands on a NodePool carries the pod annotation ``karpenter.sh/do-not-disrupt: "true"``, so
    consolidation and drift never take its node mid-request; the NodePool consolidates only empty nodes; and its
    disruption budgets let Karpenter take at most one GPU node at a time for any reason but Empty (drift of a new AMI,
    consolidation), always (no schedule), while empty nodes may all go at once. Without budgets Karpenter defaults to
    one budget of 10% of the pool's nodes for every reason. Source: sigs.k8s.io/karpenter@v1.13.0 pkg/apis/v1/labels.go
    (DoNotDisruptAnnotationKey); karpenter.sh docs, Disruption ("karpenter.sh/do-not-disrupt", consolidationPolicy
    WhenEmpty); sigs.k8s.io/karpenter@v1.13.0 pkg/apis/crds/karpenter.sh_nodepools.yaml ``disruption.budgets``: "If
    there are multiple active budgets, Karpenter uses the most restrictive value. If left undefined, this will default
    to one budget with a value to 10%"; ``reasons``: "If Reasons is not set, this budget applies to all methods";
    ``schedule``: "If omitted, the budget is always active"."""
    from stacks.cluster.karpenter import DISRUPTION_REASONS, DO_NOT_DISRUPT

    out = []
    for np in g.of(NODEPOOL):
        if _get(np.inputs, "spec", "disruption", "consolidationPolicy") != "WhenEmpty":
            out.append(
                f"{np.name}: consolidationPolicy {_get(np.inputs, 'spec', 'disruption', 'consolidationPolicy')!r}, not WhenEmpty"
            )
        budgets = _get(np.inputs, "spec", "disruption", "budgets")
        if not budgets:
            out.append(
                f"{np.name}: no disruption budgets: Karpenter defaults to 10% of the pool's nodes at once for every reason"
            )
            budgets = []
        for reason in DISRUPTION_REASONS:
            if reason == "Empty":
                continue
            # always-active budgets that apply to this reason; the most restrictive one wins
            counts = [
                str(b.get("nodes")) for b in budgets if not b.get("schedule") and (not b.get("reasons") or reason in b["reasons"])
            ]
            fixed = [int(c) for c in counts if c.isdigit()]
            if not fixed or min(fixed) > 1:
                out.append(
                    f"{np.name}: disruption budgets {counts or 'none'} for {reason}: more than one GPU node may be "
                    f'taken at once; add {{nodes: "1", reasons: [{reason}]}}'
                )
        for d, c in _on_nodepool(g, np):
            if str(_get(c, "podTemplate", "metadata", "annotations", DO_NOT_DISRUPT)) != "true":
                out.append(f'{d.name}/{c["name"]}: on NodePool {np.name} without {DO_NOT_DISRUPT}: "true"')
    return out
