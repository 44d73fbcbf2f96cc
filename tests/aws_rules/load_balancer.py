"""The front door's NLB and the AWS Load Balancer Controller that builds it (``AREA_LOAD_BALANCER``)."""

from __future__ import annotations

import re
from typing import Any, Optional

from . import (
    AREA_LOAD_BALANCER,
    EKS,
    ENVOY_PROXY,
    HELM,
    HTTP_ROUTE,
    IAM_POLICY,
    IAM_ROLE,
    POD_IDENTITY,
    SUBNET,
    Graph,
    Res,
    _attached,
    _get,
    rule,
)


LB_ANNOTATION = "service.beta.kubernetes.io/aws-load-balancer-"
LBC_CHART = "aws-load-balancer-controller"
NLB_IDLE_TIMEOUT = (60, 6000)  # ELB user guide, "Update the idle timeout for your Network Load Balancer TCP listener"


def _nlb_services(g: Graph) -> list[tuple[Res, dict]]:
    """(EnvoyProxy, its Service spec) for every gateway Service the AWS Load Balancer Controller turns into an NLB."""
    out = []
    for ep in g.of(ENVOY_PROXY):
        svc = _get(ep.inputs, "spec", "provider", "kubernetes", "envoyService", default={}) or {}
        if (svc.get("annotations") or {}).get(f"{LB_ANNOTATION}type") == "external":
            out.append((ep, svc))
    return out


def _seconds(v: Any) -> Optional[int]:
    m = re.fullmatch(r"(\d+)s", str(v or ""))
    return int(m[1]) if m else None


@rule(AREA_LOAD_BALANCER)
def front_door_nlb_is_built_by_a_controller_that_can(g: Graph) -> list[str]:
    """A gateway Service annotated for the AWS Load Balancer Controller (``aws-load-balancer-type: external``, IP
    targets) becomes an NLB only if the controller runs in the cluster with its own credentials and knows the cluster,
    Region and VPC (chart values ``clusterName``, ``region``, ``vpcId``: without them it reads the node's instance
    metadata, which hop limit 1 keeps from it); its Pod Identity role holds the upstream IAM policy; the subnets of the
    scheme carry the discovery tag (``kubernetes.io/role/elb`` for internet-facing, ``kubernetes.io/role/internal-elb``
    for internal); an internet-facing NLB lists its source ranges; every TCP listener's idle timeout is within 60-6000 s
    and at least the longest route timeout behind it (a stream idle longer than that is cut). Sources: AWS Load Balancer
    Controller docs v2 "Network Load Balancer" (service annotations: aws-load-balancer-type external,
    nlb-target-type ip, scheme, listener-attributes.TCP-<port>), "Subnet auto-discovery", "Installation" (helm values
    clusterName, region, vpcId; IAM policy docs/install/iam_policy.json); ELB user guide, NLB listeners
    ("tcp.idle_timeout.seconds": 60-6000); EKS user guide "EKS Pod Identity"."""
    out = []
    nlbs = _nlb_services(g)
    if not nlbs:
        return out
    eks = next(iter(g.of(EKS)), None)
    releases = [h for h in g.of(HELM) if h.inputs.get("chart") == LBC_CHART]
    if not releases:
        return [
            f"{ep.name}: its Service is annotated for the AWS Load Balancer Controller, which the stack does not install"
            for ep, _ in nlbs
        ]
    rel = releases[0]
    values = rel.inputs.get("values") or {}
    for key in ("clusterName", "region", "vpcId"):
        if not values.get(key):
            out.append(f"{rel.name}: values.{key} not set: the controller would read it from the node's instance metadata")
    if eks is not None and values.get("clusterName") != eks.inputs.get("name"):
        out.append(f"{rel.name}: values.clusterName {values.get('clusterName')!r} is not the cluster {eks.inputs.get('name')!r}")
    sa = (values.get("serviceAccount") or {}).get("name")
    assoc = [
        a
        for a in g.of(POD_IDENTITY)
        if a.inputs.get("serviceAccount") == sa and a.inputs.get("namespace") == rel.inputs.get("namespace")
    ]
    if not assoc:
        out.append(f"{rel.name}: no Pod Identity association for {rel.inputs.get('namespace')}/{sa}")
    for a in assoc:
        role = next(
            (r for r in g.of(IAM_ROLE) if str(a.inputs.get("roleArn", "")).endswith("/" + str(r.inputs.get("name") or r.name))),
            None,
        )
        policies = [
            pol
            for pol in g.of(IAM_POLICY)
            if role is not None
            and any(arn == f"arn:aws:iam::123456789012:policy/{pol.inputs.get('name') or pol.name}" for arn in _attached(g, role))
        ]
        if not any("elasticloadbalancing:CreateLoadBalancer" in str(pol.inputs.get("policy")) for pol in policies):
            out.append(
                f"{a.name}: the controller's role {a.inputs.get('roleArn')} holds no policy allowing elasticloadbalancing:CreateLoadBalancer"
            )
        if a.urn not in rel.dependencies:
            out.append(f"{rel.name}: installed without waiting for its Pod Identity association {a.name}")
    routes = [
        t
        for r in g.of(HTTP_ROUTE)
        for rule_ in (_get(r.inputs, "spec", "rules", default=[]) or [])
        if (t := _seconds(_get(rule_, "timeouts", "request"))) is not None
    ]
    longest = max(routes, default=0)
    for ep, svc in nlbs:
        ann = svc.get("annotations") or {}
        scheme = ann.get(f"{LB_ANNOTATION}scheme", "internal")
        tag = "kubernetes.io/role/elb" if scheme == "internet-facing" else "kubernetes.io/role/internal-elb"
        if not any((sn.inputs.get("tags") or {}).get(tag) == "1" for sn in g.of(SUBNET)):
            out.append(f"{ep.name}: a {scheme} NLB needs subnets tagged {tag}=1, and none is")
        if scheme == "internet-facing" and not svc.get("loadBalancerSourceRanges"):
            out.append(f"{ep.name}: an internet-facing NLB without loadBalancerSourceRanges admits every address")
        if ann.get(f"{LB_ANNOTATION}nlb-target-type") != "ip":
            out.append(
                f"{ep.name}: nlb-target-type {ann.get(f'{LB_ANNOTATION}nlb-target-type')!r}: the gateway's pods are IP targets (ip)"
            )
        idles = {k.rsplit("-", 1)[-1]: v for k, v in ann.items() if k.startswith(f"{LB_ANNOTATION}listener-attributes.TCP-")}
        if not idles:
            out.append(f"{ep.name}: no listener idle timeout: the NLB's 350 s default cuts routes of up to {longest} s")
        for port, v in sorted(idles.items()):
            m = re.fullmatch(r"tcp\.idle_timeout\.seconds=(\d+)", str(v))
            idle = int(m[1]) if m else None
            if idle is None or not NLB_IDLE_TIMEOUT[0] <= idle <= NLB_IDLE_TIMEOUT[1]:
                out.append(
                    f"{ep.name}: TCP-{port} {v!r}: tcp.idle_timeout.seconds must be {NLB_IDLE_TIMEOUT[0]}-{NLB_IDLE_TIMEOUT[1]}"
                )
            elif idle < min(longest, NLB_IDLE_TIMEOUT[1]):
                out.append(f"{ep.name}: TCP-{port} idles out after {idle} s, before the longest route timeout ({longest} s)")
    return out
