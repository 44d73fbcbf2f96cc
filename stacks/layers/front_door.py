"""The front door (``dynamo:frontDoor``): clients reach the served models through a Gateway API gateway with
authentication, TLS and safe routing, instead of ``kubectl port-forward``. A pure plan (a ``LayerPlan``).

**Managed implementation: Envoy Gateway v1.9.1** (``versions.yaml`` ``charts.envoy-gateway``). Why this one:
- Gateway API v1 (its v1.9.1 chart bundles Gateway API v1.6.1's CRDs); an Inference Extension InferencePool backend only
  through an extension server (Envoy AI Gateway registers it: aigateway.envoyproxy.io "HTTPRoute + InferencePool
  Guide"), as v1.9.1's own translator has no InferencePool code (internal/gatewayapi at v1.9.1). Envoy AI Gateway is
  not served by the Go module proxy, so the Inference Extension mode (Dynamo's ``epp`` component, the operator's
  InferencePool, worker frontend sidecars in ``--router-mode direct``) is not built: nothing here could check it;
- it is the gateway of KServe's LLMInferenceService and of ai-on-eks's Envoy AI Gateway (built on it), two of the
  systems Dynamo users compare with, and Dynamo's "expose the frontend behind a gateway" guidance fits any Gateway;
- its own translator runs offline here (``egctl x translate``, built from the Go module proxy), so the tests check the
  real Envoy configuration it makes from these objects; agentgateway and kgateway are not served by the proxy.
It adds what Gateway API alone lacks and a door needs: API keys and JWT (SecurityPolicy), per-identity rate limits
(BackendTrafficPolicy), header removal before authentication (ClientTrafficPolicy), Service annotations (EnvoyProxy).

**Headers a client must not set.** The Dynamo 1.6.1 frontend obeys request headers that pick a worker, a prefill
worker, a data-parallel rank, a priority, or skip the prefill hop; and ``x-tenant-id``, which namespaces the KV cache
and the router per tenant. Their names are in the frontend the rig installs (``ai-dynamo-runtime==1.6.1``,
``dynamo/_core.abi3.so``: the strings table of ``lib/llm`` HTTP service next to ``nvext.extra_fields``, and
``lib/kv-router`` for ``x-bypass-remote-prefill``); ``DYN_DISABLE_FRONTEND_NVEXT`` in Dynamo's frontend docs lists the
routing and priority ones "and their compatibility aliases". Every route removes them; the managed door also removes
the tenant header before authentication and sets it from the caller's identity (API key client id, or the JWT claim
``auth.jwt.tenantClaim``), so one team cannot read another's cache or jump the queue. Session headers
(``x-session-id``, ``x-dynamo-session-id``...) stay: they steer KV-cache affinity within a caller's own sessions.

**The body's ``nvext``.** The same choices can be made in the JSON body (``nvext.backend_instance_id``,
``decode_worker_id``, ``prefill_worker_id``, ``dp_rank``...), which no header filter sees. So with the door on, the
serving plan runs every frontend with ``DYN_DISABLE_FRONTEND_NVEXT=1`` (``stacks.serving.set_frontend_env``;
``frontDoor.clientNvext: true`` opts out), measured on the rig in tests/test_front_door_rig.py.

**Only the OpenAI API.** The frontend's port also serves its admin API (``POST /busy_threshold`` sets the load at which
it refuses every request with 503), ``/metrics``, ``/health`` (which names the Dynamo endpoints) and ``/openapi.json``.
The routes match ``/v1`` only (in a ``dynamo:serve`` stack ``/<entry>/v1``, rewritten to ``/v1``), and behind the door
the frontend's admin API is off (``DYN_DISABLE_FRONTEND_ADMIN_API=1``, ``stacks.serving.NO_ADMIN_API``).

**Timeouts.** Envoy Gateway's route timeout defaults to 15 s and also cuts a streamed response, so every route sets
``timeouts.request`` (``REQUEST_TIMEOUT_BY_CONTEXT`` from the target's context, or ``frontDoor.requestTimeout``). On
EKS the Service is an NLB in TCP mode (TLS ends at the gateway, because a TLS listener's idle timeout is fixed at 350 s),
its listener idle timeout raised to the route timeout (60-6000 s; AWS ListenerAttribute ``tcp.idle_timeout.seconds``,
set by the AWS Load Balancer Controller's ``aws-load-balancer-listener-attributes.TCP-<port>`` Service annotation).
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any, Optional, Sequence

from stacks.registry.charts import helm_spec as _helm
from stacks.layers import LayerPlan, SecretFill
from stacks.serving import pod_security_labels
from stacks.serving.network_policy import NS_NAME_LABEL, front_door_ingress
from stacks.serving.operator import FRONTEND, component_type, operator_services
from stacks.config.keys import NS, ConfigError
from stacks.config.front_door import API_KEYS_SECRET, FrontDoorConfig

if TYPE_CHECKING:
    from stacks.modes import ClusterMode

# Request headers of the Dynamo 1.6.1 frontend that choose where or how a request runs (see the module docstring).
ROUTING_HEADERS = (
    "x-worker-instance-id",
    "x-dynamo-worker-instance-id",
    "x-prefill-instance-id",
    "x-dynamo-prefill-instance-id",
    "x-dp-rank",
    "x-dynamo-dp-rank",
    "x-data-parallel-rank",
    "x-prefill-dp-rank",
    "x-dynamo-prefill-dp-rank",
    "x-dynamo-request-priority",
    "x-dynamo-request-strict-priority",
    "x-bypass-remote-prefill",
    # Also in that binary, meaning not documented: removed because a client could otherwise choose them. The first
    # sits beside the frontend's response strings, the second in lib/kv-router's selection service
    # (services/selection/affinity.rs), which picks a worker.
    "x-bypass-remote-backend",
    "x-dynamo-meta-policy-class",
)
TENANT_HEADER = "x-tenant-id"
DYNAMO_CLIENT_HEADERS = ROUTING_HEADERS + (TENANT_HEADER,)

# The longest request a target serves, by its context (Target.context): a whole-context prefill plus the longest
# output at a slow decode. None (chat-sized contexts): 10 min; 256k: 30 min; 1m (agentic 1M-token sessions): 60 min.
REQUEST_TIMEOUT_BY_CONTEXT = {None: 600, "256k": 1800, "1m": 3600}
NLB_IDLE_TIMEOUT_RANGE = (60, 6000)  # seconds, AWS ListenerAttribute tcp.idle_timeout.seconds (TCP listeners)

GATEWAY_NAME = "dynamo-front-door"
CONTROLLER_NAME = "gateway.envoyproxy.io/gatewayclass-controller"  # Envoy Gateway's GatewayClass controllerName
EG_NAMESPACE = "envoy-gateway-system"
CERT_MANAGER_NAMESPACE = "cert-manager"
GATEWAY_API = "gateway.networking.k8s.io/v1"
EG_API = "gateway.envoyproxy.io/v1alpha1"
HTTP_PORT, HTTPS_PORT = 80, 443
LB = "service.beta.kubernetes.io/aws-load-balancer-"  # AWS Load Balancer Controller Service annotations
# Kinds whose CRDs the Envoy Gateway chart (Gateway API and its own) and cert-manager's chart install.
CHART_KINDS = frozenset(
    {
        "GatewayClass",
        "Gateway",
        "HTTPRoute",
        "EnvoyProxy",
        "SecurityPolicy",
        "ClientTrafficPolicy",
        "BackendTrafficPolicy",
        "Certificate",
    }
)


def needs_load_balancer(door: FrontDoorConfig) -> bool:
    """The managed door with a load balancer (exposure vpc or internet): on EKS the AWS Load Balancer Controller makes it."""
    return door.enabled and door.gateway == "managed" and door.exposure != "cluster"


def request_timeout(door: FrontDoorConfig, targets: Sequence[Any]) -> int:
    """The routes' request timeout in seconds: ``frontDoor.requestTimeout``, else the longest the targets need."""
    if door.request_timeout is not None:
        return door.request_timeout
    return max(REQUEST_TIMEOUT_BY_CONTEXT.get(t.context, max(REQUEST_TIMEOUT_BY_CONTEXT.values())) for t in targets)


def _header_removal(remove: Sequence[str]) -> dict:
    """The HTTPRoute filter every route of the door carries: the client-supplied Dynamo headers removed."""
    return {"type": "RequestHeaderModifier", "requestHeaderModifier": {"remove": list(remove)}}


def _meta(name: str, namespace: Optional[str] = None, **extra) -> dict:
    md = {"name": name, "labels": {"app.kubernetes.io/part-of": "dynamo-front-door", "app.kubernetes.io/managed-by": "pulumi"}}
    if namespace:
        md["namespace"] = namespace
    md.update(extra)
    return md


def _frontend_service(dgd: dict) -> tuple[str, int]:
    for comp, svc in zip(dgd["spec"]["components"], operator_services(dgd)):
        if component_type(comp) == FRONTEND:
            return svc["metadata"]["name"], svc["spec"]["ports"][0]["port"]
    raise ConfigError(f"{NS}:frontDoor: DGD {dgd['metadata']['name']} has no frontend component to route to")


def _service_spec(door: FrontDoorConfig, mode: "ClusterMode", idle: int) -> dict:
    """The gateway's Service: ClusterIP for ``cluster``; a LoadBalancer otherwise (on EKS an NLB, IP targets, in TCP
    mode, through the AWS Load Balancer Controller: its docs' ``aws-load-balancer-type: external`` and
    ``nlb-target-type: ip``; ``scheme`` internal for ``vpc``)."""
    if door.exposure == "cluster":
        return {"type": "ClusterIP"}
    spec: dict[str, Any] = {"type": "LoadBalancer", "externalTrafficPolicy": "Cluster"}
    if door.source_ranges:
        spec["loadBalancerSourceRanges"] = list(door.source_ranges)
    if mode.installs_load_balancer_controller:
        ports = [HTTPS_PORT, HTTP_PORT] if door.tls.mode != "none" else [HTTP_PORT]
        spec["annotations"] = {
            f"{LB}type": "external",
            f"{LB}nlb-target-type": "ip",
            f"{LB}scheme": "internet-facing" if door.exposure == "internet" else "internal",
            **{f"{LB}listener-attributes.TCP-{p}": f"tcp.idle_timeout.seconds={idle}" for p in ports},
        }
    return spec


# What the routes pass to the frontends: the OpenAI API only (Gateway API PathPrefix matches whole path elements, so
# "/v1" matches /v1 and /v1/..., not /v1x or /metrics).
API_PREFIX = "/v1"


def plan_front_door(door: FrontDoorConfig, entries: Sequence[Any], mode: "ClusterMode", stack: str) -> Optional[LayerPlan]:
    """The front door's charts and objects for these serving entries, or None when ``frontDoor.enabled`` is false.
    ``mode``: the stack's cluster mode (where it installs the AWS Load Balancer Controller, the NLB annotations and idle
    timeout; where it installs no charts, no controllers; where the cluster has no load balancer controller, no
    LoadBalancer Service)."""
    if not door.enabled:
        return None
    if needs_load_balancer(door) and mode.lacks_load_balancer_controller:
        raise ConfigError(
            f"{NS}:frontDoor.exposure: {door.exposure!r} needs a load balancer controller, and this stack serves on a "
            f"cluster stack's cluster (cluster.mode stack), which installs none; use exposure: cluster, or "
            f"gateway: existing with a Gateway the cluster already exposes"
        )
    if door.exposure == "vpc" and not mode.internal_load_balancer:
        raise ConfigError(
            f"{NS}:frontDoor.exposure: 'vpc' makes an internal AWS NLB, which needs cluster.mode eks (this stack's "
            f"is {mode.name!r}); use exposure: internet with sourceRanges, or cluster, or gateway: existing"
        )
    timeout = request_timeout(door, [e.plan.target for e in entries])
    idle = min(max(timeout, NLB_IDLE_TIMEOUT_RANGE[0]), NLB_IDLE_TIMEOUT_RANGE[1])
    plan = LayerPlan(
        key="frontDoor", kind="FrontDoor", title=f"front door ({door.gateway} gateway, {door.exposure})", after_charts=CHART_KINDS
    )
    if door.exposure != "cluster" and timeout > NLB_IDLE_TIMEOUT_RANGE[1] and mode.installs_load_balancer_controller:
        plan.warnings.append(
            f"{NS}:frontDoor.requestTimeout: {timeout}s is longer than an NLB TCP listener may stay idle "
            f"({NLB_IDLE_TIMEOUT_RANGE[1]}s); a request silent for longer is cut by the load balancer"
        )
    namespaces = list(dict.fromkeys(e.plan.dgd["metadata"]["namespace"] for e in entries))
    tls = door.tls.mode != "none"
    managed_tenant = door.gateway == "managed" and door.auth.mode != "none"
    remove = list(ROUTING_HEADERS if managed_tenant else DYNAMO_CLIENT_HEADERS)
    if door.gateway == "managed":
        gw_ns, gw_name = door.namespace, GATEWAY_NAME
        if door.namespace in namespaces:
            raise ConfigError(
                f"{NS}:frontDoor.namespace: {door.namespace!r} is a serving namespace; the gateway gets a namespace "
                f"of its own (default dynamo-gateway), so only it is admitted to the frontends"
            )
        _managed_gateway(plan, door, mode, namespaces, idle, timeout, remove)
        section: Optional[str] = "https" if tls else "http"
    else:
        eg = door.existing_gateway
        assert eg is not None, "gateway: existing requires existingGateway (FrontDoorConfig checks it)"
        gw_ns, gw_name, section = eg.namespace, eg.name, eg.section_name
    if door.allow_namespaces and not any(e.cfg.network_policy.enabled for e in entries):
        raise ConfigError(
            f"{NS}:frontDoor.allowNamespaces: {list(door.allow_namespaces)} has no effect without NetworkPolicies "
            f"(every pod may reach the frontends); set {NS}:networkPolicy.enabled: true or remove it"
        )
    multi = len(entries) > 1 or entries[0].key != NS
    urls = {}
    for e in entries:
        dgd = e.plan.dgd
        ns, dgd_name = dgd["metadata"]["namespace"], dgd["metadata"]["name"]
        svc, port = _frontend_service(dgd)
        prefix = f"/{e.name}{API_PREFIX}" if multi else API_PREFIX
        route_name = f"{dgd_name}-front-door"
        parent = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gw_name, "namespace": gw_ns}
        if section:
            parent["sectionName"] = section
        filters: list[dict] = [_header_removal(remove)]
        if prefix != API_PREFIX:
            filters.append(
                {"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": API_PREFIX}}}
            )
        route = {
            "apiVersion": GATEWAY_API,
            "kind": "HTTPRoute",
            "metadata": _meta(route_name, ns),
            "spec": {
                "parentRefs": [parent],
                **({"hostnames": [door.hostname]} if door.hostname else {}),
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": prefix}}],
                        "filters": filters,
                        "backendRefs": [{"name": svc, "port": port}],
                        "timeouts": {"request": f"{timeout}s"},
                    }
                ],
            },
        }
        plan.objects.append(route)
        _auth_objects(plan, door, route_name, ns)
        if e.cfg.network_policy.enabled:
            # the gateway's namespace (and frontDoor.allowNamespaces) may reach the frontend's HTTP port, nothing more
            plan.objects.append(front_door_ingress(dgd, [*proxy_namespaces(door), *door.allow_namespaces]))
        urls[e.name] = _url(door, gw_name, gw_ns, f"/{e.name}" if multi else "")
    plan.outputs = {
        "frontDoorUrl": urls if multi else next(iter(urls.values())),
        "frontDoorSmokeTest": smoke_test(door, urls, [e.plan for e in entries], stack),
    }
    return plan


def proxy_namespaces(door: FrontDoorConfig) -> list[str]:
    """Where the gateway's Envoy pods run, so the frontends admit them: the managed door's namespace (the chart it
    installs deploys proxies there); with the user's own controller (installControllers: false) also Envoy Gateway's
    default, the controller's namespace; for an existing Gateway ``existingGateway.proxyNamespace``."""
    if door.gateway == "existing":
        eg = door.existing_gateway
        assert eg is not None, "gateway: existing requires existingGateway (FrontDoorConfig checks it)"
        return [eg.proxy_namespace or eg.namespace]
    return [door.namespace] if door.install_controllers else [door.namespace, EG_NAMESPACE]


def _managed_gateway(
    plan: LayerPlan,
    door: FrontDoorConfig,
    mode: "ClusterMode",
    serving_namespaces: list[str],
    idle: int,
    timeout: int,
    remove: list[str],
) -> None:
    """The pinned Envoy Gateway (and cert-manager), its GatewayClass, EnvoyProxy, Gateway, TLS and header policy."""
    ns = door.namespace
    if door.install_controllers and mode.installs_charts:
        # The proxies run in the Gateway's own namespace (not the controller's, Envoy Gateway's default): the
        # NetworkPolicy admits exactly that namespace (EnvoyGatewayKubernetesProvider.deploy.type GatewayNamespace).
        plan.charts.append(
            _helm(
                "envoy-gateway",
                "eg",
                EG_NAMESPACE,
                {
                    "config": {
                        "envoyGateway": {
                            "provider": {"type": "Kubernetes", "kubernetes": {"deploy": {"type": "GatewayNamespace"}}}
                        }
                    }
                },
            )
        )
        if door.tls.mode == "certManager":
            plan.charts.append(_helm("cert-manager", "cert-manager", CERT_MANAGER_NAMESPACE, {"crds": {"enabled": True}}))
    # Pod Security (stacks.serving.pod_security_labels): warn and audit at restricted, no enforce label. The pods here
    # are the Envoy proxies Envoy Gateway's controller creates at run time from its own defaults (this plan renders
    # only the EnvoyProxy's Service settings), so no pod spec of the plan says what level they need; the cluster's
    # default applies, and the warnings and audit events show any pod that would not fit restricted.
    ns_meta = _meta(ns)
    ns_meta["labels"].update(pod_security_labels(None))
    plan.objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": ns_meta})
    plan.objects.append(
        {
            "apiVersion": EG_API,
            "kind": "EnvoyProxy",
            "metadata": _meta(GATEWAY_NAME, ns),
            "spec": {"provider": {"type": "Kubernetes", "kubernetes": {"envoyService": _service_spec(door, mode, idle)}}},
        }
    )
    plan.objects.append(
        {
            "apiVersion": GATEWAY_API,
            "kind": "GatewayClass",
            "metadata": _meta(GATEWAY_NAME),
            "spec": {
                "controllerName": CONTROLLER_NAME,
                "parametersRef": {"group": "gateway.envoyproxy.io", "kind": "EnvoyProxy", "name": GATEWAY_NAME, "namespace": ns},
            },
        }
    )
    admitted = {
        "namespaces": {
            "from": "Selector",
            "selector": {"matchExpressions": [{"key": NS_NAME_LABEL, "operator": "In", "values": sorted(serving_namespaces)}]},
        }
    }
    host = {"hostname": door.hostname} if door.hostname else {}
    if door.tls.mode != "none":
        cert_secret = door.tls.secret_name or f"{GATEWAY_NAME}-tls"
        listeners = [
            {
                "name": "https",
                "protocol": "HTTPS",
                "port": HTTPS_PORT,
                **host,
                "allowedRoutes": admitted,
                "tls": {"mode": "Terminate", "certificateRefs": [{"kind": "Secret", "name": cert_secret}]},
            },
            # Plain HTTP only redirects (the route below, in the gateway's namespace): no model is served over it.
            {"name": "http", "protocol": "HTTP", "port": HTTP_PORT, **host, "allowedRoutes": {"namespaces": {"from": "Same"}}},
        ]
    else:
        listeners = [{"name": "http", "protocol": "HTTP", "port": HTTP_PORT, **host, "allowedRoutes": admitted}]
    plan.objects.append(
        {
            "apiVersion": GATEWAY_API,
            "kind": "Gateway",
            "metadata": _meta(GATEWAY_NAME, ns),
            "spec": {"gatewayClassName": GATEWAY_NAME, "listeners": listeners},
        }
    )
    if door.tls.mode == "certManager":
        issuer = door.tls.issuer
        assert issuer is not None, "tls.mode certManager requires tls.issuer (the config checks it)"
        plan.objects.append(
            {
                "apiVersion": "cert-manager.io/v1",
                "kind": "Certificate",
                "metadata": _meta(f"{GATEWAY_NAME}-tls", ns),
                "spec": {
                    "secretName": f"{GATEWAY_NAME}-tls",
                    "dnsNames": [door.hostname],
                    "issuerRef": {"group": "cert-manager.io", "kind": issuer.kind, "name": issuer.name},
                },
            }
        )
    if door.tls.mode != "none":
        plan.objects.append(
            {
                "apiVersion": GATEWAY_API,
                "kind": "HTTPRoute",
                "metadata": _meta(f"{GATEWAY_NAME}-https-redirect", ns),
                "spec": {
                    "parentRefs": [{"name": GATEWAY_NAME, "sectionName": "http"}],
                    # the same header removals and timeout as every route (the rule forwards
                    # nothing, but no route of the door is without them)
                    "rules": [
                        {
                            "filters": [
                                _header_removal(remove),
                                {"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}},
                            ],
                            "timeouts": {"request": f"{timeout}s"},
                        }
                    ],
                },
            }
        )
    # Before routing and before authentication: a client's tenant and routing headers never reach the filters that set
    # them from its identity (Envoy Gateway ClientTrafficPolicy headers.earlyRequestHeaders).
    plan.objects.append(
        {
            "apiVersion": EG_API,
            "kind": "ClientTrafficPolicy",
            "metadata": _meta(GATEWAY_NAME, ns),
            "spec": {
                "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": GATEWAY_NAME}],
                "headers": {"earlyRequestHeaders": {"remove": list(DYNAMO_CLIENT_HEADERS)}},
            },
        }
    )


def _auth_objects(plan: LayerPlan, door: FrontDoorConfig, route: str, ns: str) -> None:
    """SecurityPolicy (API keys from the stack's secret, or JWT) and the per-identity rate limit, on one route."""
    if door.auth.mode == "none":
        return
    target = [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route}]
    if door.auth.mode == "apiKeys":
        secret = f"{route}-api-keys"
        plan.secrets[len(plan.objects)] = SecretFill(API_KEYS_SECRET)
        # No data in the plan (render writes the Secret empty, as it does the HF token's): `up` fills one key per
        # client from the Pulumi secret (components/layer.py).
        plan.objects.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": _meta(secret, ns)})
        # OpenAI clients send "Authorization: Bearer <key>"; Envoy's api_key_auth strips the "Bearer " prefix
        # (envoy.extensions.filters.http.api_key_auth.v3.KeySource.header). The key itself is removed before the
        # frontend (sanitize); the client id becomes the tenant header, which the rate limit keys on. On an existing
        # gateway the route's header filter (applied by the router, after the rate limit) still drops it before the
        # frontend: tenant isolation needs the managed door, which removes a client's copy before authentication.
        auth = {
            "apiKeyAuth": {
                "credentialRefs": [{"group": "", "kind": "Secret", "name": secret}],
                "extractFrom": [{"headers": ["Authorization"]}],
                "forwardClientIDHeader": TENANT_HEADER,
                "sanitize": True,
            }
        }
    else:
        jwt = door.auth.jwt
        assert jwt is not None, "auth.mode jwt requires auth.jwt (the config checks it)"
        provider: dict[str, Any] = {"name": "issuer", "issuer": jwt.issuer, "remoteJWKS": {"uri": jwt.jwks_uri}}
        if jwt.audiences:
            provider["audiences"] = list(jwt.audiences)
        provider["claimToHeaders"] = [{"header": TENANT_HEADER, "claim": jwt.tenant_claim}]
        auth = {"jwt": {"providers": [provider]}}
    plan.objects.append(
        {"apiVersion": EG_API, "kind": "SecurityPolicy", "metadata": _meta(route, ns), "spec": {"targetRefs": target, **auth}}
    )
    if door.rate_limit is not None:
        plan.objects.append(
            {
                "apiVersion": EG_API,
                "kind": "BackendTrafficPolicy",
                "metadata": _meta(route, ns),
                "spec": {
                    "targetRefs": target,
                    "rateLimit": {
                        "type": "Local",
                        "local": {
                            "rules": [
                                {
                                    "clientSelectors": [{"headers": [{"name": TENANT_HEADER, "type": "Distinct"}]}],
                                    "limit": {"requests": door.rate_limit.requests_per_minute, "unit": "Minute"},
                                }
                            ]
                        },
                    },
                },
            }
        )


def _url(door: FrontDoorConfig, gw_name: str, gw_ns: str, path: str) -> str:
    """The OpenAI base URL of one entry (``path``: ``/<entry>`` in a ``dynamo:serve`` stack, else empty)."""
    if door.hostname:
        scheme = "https" if door.tls.mode != "none" or door.gateway == "existing" else "http"
        return f"{scheme}://{door.hostname}{path}/v1"
    # No host name: the Gateway's first address (its status.addresses, the load balancer's or the Service's), read live.
    address = f"$(kubectl -n {gw_ns} get gateway {gw_name} -o jsonpath='{{.status.addresses[0].value}}')"
    return f"http://{address}{path}/v1"


SMOKE_TEST_TOKENS = 16384  # the streamed answer's length in frontDoorSmokeTest


def smoke_test(door: FrontDoorConfig, urls: dict[str, str], plans: Sequence[Any], stack: str) -> str:
    """A shell snippet: 401 without a key and 200 with one, then a long streamed request (its chunks counted and
    timed). With ``frontDoor.clientNvext`` the stream also asks which worker served (``nvext.extra_fields:
    ["worker_id"]``); without it the frontend drops every client's ``nvext`` (worker ids included) and the snippet says
    so. The key is read from the stack's secret config, never printed."""
    from stacks.serving.benchmark import served_model

    url, plan = next(iter(urls.values())), plans[0]
    model = served_model(plan.dgd)
    # ignore_eos (root level; the frontend refuses it inside nvext) makes the answer exactly max_tokens long, so the
    # stream outlives 60 s at any decode speed below ~270 tokens/s per request.
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Count slowly to 20000."}],
            "max_tokens": SMOKE_TEST_TOKENS,
            "ignore_eos": True,
            "stream": True,
            **({"nvext": {"extra_fields": ["worker_id"]}} if door.client_nvext else {}),
        }
    )
    auth = ""
    if door.auth.mode == "apiKeys":
        auth = (
            f"KEY=$(pulumi config get --stack {shlex.quote(stack)} --path '{NS}:{API_KEYS_SECRET}' | python3 -c "
            f"'import json,sys; print(next(iter(json.load(sys.stdin).values())))'); "
        )
        header = '-H "Authorization: Bearer $KEY"'
    elif door.auth.mode == "jwt":
        auth = "KEY=<a token from your issuer>; "
        header = '-H "Authorization: Bearer $KEY"'
    else:
        header = ""
    steps = [f"{auth}URL={url}"]
    if door.auth.mode != "none":
        steps.append("curl -s -o /dev/null -w 'without a key: %{http_code} (want 401)\\n' $URL/models")
    steps.append(f"curl -s -o /dev/null -w 'with the key: %{{http_code}} (want 200)\\n' {header} $URL/models".replace("  ", " "))
    stream = f"time curl -sN {header} $URL/chat/completions -H 'Content-Type: application/json' -d {shlex.quote(body)} "
    if door.client_nvext:
        steps.append((stream + "| grep -o '\"worker_id\":[^}]*}' | sort | uniq -c").replace("  ", " "))
    else:
        steps.append(
            (
                stream + "| grep -c '^data:' | sed 's/$/ streamed chunks (worker ids: hidden from clients, "
                "frontDoor.clientNvext false)/'"
            ).replace("  ", " ")
        )
    return " && ".join(steps)
