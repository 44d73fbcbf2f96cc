"""``dynamo:frontDoor``: how clients outside the cluster reach the served models (stacks/layers/front_door.py plans it).

Off by default. Every key is checked here, before any resource, and the combinations a platform team must not ship
are refused with the key and the fix: an internet-facing door without authentication, TLS or source ranges; a
per-identity rate limit without an identity; a zero request timeout (Gateway API and Envoy read a zero
``timeouts.request`` as "no timeout": a hung stream would hold its connection for ever). The API keys themselves
are the Pulumi secret ``dynamo:frontDoorApiKeys`` (a mapping client id -> key), never a plain key here.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from stacks.config.keys import NS, _key_error, _Model, _short, dns_subdomain_problem, namespace_name, url_problem

API_KEYS_SECRET = "frontDoorApiKeys"  # the Pulumi secret config key holding {client id: API key}
# A client id becomes the tenant header's value and a Secret data key (Kubernetes: [-._a-zA-Z0-9]+, at most 253).
_CLIENT_ID = re.compile(r"[A-Za-z0-9][-._A-Za-z0-9]{0,62}")
MIN_API_KEY_LENGTH = 24  # an API key shorter than this is guessable; generate one with `openssl rand -hex 32`
MAX_REQUEST_TIMEOUT_SECONDS = 86400


class ExistingGateway(_Model):
    """A Gateway the cluster already runs (``gateway: existing``); the routes attach to it in the serving namespaces."""

    namespace: str
    name: str
    section_name: Optional[str] = None  # the listener the routes attach to (default: every listener that admits them)
    # Which implementation runs it: envoy-gateway accepts this program's SecurityPolicy (authentication, rate limit);
    # with any other (Istio, agentgateway, kgateway...) authentication is that gateway's own configuration.
    implementation: Literal["envoy-gateway", "other"] = "other"
    # Where that gateway's proxy pods run (the NetworkPolicy admits it); default: the Gateway's namespace.
    proxy_namespace: Optional[str] = None

    _ns = field_validator("namespace")(classmethod(lambda cls, v: namespace_name(v)))
    _proxy_ns = field_validator("proxy_namespace")(classmethod(lambda cls, v: v if v is None else namespace_name(v)))

    @field_validator("name", "section_name")
    @classmethod
    def _name(cls, v):
        if v is not None:
            why = dns_subdomain_problem(v)
            if why:
                raise ValueError(f"{_short(v)} {why}")
        return v


class IssuerRef(_Model):
    """The cert-manager issuer that signs the door's certificate (it must exist: ACME, a private CA...)."""

    name: str
    kind: Literal["ClusterIssuer", "Issuer"] = "ClusterIssuer"


class TlsConfig(_Model):
    """``none``; ``certManager``: a cert-manager Certificate for ``hostname`` from ``issuer``; ``secret``: an existing
    ``kubernetes.io/tls`` Secret (``secretName``) in the gateway's namespace. TLS ends at the gateway either way."""

    mode: Literal["none", "certManager", "secret"] = "none"
    issuer: Optional[IssuerRef] = None
    secret_name: Optional[str] = None

    @model_validator(mode="after")
    def _check(self):
        if self.mode == "certManager" and self.issuer is None:
            raise _key_error(
                "issuer",
                "required with tls.mode certManager: the cert-manager issuer that signs the certificate, "
                "e.g. {kind: ClusterIssuer, name: letsencrypt-prod}",
            )
        if self.mode == "secret" and not self.secret_name:
            raise _key_error(
                "secretName", "required with tls.mode secret: an existing kubernetes.io/tls Secret in the gateway's namespace"
            )
        if self.mode != "certManager" and self.issuer is not None:
            raise _key_error("issuer", f"has no effect with tls.mode {self.mode!r}; it applies to mode 'certManager'")
        if self.mode != "secret" and self.secret_name:
            raise _key_error("secretName", f"has no effect with tls.mode {self.mode!r}; it applies to mode 'secret'")
        return self


class JwtConfig(_Model):
    """JSON Web Tokens from an issuer the user names, checked against its JWKS; ``tenantClaim`` names the caller."""

    issuer: str
    jwks_uri: str
    # The ``aud`` values a token must carry (any one). Envoy Gateway checks none when the list is empty ("If not
    # provided, JWT audiences are not checked", api/v1alpha1/jwt_types.go JWTProvider.Audiences, v1.9.1; at most 8),
    # so a door outside the cluster requires it (FrontDoorConfig._check).
    audiences: tuple[str, ...] = Field(default=(), max_length=8)
    tenant_claim: str = "sub"

    @field_validator("issuer", "jwks_uri")
    @classmethod
    def _https(cls, v):
        why = url_problem(v)
        if why or not str(v).startswith("https://"):
            raise ValueError(
                f"{_short(v)} {why or 'is not an https URL'}; the issuer and its JWKS are fetched over TLS, "
                f"e.g. https://login.example.com/.well-known/jwks.json"
            )
        return v


class AuthConfig(_Model):
    """``apiKeys`` (the secret ``dynamo:frontDoorApiKeys``), ``jwt``, or ``none`` (only for a door inside the cluster)."""

    mode: Literal["none", "apiKeys", "jwt"] = "none"
    jwt: Optional[JwtConfig] = None

    @model_validator(mode="after")
    def _check(self):
        if self.mode == "jwt" and self.jwt is None:
            raise _key_error("jwt", "required with auth.mode jwt: {issuer: https://..., jwksUri: https://..., audiences: [...]}")
        if self.mode != "jwt" and self.jwt is not None:
            raise _key_error("jwt", f"has no effect with auth.mode {self.mode!r}; set auth.mode: jwt or remove it")
        return self


class RateLimitConfig(_Model):
    """Requests per minute for each authenticated caller (API key client id or JWT tenant claim)."""

    requests_per_minute: int = Field(ge=1, le=1_000_000)


class FrontDoorConfig(_Model):
    """``dynamo:frontDoor`` (see the module docstring and docs/configuration.md)."""

    enabled: bool = False
    gateway: Literal["managed", "existing"] = "managed"
    existing_gateway: Optional[ExistingGateway] = None
    # managed: install the pinned Envoy Gateway (and cert-manager for tls.mode certManager); false when the cluster
    # already runs those controllers and this stack should only own its Gateway and routes.
    install_controllers: bool = True
    namespace: str = "dynamo-gateway"  # managed: the Gateway's own namespace (created by the stack)
    exposure: Literal["cluster", "vpc", "internet"] = "cluster"
    source_ranges: tuple[str, ...] = ()
    hostname: Optional[str] = None
    tls: TlsConfig = Field(default_factory=TlsConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    rate_limit: Optional[RateLimitConfig] = None
    request_timeout: Optional[int] = None  # seconds; default: from the target (stacks/layers/front_door.py)
    allow_namespaces: tuple[str, ...] = ()  # with networkPolicy: namespaces besides the gateway's that reach the frontends
    # false (default): the frontends drop every client's ``nvext`` and routing headers (DYN_DISABLE_FRONTEND_NVEXT,
    # stacks/serving/__init__.py), so no client picks its worker through a field in the request body; true: clients
    # behind the door may send nvext (worker choice, cache_salt, agent_hints, extra_fields) as upstream allows.
    client_nvext: bool = False
    # true: a door with exposure vpc serves without authentication, said in so many words (every pod and host of the
    # VPC and its peered networks may then use the GPUs).
    allow_unauthenticated: bool = False

    _ns = field_validator("namespace")(classmethod(lambda cls, v: namespace_name(v)))

    @field_validator("source_ranges")
    @classmethod
    def _cidrs(cls, v):
        for cidr in v:
            try:
                ipaddress.ip_network(str(cidr), strict=True)
            except ValueError as e:
                raise ValueError(f"{_short(cidr)} is not a CIDR block ({e}); e.g. 203.0.113.0/24") from None
        return v

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, v):
        if v is not None:
            why = dns_subdomain_problem(v)
            if why or "." not in v or v.startswith("*"):
                raise ValueError(f"{_short(v)} {why or 'is not a fully qualified host name'}; e.g. models.example.com")
        return v

    @field_validator("request_timeout", mode="before")
    @classmethod
    def _timeout(cls, v):
        if v is not None and not isinstance(v, bool) and str(v).strip() in ("0", "0.0"):
            raise ValueError(
                "0 means no timeout at all to Gateway API and Envoy: a hung stream would hold its connection and "
                "its worker for ever; set the longest request you serve in seconds (e.g. 3600), or leave it "
                "unset for the target's default"
            )
        return v

    @field_validator("request_timeout")
    @classmethod
    def _timeout_range(cls, v):
        if v is not None and not 1 <= v <= MAX_REQUEST_TIMEOUT_SECONDS:
            raise ValueError(f"{v!r} is out of range; seconds from 1 to {MAX_REQUEST_TIMEOUT_SECONDS}")
        return v

    @field_validator("allow_namespaces")
    @classmethod
    def _namespaces(cls, v):
        return tuple(namespace_name(n) for n in v)

    @model_validator(mode="after")
    def _check(self):
        if not self.enabled:
            extra = sorted(self.model_fields_set - {"enabled"})
            if extra:
                key = type(self).model_fields[extra[0]].alias or extra[0]
                raise _key_error(key, "has no effect: frontDoor.enabled is false; set frontDoor.enabled: true or remove it")
            return self
        if self.gateway == "existing":
            if self.existing_gateway is None:
                raise _key_error(
                    "existingGateway",
                    "required with gateway: existing: the Gateway the routes attach to, "
                    "{namespace: <its namespace>, name: <its name>}",
                )
            managed_only = {"exposure", "source_ranges", "tls", "namespace", "install_controllers"} & self.model_fields_set
            if managed_only:
                first = sorted(managed_only)[0]
                key = type(self).model_fields[first].alias or first
                raise _key_error(
                    key,
                    "has no effect with gateway: existing (that Gateway's listeners, certificates and load "
                    "balancer are its own); set it on the existing Gateway, or use gateway: managed",
                )
            if self.existing_gateway.implementation != "envoy-gateway" and (self.auth.mode != "none" or self.rate_limit):
                raise _key_error(
                    "auth.mode" if self.auth.mode != "none" else "rateLimit",
                    f"needs existingGateway.implementation: envoy-gateway (this program writes Envoy Gateway "
                    f"SecurityPolicy and BackendTrafficPolicy objects); on Istio, agentgateway or kgateway "
                    f"configure authentication on that gateway and leave {NS}:frontDoor.auth unset",
                )
        elif self.existing_gateway is not None:
            raise _key_error("existingGateway", "has no effect with gateway: managed; set gateway: existing or remove it")
        if self.exposure == "internet":
            missing = [
                k
                for k, off in (
                    ("auth.mode", self.auth.mode == "none"),
                    ("tls.mode", self.tls.mode == "none"),
                    ("sourceRanges", not self.source_ranges),
                )
                if off
            ]
            if missing:
                raise _key_error(
                    "exposure",
                    (
                        f"'internet' needs authentication, TLS and the allowed source ranges; not set: {', '.join(missing)}. "
                        f"Set auth.mode: apiKeys (keys in the secret {NS}:{API_KEYS_SECRET}) or jwt, tls.mode: certManager "
                        f"(with tls.issuer) or secret, and sourceRanges: [<CIDR>, ...] (0.0.0.0/0 only if every address "
                        f"may try); or keep exposure: cluster (default) or vpc"
                    ),
                )
        if self.exposure == "vpc" and self.auth.mode == "none" and not self.allow_unauthenticated:
            raise _key_error(
                "auth.mode",
                "'none' with exposure 'vpc': every pod and host of the VPC (and of its peered networks) could use the "
                f"GPUs without a key; set auth.mode: apiKeys (keys in the secret {NS}:{API_KEYS_SECRET}) or jwt, or "
                "set allowUnauthenticated: true to serve the VPC without authentication",
            )
        if self.allow_unauthenticated and not (self.exposure == "vpc" and self.auth.mode == "none"):
            raise _key_error(
                "allowUnauthenticated",
                f"has no effect with exposure {self.exposure!r} and auth.mode {self.auth.mode!r}; it allows only a "
                "door with exposure: vpc and auth.mode: none (exposure internet always needs authentication)",
            )
        jwt = self.auth.jwt
        if self.exposure != "cluster" and jwt is not None and not jwt.audiences:
            raise _key_error(
                "auth.jwt.audiences",
                f"required with exposure {self.exposure!r}: without it no audience is checked (Envoy Gateway), so "
                f"every token {_short(jwt.issuer)} signs for any client passes the door (for a public issuer, any of "
                "its accounts); set audiences: [<the aud value your issuer puts in this API's tokens>]",
            )
        if self.exposure != "cluster" and self.auth.mode != "none" and self.tls.mode == "none":
            raise _key_error(
                "tls.mode",
                f"'none' with auth.mode {self.auth.mode!r} and exposure {self.exposure!r}: the keys or tokens "
                "would cross the network in clear text; set tls.mode: certManager or secret",
            )
        if self.exposure == "cluster" and self.source_ranges:
            raise _key_error(
                "sourceRanges", "has no effect with exposure: cluster (no load balancer); set exposure: vpc or internet"
            )
        if self.tls.mode != "none" and not self.hostname:
            raise _key_error(
                "hostname",
                f"required with tls.mode {self.tls.mode!r}: the name clients use and the certificate "
                "covers, e.g. models.example.com",
            )
        if self.rate_limit is not None and self.auth.mode == "none":
            raise _key_error(
                "rateLimit", "limits each authenticated caller, and auth.mode is 'none'; set auth.mode: apiKeys or jwt"
            )
        return self


def api_key_problems(value: object) -> list[str]:
    """What is wrong with the secret ``dynamo:frontDoorApiKeys`` (never the keys themselves): a mapping of client ids
    (the tenant each key stands for) to keys of at least ``MIN_API_KEY_LENGTH`` characters, each key once."""
    key = f"{NS}:{API_KEYS_SECRET}"
    fix = (
        f"set it as a mapping of client id to key: `pulumi config set --secret --path '{key}.team-a' \"$(openssl rand -hex 32)\"`"
    )
    if not isinstance(value, dict) or not value:
        return [f"{key}: the secret is not a non-empty mapping of client id to API key (value not shown); {fix}"]
    out = []
    for i, (client, api_key) in enumerate(value.items()):
        # Entries are named by position: a client id that fails a check may be a key pasted in its place.
        if not _CLIENT_ID.fullmatch(str(client)):
            out.append(
                f"{key}: entry {i + 1} has a name that is not a client id (letters, digits, '-', '_', '.', at most 63; "
                f"name not shown: it may be a key); {fix}"
            )
        elif not isinstance(api_key, str) or len(api_key) < MIN_API_KEY_LENGTH or any(c.isspace() for c in api_key):
            out.append(
                f"{key}: entry {i + 1}'s key is shorter than {MIN_API_KEY_LENGTH} characters or has whitespace "
                f"(values not shown); {fix}"
            )
    keys = [v for v in value.values() if isinstance(v, str)]
    if len(set(keys)) != len(keys):
        out.append(f"{key}: two clients share one key (values not shown); each client needs its own key to be told apart")
    return out
