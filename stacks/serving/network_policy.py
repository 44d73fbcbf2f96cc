"""Optional NetworkPolicies for a serving namespace (``dynamo:networkPolicy: {enabled: true, ...}``): deny by default,
then allow what Dynamo needs. Pure data; stacks/serving/__init__.py adds them to the plan, components/serving.py registers them.

Allowed (each a separate policy, named ``<dgd>-<what>``; several DGDs in one namespace each add theirs, and
NetworkPolicies add up):
- every pod: DNS to kube-system's kube-dns/CoreDNS pods (``k8s-app: kube-dns``, UDP/TCP 53);
- the DGD's pods among themselves, any port (frontend <-> workers: request plane, KV events, NIXL KV transfer);
- the frontend's HTTP port (operator default 8000, stacks/operator.container_ports) from the namespaces named in
  ``ingressNamespaces`` and, of the serving namespace's own pods, only those of the Jobs that are the frontend's
  clients (the benchmark Job, by the Job controller's label): any other pod there (a download Job running remote
  code, a pod someone starts) is refused. ``kubectl port-forward`` is not affected: the kubelet forwards inside the
  pod's own network namespace, which NetworkPolicies do not filter;
- every component's ports from ``monitoringNamespaces`` (Prometheus scraping the ``system`` / ``http`` ports);
- the DGD's pods to the platform in ``dynamo-system``: NATS client port 4222 (dynamo-platform values.yaml
  ``nats.port: 4222``) and etcd 2379 (dynamo-platform.md: ``etcdAddr`` format ``http://host:2379``), and to the
  Kubernetes API server on TCP 443/6443: the platform's discovery backend is "kubernetes" (values.yaml
  ``discoveryBackend``: "Default is kubernetes for Kubernetes API service discovery"). The API server is not a pod a
  selector can name, so the rule names networks (``api_server_cidrs``): its ``kubernetes`` Service's ClusterIP, which
  implementations that evaluate a policy before the Service's address translation see (the VPC CNI's network
  policy controller puts Service ClusterIPs into its PolicyEndpoints, aws/amazon-network-policy-controller-k8s#222),
  and its endpoints, which the others see (the VPC CNI maintainers' advice for the API server: "allow the endpoint
  IPs behind the Kubernetes service ... Another way is to allow the subnet", aws/aws-network-policy-agent#281).
  Where the program does not know them (a cluster it did not build) and ``networkPolicy.apiServerCidrs`` is unset,
  these ports stay open to any address, and the serving layer warns, naming the key;
- the download / validate Jobs (and the benchmark Job): egress TCP 443 to any address (Hugging Face Hub, PyPI for
  the ``pip install`` of the python:3.10-slim Jobs); the frontend's clients among them (the benchmark Job) also
  reach the frontend's HTTP port, and no other Job does.

Pods are selected by the labels the Dynamo operator puts on them (stacks/operator.pod_labels:
``nvidia.com/dynamo-graph-deployment-name``, ``nvidia.com/dynamo-component-type``) and Job pods by the label the
Job controller adds (``batch.kubernetes.io/job-name``, Kubernetes >= 1.27: "Job: ... the job-name label",
https://kubernetes.io/docs/reference/labels-annotations-taints/#batchkubernetesiojob-name).
"""

from __future__ import annotations

from typing import Iterable

from stacks.serving.operator import LABEL_COMPONENT_TYPE, LABEL_DGD_NAME, container_ports, component_type
from stacks.registry.charts import PLATFORM_NAMESPACE

API = "networking.k8s.io/v1"
NS_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server (Kubernetes >= 1.22)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
NATS_PORT, ETCD_PORT = 4222, 2379
API_SERVER_PORTS = (443, 6443)
HTTPS = 443
# EKS assigns Service addresses from one of these when the cluster names no serviceIpv4Cidr (the program names none):
# EKS API reference, KubernetesNetworkConfigRequest.serviceIpv4Cidr: "If you don't specify a block, Kubernetes assigns
# addresses from either the 10.100.0.0/16 or 172.20.0.0/16 CIDR blocks."
EKS_DEFAULT_SERVICE_CIDRS = ("10.100.0.0/16", "172.20.0.0/16")


def eks_api_server_cidrs(vpc_cidr: str) -> tuple[str, ...]:
    """Where Dynamo's pods reach the API server of an EKS cluster the program built in ``vpc_cidr``: the ``kubernetes``
    Service's ClusterIP (in one of EKS's default Service ranges) and its endpoints, the control plane's network
    interfaces, which EKS places in the cluster's subnets (EKS user guide, "View Amazon EKS networking requirements
    for VPC and subnets": "Amazon EKS creates up to 4 elastic network interfaces in the subnets that you specify"),
    all inside the VPC's CIDR. Nothing outside the VPC is reachable on 443/6443 through this rule."""
    return (vpc_cidr, *EKS_DEFAULT_SERVICE_CIDRS)


def benchmark_job_name(dgd: dict) -> str:
    """The AIPerf Job's name (stacks/benchmark.build_benchmark names it so; a test holds the two equal)."""
    return f"aiperf-{dgd['metadata']['name']}"[:63].rstrip("-")


def _policy(name: str, namespace: str, selector: dict, types: list[str], ingress=None, egress=None) -> dict:
    spec: dict = {"podSelector": selector, "policyTypes": types}
    if ingress is not None:
        spec["ingress"] = ingress
    if egress is not None:
        spec["egress"] = egress
    return {"apiVersion": API, "kind": "NetworkPolicy", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _namespaces(names: Iterable[str]) -> dict:
    return {"namespaceSelector": {"matchExpressions": [{"key": NS_NAME_LABEL, "operator": "In", "values": sorted(set(names))}]}}


def _tcp(*ports: int) -> list[dict]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _api_server_rule(cidrs: Iterable[str]) -> dict:
    blocks = sorted(set(cidrs))
    rule: dict = {"to": [{"ipBlock": {"cidr": c}} for c in blocks]} if blocks else {}
    return {**rule, "ports": _tcp(*API_SERVER_PORTS)}


def network_policies(
    dgd: dict,
    job_names: Iterable[str],
    ingress_namespaces: Iterable[str] = (),
    monitoring_namespaces: Iterable[str] = (),
    api_server_cidrs: Iterable[str] = (),
    frontend_clients: Iterable[str] = (),
) -> list[dict]:
    """The NetworkPolicies of one serving namespace holding ``dgd`` and the Jobs ``job_names``; ``api_server_cidrs``:
    the networks the API server is reached at (empty: any address); ``frontend_clients``: the Jobs among
    ``job_names`` whose pods send requests to the frontend (the benchmark Job)."""
    ns = dgd["metadata"]["namespace"]
    name = dgd["metadata"]["name"]  # every policy carries the DGD's name: entries sharing a namespace never collide
    graph = {LABEL_DGD_NAME: dgd["metadata"]["name"]}
    frontends = [c for c in dgd["spec"]["components"] if component_type(c) == "frontend"]
    fe_ports = sorted({p for c in frontends for p in container_ports(c).values()})
    all_ports = sorted({p for c in dgd["spec"]["components"] for p in container_ports(c).values()})
    jobs = sorted(set(job_names))
    clients = sorted(set(frontend_clients))
    assert set(clients) <= set(jobs), (clients, jobs)
    client_pods = {"matchExpressions": [{"key": JOB_NAME_LABEL, "operator": "In", "values": clients}]}
    frontend_peers = ([_namespaces(ingress_namespaces)] if list(ingress_namespaces) else []) + (
        [{"podSelector": client_pods}] if clients else []
    )
    out = [
        _policy(f"{name}-default-deny", ns, {}, ["Ingress", "Egress"]),
        _policy(
            f"{name}-dns",
            ns,
            {},
            ["Egress"],
            egress=[
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {NS_NAME_LABEL: "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                }
            ],
        ),
        _policy(
            f"{name}-graph",
            ns,
            {"matchLabels": dict(graph)},
            ["Ingress", "Egress"],
            ingress=[{"from": [{"podSelector": {"matchLabels": dict(graph)}}]}],
            egress=[
                {"to": [{"podSelector": {"matchLabels": dict(graph)}}]},
                {
                    "to": [{"namespaceSelector": {"matchLabels": {NS_NAME_LABEL: PLATFORM_NAMESPACE}}}],
                    "ports": _tcp(NATS_PORT, ETCD_PORT),
                },
                _api_server_rule(api_server_cidrs),
            ],
        ),
    ]
    if fe_ports and frontend_peers:
        out.append(
            _policy(
                f"{name}-frontend-ingress",
                ns,
                {"matchLabels": {**graph, LABEL_COMPONENT_TYPE: "frontend"}},
                ["Ingress"],
                ingress=[{"from": frontend_peers, "ports": _tcp(*fe_ports)}],
            )
        )
    if list(monitoring_namespaces):
        out.append(
            _policy(
                f"{name}-monitoring",
                ns,
                {"matchLabels": dict(graph)},
                ["Ingress"],
                ingress=[{"from": [_namespaces(monitoring_namespaces)], "ports": _tcp(*all_ports)}],
            )
        )
    if jobs:
        out.append(
            _policy(
                f"{name}-jobs-egress",
                ns,
                {"matchExpressions": [{"key": JOB_NAME_LABEL, "operator": "In", "values": jobs}]},
                ["Egress"],
                egress=[{"ports": _tcp(HTTPS)}],
            )
        )
    if clients and fe_ports:
        out.append(
            _policy(
                f"{name}-frontend-clients-egress",
                ns,
                client_pods,
                ["Egress"],
                egress=[
                    {
                        "to": [{"podSelector": {"matchLabels": {**graph, LABEL_COMPONENT_TYPE: "frontend"}}}],
                        "ports": _tcp(*fe_ports),
                    }
                ],
            )
        )
    return out


def front_door_ingress(dgd: dict, namespaces: Iterable[str]) -> dict:
    """The front door's path to one DGD's frontend: its HTTP port from the gateway's namespace (and the namespaces the
    user lists), nothing else; it adds to ``network_policies`` (NetworkPolicies are additive)."""
    ns, name = dgd["metadata"]["namespace"], dgd["metadata"]["name"]
    graph = {LABEL_DGD_NAME: name}
    fe_ports = sorted(
        {p for c in dgd["spec"]["components"] if component_type(c) == "frontend" for p in container_ports(c).values()}
    )
    return _policy(
        f"{name}-front-door-ingress",
        ns,
        {"matchLabels": {**graph, LABEL_COMPONENT_TYPE: "frontend"}},
        ["Ingress"],
        ingress=[{"from": [_namespaces(namespaces)], "ports": _tcp(*fe_ports)}],
    )
