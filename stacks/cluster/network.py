"""The cluster's network: the VPC's subnets, NAT gateways, the S3 gateway and ECR interface endpoints (with their
prices), the public API endpoint's CIDRs, and the fabric EKS offers (EFA only)."""

from __future__ import annotations

import ipaddress
import math
from typing import Any, Optional

from stacks.catalog.model import Target
from stacks.config.keys import NS, ConfigError
from stacks.config.eks import EksConfig


# Where each subnet sits in the VPC. A subnet's CIDR block never changes (EC2 has no call that changes it; the provider
# replaces the subnet, and the new block collides with the old while the old still holds the nodes' and the cache's
# interfaces), so a zone's block must not depend on how many zones there are: each private subnet has a fixed slot.
#   slots 0-2: the first three zones, a quarter of the VPC's first half each;
#   slot 3:    the GPU Local Zone (GB200 UltraServers), the first half's last quarter;
#   slots 4-6: the fourth to sixth zones, a quarter of the second half's second half each (the public subnets use
#              only the second half's first half: 6 zones at most, a 16th of that half each);
# so adding a zone, or a Local Zone, adds a subnet and moves none. ``by-zone-count`` is the layout clusters built
# before the slots had (subnet sizes follow the zone count): kept for them, where growth is refused instead
# (stacks.config.eks.check_subnet_layout).
LOCAL_ZONE_SLOT = 3


def _private_slots(cidr: str) -> list[ipaddress.IPv4Network]:
    """The fixed private slots 0-6 of a VPC (see above)."""
    first, second = ipaddress.IPv4Network(cidr).subnets(prefixlen_diff=1)
    overflow = list(list(second.subnets(prefixlen_diff=1))[1].subnets(prefixlen_diff=2))
    return list(first.subnets(prefixlen_diff=2)) + overflow[:3]


def _zone_slot(i: int) -> int:
    """The private slot of the zone at position ``i`` of availabilityZones."""
    return i if i < LOCAL_ZONE_SLOT else i + 1


def _subnets(
    cidr: str, zones: tuple[str, ...], local_zone: Optional[str] = None, layout: str = "fixed-slots"
) -> tuple[list[dict], list[dict], Optional[dict]]:
    """Split the VPC in two: private subnets (big, for pods: one per zone, plus one for a GPU Local Zone) in the
    first half (and, past the third zone, in the second), small public ones in the second half. ``fixed-slots``: each
    subnet's block depends only on its zone's position (2 to 6 zones, and the Local Zone); ``by-zone-count``: sizes
    follow the zone count, as clusters built before the slots have them."""
    net = ipaddress.IPv4Network(cidr)  # an IPv4 range (EksConfig checks vpcCidr)
    halves = list(net.subnets(prefixlen_diff=1))
    public = list(halves[1].subnets(prefixlen_diff=max(4, math.ceil(math.log2(len(zones))))))
    if layout == "by-zone-count":
        n_private = len(zones) + (1 if local_zone else 0)
        private = list(halves[0].subnets(prefixlen_diff=max(2, math.ceil(math.log2(n_private)))))
        zone_blocks, lz_block = private[: len(zones)], private[len(zones)] if local_zone else None
    else:
        slots = _private_slots(cidr)
        zone_blocks, lz_block = [slots[_zone_slot(i)] for i in range(len(zones))], slots[LOCAL_ZONE_SLOT]
    lz = {"availability_zone": local_zone, "cidr_block": str(lz_block)} if local_zone else None
    return (
        [{"availability_zone": z, "cidr_block": str(public[i])} for i, z in enumerate(zones)],
        [{"availability_zone": z, "cidr_block": str(zone_blocks[i])} for i, z in enumerate(zones)],
        lz,
    )


EKS_FABRICS = ("aws-efa", "none")


def check_fabric_on_eks(target: Target, fabric_profile: Optional[str]) -> None:
    """EKS offers EFA only: a recipe built for InfiniBand, GKE RDMA or Nscale needs the EFA profile."""
    if target.topology == "disagg" and target.fabric == "none" and fabric_profile != "aws-efa":
        raise ConfigError(
            f"{NS}:fabricProfile: {target.id} names no RDMA fabric, so on EKS its NIXL KV transfer would fall back to TCP; "
            f"set {NS}:fabricProfile: aws-efa"
        )
    if target.fabric not in EKS_FABRICS and fabric_profile != "aws-efa":
        raise ConfigError(
            f"{NS}:fabricProfile: {target.id} moves KV cache over {target.fabric}, which EKS does not have; "
            f"set {NS}:fabricProfile: aws-efa (EFA devices and the LIBFABRIC backend) or use an existing {target.fabric} cluster (cluster.mode: kubeconfig)"
        )


# Interface endpoints for ECR: ecr.api (API calls such as DescribeImages) and ecr.dkr (the Docker registry API used by
# pulls) (ECR user guide, "Amazon ECR interface VPC endpoints (AWS PrivateLink)": the endpoint's security group admits
# 443 from the VPC's private subnets; Route 53 private DNS). Image layers are downloaded from pre-signed S3 URLs (ECR API
# GetDownloadUrlForLayer), so without the S3 gateway endpoint layer bytes still cross the NAT gateway.
# Each interface endpoint bills per Availability Zone-hour, $0.01 in us-east-1, plus $0.01/GB
# (aws.amazon.com/privatelink/pricing); a gateway endpoint for S3 has no hourly or per-GB charge (aws.amazon.com/vpc/pricing).
ECR_ENDPOINT_SERVICES = ("ecr.api", "ecr.dkr")
INTERFACE_ENDPOINT_USD_PER_AZ_HOUR = 0.01
# NAT gateway, us-east-1: $0.045 per gateway-hour and $0.045 per GB processed (aws.amazon.com/vpc/pricing, NAT
# gateway pricing, read 2026-12-01); cross-zone traffic to a NAT in another zone adds inter-AZ transfer.
NAT_USD_PER_HOUR = 0.045
NAT_USD_PER_GB = 0.045


# FSx for Lustre clients (the GPU nodes) accept Lustre traffic from the file system on TCP 988 and 1018-1023: FSx for
# Lustre user guide, "File system access control with Amazon VPC", Lustre client VPC security group rules (inbound
# from the file system's security group). EFS needs nothing inbound on its clients (NFS is client-initiated, 2049).
LUSTRE_CLIENT_PORTS = ((988, 988), (1018, 1023))


def efa_security_group(cfg: EksConfig) -> dict[str, list[dict]]:
    """The rules of the security group on every GPU node's interfaces, besides EKS's cluster security group: all
    traffic to and from itself, which EFA requires and nothing more (EC2 user guide, "Get started with EFA",
    "Prepare an EFA-enabled security group": inbound and outbound all traffic from and to the group itself), plus
    the Lustre client ports from the cache's security group with ``cacheStorage: fsx-lustre``. Everything else a
    node sends or receives goes through the cluster security group (EKS user guide, "View Amazon EKS security group
    requirements for clusters": inbound all from itself, outbound all), so no VPC-wide or internet rule sits here.
    ``{"self": True}`` is this group, ``{"from_cache": True}`` the cache's; the shell fills in the ids."""
    ingress = [{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}]
    if cfg.cache_storage == "fsx-lustre":
        ingress += [{"protocol": "tcp", "from_port": lo, "to_port": hi, "from_cache": True} for lo, hi in LUSTRE_CLIENT_PORTS]
    return {"ingress": ingress, "egress": [{"protocol": "-1", "from_port": 0, "to_port": 0, "self": True}]}


# The model cache's file-system ports its clients reach: FSx for Lustre servers listen on TCP 988 and 1018-1023 (the
# range 988-1023 covers both; FSx for Lustre user guide, "File system access control with Amazon VPC"), EFS on NFS 2049.
LUSTRE_SERVER_PORTS = (988, 1023)
NFS_PORT = 2049
ALL_EGRESS = {"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}


def cache_security_group(cfg: EksConfig) -> dict[str, list[dict]]:
    """The rules of the model cache's security group (its mount targets or its FSx interfaces): the file system's ports
    from the VPC, all egress."""
    lo, hi = LUSTRE_SERVER_PORTS if cfg.cache_storage == "fsx-lustre" else (NFS_PORT, NFS_PORT)
    return {
        "ingress": [{"protocol": "tcp", "from_port": lo, "to_port": hi, "cidr_blocks": [cfg.vpc_cidr]}],
        "egress": [dict(ALL_EGRESS)],
    }


def endpoint_security_group(cfg: EksConfig) -> dict[str, list[dict]]:
    """The rules of the interface endpoints' security group: HTTPS from the VPC, all egress."""
    return {
        "ingress": [{"protocol": "tcp", "from_port": 443, "to_port": 443, "cidr_blocks": [cfg.vpc_cidr]}],
        "egress": [dict(ALL_EGRESS)],
    }


def api_endpoint(public: bool, public_access_cidrs: list[str]) -> dict[str, Any]:
    """The EKS cluster's ``vpc_config`` besides its subnets: a private endpoint always, a public one when asked. A
    private-only endpoint sends no ``public_access_cidrs`` (the provider keeps the computed value; sending [] would
    diff forever)."""
    return {
        "endpoint_public_access": public,
        "endpoint_private_access": True,
        **({"public_access_cidrs": public_access_cidrs} if public else {}),
    }


def api_ingress(private_access_cidrs: tuple[str, ...]) -> list[dict[str, Any]]:
    """The cluster security group's rules that admit the networks reaching a private endpoint on 443, each with the
    resource-name part its CIDR gives it (``api-from-10-1-0-0-16``)."""
    return [
        {
            "name": f"api-from-{cidr.replace('.', '-').replace('/', '-')}",
            "cidr_ipv4": cidr,
            "ip_protocol": "tcp",
            "from_port": 443,
            "to_port": 443,
            "description": "Kubernetes API (private endpoint) from a connected network",
        }
        for cidr in private_access_cidrs
    ]


def network_plan(cfg: EksConfig) -> dict[str, Any]:
    """Egress of the cluster's private subnets and the endpoints that keep AWS traffic off the NAT gateway's per-GB
    charge: ``nat_zones`` (the zones with a NAT gateway: the first, or every zone), ``s3_gateway_endpoint``,
    ``interface_endpoints`` (service suffixes), the API endpoint (``endpoint_public_access``, ``public_access_cidrs``,
    ``private_access_cidrs``: the networks the cluster security group admits on 443), the rules the shell creates from
    it (``api_endpoint``, ``api_ingress``), the security groups' rules (``efa_security_group``,
    ``cache_security_group``, ``endpoint_security_group``) and ``warnings``."""
    zones = cfg.zones()
    warnings = []
    public = cfg.endpoint_access == "public"
    if not public:
        warnings.append(
            f"{NS}:cluster.endpointAccess is private: once this cluster exists, `pulumi up`, kubectl and CI reach its "
            f"Kubernetes API only from {', '.join(cfg.private_access_cidrs)} through the VPC (a runner inside it, a VPN, "
            "peering or Direct Connect); run `up` from there"
        )
    if public and "0.0.0.0/0" in cfg.public_access_cidrs:
        warnings.append(
            f"{NS}:cluster.publicAccessCidrs includes 0.0.0.0/0 (the default, as EKS's): the Kubernetes API endpoint "
            "accepts connections from any address (authentication still applies); list your networks there, e.g. "
            "[203.0.113.0/24]"
        )
    if cfg.ecr_endpoints and not cfg.s3_gateway_endpoint:
        warnings.append(
            f"{NS}:cluster.ecrEndpoints without s3GatewayEndpoint: ECR image layers still come from S3 through the NAT gateway"
        )
    return {
        "nat_zones": list(zones) if cfg.nat_gateways == "per-zone" else [zones[0]],
        "s3_gateway_endpoint": cfg.s3_gateway_endpoint,
        "interface_endpoints": list(ECR_ENDPOINT_SERVICES) if cfg.ecr_endpoints else [],
        "endpoint_public_access": public,
        "public_access_cidrs": list(cfg.public_access_cidrs) if public else [],
        "private_access_cidrs": list(cfg.private_access_cidrs),
        "api_endpoint": api_endpoint(public, list(cfg.public_access_cidrs) if public else []),
        "api_ingress": api_ingress(tuple(cfg.private_access_cidrs)),
        "efa_security_group": efa_security_group(cfg),
        "cache_security_group": cache_security_group(cfg),
        "endpoint_security_group": endpoint_security_group(cfg),
        "warnings": warnings,
    }
