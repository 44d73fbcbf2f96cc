"""Cluster access and Secrets (``AREA_CLUSTER_ACCESS``, ``AREA_SECRETS``): access entries, the cluster's administrators,
Secrets envelope encryption, control-plane logs, ARNs in the Region's partition, and the Secrets the pods reference on
a new cluster."""

from __future__ import annotations

import re
from typing import Any, Iterable

from . import (
    ACCESS_ENTRY,
    ACCESS_POLICY_ASSOCIATION,
    AREA_CLUSTER_ACCESS,
    AREA_NODE_CREDENTIALS,
    AREA_SECRETS,
    DGD,
    EKS,
    IAM_ROLE,
    IAM_ROLE_POLICY,
    JOB,
    KMS_KEY,
    LOG_GROUP,
    SECRET,
    Graph,
    Res,
    _get,
    rule,
)


# --------------------------------------------------------------------------- cluster access, Secrets encryption, control-plane logs


CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
AUTHENTICATION_MODES = ("API", "API_AND_CONFIG_MAP", "CONFIG_MAP")


@rule(AREA_CLUSTER_ACCESS)
def access_entries_are_complete(g: Graph) -> list[str]:
    """Every standard access entry has an access policy association for the same principal and cluster, registered
    after it (AssociateAccessPolicy needs the entry: "the access entry must already exist"), with an EKS access policy
    ARN and a scope EKS accepts (``cluster``, or ``namespace`` with namespaces); one entry per principal per cluster
    (CreateAccessEntry refuses a second one, ResourceInUseException). Sources: EKS API CreateAccessEntry,
    AssociateAccessPolicy, AccessScope; EKS user guide "Review access policy permissions"."""
    out = []
    seen: dict[tuple, str] = {}
    for e in g.of(ACCESS_ENTRY):
        key = (e.inputs.get("clusterName"), e.inputs.get("principalArn"))
        if key in seen:
            out.append(f"{e.name}: a second access entry for {key[1]} (already {seen[key]}); EKS allows one per principal")
        seen[key] = e.name
        if e.inputs.get("type") not in (None, "STANDARD"):
            continue
        assoc = [a for a in g.of(ACCESS_POLICY_ASSOCIATION) if (a.inputs.get("clusterName"), a.inputs.get("principalArn")) == key]
        if not assoc:
            out.append(
                f"{e.name}: access entry for {key[1]} without an access policy association (it authenticates, but may do nothing)"
            )
        for a in assoc:
            if e.urn and e.urn not in a.dependencies:
                out.append(f"{a.name}: associated without waiting for access entry {e.name}")
            if not str(a.inputs.get("policyArn", "")).startswith("arn:aws:eks::aws:cluster-access-policy/"):
                out.append(f"{a.name}: policyArn {a.inputs.get('policyArn')!r} is not an EKS access policy")
            scope = a.inputs.get("accessScope") or {}
            if scope.get("type") not in ("cluster", "namespace") or (scope.get("type") == "namespace") != bool(
                scope.get("namespaces")
            ):
                out.append(f"{a.name}: accessScope {scope} is neither cluster nor namespace with namespaces")
    return out


@rule(AREA_CLUSTER_ACCESS)
def cluster_is_administered_without_the_creator(g: Graph) -> list[str]:
    """A cluster created with ``bootstrapClusterCreatorAdminPermissions: false`` gives its creator no access entry, so the
    stack names at least one cluster-admin (AmazonEKSClusterAdminPolicy, cluster scope) and the Kubernetes objects of
    the same ``up`` come after that association (else the installing identity is refused by the API server). The mode is
    API or API_AND_CONFIG_MAP (access entries exist only there); with CONFIG_MAP EKS refuses the flag off. Sources: EKS API
    CreateAccessConfigRequest (bootstrapClusterCreatorAdminPermissions, authenticationMode API | API_AND_CONFIG_MAP |
    CONFIG_MAP); upbound/configuration-aws-eks#130 ("bootstrapClusterCreatorAdminPermissions must be true if cluster
    authentication mode is set to CONFIG_MAP")."""
    out = []
    for c in g.of(EKS):
        ac = c.inputs.get("accessConfig") or {}
        mode = ac.get("authenticationMode", "CONFIG_MAP")
        if mode not in AUTHENTICATION_MODES:
            out.append(f"{c.name}: authenticationMode {mode!r} is not one of {AUTHENTICATION_MODES}")
        if ac.get("bootstrapClusterCreatorAdminPermissions", True):
            continue
        if mode == "CONFIG_MAP":
            out.append(
                f"{c.name}: bootstrapClusterCreatorAdminPermissions false with authenticationMode CONFIG_MAP (EKS refuses it)"
            )
        admins = [
            a
            for a in g.of(ACCESS_POLICY_ASSOCIATION)
            if a.inputs.get("clusterName") == c.inputs.get("name")
            and a.inputs.get("policyArn") == CLUSTER_ADMIN_POLICY
            and (a.inputs.get("accessScope") or {}).get("type") == "cluster"
        ]
        if not admins:
            out.append(
                f"{c.name}: created without the creator's admin and no cluster-admin access entry: nobody can administer it"
            )
            continue
        admin_urns = {a.urn for a in admins}
        for p in g.of("pulumi:providers:kubernetes"):
            if not admin_urns & set(p.dependencies):
                out.append(f"{p.name}: Kubernetes provider does not wait for a cluster-admin access entry of {c.name}")
    return out


@rule(AREA_CLUSTER_ACCESS)
def secrets_are_envelope_encrypted_with_a_rotating_key(g: Graph) -> list[str]:
    """A cluster with ``encryptionConfig`` encrypts ``secrets`` (the one resource EKS takes) with a symmetric KMS key of
    the stack that has automatic rotation on and that the cluster waits for, and the cluster role may use that key
    (kms:Encrypt, kms:Decrypt, kms:ListGrants, kms:DescribeKey). Sources: EKS API EncryptionConfig (resources:
    "secrets"); EKS user guide enable-kms (symmetric key, same Region); terraform-aws-modules/terraform-aws-eks main.tf
    @0005984c (cluster_encryption policy, enable_key_rotation)."""
    out = []
    keys = {k.urn: k for k in g.of(KMS_KEY)}
    for c in g.of(EKS):
        enc = c.inputs.get("encryptionConfig")
        if not enc:
            continue
        if sorted(enc.get("resources") or []) != ["secrets"]:
            out.append(f"{c.name}: encryptionConfig resources {enc.get('resources')} (EKS takes [secrets])")
        mine = [keys[u] for u in c.dependencies if u in keys]
        if not mine:
            out.append(f"{c.name}: encryptionConfig with no KMS key of the stack that the cluster waits for")
        for k in mine:
            if k.inputs.get("enableKeyRotation") is not True:
                out.append(f"{k.name}: KMS key for {c.name}'s Secrets without enableKeyRotation")
            if k.inputs.get("customerMasterKeySpec", k.inputs.get("keySpec", "SYMMETRIC_DEFAULT")) != "SYMMETRIC_DEFAULT":
                out.append(f"{k.name}: not a symmetric key (EKS envelope encryption needs SYMMETRIC_DEFAULT)")
            uses = [
                p
                for p in g.of(IAM_ROLE_POLICY)
                if k.urn in p.dependencies and p.urn in c.dependencies and str(p.inputs.get("role")) == _role_id_of(g, c)
            ]
            if not uses or not all(
                a in str(uses[0].inputs.get("policy")) for a in ("kms:Encrypt", "kms:Decrypt", "kms:DescribeKey")
            ):
                out.append(f"{c.name}: its role has no policy on KMS key {k.name} that the cluster waits for")
    return out


def _role_id_of(g: Graph, c: Res) -> str:
    """The mock id of the cluster's IAM role (its roleArn ends with the role's name under the mocks)."""
    role = next(
        (r for r in g.of(IAM_ROLE) if str(c.inputs.get("roleArn", "")).endswith("/" + str(r.inputs.get("name") or r.name))), None
    )
    return role.id if role else ""


@rule(AREA_CLUSTER_ACCESS)
def control_plane_logs_have_their_log_group_first(g: Graph) -> list[str]:
    """A cluster that sends control-plane logs writes to the log group ``/aws/eks/<cluster>/cluster``; the stack creates
    it with a retention before the cluster, or EKS creates it on first delivery with no retention (kept forever) and the
    stack's own create then fails on the existing group. Every log type is one EKS knows. Sources: EKS user guide "Send
    control plane logs to CloudWatch Logs" (log group /aws/eks/my-cluster/cluster; api, audit, authenticator,
    controllerManager, scheduler); terraform-aws-modules/terraform-aws-eks main.tf @0005984c (aws_cloudwatch_log_group
    /aws/eks/${cluster_name}/cluster, retention_in_days, in the cluster's depends_on); CloudWatch Logs
    PutRetentionPolicy (retention values). The cluster role may not create log groups, or logs still delivered while
    the cluster is destroyed re-create the group outside the stack (terraform-aws-eks main.tf, inline Deny
    logs:CreateLogGroup; terraform-aws-modules/terraform-aws-eks#920)."""
    from stacks.cluster import CONTROL_PLANE_LOG_TYPES, LOG_RETENTION_DAYS

    out = []
    for c in g.of(EKS):
        types = c.inputs.get("enabledClusterLogTypes") or []
        bad = [t for t in types if t not in CONTROL_PLANE_LOG_TYPES]
        if bad:
            out.append(f"{c.name}: enabledClusterLogTypes {bad} are not EKS log types {CONTROL_PLANE_LOG_TYPES}")
        if not types:
            continue
        want = f"/aws/eks/{c.inputs.get('name')}/cluster"
        groups = [lg for lg in g.of(LOG_GROUP) if lg.inputs.get("name") == want]
        if not groups:
            out.append(f"{c.name}: logs {types} without the stack's log group {want} (EKS would create it with no retention)")
            continue
        for lg in groups:
            if lg.urn not in c.dependencies:
                out.append(f"{c.name}: does not wait for log group {lg.name} ({want})")
            if int(lg.inputs.get("retentionInDays") or 0) not in LOG_RETENTION_DAYS:
                out.append(f"{lg.name}: retentionInDays {lg.inputs.get('retentionInDays')} is not a CloudWatch Logs retention")
        role = _role_id_of(g, c)
        denies = [
            p
            for p in g.of(IAM_ROLE_POLICY)
            if str(p.inputs.get("role")) == role
            and '"Deny"' in str(p.inputs.get("policy"))
            and "logs:CreateLogGroup" in str(p.inputs.get("policy"))
        ]
        if not denies:
            out.append(
                f"{c.name}: its role may create log groups, so logs delivered during destroy re-create {want} outside the stack"
            )
    return out


# --------------------------------------------------------------------------- ARNs in the Region's partition


_ARN = re.compile(r"\barn:(aws[a-z-]*):")


def _partition(region: str) -> str:
    """The AWS partition of a Region: aws-us-gov for GovCloud, aws-cn for China, aws for the others (AWS General
    Reference, "Amazon Resource Names (ARNs)": partition)."""
    return "aws-us-gov" if region.startswith("us-gov-") else "aws-cn" if region.startswith("cn-") else "aws"


def _strings(x: Any):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


@rule(AREA_CLUSTER_ACCESS, AREA_NODE_CREDENTIALS)
def arns_are_in_the_regions_partition(g: Graph) -> list[str]:
    """Every ARN the program writes (IAM policies, trust policies, access entries, KMS and queue policies) is in the
    partition of the Region the AWS provider deploys to: IAM refuses a policy or principal of another partition, so a
    GovCloud or China stack written in ``arn:aws:`` fails on its first IAM resource. Source: AWS General Reference,
    "Amazon Resource Names (ARNs)" (``partition``: aws, aws-cn, aws-us-gov)."""
    regions = {str(p.inputs.get("region")) for p in g.of("pulumi:providers:aws") if p.inputs.get("region")}
    out = []
    for region in sorted(regions):
        want = _partition(region)
        for r in g.resources:
            bad = sorted({m for text in _strings(r.inputs) for m in _ARN.findall(text) if m != want})
            if bad:
                out.append(
                    f"{r.name}: ARNs in partition {', '.join(bad)}, but the provider deploys to {region} (partition {want})"
                )
    return out


# --------------------------------------------------------------------------- Secrets on a new cluster


def _pull_secret_refs(x: Any) -> Iterable[str]:
    if isinstance(x, dict):
        for s in x.get("imagePullSecrets") or [] if isinstance(x.get("imagePullSecrets"), list) else []:
            yield s.get("name")
        for k, v in x.items():
            yield from _pull_secret_refs(v)
    elif isinstance(x, list):
        for v in x:
            yield from _pull_secret_refs(v)


def _secret_refs(x: Any) -> Iterable[str]:
    if isinstance(x, dict):
        for key in ("secretRef", "secretKeyRef"):
            if isinstance(x.get(key), dict) and x[key].get("name"):
                yield x[key]["name"]
        for v in x.values():
            yield from _secret_refs(v)
    elif isinstance(x, list):
        for v in x:
            yield from _secret_refs(v)


@rule(AREA_SECRETS)
def secrets_exist_on_a_new_cluster(g: Graph) -> list[str]:
    """On a cluster the same ``up`` creates, every Secret the workloads name (image pull secrets, the HF token)
    must be created by the stack: nothing else could have made it, and pods would fail ErrImagePull or
    CreateContainerConfigError. Pull secrets are ``kubernetes.io/dockerconfigjson``, and the DGD waits for them.
    Source: Kubernetes "Pull an Image from a Private Registry"; EKS (a new cluster has no user Secrets)."""
    if not g.of(EKS):
        return []
    out = []
    for r in g.of(DGD) + g.of(JOB):
        ns = _get(r.inputs, "metadata", "namespace")
        for name in set(_pull_secret_refs(r.inputs.get("spec"))):
            s = g.k8s(SECRET, name, ns)
            if s is None:
                out.append(f"{r.name}: imagePullSecret {name} is not created by the stack")
            elif s.inputs.get("type") != "kubernetes.io/dockerconfigjson":
                out.append(f"{r.name}: imagePullSecret {name} has type {s.inputs.get('type')!r}")
            elif r.type == DGD and s.urn and s.urn not in r.dependencies:
                out.append(f"{r.name}: does not wait for imagePullSecret {name} (workers would start in ErrImagePull)")
        for name in set(_secret_refs(r.inputs.get("spec"))):
            if g.k8s(SECRET, name, ns) is None:
                out.append(f"{r.name}: Secret {name} is not created by the stack")
    return out
