"""The credentials check every ``up`` and ``preview`` of a kubeconfig cluster makes first (components/credentials.py),
against a stand-in kubectl that answers as kubectl does for a refused token; the engine test with the real kube-apiserver
is tests/test_transitions.py. The secret kubeconfig text never appears in the message."""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path

from components.credentials import credentials_problem

CANARY = "token: kubeconfig-secret-canary-7f3a"


def _kubectl(tmp_path, rc: int, stderr: str):
    script = tmp_path / "kubectl"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\necho '{stderr}' >&2\nexit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_a_refused_read_names_the_source_and_what_the_server_said_never_the_secret(tmp_path):
    kubectl = _kubectl(tmp_path, 1, "error: You must be logged in to the server (Unauthorized)")
    left_before = set(Path(tempfile.gettempdir()).glob("dynamo-kubeconfig-*"))
    msg = credentials_problem(f"apiVersion: v1\nusers:\n- user:\n    {CANARY}\n", "prod", "dynamo:kubeconfig", kubectl=kubectl)
    assert msg and "dynamo:kubeconfig (context prod)" in msg and "Unauthorized" in msg
    assert CANARY not in msg and "dynamo-kubeconfig-" not in msg  # neither the text nor the temporary file's path
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("get") : args.index("get") + 3] == ["get", "--raw", "/api"] and "--context" in args
    assert set(Path(tempfile.gettempdir()).glob("dynamo-kubeconfig-*")) <= left_before  # the temporary file is removed


def test_a_kubeconfig_file_is_read_where_it_lies_and_a_working_read_passes(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\n")
    assert credentials_problem(None, None, str(kubeconfig), path=str(kubeconfig), kubectl=_kubectl(tmp_path, 0, "")) is None
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("--kubeconfig") + 1] == str(kubeconfig) and "--context" not in args


def test_a_cache_claim_that_cannot_bind_is_named_before_any_resource():
    from components.credentials import DEFAULT_CLASS_ANNOTATION, storage_class_warnings

    efs = {"metadata": {"name": "efs"}}
    gp3 = {"metadata": {"name": "gp3", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}}}
    claims = [("dynamo", "ns/shared-model-cache", None)]
    (msg,) = storage_class_warnings(claims, [])
    assert "dynamo:storage.className: not set" in msg and "no StorageClass" in msg and "ns/shared-model-cache" in msg
    (msg,) = storage_class_warnings(claims, [efs])
    assert "no default StorageClass" in msg and "efs" in msg
    assert storage_class_warnings(claims, [efs, gp3]) == []
    (msg,) = storage_class_warnings([("dynamo:serve[1]", "b/c", "fsx")], [efs, gp3])
    assert "dynamo:serve[1].storage.className: 'fsx' is not a StorageClass" in msg and "efs, gp3" in msg
    assert storage_class_warnings([("dynamo", "a/b", "efs")], [efs]) == []
