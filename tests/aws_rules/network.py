"""Network cost (NAT gateways, the S3 gateway and ECR interface endpoints) and the Kubernetes API endpoint
(``AREA_NETWORK``)."""

from __future__ import annotations

from . import (
    AREA_NETWORK,
    AZ,
    EKS,
    NAT,
    NODEGROUP,
    ROUTE_TABLE,
    RTA,
    SG_INGRESS_RULE,
    SUBNET,
    VPC_ENDPOINT,
    Graph,
    Res,
    rule,
)


def _nat_route_tables(g: Graph) -> list[Res]:
    return [rt for rt in g.of(ROUTE_TABLE) if any(r.get("natGatewayId") for r in rt.inputs.get("routes") or [])]


@rule(AREA_NETWORK)
def private_route_tables_reach_s3_through_a_gateway_endpoint(g: Graph) -> list[str]:
    """Every route table that sends traffic to a NAT gateway also carries the S3 gateway endpoint, so S3 traffic (ECR
    image layers, pre-signed S3 downloads) does not pay the NAT gateway's per-GB processing charge; a gateway
    endpoint has no hourly or per-GB charge. Source: VPC pricing (aws.amazon.com/vpc/pricing: NAT gateway $/GB
    processed; gateway endpoints free); PrivateLink guide "Gateway endpoints for Amazon S3"; ECR API
    ``GetDownloadUrlForLayer`` (layers are S3 downloads)."""
    out = []
    s3 = [
        e
        for e in g.of(VPC_ENDPOINT)
        if str(e.inputs.get("serviceName", "")).endswith(".s3") and e.inputs.get("vpcEndpointType") == "Gateway"
    ]
    for rt in _nat_route_tables(g):
        if not any(rt.id in (e.inputs.get("routeTableIds") or []) for e in s3):
            out.append(f"{rt.name}: routes to a NAT gateway without the S3 gateway endpoint (S3 bytes pay NAT per-GB charges)")
    return out


@rule(AREA_NETWORK)
def private_subnet_uses_its_zones_nat(g: Graph) -> list[str]:
    """A private subnet in a zone that has a NAT gateway routes through that zone's NAT gateway: traffic to a NAT in
    another zone pays inter-AZ transfer on top of NAT processing, and loses egress when that zone fails. Source: VPC
    user guide "NAT gateways" (create a NAT gateway in each Availability Zone and route each zone's traffic to its own);
    VPC pricing (data transfer between Availability Zones)."""
    out = []
    nat_zone = {}
    for nat in g.of(NAT):
        sn = g.by_id(nat.inputs.get("subnetId"), SUBNET)
        if sn:
            nat_zone[nat.id] = sn.inputs.get("availabilityZone")
    zones_with_nat = set(nat_zone.values())
    for a in g.of(RTA):
        sn, rt = g.by_id(a.inputs.get("subnetId"), SUBNET), g.by_id(a.inputs.get("routeTableId"), ROUTE_TABLE)
        if not sn or not rt:
            continue
        nats = [r.get("natGatewayId") for r in rt.inputs.get("routes") or [] if r.get("natGatewayId")]
        zone = sn.inputs.get("availabilityZone")
        if nats and zone in zones_with_nat and not any(nat_zone.get(n) == zone for n in nats):
            out.append(
                f"{sn.name} ({zone}) routes through a NAT gateway in {[nat_zone.get(n) for n in nats]}, not its own zone's"
            )
    return out


@rule(AREA_NETWORK)
def ecr_interface_endpoints_are_complete(g: Graph) -> list[str]:
    """ECR interface endpoints come as a pair, ``ecr.api`` and ``ecr.dkr``, with private DNS, in a subnet of every
    Availability Zone the node groups use, next to the S3 gateway endpoint that carries the image layers. Source: ECR
    user guide "Amazon ECR interface VPC endpoints (AWS PrivateLink)" (both endpoints; 443 from the VPC; private DNS);
    ECR API ``GetDownloadUrlForLayer``; PrivateLink pricing (billed per endpoint per Availability Zone-hour)."""
    out = []
    ecr = {
        str(e.inputs.get("serviceName", "")).rsplit(".", 2)[-2] + "." + str(e.inputs.get("serviceName", "")).rsplit(".", 1)[-1]: e
        for e in g.of(VPC_ENDPOINT)
        if ".ecr." in str(e.inputs.get("serviceName", ""))
    }
    if not ecr:
        return out
    missing = {"ecr.api", "ecr.dkr"} - set(ecr)
    if missing:
        out.append(f"ECR interface endpoints without {sorted(missing)}: image pulls still go through the NAT gateway")
    node_zones = set()
    for ng in g.of(NODEGROUP):
        for sid in ng.inputs.get("subnetIds") or []:
            sn = g.by_id(sid, SUBNET)
            if sn and AZ.fullmatch(str(sn.inputs.get("availabilityZone"))):
                node_zones.add(sn.inputs["availabilityZone"])
    for svc, e in ecr.items():
        if not e.inputs.get("privateDnsEnabled"):
            out.append(f"{e.name}: {svc} without private DNS (clients would still resolve the public ECR endpoint)")
        zones = {
            (_s.inputs.get("availabilityZone") if (_s := g.by_id(sid, SUBNET)) else None)
            for sid in e.inputs.get("subnetIds") or []
        }
        if node_zones - zones:
            out.append(f"{e.name}: no endpoint subnet in {sorted(node_zones - zones)} where nodes run")
    if not any(str(e.inputs.get("serviceName", "")).endswith(".s3") for e in g.of(VPC_ENDPOINT)):
        out.append("ECR interface endpoints without the S3 gateway endpoint: image layers still cross the NAT gateway")
    return out


@rule(AREA_NETWORK)
def eks_public_endpoint_cidrs_are_explicit(g: Graph) -> list[str]:
    """A cluster whose Kubernetes API endpoint is public names the CIDR blocks allowed to reach it
    (``publicAccessCidrs``, from ``dynamo:cluster.publicAccessCidrs``) instead of leaving EKS's default of 0.0.0.0/0
    implicit. Source: EKS API reference ``VpcConfigRequest`` (publicAccessCidrs: default 0.0.0.0/0); EKS user guide
    "Cluster API server endpoint"."""
    out = []
    for c in g.of(EKS):
        vc = c.inputs.get("vpcConfig") or {}
        if vc.get("endpointPublicAccess", True) and not vc.get("publicAccessCidrs"):
            out.append(f"{c.name}: public API endpoint without publicAccessCidrs (EKS opens it to 0.0.0.0/0)")
    return out


@rule(AREA_NETWORK)
def eks_endpoint_is_reachable(g: Graph) -> list[str]:
    """The Kubernetes API keeps at least one endpoint, and a private-only endpoint is reached from connected networks
    that the cluster security group admits on TCP 443, or no `pulumi up` after this one reaches it. Sources: EKS API
    reference ``VpcConfigRequest`` (endpointPublicAccess false: requests only from within the VPC); eksctl "Cluster
    Access" ("EKS doesn't allow clusters without either private or public access enabled"); EKS user guide "Cluster API
    server endpoint" (private-only access from a connected network) and "View Amazon EKS security group requirements
    for clusters" (the cluster group admits only itself by default)."""
    out = []
    for c in g.of(EKS):
        vc = c.inputs.get("vpcConfig") or {}
        public, private = vc.get("endpointPublicAccess", True), vc.get("endpointPrivateAccess", False)
        if not public and not private:
            out.append(f"{c.name}: neither the public nor the private API endpoint is on (EKS refuses it)")
        elif not public:
            rules = [
                r
                for r in g.of(SG_INGRESS_RULE)
                if r.inputs.get("fromPort") == 443
                and r.inputs.get("toPort") == 443
                and r.inputs.get("ipProtocol") == "tcp"
                and r.inputs.get("cidrIpv4")
            ]
            if not rules:
                out.append(
                    f"{c.name}: private-only API endpoint, and no rule admits any network to the cluster security group "
                    "on 443: nothing outside the cluster reaches the API"
                )
    return out
