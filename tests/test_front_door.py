"""The front door (``dynamo:frontDoor``, stacks/layers/front_door.py) as a plan: what is refused before any resource,
what every route carries, where the API keys go, and which Dynamo headers a client may not set.

The header list is held to the Dynamo 1.6.1 frontend the serving rig installs (its compiled HTTP service), not to the
product's own list; the timeouts to Envoy Gateway's documented 15 s default; the NetworkPolicy port to the operator's
documented frontend port (../shared/reference/dynamo-next/OPERATOR-LABELS.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stacks.catalog import targets
from stacks.program import build_program
from stacks.config.keys import ConfigError
from conftest import reference_file  # the reference data: $DYNAMO_REFERENCE, else ../shared/reference
from stacks.registry import yaml_text

ROOT = Path(__file__).resolve().parent.parent
CANARY = "fdkey-canary-" + "7" * 24
ENVOY_DEFAULT_ROUTE_TIMEOUT = 15  # seconds: Envoy's route timeout default, which also cuts a streamed response

INTERNET = {
    "enabled": True,
    "exposure": "internet",
    "sourceRanges": ["203.0.113.0/24"],
    "hostname": "models.example.com",
    "tls": {"mode": "certManager", "issuer": {"name": "letsencrypt"}},
    "auth": {"mode": "apiKeys"},
    "rateLimit": {"requestsPerMinute": 60},
}
KEYS = frozenset({"frontDoorApiKeys"})


def _door(program):
    """The front door's LayerPlan among the program's layers (the platform layer and KEDA come first)."""
    return next(layer for layer in program.layers if layer.key == "frontDoor")


def _program(door: dict, secret_keys=KEYS, cluster=None, env=None, **raw):
    base = {
        "gpu": "h100",
        "topology": "disagg",
        "namespace": "llm",
        "hfTokenSecretName": "hf",
        "createNamespace": False,
        "frontDoor": door,
        **raw,
    }
    if cluster:
        base["cluster"] = cluster
        if cluster["mode"] == "eks":  # the stack's own cluster: the token comes from the secret dynamo:hfToken
            del base["hfTokenSecretName"]
            secret_keys = secret_keys | {"hfToken"}
    return build_program(base, "test", secret_keys, env=env)


def _refused(door: dict, secret_keys=KEYS, env=None, **raw) -> str:
    with pytest.raises(ConfigError) as err:
        _program(door, secret_keys, env=env, **raw)
    return str(err.value)


def _objects(program, kind):
    return [o for layer in program.layers for o in layer.objects if o["kind"] == kind]


# ---------------------------------------------------------------------------- refused before any resource


@pytest.mark.parametrize("missing", ["auth", "tls", "sourceRanges"])
def test_internet_exposure_needs_auth_tls_and_source_ranges(missing):
    door = {k: v for k, v in INTERNET.items() if k != missing and not (missing == "auth" and k == "rateLimit")}
    msg = _refused(door, KEYS if missing != "auth" else frozenset())
    key = {"auth": "auth.mode", "tls": "tls.mode", "sourceRanges": "sourceRanges"}[missing]
    assert "dynamo:frontDoor.exposure: 'internet' needs" in msg and f"not set: {key}" in msg
    assert "exposure: cluster" in msg  # the way out


def test_a_zero_timeout_is_refused_naming_the_key():
    msg = _refused({"enabled": True, "requestTimeout": 0}, frozenset())
    assert "dynamo:frontDoor.requestTimeout" in msg and "no timeout" in msg


def test_a_rate_limit_needs_an_identity():
    msg = _refused({"enabled": True, "rateLimit": {"requestsPerMinute": 5}}, frozenset())
    assert "dynamo:frontDoor.rateLimit" in msg and "auth.mode" in msg


def test_auth_on_an_existing_gateway_of_another_implementation_is_refused():
    door = {
        "enabled": True,
        "gateway": "existing",
        "existingGateway": {"namespace": "infra", "name": "shared"},
        "auth": {"mode": "apiKeys"},
    }
    msg = _refused(door)
    assert "existingGateway.implementation: envoy-gateway" in msg


def test_managed_only_keys_on_an_existing_gateway_are_refused():
    door = {
        "enabled": True,
        "gateway": "existing",
        "existingGateway": {"namespace": "infra", "name": "shared"},
        "exposure": "internet",
    }
    assert "dynamo:frontDoor.exposure: has no effect with gateway: existing" in _refused(door, frozenset())


def test_keys_under_a_door_that_is_off_are_refused():
    assert "frontDoor.enabled is false" in _refused({"exposure": "internet"}, frozenset())


def test_api_keys_are_required_with_api_key_auth_and_refused_without():
    assert "dynamo:frontDoorApiKeys is not set" in _refused({"enabled": True, "auth": {"mode": "apiKeys"}}, frozenset(), env={})
    assert "nothing reads it" in _refused({"enabled": True}, KEYS)


def test_plain_text_api_keys_are_refused():
    msg = _refused({"enabled": True, "auth": {"mode": "apiKeys"}}, frozenset(), frontDoorApiKeys={"a": CANARY})
    assert "must be a Pulumi secret" in msg and CANARY not in msg


@pytest.mark.parametrize(
    "value,why",
    [
        ({"team-a": "short"}, "shorter than"),
        ({"team-a": CANARY, "team-b": CANARY}, "share one key"),
        ({"bad id!": CANARY}, "is not a client id"),
        ([CANARY], "not a non-empty mapping"),
        ({CANARY + "x" * 40: "team-x"}, "not a client id"),  # a key pasted where the client id goes
        ({CANARY: "team-x"}, "shorter than"),  # the two swapped: the key is a valid-looking name
    ],
)
def test_bad_api_key_secrets_are_named_without_their_value(value, why):
    from stacks.config.secret_values import secret_value_problems

    problems = secret_value_problems({"frontDoorApiKeys": json.dumps(value)})
    assert problems and why in " ".join(problems)
    assert all(CANARY not in p and 'short"' not in p and "team-x" not in p for p in problems)


def test_vpc_exposure_needs_eks():
    msg = _refused(
        {"enabled": True, "exposure": "vpc", "allowUnauthenticated": True},
        frozenset(),
        cluster={"mode": "kubeconfig", "kubeconfigPath": __file__},
    )
    assert "dynamo:frontDoor.exposure: 'vpc'" in msg and "cluster.mode eks" in msg


# ---------------------------------------------------------------------------- every route, every target


def _door_variants():
    yield "managed-open", {"enabled": True}, frozenset()
    yield "managed-internet", INTERNET, KEYS
    yield (
        "existing",
        {"enabled": True, "gateway": "existing", "existingGateway": {"namespace": "infra", "name": "shared"}},
        frozenset(),
    )
    yield (
        "existing-eg-jwt",
        {
            "enabled": True,
            "gateway": "existing",
            "existingGateway": {"namespace": "infra", "name": "shared", "implementation": "envoy-gateway"},
            "auth": {"mode": "jwt", "jwt": {"issuer": "https://id.example.com", "jwksUri": "https://id.example.com/jwks"}},
        },
        frozenset(),
    )


@pytest.mark.parametrize("target_id", sorted(targets()))
def test_every_route_has_a_timeout_and_removes_the_dynamo_headers(target_id):
    from stacks.layers.front_door import DYNAMO_CLIENT_HEADERS, ROUTING_HEADERS, TENANT_HEADER

    for variant, door, keys in _door_variants():
        program = build_program(
            {"target": target_id, "namespace": "llm", "hfTokenSecretName": "hf", "createNamespace": False, "frontDoor": door},
            "t",
            keys,
        )
        routes = _objects(program, "HTTPRoute")  # the model's route and, with TLS, the gateway's HTTPS redirect
        assert len([r for r in routes if r["metadata"]["namespace"] == "llm"]) == 1, variant
        for rule in [rule for r in routes for rule in r["spec"]["rules"]]:
            seconds = int(rule["timeouts"]["request"].rstrip("s"))
            assert seconds > ENVOY_DEFAULT_ROUTE_TIMEOUT * 4, (variant, seconds)
            removed = {
                h for f in rule["filters"] if f["type"] == "RequestHeaderModifier" for h in f["requestHeaderModifier"]["remove"]
            }
            assert set(ROUTING_HEADERS) <= removed, variant
            if TENANT_HEADER not in removed:  # the managed door sets it from the identity: removed early, before auth
                early = _objects(program, "ClientTrafficPolicy")[0]["spec"]["headers"]["earlyRequestHeaders"]["remove"]
                assert set(DYNAMO_CLIENT_HEADERS) <= set(early), variant
                assert variant == "managed-internet"


def test_long_context_targets_get_longer_timeouts_and_the_override_wins():
    by_context = {}
    for t in targets().values():
        program = build_program(
            {
                "target": t.id,
                "namespace": "llm",
                "hfTokenSecretName": "hf",
                "createNamespace": False,
                "frontDoor": {"enabled": True},
            },
            "t",
        )
        by_context.setdefault(t.context, set()).add(_objects(program, "HTTPRoute")[0]["spec"]["rules"][0]["timeouts"]["request"])
    seconds = {ctx: max(int(v.rstrip("s")) for v in vals) for ctx, vals in by_context.items()}
    assert seconds["1m"] > seconds["256k"] > seconds[None]
    program = _program({"enabled": True, "requestTimeout": 7200}, frozenset())
    assert _objects(program, "HTTPRoute")[0]["spec"]["rules"][0]["timeouts"]["request"] == "7200s"


def test_rig_frontend_headers_that_steer_a_request_are_all_removed():
    """Every header the installed 1.6.1 frontend reads to pick a worker, a rank, a priority, a tenant or to skip the
    prefill hop is in the door's removal list (names read from its compiled HTTP service)."""
    from rig import rig_env_dir

    from stacks.layers.front_door import DYNAMO_CLIENT_HEADERS

    core = sorted(rig_env_dir().glob("lib/python3*/site-packages/dynamo/_core*.so"))
    assert core, "the rig's ai-dynamo-runtime has no dynamo/_core*.so"
    data = core[0].read_bytes()
    # Header names are stored back to back; match each known stem with the longest plausible prefix.
    stems = rb"(?:worker-instance-id|prefill-instance-id|dp-rank|data-parallel-rank|request-priority|request-strict-priority|tenant-id|bypass-remote-prefill)"
    found = {m.group(0).decode() for m in re.finditer(rb"x-(?:dynamo-|prefill-)?" + stems, data)}
    found |= {m.group(0).decode() for m in re.finditer(rb"x-dynamo-prefill-dp-rank", data)}
    assert {"x-worker-instance-id", "x-dynamo-worker-instance-id", "x-tenant-id"} <= found
    assert found <= set(DYNAMO_CLIENT_HEADERS), sorted(found - set(DYNAMO_CLIENT_HEADERS))


# Names of the x-dynamo-/x-bypass- family the door lets through, each for a reason: request ids (tracing) and session
# ids (KV-cache affinity within a caller's own sessions, stacks/layers/front_door.py's docstring). "x-dynamo-request"
# is stored alone in the binary (the stem the request-id and priority names share).
PASSED_THROUGH = ("x-dynamo-request-id", "x-dynamo-session-id", "x-dynamo-session-final", "x-dynamo-parent-session-id")
STEMS = ("x-dynamo-request",)


def test_every_dynamo_or_bypass_header_in_the_rig_frontend_is_removed_or_passed_for_a_reason():
    """Not only the names the door knows: every place the 1.6.1 frontend's binary holds ``x-dynamo-`` or ``x-bypass-``
    (strings are stored back to back, so each occurrence is checked from where it starts) begins with a removed name,
    a documented pass-through, or the bare stem."""
    from rig import rig_env_dir

    from stacks.layers.front_door import DYNAMO_CLIENT_HEADERS

    data = sorted(rig_env_dir().glob("lib/python3*/site-packages/dynamo/_core*.so"))[0].read_bytes()
    # Each occurrence starts at an "x-dynamo-"/"x-bypass-" (which cannot start inside another one); the name is read on
    # from there (a search for the literal prefix, then a match at each hit: a scan of the 226 MB binary in 0.1 s)
    name = re.compile(rb"x-(?:dynamo|bypass)-[a-z-]+")
    occurrences = {name.match(data, m.start()).group(0).decode() for m in re.finditer(rb"x-(?:dynamo|bypass)-", data)}
    assert len(occurrences) >= 10, sorted(occurrences)
    known = sorted({*DYNAMO_CLIENT_HEADERS, *PASSED_THROUGH}, key=len, reverse=True)
    unknown = [
        o
        for o in sorted(occurrences)
        if not any(o.startswith(k) for k in known) and not any(o.startswith(s) and not o.startswith(s + "-") for s in STEMS)
    ]
    assert unknown == []


# ---------------------------------------------------------------------------- what the managed door creates


def test_internet_door_objects():
    program = _program(INTERNET)
    gw = _objects(program, "Gateway")[0]
    https = next(lst for lst in gw["spec"]["listeners"] if lst["protocol"] == "HTTPS")
    assert https["tls"]["mode"] == "Terminate" and https["hostname"] == "models.example.com"
    assert https["allowedRoutes"]["namespaces"]["selector"]["matchExpressions"][0]["values"] == ["llm"]
    http = next(lst for lst in gw["spec"]["listeners"] if lst["protocol"] == "HTTP")
    assert http["allowedRoutes"]["namespaces"]["from"] == "Same"  # plain HTTP serves only the redirect
    redirect = next(r for r in _objects(program, "HTTPRoute") if r["metadata"]["namespace"] == "dynamo-gateway")
    assert (
        next(f for f in redirect["spec"]["rules"][0]["filters"] if f["type"] == "RequestRedirect")["requestRedirect"]["scheme"]
        == "https"
    )
    policy = _objects(program, "SecurityPolicy")[0]["spec"]["apiKeyAuth"]
    assert policy["extractFrom"] == [{"headers": ["Authorization"]}] and policy["sanitize"] is True
    assert policy["forwardClientIDHeader"] == "x-tenant-id"
    svc = _objects(program, "EnvoyProxy")[0]["spec"]["provider"]["kubernetes"]["envoyService"]
    assert svc["type"] == "LoadBalancer" and svc["loadBalancerSourceRanges"] == ["203.0.113.0/24"]
    cert = _objects(program, "Certificate")[0]["spec"]
    assert cert["dnsNames"] == ["models.example.com"] and cert["issuerRef"]["name"] == "letsencrypt"
    assert program.layer_outputs()["frontDoorUrl"] == "https://models.example.com/v1"


def test_on_eks_the_gateway_is_an_nlb_in_tcp_mode_idle_as_long_as_a_request():
    program = _program(INTERNET, cluster={"mode": "eks", "region": "us-east-1"})
    svc = _objects(program, "EnvoyProxy")[0]["spec"]["provider"]["kubernetes"]["envoyService"]
    timeout = int(_objects(program, "HTTPRoute")[-1]["spec"]["rules"][0]["timeouts"]["request"].rstrip("s"))
    ann = svc["annotations"]
    assert ann["service.beta.kubernetes.io/aws-load-balancer-scheme"] == "internet-facing"
    assert ann["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"] == "ip"
    # AWS ListenerAttribute tcp.idle_timeout.seconds: 60-6000 s on TCP listeners (TLS listeners are fixed at 350 s).
    idle = int(ann["service.beta.kubernetes.io/aws-load-balancer-listener-attributes.TCP-443"].split("=")[1])
    assert 60 <= idle <= 6000 and idle >= min(timeout, 6000)
    assert [c.chart for c in _door(program).charts] == ["gateway-helm", "cert-manager"]


def test_the_api_key_secret_is_redacted_in_the_plan_and_filled_from_the_stack_secret():
    program = _program(INTERNET)
    layer = _door(program)
    secrets = [(i, o) for i, o in enumerate(layer.objects) if o["kind"] == "Secret"]
    assert len(secrets) == 1 and layer.secrets[secrets[0][0]].config_key == "frontDoorApiKeys"
    assert not {"data", "stringData"} & set(secrets[0][1])  # values only at up, from the secret


def test_with_network_policy_only_the_gateway_namespace_reaches_the_frontend():
    # the operator's frontend port, from the reference table (tests/conftest.py reference_file: $DYNAMO_REFERENCE,
    # else ../shared/reference; skipped without it, a failure under CI=true)
    labels = reference_file("dynamo-next/OPERATOR-LABELS.md")
    port = int(re.search(r"\| `http` \| (\d+) \| frontend container", labels.read_text()).group(1))
    program = _program({"enabled": True, "allowNamespaces": ["team-a"]}, frozenset(), networkPolicy={"enabled": True})
    [policy] = [p for p in _objects(program, "NetworkPolicy")]
    assert policy["metadata"]["namespace"] == "llm"
    assert policy["spec"]["podSelector"]["matchLabels"]["nvidia.com/dynamo-component-type"] == "frontend"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["dynamo-gateway", "team-a"]}
                        ]
                    }
                }
            ],
            "ports": [{"protocol": "TCP", "port": port}],
        }
    ]


def test_a_serve_stack_routes_each_entry_under_its_name():
    raw = {
        "hfTokenSecretName": "hf",
        "createNamespace": False,
        "frontDoor": {"enabled": True},
        "serve": [
            {"name": "chat", "target": "lightning-vllm-agg-h100-dspark", "namespace": "a"},
            {"name": "long", "target": "lightning-vllm-disagg-h100-dspark", "namespace": "b"},
        ],
    }
    program = build_program(raw, "t")
    routes = {r["metadata"]["namespace"]: r for r in _objects(program, "HTTPRoute")}
    # each entry's OpenAI API (/v1 of its frontend) under its name, and nothing else of the frontend
    assert routes["a"]["spec"]["rules"][0]["matches"][0]["path"] == {"type": "PathPrefix", "value": "/chat/v1"}
    assert routes["b"]["spec"]["rules"][0]["matches"][0]["path"] == {"type": "PathPrefix", "value": "/long/v1"}
    for r in routes.values():
        assert {"type": "URLRewrite", "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}}} in r[
            "spec"
        ]["rules"][0]["filters"]
    urls = program.layer_outputs()["frontDoorUrl"]
    assert set(urls) == {"chat", "long"} and urls["chat"].endswith("/chat/v1") and urls["long"].endswith("/long/v1")
    gw = _objects(program, "Gateway")[0]
    assert gw["spec"]["listeners"][0]["allowedRoutes"]["namespaces"]["selector"]["matchExpressions"][0]["values"] == ["a", "b"]


def test_committed_front_door_stacks_render():
    from stacks.program.render import program_for_stack

    found = []
    for path in sorted(ROOT.glob("Pulumi.*.yaml")):
        door = (yaml_text.load(path.read_text()).get("config") or {}).get("dynamo:frontDoor")
        if door and door.get("enabled"):
            program = program_for_stack(path.name[len("Pulumi.") : -len(".yaml")])
            found.append((door.get("gateway", "managed"), door.get("exposure", "cluster"), program))
    kinds = {(g, e) for g, e, _ in found}
    assert ("managed", "internet") in kinds and ("existing", "cluster") in kinds
    for _, _, program in found:
        assert _objects(program, "HTTPRoute")


# ---------------------------------------------------------------------------- the shell, under Pulumi mocks


def test_the_layer_component_creates_the_plan_and_keeps_the_keys_secret():
    from harness import SECRET_SIG, SECRETS, run_program

    cfg = {
        "gpu": "h100",
        "topology": "agg",
        "namespace": "llm",
        "imagePullSecrets": ["ngc-secret"],
        "frontDoor": INTERNET,
        "cluster": {"mode": "eks", "region": "us-east-1"},
    }
    run = run_program(cfg, {**SECRETS, "frontDoorApiKeys": json.dumps({"team-a": CANARY})}, stack="door")
    (component,) = run.by_type("dynamo:frontDoor:FrontDoor")
    planned = _door(build_program(cfg, "door", frozenset({"hfToken", "ngcApiKey", "frontDoorApiKeys"})))
    made = [r for r in run.resources if r.parent == component.urn]
    charts = [r for r in made if r.type == "kubernetes:helm.sh/v3:Release"]
    assert [r.inputs["chart"] for r in charts] == [c.chart for c in planned.charts]
    kinds = sorted(r.type.rsplit(":", 1)[1] for r in made if r.type != "kubernetes:helm.sh/v3:Release")
    assert kinds == sorted(o["kind"] for o in planned.objects)
    for r in made:  # objects whose CRDs the charts bring wait for them
        if r.type.rsplit(":", 1)[1] in planned.after_charts:
            assert {c.urn for c in charts} <= set(r.dependencies), r.name
    (secret,) = [r for r in made if r.type == "kubernetes:core/v1:Secret"]
    assert SECRET_SIG in secret.raw_inputs["stringData"]  # the whole mapping travels as one Pulumi secret
    assert {"stringData", "data"} <= set(secret.additional_secret_outputs)
    others = [r.raw_inputs for r in run.resources if r is not secret]
    assert CANARY not in json.dumps(others, default=str) + json.dumps(run.raw_outputs, default=str)
    assert run.outputs.get("frontDoorUrl") == "https://models.example.com/v1"


def test_keys_without_tls_across_the_network_are_refused():
    door = {"enabled": True, "exposure": "vpc", "auth": {"mode": "apiKeys"}}
    assert "dynamo:frontDoor.tls.mode: 'none' with auth.mode 'apiKeys'" in _refused(
        door, cluster={"mode": "eks", "region": "us-east-1"}
    )


def test_allow_namespaces_without_network_policies_is_refused():
    assert "dynamo:frontDoor.allowNamespaces" in _refused({"enabled": True, "allowNamespaces": ["team-a"]}, frozenset())


def test_a_load_balancer_on_a_cluster_stack_is_refused():
    cluster = {"mode": "stack", "stack": "organization/dynamo/h100-cluster"}
    door = {**INTERNET}
    with pytest.raises(ConfigError) as err:
        build_program(
            {"target": "lightning-vllm-agg-h100-dspark", "namespace": "llm", "frontDoor": door, "cluster": cluster},
            "t",
            KEYS | {"hfToken"},
        )
    assert "cluster stack's cluster" in str(err.value) and "dynamo:frontDoor.exposure" in str(err.value)


def test_the_managed_chart_runs_the_proxies_where_the_network_policy_admits_them():
    """Envoy Gateway deploys its proxies in the controller's namespace unless told GatewayNamespace
    (envoyproxy/gateway api/v1alpha1/envoygateway_types.go KubernetesDeployMode: default ControllerNamespace)."""
    from stacks.layers.front_door import plan_front_door
    from stacks.modes.registry import CLUSTER_MODES

    program = _program({"enabled": True}, frozenset(), networkPolicy={"enabled": True})
    door, kubeconfig = program.spec.front_door, CLUSTER_MODES["kubeconfig"]
    layer = plan_front_door(door, program.entries, kubeconfig, "t")  # render mode installs no chart
    (chart,) = layer.charts
    assert chart.values["config"]["envoyGateway"]["provider"]["kubernetes"]["deploy"]["type"] == "GatewayNamespace"
    (policy,) = [o for o in layer.objects if o["kind"] == "NetworkPolicy"]
    gw = next(o for o in layer.objects if o["kind"] == "Gateway")
    assert policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        gw["metadata"]["namespace"]
    ]
    own = plan_front_door(door.model_copy(update={"install_controllers": False}), program.entries, kubeconfig, "t")
    (policy,) = [o for o in own.objects if o["kind"] == "NetworkPolicy"]  # the user's controller: either namespace
    assert policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "dynamo-gateway",
        "envoy-gateway-system",
    ]


def test_an_existing_envoy_gateway_still_keys_the_rate_limit_on_the_identity():
    door = {
        "enabled": True,
        "gateway": "existing",
        "existingGateway": {
            "namespace": "infra",
            "name": "shared",
            "implementation": "envoy-gateway",
            "proxyNamespace": "envoy-gateway-system",
        },
        "auth": {"mode": "apiKeys"},
        "rateLimit": {"requestsPerMinute": 10},
    }
    program = _program(door, networkPolicy={"enabled": True})
    assert _objects(program, "SecurityPolicy")[0]["spec"]["apiKeyAuth"]["forwardClientIDHeader"] == "x-tenant-id"
    route = _objects(program, "HTTPRoute")[0]
    assert "x-tenant-id" in route["spec"]["rules"][0]["filters"][0]["requestHeaderModifier"]["remove"]
    (policy,) = _objects(program, "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "envoy-gateway-system"
    ]


# ---------------------------------------------------------------------------- on EKS: the AWS Load Balancer Controller

EKS_DOOR = {
    "gpu": "h100",
    "topology": "agg",
    "namespace": "llm",
    "imagePullSecrets": ["ngc-secret"],
    "frontDoor": INTERNET,
    "cluster": {"mode": "eks", "region": "us-east-1"},
}


def _eks_run(cfg):
    from harness import SECRETS, run_program

    return run_program(cfg, {**SECRETS, "frontDoorApiKeys": json.dumps({"team-a": CANARY})}, stack="door")


def test_an_nlb_door_on_eks_installs_the_load_balancer_controller_with_its_own_identity():
    """The controller's service account gets the upstream policy through EKS Pod Identity (EKS user guide, Pod Identity:
    a role trusted by pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession, the eks-pod-identity-agent add-on),
    and its values name the region and VPC (no instance metadata). The listener idle timeout annotation needs
    elasticloadbalancing:ModifyListenerAttributes, which the pinned upstream policy grants."""
    import hashlib

    from stacks.cluster.load_balancer import POLICY_FILE
    from stacks.registry.charts import chart_pin

    run = _eks_run(EKS_DOOR)
    (release,) = [
        r for r in run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("chart") == "aws-load-balancer-controller"
    ]
    assert release.inputs["version"] == chart_pin("aws-load-balancer-controller")["version"]
    values = release.inputs["values"]
    assert values["region"] == "us-east-1" and values["clusterName"] and "vpcId" in values
    (assoc,) = [
        a
        for a in run.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if a.inputs["serviceAccount"] == values["serviceAccount"]["name"]
    ]
    assert assoc.inputs["namespace"] == release.inputs["namespace"] == "kube-system"
    role = next(r for r in run.by_type("aws:iam/role:Role") if r.name.endswith("-lb-controller"))
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"} and {"sts:AssumeRole", "sts:TagSession"} <= set(
        trust["Action"]
    )
    policy = next(r for r in run.by_type("aws:iam/policy:Policy") if r.name.endswith("-lb-controller"))
    assert json.loads(policy.inputs["policy"]) == json.loads(POLICY_FILE.read_text())
    assert hashlib.sha256(POLICY_FILE.read_bytes()).hexdigest() == chart_pin("aws-load-balancer-controller")["iam-policy-sha256"]
    actions = {
        a
        for st in json.loads(policy.inputs["policy"])["Statement"]
        for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
    }
    assert {"elasticloadbalancing:ModifyListenerAttributes", "elasticloadbalancing:CreateLoadBalancer"} <= actions
    assert any(a.inputs.get("addonName") == "eks-pod-identity-agent" for a in run.by_type("aws:eks/addon:Addon"))
    (door,) = run.by_type("dynamo:frontDoor:FrontDoor")
    assert release.urn in door.dependencies or any(release.urn in r.dependencies for r in run.resources if r.parent == door.urn)


def test_opening_the_door_on_a_running_eks_stack_only_adds_resources():
    """The update a team makes: the same EKS stack, then with the door. Every resource of the first graph is in the second
    with the same inputs (no AWS update or replacement of the cluster, its network or its nodes) except the DGD, whose
    frontend container gains exactly Dynamo's admin-API and nvext switches (an in-place update: a frontend restart); the
    additions are the controller's role, policy, association and chart, and the door's own objects."""
    plain = {k: v for k, v in EKS_DOOR.items() if k != "frontDoor"}
    from harness import SECRETS, run_program

    before = run_program(plain, dict(SECRETS), stack="door")
    after = _eks_run(EKS_DOOR)
    first = {r.urn: r for r in before.resources}
    second = {r.urn: r for r in after.resources}
    assert set(first) <= set(second)
    changed = [
        u
        for u, r in first.items()
        if json.dumps(r.inputs, sort_keys=True, default=str) != json.dumps(second[u].inputs, sort_keys=True, default=str)
    ]
    assert [first[u].type for u in changed] == ["kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"], changed[:5]
    dgd_before, dgd_after = first[changed[0]].inputs, second[changed[0]].inputs
    frontend = next(i for i, c in enumerate(dgd_before["spec"]["components"]) if c["type"] == "frontend")
    env_after = dgd_after["spec"]["components"][frontend]["podTemplate"]["spec"]["containers"][0]["env"]
    # Dynamo's security guide: "set DYN_DISABLE_FRONTEND_NVEXT=1" for untrusted clients; its frontend docs: the admin
    # API is on by default, DYN_DISABLE_FRONTEND_ADMIN_API turns it off
    assert env_after[-2:] == [
        {"name": "DYN_DISABLE_FRONTEND_ADMIN_API", "value": "1"},
        {"name": "DYN_DISABLE_FRONTEND_NVEXT", "value": "1"},
    ]
    dgd_after["spec"]["components"][frontend]["podTemplate"]["spec"]["containers"][0]["env"] = env_after[:-2]
    assert json.dumps(dgd_after, sort_keys=True, default=str) == json.dumps(dgd_before, sort_keys=True, default=str)
    added = {second[u].type for u in set(second) - set(first)}
    assert {
        "aws:iam/role:Role",
        "aws:iam/policy:Policy",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        "kubernetes:helm.sh/v3:Release",
        "dynamo:frontDoor:FrontDoor",
    } <= added
    assert not {
        t
        for t in added
        if t.startswith("aws:")
        and t
        not in (
            "aws:iam/role:Role",
            "aws:iam/policy:Policy",
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "aws:eks/podIdentityAssociation:PodIdentityAssociation",
        )
    }


# ---------------------------------------------------------------------------- who may pass a door outside the cluster
JWT = {"mode": "jwt", "jwt": {"issuer": "https://accounts.google.com", "jwksUri": "https://www.googleapis.com/oauth2/v3/certs"}}


@pytest.mark.parametrize("exposure", ["vpc", "internet"])
def test_a_jwt_door_outside_the_cluster_needs_audiences(exposure):
    """Envoy Gateway checks no audience when none is given (the JWTProvider API of the pinned release says so), so a
    door on a public issuer would let every account of that issuer use the GPUs."""
    door = {**INTERNET, "exposure": exposure, "auth": JWT}
    if exposure == "vpc":
        door.pop("sourceRanges")
    msg = _refused(door, frozenset(), cluster={"mode": "eks", "region": "us-east-1"})
    assert "dynamo:frontDoor.auth.jwt.audiences" in msg and "https://accounts.google.com" in msg, msg
    with_audience = {**door, "auth": {**JWT, "jwt": {**JWT["jwt"], "audiences": ["models-api"]}}}
    policy = next(
        o
        for o in _objects(_program(with_audience, frozenset(), cluster={"mode": "eks", "region": "us-east-1"}), "SecurityPolicy")
    )
    assert policy["spec"]["jwt"]["providers"][0]["audiences"] == ["models-api"]


def test_an_unauthenticated_vpc_door_is_said_in_one_key():
    door = {"enabled": True, "exposure": "vpc"}
    msg = _refused(door, frozenset(), cluster={"mode": "eks", "region": "us-east-1"})
    assert "dynamo:frontDoor.auth.mode" in msg and "allowUnauthenticated: true" in msg and "apiKeys" in msg, msg
    assert _program({**door, "allowUnauthenticated": True}, frozenset(), cluster={"mode": "eks", "region": "us-east-1"})
    msg = _refused({**INTERNET, "allowUnauthenticated": True}, cluster={"mode": "eks", "region": "us-east-1"})
    assert "dynamo:frontDoor.allowUnauthenticated" in msg and "exposure 'internet'" in msg, msg
