"""The AWS Load Balancer Controller: on an EKS cluster this program builds, when the front door needs a load balancer
(``dynamo:frontDoor.exposure`` vpc or internet), it makes the gateway's Service an NLB from its
``service.beta.kubernetes.io/aws-load-balancer-*`` annotations (stacks/layers/front_door.py).

Pinned chart and upstream IAM policy (``versions.yaml`` ``charts.aws-load-balancer-controller``; the policy file is the
pinned tag's docs/install/iam_policy.json, byte for byte, checked by its sha256). Credentials through EKS Pod Identity
(a role trusted by pods.eks.amazonaws.com, an association for kube-system/aws-load-balancer-controller; the cluster has
the eks-pod-identity-agent add-on), and ``region`` and ``vpcId`` set in the values, so the controller never needs the
node's instance metadata. The public and private subnets carry the discovery tags it selects on
(``kubernetes.io/role/elb``, ``kubernetes.io/role/internal-elb``: components/cluster.py).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from stacks.registry.charts import HelmSpec, chart_pin, helm_spec as _helm
from stacks.cluster.identity import role_name

SERVICE_ACCOUNT = "aws-load-balancer-controller"
NAMESPACE = "kube-system"
POLICY_FILE = Path(__file__).resolve().parent.parent / "registry" / "aws-load-balancer-controller-iam-policy.json"


@dataclass
class LoadBalancerControllerPlan:
    helm: HelmSpec  # values without vpcId, which the shell adds from the VPC it creates
    service_account: str
    policy: dict  # the upstream IAM policy document
    role_name: str


def controller_policy() -> dict:
    """The upstream policy, refused if the file is not the pinned one (an edit would widen or break the controller's rights)."""
    raw = POLICY_FILE.read_bytes()
    want = chart_pin("aws-load-balancer-controller")["iam-policy-sha256"]
    got = hashlib.sha256(raw).hexdigest()
    if got != want:
        raise ValueError(
            f"{POLICY_FILE.name}: sha256 {got} is not the pinned upstream policy's {want} "
            f"(stacks/registry/versions.yaml charts.aws-load-balancer-controller)"
        )
    return json.loads(raw)


def plan_load_balancer_controller(cluster_name: str, region: str) -> LoadBalancerControllerPlan:
    values = {"clusterName": cluster_name, "region": region, "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}}
    return LoadBalancerControllerPlan(
        helm=_helm("aws-load-balancer-controller", "aws-load-balancer-controller", NAMESPACE, values),
        service_account=SERVICE_ACCOUNT,
        policy=controller_policy(),
        role_name=role_name(cluster_name, region, "lb-controller"),
    )
