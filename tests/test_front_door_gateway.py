"""The front door on the real parts: the managed gateway's own translator, and admission by a real kube-apiserver.

- Envoy Gateway v1.9.1's ``egctl x translate`` (built by tools/egctl.sh from the Go module proxy) turns the rendered
  objects into the Envoy configuration the managed gateway serves; the assertions read that xDS: authentication on the
  route, the header removals (early, before authentication, and on the route), the route timeout, TLS on the listener,
  the per-identity rate limit, and every object Accepted in the gateway status it computes.
- A kube-apiserver with the CRDs the managed path installs (the Envoy Gateway v1.9.1 chart's: its Gateway API bundle
  and its own) and a cluster's own Gateway API v1.5.1 standard install (the existing-gateway path), plus cert-manager
  v1.21.2's, admits every front-door object of an aggregated and a disaggregated target, without pruning a field.

The translator's file loader keeps no labels of a Namespace (envoyproxy/gateway internal/gatewayapi/resource/load.go
builds each Namespace from its name only), while the API server labels every namespace with its name: so the listener's
namespace selector (``kubernetes.io/metadata.name In [serving namespaces]``) is checked by admission and by
test_front_door.py, and the translator input admits routes from every namespace it is given.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from harness import go_module_dir
from stacks.registry.charts import chart_pin
from stacks.layers.front_door import DYNAMO_CLIENT_HEADERS, ROUTING_HEADERS, TENANT_HEADER
from stacks.program import build_program
from stacks.registry import yaml_text

pytestmark = pytest.mark.engine
ROOT = Path(__file__).resolve().parent.parent
AGG, DISAGG = "lightning-vllm-agg-h100-dspark", "lightning-vllm-disagg-h100-dspark"
KEYS = {"team-a": "a" * 40, "team-b": "b" * 40}
DOOR = {
    "enabled": True,
    "exposure": "internet",
    "sourceRanges": ["203.0.113.0/24"],
    "hostname": "models.example.com",
    "tls": {"mode": "certManager", "issuer": {"name": "letsencrypt"}},
    "auth": {"mode": "apiKeys"},
    "rateLimit": {"requestsPerMinute": 60},
}
JWT = {
    "enabled": True,
    "auth": {
        "mode": "jwt",
        "jwt": {
            "issuer": "https://id.example.com",
            "jwksUri": "https://id.example.com/jwks.json",
            "audiences": ["models"],
            "tenantClaim": "org",
        },
    },
}


def program(door: dict, target: str = DISAGG, **extra):
    keys = frozenset({"frontDoorApiKeys"}) if door.get("auth", {}).get("mode") == "apiKeys" else frozenset()
    return build_program(
        {"target": target, "namespace": "llm", "hfTokenSecretName": "hf", "createNamespace": False, "frontDoor": door, **extra},
        "t",
        keys,
    )


def door_objects(prog) -> list[dict]:
    return copy.deepcopy([o for layer in prog.layers for o in layer.objects])


def envoy_gateway_crd_files() -> list[Path]:
    """The CRDs the managed door's chart installs (Envoy Gateway at the pinned version: its Gateway API bundle, then
    its own), from the Go module proxy."""
    crds = (
        go_module_dir("github.com/envoyproxy/gateway", chart_pin("envoy-gateway")["version"])
        / "charts/gateway-helm/charts/crds/crds"
    )
    return [crds / "gatewayapi-crds.yaml", *sorted((crds / "generated").glob("*.yaml"))]


def cert_manager_crd_files() -> list[Path]:
    """cert-manager's CRDs at the pinned chart version, from the Go module proxy."""
    return sorted(
        (go_module_dir("github.com/cert-manager/cert-manager", chart_pin("cert-manager")["version"]) / "deploy/crds").glob(
            "*.yaml"
        )
    )


# ---------------------------------------------------------------------------- the translator


@pytest.fixture(scope="module")
def egctl() -> str:
    proc = subprocess.run([str(ROOT / "tools" / "egctl.sh")], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> dict:
    """A self-signed certificate for the door's host, as cert-manager would leave it in the TLS Secret."""
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            d / "k.pem",
            "-out",
            d / "c.pem",
            "-days",
            "2",
            "-subj",
            "/CN=models.example.com",
            "-addext",
            "subjectAltName=DNS:models.example.com",
        ],
        check=True,
        capture_output=True,
    )
    return {"tls.crt": (d / "c.pem").read_text(), "tls.key": (d / "k.pem").read_text()}


def _b64(data: dict) -> dict:
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


def translator_input(prog, certificate: dict) -> list[dict]:
    """The door's objects as the cluster holds them once up: the API key Secret filled (data, base64), the TLS Secret
    cert-manager issues, the frontend Service the operator makes (with its cluster IP), the namespaces."""
    objs = []
    for o in door_objects(prog):
        if o["kind"] == "Certificate":
            continue  # cert-manager's; the Secret it issues is added below
        if o["kind"] == "Secret":
            o["data"] = _b64(KEYS)
            o.pop("stringData", None)
        if o["kind"] == "Gateway":
            for lst in o["spec"]["listeners"]:
                if lst["allowedRoutes"]["namespaces"]["from"] == "Selector":
                    lst["allowedRoutes"]["namespaces"] = {"from": "All"}  # see the module docstring
        objs.append(o)
    gw = next(o for o in objs if o["kind"] == "Gateway")
    if any(lst.get("tls") for lst in gw["spec"]["listeners"]):
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/tls",
                "metadata": {"name": "dynamo-front-door-tls", "namespace": gw["metadata"]["namespace"]},
                "data": _b64(certificate),
            }
        )
    from stacks.serving.operator import operator_services

    for e in prog.entries:
        for i, svc in enumerate(operator_services(e.plan.dgd)):
            svc["spec"]["clusterIP"] = f"10.96.0.{10 + i}"
            objs.append(svc)
    for ns in {e.plan.dgd["metadata"]["namespace"] for e in prog.entries}:
        objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return objs


def translate(egctl: str, objs: list[dict], tmp_path: Path, to: str) -> dict | list:
    f = tmp_path / f"in-{to}.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    args = [egctl, "x", "translate", "--from", "gateway-api", "--to", to, "-f", str(f)] + (["-t", "all"] if to == "xds" else [])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr[-3000:]
    return list(yaml_text.load_all(proc.stdout)) if to == "gateway-api" else yaml_text.load(proc.stdout)


def walk(node, key: str):
    """Every value under ``key`` anywhere in a nested structure."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from walk(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v, key)


def listeners(xds: dict) -> list[dict]:
    return [s["activeState"]["listener"] for s in walk(xds, "dynamicListeners") for s in s if "activeState" in s]


def routes(xds: dict) -> list[dict]:
    """The routes Envoy Gateway made from HTTPRoutes (named httproute/<namespace>/<name>/rule/...)."""
    return [
        r
        for rc in walk(xds, "routeConfig")
        if isinstance(rc, dict)
        for vh in rc.get("virtualHosts", [])
        for r in vh["routes"]
        if r.get("name", "").startswith("httproute/")
    ]


def _all_accepted(status_docs: list) -> None:
    bad = []
    for doc in status_docs:
        for item in doc if isinstance(doc, list) else [doc]:
            if not isinstance(item, dict):
                continue
            for cond in walk(item.get("status") or {}, "conditions"):
                for c in cond:
                    if c["status"] != "True" and c["type"] not in ("Programmed",):  # no Envoy runs here: nothing is programmed
                        bad.append((item["kind"], item["metadata"]["name"], c["type"], c.get("message")))
    assert not bad, bad


def test_envoy_gateway_serves_the_door_with_auth_tls_timeouts_and_header_removal(egctl, certificate, tmp_path):
    prog = program(DOOR)
    objs = translator_input(prog, certificate)
    _all_accepted(translate(egctl, objs, tmp_path, "gateway-api"))
    xds = translate(egctl, objs, tmp_path, "xds")
    by_port = {
        lst["address"]["socketAddress"]["portValue"]: lst for lst in listeners(xds) if "envoy-gateway-proxy" not in lst["name"]
    }
    # Envoy Gateway maps privileged ports to 10000 + port; both listeners remove a client's Dynamo headers before any filter
    assert set(by_port) == {10080, 10443}, sorted(by_port)
    for lst in by_port.values():
        hcm = next(walk(lst, "earlyHeaderMutationExtensions"))
        removed = {m["remove"] for m in next(walk(hcm, "mutations"))}
        assert set(DYNAMO_CLIENT_HEADERS) <= removed
    https = by_port[10443]
    assert any("tlsCertificateSdsSecretConfigs" in json.dumps(fc) for fc in https["filterChains"]), "no TLS on the HTTPS listener"
    filters = [f["name"] for f in next(walk(https, "httpFilters"))]
    # authentication, then the rate limit, then the router: the tenant header the rate limit keys on is the one auth set
    assert (
        filters.index("envoy.filters.http.api_key_auth")
        < filters.index("envoy.filters.http.local_ratelimit")
        < filters.index("envoy.filters.http.router")
    )
    planned = {
        o["metadata"]["name"]: o["spec"]["rules"][0]["timeouts"]["request"]
        for o in next(x for x in prog.layers if x.key == "frontDoor").objects
        if o["kind"] == "HTTPRoute" and "backendRefs" in o["spec"]["rules"][0]
    }
    model_routes = [r for r in routes(xds) if "route" in r]
    assert model_routes and {r["name"].split("/")[2] for r in model_routes} == set(planned)
    for r in model_routes:
        # the route's own timeout, as planned; Envoy's default 15 s would cut a stream
        assert r["route"]["timeout"] == planned[r["name"].split("/")[2]], r["route"]
        assert int(r["route"]["timeout"].rstrip("s")) >= 600
        assert set(ROUTING_HEADERS) <= set(r.get("requestHeadersToRemove", []))
        # the OpenAI API only (Envoy's path-separated prefix: /v1 and /v1/..., not /metrics or /busy_threshold)
        assert r["match"].get("pathSeparatedPrefix") == "/v1" or r["match"].get("path") == "/v1", r["match"]
        per = r["typedPerFilterConfig"]
        auth = per["envoy.filters.http.api_key_auth"]
        assert auth["forwarding"] == {"header": TENANT_HEADER, "hideCredentials": True}
        assert {c["client"] for c in auth["credentials"]} == set(KEYS)
        assert next(walk(auth, "keySources")) == [{"header": "Authorization"}]
        limit = per["envoy.filters.http.local_ratelimit"]
        assert json.dumps(limit).count(TENANT_HEADER) >= 1 and "60" in json.dumps(next(walk(limit, "tokenBucket")))
    redirects = [r for r in routes(xds) if "redirect" in r]
    assert redirects and all(r["redirect"]["schemeRedirect"] == "https" for r in redirects)
    assert not [r for r in routes(xds) if "route" in r and "redirect" in r["name"]]  # plain HTTP serves no model


def test_jwt_door_sets_the_tenant_from_the_claim(egctl, certificate, tmp_path):
    prog = program(JWT)
    xds = translate(egctl, translator_input(prog, certificate), tmp_path, "xds")
    text = json.dumps(xds)
    assert "envoy.filters.http.jwt_authn" in text
    providers = next(walk(xds, "providers"))
    provider = next(iter(providers.values()))
    assert provider["issuer"] == "https://id.example.com" and provider["audiences"] == ["models"]
    assert {"headerName": TENANT_HEADER, "claimName": "org"} in provider["claimToHeaders"]
    for r in [r for r in routes(xds) if "route" in r]:
        assert int(r["route"]["timeout"].rstrip("s")) >= 600


def test_a_serve_stack_gets_one_prefix_per_entry_rewritten_to_the_frontend(egctl, certificate, tmp_path):
    prog = build_program(
        {
            "hfTokenSecretName": "hf",
            "createNamespace": False,
            "frontDoor": {"enabled": True},
            "serve": [{"name": "chat", "target": AGG, "namespace": "a"}, {"name": "long", "target": DISAGG, "namespace": "b"}],
        },
        "t",
    )
    xds = translate(egctl, translator_input(prog, certificate), tmp_path, "xds")
    model = {
        r["match"]["prefix"] if "prefix" in r["match"] else r["match"].get("pathSeparatedPrefix"): r
        for r in routes(xds)
        if "route" in r
    }
    # the OpenAI API only: not the frontend's /metrics, /health or admin API
    assert set(model) == {"/chat/v1", "/long/v1"}, sorted(model)
    for r in model.values():
        assert r["route"].get("prefixRewrite") == "/v1", r["route"]
        assert set(DYNAMO_CLIENT_HEADERS) <= set(r["requestHeadersToRemove"])  # no identity here: the tenant header goes too


def test_auth_and_the_rate_limit_hold_on_every_route_of_every_entry(egctl, certificate, tmp_path):
    """Auth is attached per route: in Envoy's own configuration for a stack of three entries behind one door, every
    route that reaches a frontend (one per entry) checks the API keys of every client and applies the per-caller rate
    limit; a door that protected only the first entry's route would fail here."""
    entries = [
        {"name": "chat", "target": AGG, "namespace": "a"},
        {"name": "long", "target": DISAGG, "namespace": "b"},
        {"name": "more", "target": AGG, "namespace": "c"},
    ]
    prog = build_program(
        {"hfTokenSecretName": "hf", "createNamespace": False, "frontDoor": DOOR, "serve": entries},
        "t",
        frozenset({"frontDoorApiKeys"}),
    )
    xds = translate(egctl, translator_input(prog, certificate), tmp_path, "xds")
    model = [r for r in routes(xds) if "route" in r]
    prefixes = {r["match"].get("prefix") or r["match"].get("pathSeparatedPrefix") for r in model}
    assert prefixes == {f"/{e['name']}/v1" for e in entries}, sorted(map(str, prefixes))
    for r in model:
        per = r.get("typedPerFilterConfig") or {}
        auth = per.get("envoy.filters.http.api_key_auth")
        assert auth, f"route {r['name']} reaches a frontend without API key auth"
        assert {c["client"] for c in auth["credentials"]} == set(KEYS), r["name"]
        assert "envoy.filters.http.local_ratelimit" in per, f"route {r['name']} has no rate limit"


# ---------------------------------------------------------------------------- admission


def _crd_docs(paths) -> list[dict]:
    out = []
    for p in paths:
        for d in yaml_text.load_all(Path(p).read_text()):
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition":
                out.append(d)  # annotations kept: *.k8s.io groups need api-approved.kubernetes.io
    return out


def crd_sets() -> dict[str, list[dict]]:
    """The managed path's CRDs (Envoy Gateway's chart bundle) and a cluster's own Gateway API v1.5.1 standard install,
    each with cert-manager v1.21.2's."""
    eg = envoy_gateway_crd_files()
    gwapi = go_module_dir("sigs.k8s.io/gateway-api", "v1.5.1") / "config/crd/standard"
    eg_own = eg[1:]
    return {
        "managed": _crd_docs([*eg, *cert_manager_crd_files()]),
        "existing": _crd_docs([*sorted(gwapi.glob("*.yaml")), *eg_own]),
    }


@pytest.mark.parametrize("crds", ["managed", "existing"])
def test_the_api_server_admits_every_front_door_object(crds, tmp_path):
    from local_cluster import control_plane
    from stacks.cli.simulate import Simulator

    docs = crd_sets()[crds]
    with control_plane(tmp_path / "kube", apiserver_only=True, crds=False, timeout=300):
        sim = Simulator(tmp_path / "kube" / "kubeconfig")
        try:
            for d in docs:
                sim.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", d)
            deadline = time.monotonic() + 120
            for d in docs:
                path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{d['metadata']['name']}"
                while not any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in (sim.request("GET", path).get("status") or {}).get("conditions") or []
                ):
                    assert time.monotonic() < deadline, f"CRD {d['metadata']['name']} not Established"
                    time.sleep(0.2)
            plurals = {
                d["spec"]["names"]["kind"]: (d["spec"]["group"], d["spec"]["names"]["plural"], d["spec"]["scope"]) for d in docs
            }
            variants = (
                [("internet", DOOR), ("jwt", JWT)]
                if crds == "managed"
                else [
                    (
                        "existing",
                        {
                            "enabled": True,
                            "gateway": "existing",
                            "existingGateway": {"namespace": "infra", "name": "shared", "implementation": "envoy-gateway"},
                            "auth": {"mode": "apiKeys"},
                        },
                    )
                ]
            )
            created = set()
            for target in (AGG, DISAGG):
                for variant, door in variants:
                    prog = program(door, target, networkPolicy={"enabled": True})
                    for o in door_objects(prog):
                        ns = o["metadata"].get("namespace")
                        for n in filter(None, [ns]):
                            if n not in created:
                                sim.request(
                                    "POST",
                                    "/api/v1/namespaces",
                                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}},
                                )
                                created.add(n)
                        group, _, version = o["apiVersion"].rpartition("/")
                        if o["kind"] in plurals:
                            g, plural, scope = plurals[o["kind"]]
                            base = f"/apis/{g}/{version}" + (f"/namespaces/{ns}" if scope == "Namespaced" else "")
                            url = f"{base}/{plural}"
                        elif o["kind"] == "Namespace":
                            continue
                        else:
                            core = {"Secret": "secrets", "NetworkPolicy": "networkpolicies"}[o["kind"]]
                            url = (
                                f"/api/v1/namespaces/{ns}/{core}"
                                if not group
                                else f"/apis/{group}/{version}/namespaces/{ns}/{core}"
                            )
                        stored = sim.request("POST", url + "?dryRun=All&fieldValidation=Strict", o)
                        if "spec" in o:
                            assert _contains(stored["spec"], o["spec"]), (variant, target, o["kind"], o["metadata"]["name"])
        finally:
            sim.close()


def _contains(stored, sent) -> bool:
    """Every field sent is stored as sent (defaults may be added, nothing pruned)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(k in stored and _contains(stored[k], v) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(stored, list) and len(stored) == len(sent) and all(_contains(a, b) for a, b in zip(stored, sent))
    return stored == sent
