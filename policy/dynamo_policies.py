"""Validation functions of the Dynamo policy pack (pure: plain dicts in, messages out).

``__main__.py`` wraps them in pulumi-policy ``ResourceValidationPolicy`` objects. Stack facts the
resources do not carry (the node's GPU count, the fabric, whether the cache is retained) come from
the policy config, generated per stack by ``python policy/stack_config.py <stack>``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DGD_TYPE = "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment"
PVC_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"
HF_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"

Report = Callable[[str], None]


def pod_specs(props: Any, path: str = "") -> Iterator[tuple[str, Mapping]]:
    """Every pod spec (a mapping with ``containers``) anywhere in a resource's inputs."""
    if isinstance(props, Mapping):
        if isinstance(props.get("containers"), list):
            yield path or ".", props
        for k, v in props.items():
            yield from pod_specs(v, f"{path}.{k}" if path else k)
    elif isinstance(props, list):
        for i, v in enumerate(props):
            name = v.get("name") if isinstance(v, Mapping) else None
            yield from pod_specs(v, f"{path}[{name if isinstance(name, str) else i}]")


def containers(spec: Mapping) -> Iterator[Mapping]:
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, Mapping):
                yield c


def image_pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rsplit(":", 1)[1] not in ("", "latest")


def check_images_pinned(props: Mapping, report: Report) -> None:
    for path, spec in pod_specs(props):
        for c in containers(spec):
            img = c.get("image")
            if not isinstance(img, str) or not image_pinned(img):
                report(
                    f"{path} container {c.get('name')!r}: image {img!r} is not pinned (use a fixed tag other than latest, or a digest)"
                )


def _env_lists(x: Any, path: str = "") -> Iterator[tuple[str, list]]:
    if isinstance(x, Mapping):
        for k, v in x.items():
            p = f"{path}.{k}" if path else k
            if k in ("env", "envs") and isinstance(v, list):
                yield p, v
            else:
                yield from _env_lists(v, p)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _env_lists(v, f"{path}[{i}]")


def check_hf_token_from_secret(props: Mapping, report: Report) -> None:
    for path, env in _env_lists(props):
        for e in env:
            if isinstance(e, Mapping) and e.get("name") in HF_TOKEN_VARS and "value" in e:
                report(
                    f"{path}: {e['name']} is set as a literal value; take it from a Secret (envFrom.secretRef or valueFrom.secretKeyRef)"
                )


def _components(props: Mapping) -> list[Mapping]:
    return [c for c in ((props.get("spec") or {}).get("components") or []) if isinstance(c, Mapping)]


def check_efa_disagg(resource_type: str, props: Mapping, config: Mapping, report: Report) -> None:
    if resource_type != DGD_TYPE or config.get("fabric") != "aws-efa":
        return
    for comp in _components(props):
        if comp.get("type") not in ("prefill", "decode"):
            continue
        for c in containers((comp.get("podTemplate") or {}).get("spec") or {}):
            res = c.get("resources") or {}
            if not any(EFA in (res.get(k) or {}) for k in ("requests", "limits")):
                report(
                    f"component {comp.get('name')} container {c.get('name')}: a disaggregated worker on an EFA stack must request {EFA}"
                )
            args = [str(a) for a in (c.get("args") or [])] + [str(a) for a in (c.get("command") or [])]
            kv = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--kv-transfer-config"), None)
            kv = kv or next((a.split("=", 1)[1] for a in args if a.startswith("--kv-transfer-config=")), None)
            try:
                backends = (json.loads(kv).get("kv_connector_extra_config") or {}).get("backends") or [] if kv else []
            except (ValueError, AttributeError):
                backends = []
            if "LIBFABRIC" not in backends:
                report(
                    f"component {comp.get('name')} container {c.get('name')}: --kv-transfer-config must use the LIBFABRIC backend on EFA (got {kv!r})"
                )


def gpus_per_node(config: Mapping) -> int | None:
    if config.get("gpusPerNode"):
        return int(config["gpusPerNode"])
    if config.get("gpu"):
        from stacks.registry.gpus import shape_for

        return shape_for(config["gpu"], config.get("instanceType")).gpus_per_node
    return None


def _qty(v: Any) -> int:
    try:
        return int(str(v))
    except ValueError:
        return 0


def check_gpu_fits_node(props: Mapping, config: Mapping, report: Report) -> None:
    limit = gpus_per_node(config)
    if limit is None:
        return
    for path, spec in pod_specs(props):
        want = 0
        for c in containers(spec):
            res = c.get("resources") or {}
            want += max(_qty((res.get("limits") or {}).get(GPU, 0)), _qty((res.get("requests") or {}).get(GPU, 0)))
        if want > limit:
            report(
                f"{path}: the pod requests {want} {GPU} but a {config.get('instanceType') or config.get('gpu') or 'stack'} node has {limit}"
            )
    for comp in _components(props):  # DGD component-level resources: {limits: {gpu: "N"}}
        res = comp.get("resources") or {}
        want = max(_qty((res.get("limits") or {}).get("gpu", 0)), _qty((res.get("requests") or {}).get("gpu", 0)))
        if want > limit:
            report(
                f"component {comp.get('name')}: resources ask for {want} GPUs but a {config.get('instanceType') or config.get('gpu') or 'stack'} node has {limit}"
            )


def check_model_cache_retained(resource_type: str, name: str, protect: bool, config: Mapping, report: Report) -> None:
    """pulumi-policy does not expose retainOnDelete to policies; the stack config that sets it
    (dynamo:storage.protect, passed as ``storageProtect``) is checked instead, and ``protect`` is accepted too."""
    if resource_type != PVC_TYPE or "model-cache" not in name:
        return
    if protect or config.get("storageProtect", True):
        return
    report(
        f"PVC {name}: the model cache is not retained (dynamo:storage.protect is false); "
        "set it to true, or set allowUnretainedCache in the policy config to destroy the cache on purpose"
    )


def check_model_cache_retained_cfg(resource_type: str, name: str, protect: bool, config: Mapping, report: Report) -> None:
    """The policy entry point: ``allowUnretainedCache`` in the config turns the check off."""
    if config.get("allowUnretainedCache"):
        return
    check_model_cache_retained(resource_type, name, protect, config, report)
