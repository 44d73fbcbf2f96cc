"""What a pod on a node the program builds can reach of AWS credentials: the node roles' policies, the instance metadata
service (IMDS) options of every GPU launch template and EC2NodeClass, and the add-ons that carry their own IAM role.

- **IMDSv2 with a hop limit of 1** on every GPU launch template and Karpenter EC2NodeClass: an IMDSv2 token response
  then cannot cross the extra network hop into a pod's network namespace, so a pod cannot read the node role's
  credentials (EKS Best Practices Guide, security, "Restrict access to the instance profile assigned to the worker
  node": "IMDSv2 ... hop count of 1"; Karpenter's EC2NodeClass ``metadataOptions`` default ``httpPutResponseHopLimit:
  1``; terraform-aws-eks node groups' ``metadata_options`` default ``http_put_response_hop_limit = 1``). Host-network
  pods (aws-node, kube-proxy, the EKS Pod Identity agent, the CSI node plugins) share the node's stack and keep IMDS.
  The system node group has no launch template of ours: EKS's own one for an AL2023 AMI type already requires IMDSv2
  with hop count 1 (EKS user guide, "Upgrade from Amazon Linux 2 to Amazon Linux 2023": "the default hop count for
  managed node groups is set to 1"), which the AWS rules hold it to.
  Nothing else on a GPU node needs it: the workers read the model from the cache, the device plugins and the DRA
  driver talk only to the kubelet. Every AWS-calling controller runs on the system nodes with its own Pod Identity
  role and learns its Region without the metadata service: Karpenter from ``AWS_REGION`` in its chart values (it
  would otherwise ask IMDS and exit: karpenter-provider-aws v1.13.1 ``pkg/operator/operator.go``), the AWS Load
  Balancer Controller from ``region`` and ``vpcId``, and the EFS and FSx CSI controllers fall back to the Kubernetes
  API when IMDS does not answer (aws-efs-csi-driver ``pkg/cloud/metadata.go`` ``GetNewMetadataProvider``;
  aws-fsx-csi-driver ``pkg/cloud/metadata.go`` ``NewMetadataService``).
- **Node roles hold what a kubelet needs and nothing more**: ``AmazonEKSWorkerNodePolicy`` and
  ``AmazonEC2ContainerRegistryReadOnly``. The VPC CNI's ``AmazonEKS_CNI_Policy`` (create, attach and delete any ENI)
  moves to its own role through an EKS Pod Identity association on the add-on (EKS user guide, "IAM roles for Amazon
  EKS add-ons": "the Amazon VPC CNI add-on calls certain AWS APIs ... The recommended way ... is using ... Pod
  Identities"; "Configure the Amazon VPC CNI plugin to use IRSA": do not keep the policy on the node role).
  ``AmazonSSMManagedInstanceCore`` (Session Manager, and every SSM parameter of the account) only with
  ``dynamo:cluster.ssmAccess: true``.
- Because the CNI then gets its credentials only from the Pod Identity agent, the ``vpc-cni`` and
  ``eks-pod-identity-agent`` add-ons are created before any node group (terraform-aws-eks v21 ``addons``:
  ``before_compute = true`` on exactly these two); a new node's aws-node finds its association at once.
- **NetworkPolicies are enforced**: the ``vpc-cni`` add-on always gets ``enableNetworkPolicy: "true"`` (EKS user
  guide, "Restrict Pod network traffic with Kubernetes network policies": "Enable the network policy parameter for the
  add-on"; VPC CNI >= 1.14, the pinned add-on is 1.21). Without it the NetworkPolicies ``dynamo:networkPolicy`` and
  the front door render change nothing on EKS. Pods no policy selects keep all traffic.
"""

from __future__ import annotations

CLUSTER_POLICY = (
    "AmazonEKSClusterPolicy"  # the EKS cluster role's one managed policy (EKS user guide, "Amazon EKS cluster IAM role")
)
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly")
SSM_POLICY = "AmazonSSMManagedInstanceCore"
CNI_POLICY = "AmazonEKS_CNI_Policy"
IMDS_HOP_LIMIT = 1
# add-on -> (its Kubernetes service account, the AWS managed policy its Pod Identity role gets). The CSI controllers'
# service accounts and policies: EKS user guide, "Use Amazon EFS storage" / "Use Amazon FSx for Lustre storage".
ADDON_IDENTITIES = {
    "vpc-cni": ("aws-node", CNI_POLICY),
    "aws-efs-csi-driver": ("efs-csi-controller-sa", "service-role/AmazonEFSCSIDriverPolicy"),
    "aws-fsx-csi-driver": ("fsx-csi-controller-sa", "AmazonFSxFullAccess"),
}
BEFORE_NODES = ("vpc-cni", "eks-pod-identity-agent")
ADDON_CONFIGURATION = {"vpc-cni": {"enableNetworkPolicy": "true"}}


def node_policies(ssm_access: bool) -> tuple[str, ...]:
    """The AWS managed policies of the node roles (the managed node groups' and Karpenter's)."""
    return NODE_POLICIES + ((SSM_POLICY,) if ssm_access else ())


def managed_policy_arn(policy: str) -> str:
    """The ARN of an AWS managed policy named ``policy`` (its path included, e.g. ``service-role/...``)."""
    return f"arn:aws:iam::aws:policy/{policy}"


def launch_template_metadata() -> dict:
    """``metadata_options`` of a GPU node group's launch template (pulumi-aws snake case)."""
    return {"http_endpoint": "enabled", "http_tokens": "required", "http_put_response_hop_limit": IMDS_HOP_LIMIT}


def nodeclass_metadata() -> dict:
    """``metadataOptions`` of a Karpenter EC2NodeClass."""
    return {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": IMDS_HOP_LIMIT}


def role_name(cluster_name: str, region: str, what: str) -> str:
    """The name of an IAM role the program names itself (the Karpenter node and controller roles, the load balancer
    controller's role): ``<cluster>-<region>-<what>``. IAM role names are unique in the whole account and EKS cluster
    names only per Region (IAM user guide, "IAM identifiers": names unique within the account; EKS CreateCluster: the
    name is unique in the Region), so two stacks with one cluster name in two Regions would otherwise claim one role.
    At most 64 characters (IAM CreateRole RoleName); a longer one keeps its start and ends in a hash of cluster,
    Region and role (so two long names never meet). A running cluster keeps the name its roles were created with (the
    wiring ignores ``name``: a renamed node role would be a new role, and the nodes on the old one's instance profile
    would lose their credentials)."""
    import hashlib

    name = f"{cluster_name}-{region}-{what}"
    if len(name) <= 64:
        return name
    return f"{cluster_name}-{what}"[:57] + "-" + hashlib.sha256(f"{cluster_name}/{region}/{what}".encode()).hexdigest()[:6]
