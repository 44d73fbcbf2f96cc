"""How a DGD's GPU pods fit on nodes: the extended resources a pod asks for, and first-fit packing onto nodes of one
capacity. Pure functions of the DGD (the catalog's recipe data and the serving plans read them alike), so the catalog
view, the autoscaling checks and the node groups' sizing share one count."""

from __future__ import annotations


NODE_RESOURCES = ("nvidia.com/gpu", "vpc.amazonaws.com/efa")


def pod_requests(pod: dict, resources: tuple[str, ...] = NODE_RESOURCES) -> dict[str, int]:
    """Extended-resource requests of one pod (limits win over requests, as the scheduler counts them)."""
    out: dict[str, int] = {}
    for c in pod.get("containers") or []:
        res = c.get("resources") or {}
        for k, v in {**(res.get("requests") or {}), **(res.get("limits") or {})}.items():
            if k in resources:
                out[k] = out.get(k, 0) + int(v)
    return out


def pack(dgd: dict, capacity: dict[str, int]) -> tuple[int, list[str]]:
    """GPU nodes the DGD's GPU pods need, first fit in component and replica order (the order
    stacks.cluster.scheduling ``check_target`` checks), and the replicas no single node can hold."""
    nodes: list[dict[str, int]] = []
    too_big: list[str] = []
    for comp in dgd["spec"]["components"]:
        req = pod_requests(comp["podTemplate"]["spec"])
        if not req.get("nvidia.com/gpu"):
            continue
        if any(capacity.get(k, 0) < v for k, v in req.items()):
            too_big.append(f"{comp['name']} requests {req}, a node has {capacity}")
            continue
        for _ in range(int(comp.get("replicas", 1))):
            node = next((n for n in nodes if all(n.get(k, 0) >= v for k, v in req.items())), None)
            if node is None:
                node = dict(capacity)
                nodes.append(node)
            for k, v in req.items():
                node[k] -= v
    return len(nodes), too_big
