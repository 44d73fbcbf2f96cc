"""Who may use the cluster and how its control plane is kept: EKS access entries and their policies
(``access_plan``), envelope encryption of Kubernetes Secrets with a KMS key and control-plane logs
(``control_plane_plan``)."""

from __future__ import annotations

import datetime

import re
from typing import Any

from stacks.config.keys import NS
from stacks.config.eks import EksConfig, _eks_pin


# EKS access policies a stack may associate (EKS user guide "Review access policy permissions", access-policy-permissions:
# arn:aws:eks::aws:cluster-access-policy/<name>; like the Kubernetes cluster-admin, admin, edit and view roles).
ACCESS_POLICIES = {
    "cluster-admin": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
    "admin": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy",
    "edit": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy",
    "view": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy",
}
# What the cluster role may do with the Secrets key (terraform-aws-modules/terraform-aws-eks main.tf @0005984c,
# aws_iam_policy.cluster_encryption).
SECRETS_KEY_ACTIONS = ("kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey")
# What the Secrets key encrypts (EKS EncryptionConfig resources: "secrets" is the only value EKS accepts).
ENCRYPTED_RESOURCES = ("secrets",)


def secrets_key_policy(key_arn: str) -> dict[str, Any]:
    """The cluster role's inline policy on the Secrets key: ``SECRETS_KEY_ACTIONS`` on that key only."""
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": list(SECRETS_KEY_ACTIONS), "Resource": key_arn}]}


def _principal_slug(arn: str) -> str:
    """A stable resource-name part for a principal: account, kind and name (``123456789012-role-ops-admin``), so reordering
    ``accessEntries`` renames nothing (a renamed access entry would be created before the old one is deleted, and EKS
    refuses a second entry for the same principal)."""
    account, rest = arn.split(":")[4], arn.split(":", 5)[5]
    return re.sub(r"[^A-Za-z0-9_.=,@+-]+", "-", f"{account}-{rest}")


def access_plan(cfg: EksConfig) -> dict[str, Any]:
    """Who may use the cluster's Kubernetes API, as EKS access entries (authentication mode API only).

    ``bootstrap_creator_admin``: EKS CreateCluster ``accessConfig.bootstrapClusterCreatorAdminPermissions`` ("whether or
    not the cluster creator IAM principal was set as a cluster admin access entry during cluster creation time", default
    true; EKS API reference CreateAccessConfigRequest). False as soon as ``accessEntries`` names the principals; true
    without them (the creator's implicit admin, warned about). It only acts on CreateCluster: terraform-provider-
    aws marks it ForceNew (internal/service/eks/cluster.go), so the wiring keeps an existing cluster's value
    (``ignoreChanges``) and never replaces a cluster for it.

    ``authentication_mode``: API. Of API, API_AND_CONFIG_MAP and CONFIG_MAP (EKS API AccessConfigResponse), API uses access
    entries only; nothing here writes the aws-auth ConfigMap, managed node groups get their entries from EKS, and a
    cluster cannot go back from API ("you can't change the authentication mode back to a mode that removes the EKS API
    and access entries", EKS user guide setting-up-access-entries): existing clusters of this program already run API.

    ``entries``: one access entry and one policy association per principal; ``adminPrincipalArns`` keep their resource
    names (``admin-<i>``), ``accessEntries`` are named by principal (``access-<account>-<role|user>-<name>``)."""
    entries = [
        {
            "name": f"admin-{i}",
            "principal_arn": arn,
            "policy": "cluster-admin",
            "policy_arn": ACCESS_POLICIES["cluster-admin"],
            "access_scope": {"type": "cluster"},
        }
        for i, arn in enumerate(cfg.admin_principal_arns)
    ]
    for e in cfg.access_entries:
        scope = {"type": "namespace", "namespaces": list(e.namespaces)} if e.namespaces else {"type": "cluster"}
        entries.append(
            {
                "name": f"access-{_principal_slug(e.principal_arn)}",
                "principal_arn": e.principal_arn,
                "policy": e.policy,
                "policy_arn": ACCESS_POLICIES[e.policy],
                "access_scope": scope,
            }
        )
    warnings = []
    if not cfg.access_entries:
        warnings.append(
            f"{NS}:cluster.accessEntries is not set: a new cluster makes whoever runs its first `up` cluster-admin "
            "implicitly (EKS bootstrapClusterCreatorAdminPermissions); name the deploy role and your admins there, "
            "e.g. [{principalArn: arn:aws:iam::<account>:role/<deploy role>, policy: cluster-admin}] "
            '(docs/deploy-aws.md, "Cluster access")'
        )
    return {
        "authentication_mode": "API",
        "bootstrap_creator_admin": not cfg.access_entries,
        "entries": entries,
        "warnings": warnings,
    }


def control_plane_plan(name: str, cfg: EksConfig) -> dict[str, Any]:
    """Secrets envelope encryption and control-plane logs of the cluster ``name``.

    ``secrets_encryption``: a customer-managed symmetric KMS key of the stack with automatic rotation, used for
    ``resources: ["secrets"]`` (EKS EncryptionConfig; EKS user guide enable-kms: symmetric, same Region). Adding it to an
    existing cluster is an in-place AssociateEncryptionConfig (terraform-provider-aws internal/service/eks/cluster.go
    update: only from none to one), and it cannot be undone: "You can't disable secrets encryption after enabling it.
    This action is irreversible" (EKS user guide enable-kms); the provider replaces the cluster when it is removed
    (``ForceNewIfChange("encryption_config", ...)``), which the AWS rules' update rules refuse. The cluster role gets
    kms:Encrypt, kms:Decrypt, kms:ListGrants, kms:DescribeKey on the key (terraform-aws-modules/terraform-aws-eks
    main.tf @0005984c, cluster_encryption policy).

    ``logs``: the log types, the log group EKS writes to (``/aws/eks/<cluster>/cluster``) and its retention. The stack
    creates the group before the cluster (terraform-aws-eks main.tf: the cluster depends on aws_cloudwatch_log_group):
    otherwise EKS creates it on first delivery with no retention (events never expire) and the stack could not create
    it afterwards. ``cluster_role_policy`` denies the cluster role logs:CreateLogGroup, so logs still delivered while
    ``pulumi destroy`` deletes the cluster cannot re-create the group outside the stack (terraform-aws-eks main.tf, the
    cluster role's inline policy; terraform-aws-modules/terraform-aws-eks#920)."""
    logs = None
    if cfg.control_plane_logs:
        logs = {
            "types": list(cfg.control_plane_logs),
            "log_group": f"/aws/eks/{name}/cluster",
            "retention_in_days": cfg.control_plane_log_retention_days,
            "cluster_role_policy": {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Deny", "Action": ["logs:CreateLogGroup"], "Resource": "*"}],
            },
        }
    return {
        "secrets_encryption": cfg.secrets_encryption,
        "logs": logs,
        "upgrade_policy": cfg.upgrade_policy,
        "support_warnings": support_warnings(cfg.kubernetes_version, cfg.upgrade_policy, datetime.date.today()),
    }


SUPPORT_WARNING_DAYS = 90


def standard_support_ends() -> dict[str, datetime.date]:
    """Kubernetes version -> the last day of its EKS standard support (versions.yaml eks.standardSupportEnds)."""
    return {str(k): datetime.date.fromisoformat(str(v)) for k, v in (_eks_pin("standardSupportEnds") or {}).items()}


def support_warnings(version: str, policy: str, today: datetime.date) -> list[str]:
    """What ``up`` and ``cost`` say when the control plane's version leaves EKS standard support within
    ``SUPPORT_WARNING_DAYS`` days (or has left it): with ``upgradePolicy`` STANDARD, EKS upgrades the control plane
    itself; with EXTENDED, the cluster hour costs the extended-support price. Source: EKS user guide "View current
    cluster upgrade policy"; the end dates in stacks/registry/versions.yaml."""
    end = standard_support_ends().get(str(version))
    if end is None:
        return []
    days = (end - today).days
    if days > SUPPORT_WARNING_DAYS:
        return []
    when = (
        f"ends {end.isoformat()} (in {days} days)"
        if days > 0
        else f"ends today ({end.isoformat()})"
        if days == 0
        else f"ended {end.isoformat()} ({-days} days ago)"
    )
    then = (
        "EKS then upgrades the control plane by itself, outside this stack (upgradePolicy STANDARD)"
        if policy == "STANDARD"
        else "the cluster then enters extended support, billed at the extended-support hourly price (upgradePolicy EXTENDED)"
    )
    return [
        f"{NS}:cluster.kubernetesVersion: EKS standard support for Kubernetes {version} {when}; {then}. Move one minor "
        f'version with kubernetesVersion before then (docs/deploy-aws.md, "Upgrading Kubernetes")'
    ]


def check_upgrade_policy(running: "str | None", policy: str, today: datetime.date, cluster: str) -> None:
    """A cluster whose running version has left standard support is in extended support, which EKS does not let a
    cluster leave by policy ("You can't disable extended support for a cluster that's already in extended support":
    EKS user guide, "Disable EKS extended support"): sending STANDARD then fails the update mid-`up`. Refused before
    any resource with the way through."""
    end = standard_support_ends().get(str(running)) if running is not None else None
    if end is None or policy != "STANDARD" or today <= end:
        return
    raise ValueError(
        f"{NS}:cluster.upgradePolicy: 'STANDARD', but EKS cluster {cluster!r} runs Kubernetes {running}, whose standard "
        f"support ended {end.isoformat()}: the cluster is in extended support (billed at the extended-support price), "
        f"which it cannot leave by policy. Set {NS}:cluster.upgradePolicy: EXTENDED and step "
        f"{NS}:cluster.kubernetesVersion one minor version up; once it runs a version in standard support, set "
        f'STANDARD again (docs/deploy-aws.md, "Upgrading Kubernetes")'
    )
