"""The model cache: FSx for Lustre (``AREA_FSX_LUSTRE``), EFS throughput (``AREA_EFS_THROUGHPUT``), who reaches the
cache (``AREA_CACHE_ACCESS``), and retention and destroy of the cache and its network (``AREA_RETENTION``)."""

from __future__ import annotations

import inspect
import re
from functools import lru_cache

from stacks.cluster import EFS_CLIENT_MBPS, EFS_PROVISIONED_MIBPS

from . import (
    AREA_CACHE_ACCESS,
    AREA_EFS_THROUGHPUT,
    AREA_FSX_LUSTRE,
    AREA_RETENTION,
    EFS,
    EFS_POLICY,
    FSX,
    PV,
    PVC,
    SECURITY_GROUP,
    STORAGE_CLASS,
    SUBNET,
    VPC,
    Graph,
    _get,
    rule,
)


# --------------------------------------------------------------------------- FSx for Lustre


@lru_cache(maxsize=None)
def _sdk_params(typ: str) -> dict[str, str]:
    """``{camelCaseInput: annotation}`` of a pulumi-aws resource's Args class, from the installed SDK."""
    import importlib

    m = re.fullmatch(r"aws:([a-zA-Z0-9]+)/[a-zA-Z0-9]+:([A-Za-z0-9]+)", typ)
    if not m:
        return {}
    try:
        args = getattr(importlib.import_module(f"pulumi_aws.{m[1]}"), f"{m[2]}Args")
    except (ImportError, AttributeError):
        return {}
    out = {}
    for name, p in inspect.signature(args.__init__).parameters.items():
        if name != "self":
            head, *rest = name.split("_")
            out[head + "".join(x.title() for x in rest)] = str(p.annotation)
    return out


@rule(AREA_FSX_LUSTRE)
def argument_types_match_the_installed_sdk(g: Graph) -> list[str]:
    """Every pulumi-aws argument has the shape the installed SDK declares: a list where it takes a Sequence, a
    single value where it does not (pulumi-aws 7.x ``aws.fsx.LustreFileSystem(subnet_ids=...)`` is one string).
    Source: pulumi-aws SDK ``pulumi_aws/fsx/lustre_file_system.py``; FSx API ``CreateFileSystem`` SubnetIds
    (Lustre: one subnet)."""
    out = []
    for r in g.resources:
        params = _sdk_params(r.type)
        for key, value in r.inputs.items():
            ann = params.get(key)
            if ann is None or "Mapping" in ann:
                continue
            top_sequence = ann.startswith("typing.Union[typing.Sequence") or ann.startswith("typing.Sequence")
            if isinstance(value, list) and not top_sequence:
                out.append(f"{r.name} ({r.type}): {key} is a list, the SDK takes one value ({ann[:60]}...)")
            if isinstance(value, str) and top_sequence:
                out.append(f"{r.name} ({r.type}): {key} is one value, the SDK takes a list")
    return out


@rule(AREA_FSX_LUSTRE)
def fsx_cache_is_bound_statically(g: Graph) -> list[str]:
    """The FSx CSI driver provisions a new file system per PVC or binds statically; it has no StorageClass
    parameter naming an existing file system. The stack's file system is bound by a PersistentVolume with
    ``csi.volumeHandle`` (its id), ``volumeAttributes.dnsname`` and ``mountname``, reserved for the cache claim.
    Source: kubernetes-sigs/aws-fsx-csi-driver examples/kubernetes/static_provisioning, pkg/driver/controller.go."""
    out = []
    for sc in g.of(STORAGE_CLASS):
        if sc.inputs.get("provisioner") == "fsx.csi.aws.com" and "fileSystemId" in (sc.inputs.get("parameters") or {}):
            out.append(
                f"{sc.name}: fsx.csi.aws.com StorageClass with a fileSystemId parameter (the driver ignores it and creates a new file system)"
            )
    for fs in g.of(FSX):
        pvs = [pv for pv in g.of(PV) if _get(pv.inputs, "spec", "csi", "volumeHandle") == fs.id]
        if not pvs:
            out.append(f"{fs.name}: no PersistentVolume with volumeHandle {fs.id}")
            continue
        for pv in pvs:
            attrs = _get(pv.inputs, "spec", "csi", "volumeAttributes", default={}) or {}
            if not attrs.get("dnsname") or not attrs.get("mountname"):
                out.append(f"{pv.name}: volumeAttributes lack dnsname/mountname ({sorted(attrs)})")
            ref = _get(pv.inputs, "spec", "claimRef", default={}) or {}
            claim = g.k8s(PVC, ref.get("name"), ref.get("namespace"))
            if claim is None:
                out.append(f"{pv.name}: claimRef {ref} names no registered claim")
            elif _get(claim.inputs, "spec", "storageClassName") != _get(pv.inputs, "spec", "storageClassName"):
                out.append(
                    f"{pv.name}: claim {ref.get('name')} asks for class {_get(claim.inputs, 'spec', 'storageClassName')!r}, "
                    f"the volume has {_get(pv.inputs, 'spec', 'storageClassName')!r}"
                )
    return out


@rule(AREA_FSX_LUSTRE)
def fsx_capacity_and_throughput(g: Graph) -> list[str]:
    """PERSISTENT_2 SSD capacity is 1200 GiB, 2400 GiB or a multiple of 2400 GiB, and throughput is per TiB
    (125, 250, 500 or 1000 MB/s/TiB); the model cache must read at least as fast as one EFS client (~1.5 GiB/s).
    Sources: FSx API ``CreateFileSystem`` StorageCapacity, ``PerUnitStorageThroughput``; FSx for Lustre user guide
    "Performance"; EFS user guide "Amazon EFS performance"."""
    out = []
    for fs in g.of(FSX):
        cap = int(fs.inputs.get("storageCapacity") or 0)
        per = int(fs.inputs.get("perUnitStorageThroughput") or 0)
        if cap not in (1200, 2400) and (cap <= 0 or cap % 2400):
            out.append(f"{fs.name}: storageCapacity {cap} GiB is not 1200, 2400 or a multiple of 2400")
        if fs.inputs.get("deploymentType") == "PERSISTENT_2" and per not in (125, 250, 500, 1000):
            out.append(f"{fs.name}: perUnitStorageThroughput {per} is not one of 125, 250, 500, 1000")
        if cap / 1024 * per < EFS_CLIENT_MBPS:
            out.append(
                f"{fs.name}: {cap} GiB x {per} MB/s/TiB = {cap / 1024 * per:.0f} MB/s, slower than one EFS client ({EFS_CLIENT_MBPS:.0f} MB/s)"
            )
    return out


# --------------------------------------------------------------------------- EFS throughput


@rule(AREA_EFS_THROUGHPUT)
def efs_provisioned_throughput_in_the_api_range(g: Graph) -> list[str]:
    """``ProvisionedThroughputInMibps`` is one the EFS API accepts: "Valid values are 1-3414 MiBps, with the upper limit
    depending on Region" (AWS Support raises it). Source: EFS API reference ``CreateFileSystem`` /
    ``UpdateFileSystem`` ProvisionedThroughputInMibps."""
    lo, hi = EFS_PROVISIONED_MIBPS
    return [
        f"{fs.name}: provisionedThroughputInMibps {fs.inputs['provisionedThroughputInMibps']} is outside {lo}-{hi}"
        for fs in g.of(EFS)
        if fs.inputs.get("provisionedThroughputInMibps") is not None
        and not lo <= float(fs.inputs["provisionedThroughputInMibps"]) <= hi
    ]


@rule(AREA_EFS_THROUGHPUT)
def efs_provisioned_throughput_has_its_value(g: Graph) -> list[str]:
    """An EFS file system in provisioned throughput mode carries ``ProvisionedThroughputInMibps``.
    Source: EFS API ``CreateFileSystem`` (ProvisionedThroughputInMibps: required with ThroughputMode provisioned);
    EFS user guide "Amazon EFS performance"."""
    out = []
    for fs in g.of(EFS):
        if fs.inputs.get("throughputMode") == "provisioned" and not fs.inputs.get("provisionedThroughputInMibps"):
            out.append(f"{fs.name}: throughputMode provisioned without provisionedThroughputInMibps")
    return out


# --------------------------------------------------------------------------- who reaches the model cache


@rule(AREA_CACHE_ACCESS)
def efs_cache_refuses_clients_without_tls(g: Graph) -> list[str]:
    """An EFS cache carries a file-system policy that denies every request without TLS and still grants mounting through
    a mount target (what EFS grants by default), and is encrypted at rest. Sources: EFS user guide, "Creating file
    system policies" ("Enforce in-transit encryption for all clients"), "Using IAM to control access to file systems"
    (the default policy: ClientRootAccess, ClientWrite, ClientMount with elasticfilesystem:AccessedViaMountTarget),
    "Encrypting data at rest" (encryption is chosen at creation only)."""
    import json

    out = []
    for fs in g.of(EFS):
        if fs.inputs.get("encrypted") is not True:
            out.append(f"{fs.name}: not encrypted at rest (only a new file system can be)")
        pols = [p for p in g.of(EFS_POLICY) if p.inputs.get("fileSystemId") == fs.id]
        if not pols:
            out.append(f"{fs.name}: no file-system policy: any host of the VPC mounts the cache over plain NFS")
            continue
        doc = json.loads(pols[0].inputs.get("policy") or "{}")
        sts = doc.get("Statement") or []
        deny = any(
            st.get("Effect") == "Deny"
            and st.get("Action") == "*"
            and _get(st, "Condition", "Bool", "aws:SecureTransport") == "false"
            for st in sts
        )
        mount = any(
            st.get("Effect") == "Allow"
            and "elasticfilesystem:ClientMount" in (st.get("Action") or [])
            and _get(st, "Condition", "Bool", "elasticfilesystem:AccessedViaMountTarget") == "true"
            for st in sts
        )
        if not deny:
            out.append(f"{pols[0].name}: the policy does not deny requests without TLS (aws:SecureTransport false)")
        if not mount:
            out.append(
                f"{pols[0].name}: the policy grants no ClientMount through a mount target: the nodes cannot mount the cache"
            )
    return out


# --------------------------------------------------------------------------- retention and destroy


@rule(AREA_RETENTION)
def cache_file_system_follows_the_claim(g: Graph) -> list[str]:
    """The cache file system is retained exactly when the cache claim is (``dynamo:storage.protect``): a protected
    claim on a deleted file system is useless, and an unprotected stack must not leave a billed file system.
    Source: EFS/FSx pricing (storage billed per GB-month until deleted); Kubernetes "Persistent Volumes" (Retain)."""
    out = []
    claims = g.of(PVC)
    for fs in g.of(FSX) + g.of(EFS):
        for c in claims:
            if c.retain_on_delete != fs.retain_on_delete:
                out.append(f"{fs.name}: retainOnDelete {fs.retain_on_delete}, cache claim {c.name} {c.retain_on_delete}")
    return out


_REFS = {
    "subnetId": SUBNET,
    "subnetIds": SUBNET,
    "securityGroupIds": SECURITY_GROUP,
    "securityGroups": SECURITY_GROUP,
    "vpcId": VPC,
}


@rule(AREA_RETENTION)
def retained_resources_keep_their_network(g: Graph) -> list[str]:
    """A retained resource with network interfaces keeps the subnets, security groups and VPC they sit in: deleting
    a subnet or security group that an ENI still uses fails with DependencyViolation, so ``pulumi destroy`` would
    stop. EFS mount targets are deleted (their ENIs go with them); an FSx file system's ENIs stay with it.
    Source: EC2 API ``DeleteSubnet``/``DeleteSecurityGroup`` (DependencyViolation); FSx user guide "File system
    access control with Amazon VPC" (the file system's network interfaces)."""
    out = []
    pending = [r for r in g.resources if r.retain_on_delete and r.type.startswith("aws:")]
    seen = set()
    while pending:
        r = pending.pop()
        if r.name in seen:
            continue
        seen.add(r.name)
        for key, typ in _REFS.items():
            ids = r.inputs.get(key)
            for rid in ids if isinstance(ids, list) else [ids] if ids else []:
                dep = g.by_id(rid, typ)
                if dep is None:
                    continue
                if not dep.retain_on_delete:
                    out.append(f"{r.name} is retained but its {key} {dep.name} is not: destroy fails with DependencyViolation")
                pending.append(dep)
    return out
