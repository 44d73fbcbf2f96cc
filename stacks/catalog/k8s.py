"""Tiny constructors for the Kubernetes fragments every recipe family repeats."""

from __future__ import annotations

from typing import Any

PLACEHOLDER_PULL_SECRET = "your-image-pull-secret"
PLACEHOLDER_STORAGE_CLASS = "your-storage-class-name"
CACHE_PVC = "shared-model-cache"
HF_SECRET = "hf-token-secret"


def env(name: str, value: str) -> dict:
    return {"name": name, "value": value}


def env_field(name: str, path: str) -> dict:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def env_configmap(name: str, configmap: str, key: str) -> dict:
    return {"name": name, "valueFrom": {"configMapKeyRef": {"name": configmap, "key": key}}}


def envs(pairs: dict[str, Any]) -> list[dict]:
    """Plain env list from an ordered mapping (dict values are full entries)."""
    out = []
    for k, v in pairs.items():
        out.append({"name": k, **v} if isinstance(v, dict) else env(k, v))
    return out


def pvc_volume(name: str = CACHE_PVC, claim: str = CACHE_PVC, read_only: bool | None = None) -> dict:
    src: dict[str, Any] = {"claimName": claim}
    if read_only is not None:
        src["readOnly"] = read_only
    return {"name": name, "persistentVolumeClaim": src}


def shm_volume(size: str, name: str = "dshm") -> dict:
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def mount(name: str, path: str, read_only: bool | None = None) -> dict:
    m: dict[str, Any] = {"name": name, "mountPath": path}
    if read_only is not None:
        m["readOnly"] = read_only
    return m


def http_probe(path: str, port: int | str, period: int, timeout: int, failures: int) -> dict:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def gpu_affinity(product: str, key: str = "nvidia.com/gpu.product") -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [product]}]}]
            }
        }
    }


def toleration(key: str, value: str | None = None, effect: str = "NoSchedule", operator: str | None = None) -> dict:
    t: dict[str, Any] = {"key": key, "operator": operator or ("Equal" if value is not None else "Exists")}
    if value is not None:
        t["value"] = value
    t["effect"] = effect
    return t


GPU_TOLERATION = toleration("nvidia.com/gpu", "true")


def pull_secrets(names: list[str] | tuple[str, ...] = (PLACEHOLDER_PULL_SECRET,)) -> list[dict]:
    return [{"name": n} for n in names]


def labels(dgd_name: str) -> dict:
    return {"app.kubernetes.io/name": dgd_name, "app.kubernetes.io/part-of": "dynamo"}


def configmap(name: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def dgd(name: str, framework: str, components: list[dict], *, with_labels: bool = True, spec_env: list | None = None) -> dict:
    md: dict[str, Any] = {"name": name}
    if with_labels:
        md["labels"] = labels(name)
    spec: dict[str, Any] = {"backendFramework": framework}
    if spec_env is not None:
        spec["env"] = spec_env
    spec["components"] = components
    return {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment", "metadata": md, "spec": spec}


def pvc(name: str, size: str, access_mode: str = "ReadWriteMany", storage_class: str | None = PLACEHOLDER_STORAGE_CLASS) -> dict:
    spec: dict[str, Any] = {"accessModes": [access_mode], "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}
