"""The model cache's storage: EFS and FSx for Lustre throughput facts, the cache StorageClass, the FSx static
PersistentVolume, the cache class name of a cluster and storage quantities in GiB."""

from __future__ import annotations

import re
from typing import Any

from stacks.config.eks import EksConfig


# EFS Elastic throughput: about 1.5 GiB/s read per client (EFS user guide, "Amazon EFS performance"); the FSx default
# must not be slower for a single vLLM loader reading hundreds of GB.
EFS_CLIENT_MBPS = 1.5 * 1024 * 1.048576  # 1.5 GiB/s in MB/s
FSX_THROUGHPUT_PER_TIB = (125, 250, 500, 1000)  # PERSISTENT_2 SSD, MB/s/TiB (FSx CreateFileSystem PerUnitStorageThroughput)


def _storage_class(name: str, provisioner: str, parameters: dict) -> dict:
    """The model-cache StorageClass; ``<...>`` parameters are filled from the file system the cluster creates.
    Retain: deleting the claim must not delete the cache's data."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "parameters": parameters,
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "Immediate",
    }


def efs_class_parameters(file_system_id: str) -> dict[str, str]:
    """The EFS cache StorageClass's parameters: an access point per claim (``efs-ap``), its root directory private
    to the pod's user (700), on the stack's file system."""
    return {"provisioningMode": "efs-ap", "directoryPerms": "700", "fileSystemId": file_system_id}


def fsx_volume_source(file_system_id: str, dns_name: str, mount_name: str) -> dict[str, Any]:
    """The ``csi`` source of the FSx static PersistentVolume (kubernetes-sigs/aws-fsx-csi-driver static provisioning):
    the file system's id, DNS name and mount name."""
    return {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": file_system_id,
        "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name},
    }


def _fsx_static_pv(name: str, class_name: str, capacity_gib: int) -> dict:
    """The stack's FSx for Lustre file system as a PersistentVolume: the CSI driver has no StorageClass parameter
    naming an existing file system, so the cache binds statically (kubernetes-sigs/aws-fsx-csi-driver,
    examples/kubernetes/static_provisioning: ``volumeHandle`` = file system id, ``dnsname``, ``mountname``).
    ``<...>`` values come from the file system; the wiring adds ``claimRef`` (the serving layer's claim)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": f"{capacity_gib}Gi"},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"],
            "mountOptions": ["flock"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class_name,
            "csi": fsx_volume_source("<fsx-id>", "<fsx-dns>", "<fsx-mount>"),
        },
    }


def efs_file_system_policy(file_system_arn: str) -> dict:
    """The EFS cache's file-system policy: EFS's own default grant (mount, write and root access for clients that come
    through a mount target: EFS user guide, "Using IAM to control access to file systems", the default policy), and a
    deny of every request without TLS (``aws:SecureTransport`` false), the console's "Enforce in-transit encryption for
    all clients" (EFS user guide, "Creating file system policies"; terraform-aws-modules/efs ``deny_nonsecure_transport``).
    The EFS CSI driver mounts with TLS unless told otherwise (kubernetes-sigs/aws-efs-csi-driver, ``encryptInTransit``
    defaults to true), so the cache keeps working and a plain NFS mount from anywhere in the VPC is refused."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ClientsThroughAMountTarget",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Resource": file_system_arn,
                "Action": [
                    "elasticfilesystem:ClientRootAccess",
                    "elasticfilesystem:ClientWrite",
                    "elasticfilesystem:ClientMount",
                ],
                "Condition": {"Bool": {"elasticfilesystem:AccessedViaMountTarget": "true"}},
            },
            {
                "Sid": "NonSecureTransport",
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Action": "*",
                "Resource": file_system_arn,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    }


def cache_class_name(cfg: EksConfig) -> str:
    return "efs-model-cache" if cfg.cache_storage == "efs" else "fsx-model-cache"


def _gib(quantity: str) -> float:
    m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|Pi)?", str(quantity))
    if not m:
        return 0.0
    return float(m[1]) * {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1, "Ti": 2**10, "Pi": 2**20, None: 2**-30}[m[2]]
