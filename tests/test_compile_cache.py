"""vLLM's torch.compile cache and Triton's cache live on the model-cache volume (stacks/serving/compile_cache.py).

The containers checked are derived from the catalog: every GPU container of every vLLM target's recipe DGD
(``catalog.recipe_objects``), rendered with default options. The effective value of a variable is the one the operator
gives the container: the DGD's ``spec.env`` prepended, the container's own entry of the same name taking precedence
(DynamoGraphDeployment CRD v1beta1, ``spec.env``).
"""

from __future__ import annotations

import json

import pytest

from stacks import catalog
from stacks.program.render import render_config, render_target
from stacks.serving import compile_cache as cc
from stacks.config.keys import ConfigError


def _dgd(objs):
    return next(o for o in objs if o["kind"] == "DynamoGraphDeployment")


def _gpus(c):
    res = c.get("resources") or {}
    return int((res.get("limits") or {}).get("nvidia.com/gpu") or (res.get("requests") or {}).get("nvidia.com/gpu") or 0)


def _effective(dgd, container, name):
    """The value the container runs with: container env over the DGD's spec.env."""
    env = [*(dgd["spec"].get("env") or []), *(container.get("env") or [])]
    return next((e.get("value") for e in reversed(env) if e.get("name") == name), None)


def _workers(dgd):
    for comp in dgd["spec"]["components"]:
        for c in comp["podTemplate"]["spec"]["containers"]:
            if _gpus(c):
                yield comp["name"], c


TARGETS = sorted(catalog.targets().values(), key=lambda t: t.id)
RENDERED = {t.id: _dgd(render_target(t.id)) for t in TARGETS}
RECIPE = {t.id: _dgd(catalog.recipe_objects(t)) for t in TARGETS}


def test_every_vllm_worker_container_has_both_caches_under_the_cache_mount():
    seen = 0
    for t in TARGETS:
        mount = catalog.family_of(t).cache.mount
        want = list(_workers(RECIPE[t.id]))
        got = dict(((n, c["name"]), c) for n, c in _workers(RENDERED[t.id]))
        assert len(got) == len(want)
        for comp, rc in want:
            c = got[(comp, rc["name"])]
            if t.runtime != "vllm":  # TensorRT-LLM: the recipe's values, untouched
                assert cc.recipe_values(c) == cc.recipe_values(rc) and c.get("volumeMounts") == rc.get("volumeMounts"), t.id
                continue
            seen += 1
            vllm, triton = _effective(RENDERED[t.id], c, cc.VLLM_VAR), _effective(RENDERED[t.id], c, cc.TRITON_VAR)
            prefix = f"{mount}/compile-cache/{t.id}/{comp}/"
            assert vllm.startswith(prefix) and vllm.endswith("/vllm"), (t.id, comp, vllm)
            assert triton == vllm[: -len("vllm")] + "triton", (t.id, comp, triton)
            key = vllm[len(prefix) : -len("/vllm")]
            assert len(key) == cc.KEY_LENGTH and "/" not in key
            names = [e["name"] for e in c["env"]]
            assert names.count(cc.VLLM_VAR) == names.count(cc.TRITON_VAR) == 1  # one entry per name, set on the container
            # the directory is writable: on the cache volume, by a mount that is not read-only
            mounts = [m for m in c["volumeMounts"] if vllm.startswith(m["mountPath"].rstrip("/") + "/")]
            deepest = max(mounts, key=lambda m: len(m["mountPath"]))
            assert not deepest.get("readOnly") and deepest["name"] == next(
                m["name"] for m in rc["volumeMounts"] if m["mountPath"] == mount
            )
            if any(m.get("readOnly") for m in rc["volumeMounts"] if m["mountPath"] == mount):
                # only the container's own entry is writable: the mount is that directory, nothing above it
                entry = vllm[: -len("/vllm")]
                assert deepest == {"name": deepest["name"], "mountPath": entry, "subPath": entry[len(mount) + 1 :]}, t.id
                others = [m for m in c["volumeMounts"] if m is not deepest and m["name"] == deepest["name"]]
                assert others and all(m.get("readOnly") is True for m in others), (t.id, comp, others)
    vllm_workers = sum(1 for t in TARGETS if t.runtime == "vllm" for _ in _workers(RECIPE[t.id]))
    assert seen == vllm_workers and seen > len([t for t in TARGETS if t.runtime == "vllm"])


def _writes_modules_to(up: dict, container: dict, mount: str) -> bool:
    """Whether transformers' remote-code module cache of the upstream container is on the mount: HF_MODULES_CACHE, else
    $HF_HOME/modules (transformers utils/hub.py)."""
    modules = (
        _effective(up, container, "HF_MODULES_CACHE")
        or f"{_effective(up, container, 'HF_HOME') or '/root/.cache/huggingface'}/modules"
    )
    return modules.startswith(mount.rstrip("/") + "/")


def test_workers_that_only_read_the_model_mount_it_read_only():
    """Where upstream's recipe file runs a vLLM worker with HF_HUB_OFFLINE=1 (no hub writes) and its remote-code module
    cache off the volume, the rendered worker mounts the model cache read-only and only the compile-cache directory
    writable; every other worker keeps upstream's readOnly on that mount. The expectation is read from the upstream
    files, not from the catalog."""
    from stacks.cli import fidelity

    offline = writes_modules = 0
    for t in TARGETS:
        if t.runtime != "vllm" or not t.upstream:
            continue
        path = fidelity.snapshot_dir(t.reference) / t.upstream
        if not path.is_file():
            continue
        up = next(d for d in fidelity.load_docs(path) if d.get("kind") == "DynamoGraphDeployment")
        mount = catalog.family_of(t).cache.mount
        got = {(n, c["name"]): c for n, c in _workers(RENDERED[t.id])}
        for comp, uc in _workers(up):
            up_mount = next((m for m in uc.get("volumeMounts") or [] if m["mountPath"] == mount), None)
            if up_mount is None:
                continue
            c = got[(comp, uc["name"])]
            m = next(m for m in c["volumeMounts"] if m["mountPath"] == mount)
            if _effective(up, uc, cc.OFFLINE_VAR) == "1" and _writes_modules_to(up, uc, mount):
                writes_modules += 1
                assert m.get("readOnly") == up_mount.get("readOnly"), (t.id, comp, m, up_mount)
            elif _effective(up, uc, cc.OFFLINE_VAR) == "1":
                offline += 1
                assert m.get("readOnly") is True, (t.id, comp, m)
                entry = _effective(RENDERED[t.id], c, cc.VLLM_VAR)[: -len("/vllm")]
                assert {"name": m["name"], "mountPath": entry, "subPath": entry[len(mount) + 1 :]} in c["volumeMounts"], t.id
            else:
                assert m.get("readOnly") == up_mount.get("readOnly"), (t.id, comp, m, up_mount)
    # Lightning's workers only read; Motif-3's read offline but write remote code under HF_HOME on the volume, so they
    # keep upstream's mount; Ultra's recipe mounts read-only already (the test above).
    assert offline > 0 and writes_modules > 0


def test_opt_out_keeps_the_recipe_mount_writable_where_upstream_has_it():
    t = next(
        t
        for t in TARGETS
        if t.runtime == "vllm"
        and any(
            cc.model_read_only(c, RECIPE[t.id]["spec"].get("env") or [], catalog.family_of(t).cache.mount)
            for _, c in _workers(RECIPE[t.id])
        )
    )
    dgd = _dgd(render_config({"target": t.id, "compileCache": {"enabled": False}}))
    mount = catalog.family_of(t).cache.mount
    for (_, c), (_, rc) in zip(_workers(dgd), _workers(RECIPE[t.id])):
        assert [m for m in c["volumeMounts"] if m["mountPath"].startswith(mount)] == [
            m for m in rc["volumeMounts"] if m["mountPath"].startswith(mount)
        ], t.id


def _keys():
    """(target, component) -> (key, what it is of: image, command, args, GPU)."""
    out = {}
    for t in TARGETS:
        if t.runtime != "vllm":
            continue
        for comp, c in _workers(RENDERED[t.id]):
            key = _effective(RENDERED[t.id], c, cc.VLLM_VAR).split("/")[-2]
            out[(t.id, comp)] = (key, json.dumps([c["image"], c.get("command"), c.get("args"), t.gpu, _gpus(c)]))
    return out


def test_keys_differ_for_different_images_args_and_gpus():
    keys = _keys()
    by_facts: dict[str, set] = {}
    for key, facts in keys.values():
        by_facts.setdefault(facts, set()).add(key)
    # every distinct (image, command, args, GPU, GPUs per pod) has keys of its own
    owners: dict[str, str] = {}
    for facts, ks in by_facts.items():
        for k in ks:
            assert owners.setdefault(k, facts) == facts, f"key {k} shared by {facts} and {owners[k]}"
    assert len(by_facts) > 10
    # the same target and component: the same key on every render (replicas and restarts share it)
    t = "lightning-vllm-agg-h100-dspark"
    assert _effective(_dgd(render_target(t)), next(_workers(_dgd(render_target(t))))[1], cc.VLLM_VAR) == _effective(
        RENDERED[t], next(_workers(RENDERED[t]))[1], cc.VLLM_VAR
    )


@pytest.mark.parametrize("change", ["image", "args", "gpu", "configmap"])
def test_each_input_changes_the_key(change):
    t = catalog.targets()["lightning-vllm-agg-h100-dspark"]
    dgd = RECIPE[t.id]
    comp, c = next(_workers(dgd))
    pod = next(x for x in dgd["spec"]["components"] if x["name"] == comp)["podTemplate"]["spec"]
    cms = {o["metadata"]["name"]: o["data"] for o in catalog.recipe_objects(t) if o["kind"] == "ConfigMap"}
    base = cc.cache_key(c, pod, dgd["spec"].get("env") or [], t.gpu, cms)
    c2, gpu, cms2 = json.loads(json.dumps(c)), t.gpu, json.loads(json.dumps(cms))
    if change == "image":
        c2["image"] += "-other"
    elif change == "args":
        c2["args"] = [*c2["args"], "--max-num-seqs", "1"]
    elif change == "gpu":
        gpu = "h200"
    else:
        ref = next(e["valueFrom"]["configMapKeyRef"] for e in c["env"] if "configMapKeyRef" in (e.get("valueFrom") or {}))
        cms2[ref["name"]][ref["key"]] += " "
    assert cc.cache_key(c2, pod, dgd["spec"].get("env") or [], gpu, cms2) != base
    # the key leaves the two cache variables themselves out
    c3 = json.loads(json.dumps(c))
    c3["env"] = [e for e in c3["env"] if e["name"] not in cc.VARS]
    assert cc.cache_key(c3, pod, dgd["spec"].get("env") or [], t.gpu, cms) == base


def test_image_override_moves_the_cache():
    t = "lightning-vllm-agg-h100-dspark"
    other = _dgd(render_config({"target": t, "images": {"*": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:9.9.9"}}))
    a = _effective(RENDERED[t], next(_workers(RENDERED[t]))[1], cc.VLLM_VAR)
    b = _effective(other, next(_workers(other))[1], cc.VLLM_VAR)
    assert a != b and a.rsplit("/", 2)[0] == b.rsplit("/", 2)[0]  # same target/component directory, another key


def test_opt_out_restores_the_recipe_values():
    for t in TARGETS:
        if t.runtime != "vllm":
            continue
        off = _dgd(render_config({"target": t.id, "compileCache": {"enabled": False}}))
        assert off["spec"].get("env") == RECIPE[t.id]["spec"].get("env")
        for (comp, c), (_, rc) in zip(_workers(off), _workers(RECIPE[t.id]), strict=True):
            assert c.get("env") == rc.get("env") and c.get("volumeMounts") == rc.get("volumeMounts"), (t.id, comp)
    # and the recipe's values are what upstream keeps in the container: /tmp or $HOME, never the cache volume
    lightning = next(_workers(RECIPE["lightning-vllm-agg-h100-dspark"]))[1]
    assert cc.recipe_values(lightning) == {cc.VLLM_VAR: "/tmp/vllm-cache", cc.TRITON_VAR: "/tmp/.triton-cache"}


@pytest.mark.parametrize(
    "value,message",
    [
        ({"enabled": "maybe"}, "dynamo:compileCache.enabled: 'maybe' is not a boolean; use true or false"),
        ({"enable": False}, "dynamo:compileCache.enable: unknown key; valid keys here: enabled; did you mean 'enabled'?"),
    ],
)
def test_bad_config_names_the_key_the_value_and_the_choices(value, message):
    with pytest.raises(ConfigError) as e:
        render_config({"target": "lightning-vllm-agg-h100-dspark", "compileCache": value})
    assert message in str(e.value)


def _kubelet_read_only(pod: dict, mount: dict) -> bool:
    """The kubelet's rule: a mount is read-only when it says so or when its volume's claim source is read-only
    (PersistentVolumeClaimVolumeSource.readOnly "will force the ReadOnly setting in VolumeMounts", Kubernetes API
    reference)."""
    source = next((v for v in pod.get("volumes") or [] if v["name"] == mount["name"]), {}).get("persistentVolumeClaim") or {}
    return bool(mount.get("readOnly")) or source.get("readOnly") is True


def _pods(dgd):
    for comp in dgd["spec"]["components"]:
        yield comp["name"], comp["podTemplate"]["spec"]


def test_the_compile_cache_is_writable_where_the_kubelet_mounts_it():
    """Every directory a vLLM worker's cache variables name is under a mount the kubelet makes writable, the claim
    source included: upstream's Ultra recipes mark the model-cache claim itself read-only, which forces every mount of
    it read-only, the compile-cache subPath too."""
    read_only_sources = 0
    for t in TARGETS:
        if t.runtime != "vllm":
            continue
        dgd = RENDERED[t.id]
        for comp, pod in _pods(dgd):
            for c in pod["containers"]:
                path = _effective(dgd, c, cc.VLLM_VAR)
                if not _gpus(c) or path is None or "/compile-cache/" not in path:
                    continue
                deepest = max(
                    (m for m in c["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")),
                    key=lambda m: len(m["mountPath"]),
                )
                assert not _kubelet_read_only(pod, deepest), (t.id, comp, c["name"], deepest)
        recipe_pods = dict(_pods(RECIPE[t.id]))
        read_only_sources += any(
            (v.get("persistentVolumeClaim") or {}).get("readOnly") is True
            for p in recipe_pods.values()
            for v in p.get("volumes") or []
        )
    assert read_only_sources > 0  # the case exists in the catalog (Ultra)


def test_every_model_mount_stays_as_read_only_as_upstream_made_it():
    """Where the step releases a read-only claim source, every other mount of that volume stays read-only for the
    kubelet: upstream's read-only model files remain read-only in every container (init containers included)."""
    for t in TARGETS:
        if t.runtime != "vllm":
            continue
        for (comp, pod), (_, rpod) in zip(_pods(RENDERED[t.id]), _pods(RECIPE[t.id]), strict=True):
            for part in ("initContainers", "containers"):
                for c, rc in zip(pod.get(part) or [], rpod.get(part) or [], strict=True):
                    for rm in rc.get("volumeMounts") or []:
                        m = next(m for m in c["volumeMounts"] if m["name"] == rm["name"] and m["mountPath"] == rm["mountPath"])
                        if _kubelet_read_only(rpod, rm):
                            assert _kubelet_read_only(pod, m), (t.id, comp, c["name"], m)
