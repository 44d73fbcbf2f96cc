"""GPU-free serving rig: the real Dynamo frontend and mocker workers, started from a target's DGD, loopback only.

``start_rig(dgd, workdir)`` reads from a DGD as the product renders it (``stacks.serving.build_plan(...).dgd``) the
served model name, the frontend port, and the worker components (aggregated ``worker``, or ``prefill`` + ``decode``)
with their replicas, and starts, from the rig's own locked environment (``tools/rig.sh``):

- ``python -m dynamo.frontend`` with the DGD frontend container's own arguments, plus ``--discovery-backend file``
  and ``--http-host 127.0.0.1 --http-port <free port>``;
- one ``python -m dynamo.mocker --disaggregation-mode agg|prefill|decode`` per worker replica (the mocker is Dynamo's
  GPU-free engine; it takes the vLLM-style flags ``--max-num-seqs``/``--max-num-batched-tokens`` the DGD sets), each
  with its own system server (``DYN_SYSTEM_ENABLED=true``, ``DYN_SYSTEM_PORT``) so its ``/metrics`` is scrapeable.

Every process runs with the environment the Dynamo operator gives that pod's main container (``operator_env``):
``DYN_NAMESPACE=<k8s namespace>-<dgd>`` and the rest, the frontend's ``DYN_NAMESPACE_PREFIX`` and the workers'
``DYN_NAMESPACE_WORKER_SUFFIX=<worker hash>``, so the frontend discovers its workers, and the processes label their
metrics, the way they do in the cluster; only ports and discovery are the rig's own (loopback ports, file discovery).

Discovery is a directory (``DYN_FILE_KV``), so no etcd or NATS runs. The served model is a Hugging Face cache
(``HF_HOME``, ``HF_HUB_OFFLINE=1``) holding the 65,000-token BPE ``tokenizer.json`` that the pinned ``anthropic``
wheel ships (tools/rig/pyproject.toml), under the DGD's served model name.

Every wait ends at its deadline with what it saw last and the tail of each process's log; every process is killed
when the context exits.

Network: the HTTP server, the system servers and the TCP request plane bind 127.0.0.1 (``--http-host``,
``DYN_SYSTEM_HOST``, ``DYN_TCP_RPC_HOST``), and the response stream listens on ``lo``. The ZMQ event plane (KV events,
load metrics) of ai-dynamo 1.6.1 binds ``tcp://0.0.0.0:<port>`` with no setting to change the listener; what it
advertises in discovery, and so where subscribers connect, is ``DYN_EVENT_PLANE_HOST`` ("IP address or exact
interface advertised by direct ZMQ event publishers ... If unset, the runtime auto-detects a local IP address":
ai-dynamo/dynamo lib/runtime/src/config/environment_names.rs; its KV relay guide: "It changes the advertised address,
not the listener's bind address"), which the rig sets to 127.0.0.1, so every connection between the rig's processes
is a loopback one. Only that listener is bound wider than loopback (an isolated network namespace would close it,
at the cost of running the tests inside it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parent.parent
RIG_SCRIPT = ROOT / "tools" / "rig.sh"
HOST = "127.0.0.1"

# The named container ports the rig's processes listen on (stacks/serving/operator.py: `http` on the frontend, `system` on
# workers); an operator pod's other ports (e.g. `nixl`, NIXL telemetry) have no process behind them here.
FRONTEND_PORT_NAME, SYSTEM_PORT_NAME = "http", "system"
COMPONENT_TYPES = ("frontend", "worker", "prefill", "decode")
# Frontend flags the rig leaves out (flag -> how many values follow it), and why: they load an engine's own Python
# package into the frontend, and the GPU-free rig installs no engine. `--dyn-chat-processor vllm` (Motif-3's frontend)
# preprocesses with vLLM's chat processor: ai-dynamo 1.6.1's `python -m dynamo.frontend` exits "No module named
# 'vllm'" with it, and without it refuses the vLLM processor's own flags that follow it in the DGD ("Unknown
# arguments specified: ['--tool-call-parser', 'motif', '--reasoning-parser', 'motif', '--enable-auto-tool-choice']").
# Without them the frontend's own preprocessor applies the same tokenizer and chat template; tool-call and reasoning
# parsing of the replies, which no benchmark figure reads, are what the rig leaves untested.
ENGINE_FRONTEND_FLAGS = {
    "--dyn-chat-processor": 1,
    "--tool-call-parser": 1,
    "--reasoning-parser": 1,
    "--enable-auto-tool-choice": 0,
}
WORKER_MODES = {"worker": "agg", "prefill": "prefill", "decode": "decode"}
# vLLM engine flags the DGD's workers carry that the mocker takes too, with the same meaning
# (`python -m dynamo.mocker --help`, ai-dynamo 1.5.0 and 1.6.1: "Mocker engine ... with vLLM-style CLI").
SHARED_ENGINE_FLAGS = ("--max-num-seqs", "--max-num-batched-tokens", "--block-size")
# Mocker timing: its simulated prefill/decode step times divided by this (`--speedup-ratio`), so a benchmark with
# 64k-token prompts finishes in seconds; the serving path (frontend, router, tokenizer, request plane) is unchanged.
SPEEDUP_RATIO = "100"


class RigError(RuntimeError):
    pass


@dataclass
class RigPod:
    name: str  # e.g. "<dgd>-frontend-0", "<dgd>-vllmdecodeworker-0"
    component: str  # DGD component (service) name
    component_type: str  # frontend | worker | prefill | decode
    labels: dict[str, str]  # the labels the Dynamo operator puts on that pod
    ports: dict[str, int]  # container port NAME -> the loopback port this process really listens on
    # The operator's env for the pod (operator_env + the DGD's DYN_* values) with the rig's ports; the process also
    # gets the rig's placement over it (file discovery, loopback hosts).
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Rig:
    frontend_url: str  # http://127.0.0.1:<port>
    model: str  # served model name
    pods: list[RigPod]
    env: dict[str, str]  # env to run rig-side tools (aiperf) with: rig venv bin first on PATH, HF_HOME, HF_HUB_OFFLINE=1
    python: Path  # the rig venv's python
    hf_home: Path
    logs: dict[str, Path] = field(default_factory=dict)  # pod name -> its process's stdout+stderr

    def log_tail(self, lines: int = 30) -> str:
        return _tails(self.logs, lines)


# ---- the environment and the model -------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def rig_env_dir() -> Path:
    """Build or reuse the rig's locked environment (tools/rig.sh prints its directory last)."""
    proc = subprocess.run([str(RIG_SCRIPT)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RigError(f"{RIG_SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def tokenizer_file(env_dir: Path) -> Path:
    """The tokenizer.json inside the pinned anthropic wheel (a HF `tokenizers` byte-level BPE, 65,000 tokens)."""
    found = sorted(env_dir.glob("lib/python3*/site-packages/anthropic/tokenizer.json"))
    if not found:
        raise RigError(f"no anthropic/tokenizer.json under {env_dir} (tools/rig/pyproject.toml pins the wheel that ships it)")
    return found[0]


def _chat_template(start: str, end: str, eot: str) -> str:
    # A plain role-delimited template with the tokenizer's own special tokens; the frontend renders it for
    # /v1/chat/completions and AIPerf counts prompt tokens with the same tokenizer.
    return (
        "{% for m in messages %}" + start + "{{ m['role'] }}" + end + "{{ m['content'] }}" + eot + "{% endfor %}"
        "{% if add_generation_prompt %}" + start + "assistant" + end + "{% endif %}"
    )


def layout_hf_cache(hf_home: Path, model: str, tokenizer: Path) -> Path:
    """Lay ``tokenizer`` out as the Hugging Face hub cache entry of ``model`` ("ORG/NAME"): ``hub/models--ORG--NAME/``
    with ``snapshots/<40 hex>/`` (tokenizer.json, tokenizer_config.json with a chat template, config.json,
    generation_config.json) and ``refs/main`` naming that snapshot. Returns the snapshot directory."""
    data = tokenizer.read_bytes()
    tok = json.loads(data)
    special = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    vocab = len(tok["model"]["vocab"]) + len(
        [t for t in tok.get("added_tokens", []) if t["content"] not in tok["model"]["vocab"]]
    )
    eot, sos = "<EOT>", "<SOS>"
    if eot not in special or sos not in special:
        raise RigError(f"{tokenizer} has no {eot}/{sos} special tokens; added tokens: {sorted(special)}")
    revision = hashlib.sha1(model.encode() + b"\0" + data).hexdigest()
    repo = hf_home / "hub" / ("models--" + model.replace("/", "--"))
    snap = repo / "snapshots" / revision
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "tokenizer.json").write_bytes(data)
    (snap / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": sos,
                "eos_token": eot,
                "pad_token": eot,
                "add_bos_token": False,
                "add_eos_token": False,
                "clean_up_tokenization_spaces": False,
                "model_max_length": 1048576,
                "chat_template": _chat_template("<META_START>", "<META_END>", eot),
            },
            indent=1,
        )
    )
    # A small Llama-shaped config: the mocker derives KV bytes per token from it; the context is long enough for the
    # benchmark workloads (64k input + 400 output tokens).
    (snap / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": vocab,
                "hidden_size": 1024,
                "intermediate_size": 2816,
                "num_hidden_layers": 4,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "max_position_embeddings": 1048576,
                "torch_dtype": "bfloat16",
                "bos_token_id": special[sos],
                "eos_token_id": special[eot],
            },
            indent=1,
        )
    )
    (snap / "generation_config.json").write_text(json.dumps({"bos_token_id": special[sos], "eos_token_id": special[eot]}))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snap


def rig_env(env_dir: Path, hf_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(k, None)
    env.update(
        {
            "PATH": f"{env_dir / 'bin'}:{env.get('PATH', '')}",
            "VIRTUAL_ENV": str(env_dir),
            "HF_HOME": str(hf_home),
            "HF_HUB_OFFLINE": "1",  # no hub access here: everything comes from the cache laid out above
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


# ---- reading the DGD --------------------------------------------------------------------------------------------


def _container(comp: dict) -> dict:
    return comp["podTemplate"]["spec"]["containers"][0]


def expand(text: str, env: dict[str, str]) -> str:
    """``text`` as the kubelet runs it: every ``$(NAME)`` replaced by the container's env value of NAME, a reference to
    no such variable left as written, ``$$`` reduced to ``$`` (so ``$$(NAME)`` is the literal ``$(NAME)``), any other
    ``$`` kept. Kubernetes API reference, Container ``command``/``args`` ("Variable references $(VAR_NAME) are expanded
    using the container's environment. If a variable cannot be resolved, the reference in the input string will be
    unchanged. Double $$ are reduced to a single $ ..."); the kubelet's third_party/forked/golang/expansion Expand."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(" and ")" in text[i + 2 :]:
            end = text.index(")", i + 2)
            name = text[i + 2 : end]
            out.append(env.get(name, f"$({name})"))
            i = end + 1
        else:  # an incomplete reference or a lone $: kept as written
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def container_env(c: dict) -> dict[str, str]:
    """The literal ``env`` values of a container, each expanded with the ones before it (as the kubelet does); values
    from Secrets or fields (``valueFrom``) are not known here and stay unresolved references."""
    env: dict[str, str] = {}
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = expand(str(e["value"]), env)
    return env


def _argv(comp: dict) -> list[str]:
    """The container's command and args as the kubelet starts them (``$(VAR)`` references expanded: ``expand``)."""
    c = _container(comp)
    env = container_env(c)
    return [expand(str(a), env) for a in (c.get("command") or []) + (c.get("args") or [])]


def _flag(args: list[str], name: str) -> Optional[str]:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def served_model(dgd: dict) -> str:
    from stacks.serving.benchmark import served_model

    model = served_model(dgd)
    if not model:
        raise RigError(f"DGD {dgd['metadata']['name']}: no --served-model-name/--model on any worker")
    return model


def _model_path(dgd: dict, model: str) -> str:
    """The HF repo id the workers load (--model), falling back to the served name."""
    for comp in _components(dgd):
        if comp.get("type") in WORKER_MODES:
            path = _flag(_argv(comp), "--model")
            if path:
                return path
    return model


def _components(dgd: dict) -> list[dict]:
    comps = dgd["spec"].get("components")
    if comps is None:
        raise RigError(f"DGD {dgd['metadata']['name']}: no spec.components (only nvidia.com/v1beta1 DGDs are supported)")
    for c in comps:
        if c.get("type") not in COMPONENT_TYPES:
            raise RigError(
                f"DGD {dgd['metadata']['name']}: component {c['name']!r} has type {c.get('type')!r}; "
                f"the rig runs {', '.join(COMPONENT_TYPES)}"
            )
    return comps


def _pods(dgd: dict) -> list:
    """The pods the Dynamo operator makes from ``dgd`` (operator-exact names, labels and named container ports)."""
    from stacks.serving.operator import operator_pods

    # A multinode (LeaderWorkerSet) engine is one mocker: its leader pod; the other pods of the group hold ranks of
    # the same engine and serve nothing of their own.
    return [p for p in operator_pods(dgd) if p.role != "worker"]


# ---- the operator's environment -----------------------------------------------------------------------------------


def operator_env(dgd: dict, pod) -> dict[str, str]:
    """The env the Dynamo operator puts on the main container of ``pod`` (a ``stacks.serving.operator.OperatorPod``),
    with the operator's own port numbers. ai-dynamo/dynamo ``deploy/operator/internal/dynamo/``:

    - every component (``component_common.go`` @ 015d780ba9c3d32c293ad67b786fe9af0d8a4d22, ``getCommonContainer``):
      ``DYN_NAMESPACE`` = the DGD's Dynamo namespace (``<k8s namespace>-<dgd>``, ``stacks.serving.operator.dynamo_namespace``,
      the value of the pods' ``nvidia.com/dynamo-namespace`` label), ``DYN_COMPONENT`` = the component type,
      ``DYN_PARENT_DGD_K8S_NAME``/``DYN_PARENT_DGD_K8S_NAMESPACE``, ``POD_NAME``/``POD_NAMESPACE``/``POD_UID`` (downward
      API), ``DYN_DISCOVERY_BACKEND=kubernetes`` (unless the operator runs etcd discovery);
    - the frontend (``component_frontend.go`` @ 132ccbe3dd5fc5c2a95232461d536fbde63e115f): ``DYNAMO_PORT`` and
      ``DYN_HTTP_PORT`` = 8000, ``DYN_NAMESPACE_PREFIX`` = the Dynamo namespace;
    - worker, prefill and decode (``component_worker.go`` @ 015d780ba9c3d32c293ad67b786fe9af0d8a4d22): ``DYN_SYSTEM_ENABLED``,
      ``DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS=["generate"]``, ``DYN_SYSTEM_PORT=9090``, ``DYN_HEALTH_CHECK_ENABLED=false``,
      ``NIXL_TELEMETRY_*`` (telemetry off) and ``DYN_NAMESPACE_WORKER_SUFFIX`` = the worker hash (the pods'
      ``nvidia.com/dynamo-worker-hash`` label; controller fixture ``TestLegacyWorkerIdentityUpgradeDoesNotTriggerRollout``
      has suffix and label ``db6b6891`` alike).

    What the two extras do, as the ai-dynamo 1.6.1 the rig runs implements them: workers register in
    ``<DYN_NAMESPACE>-<suffix>`` and the frontend discovers every namespace starting with the prefix
    (``dynamo/common/utils/namespace.py`` ``get_worker_namespace`` appends
    ``DYN_NAMESPACE_WORKER_SUFFIX`` (the mocker's endpoints, ``dynamo/mocker/args.py``), and ``dynamo.frontend`` reads
    ``DYN_NAMESPACE``/``DYN_NAMESPACE_PREFIX`` as ``--namespace``/``--namespace-prefix`` (``frontend_args.py``: "prefix
    takes precedence"))."""
    from stacks.serving.operator import (
        FRONTEND,
        HTTP_PORT,
        LABEL_WORKER_HASH,
        NIXL_PORT,
        SYSTEM_PORT,
        WORKER_TYPES,
        dynamo_namespace,
    )

    meta = dgd["metadata"]
    k8s_ns = meta.get("namespace") or "default"
    base = dynamo_namespace(dgd)
    env = {
        "DYN_NAMESPACE": base,
        "DYN_COMPONENT": pod.component_type,
        "DYN_PARENT_DGD_K8S_NAME": meta["name"],
        "DYN_PARENT_DGD_K8S_NAMESPACE": k8s_ns,
        "POD_NAME": pod.name,
        "POD_NAMESPACE": k8s_ns,
        "POD_UID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{k8s_ns}/{pod.name}")),  # a stand-in of the same shape
        "DYN_DISCOVERY_BACKEND": "kubernetes",
    }
    if pod.component_type == FRONTEND:
        env.update({"DYNAMO_PORT": str(HTTP_PORT[1]), "DYN_HTTP_PORT": str(HTTP_PORT[1]), "DYN_NAMESPACE_PREFIX": base})
    elif pod.component_type in WORKER_TYPES:
        env.update(
            {
                "DYN_SYSTEM_ENABLED": "true",
                "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]',
                "DYN_SYSTEM_PORT": str(SYSTEM_PORT[1]),
                "DYN_HEALTH_CHECK_ENABLED": "false",
                "NIXL_TELEMETRY_ENABLE": "n",
                "NIXL_TELEMETRY_EXPORTER": "prometheus",
                "NIXL_TELEMETRY_PROMETHEUS_PORT": str(NIXL_PORT[1]),
                "DYN_NAMESPACE_WORKER_SUFFIX": pod.labels[LABEL_WORKER_HASH],
            }
        )
    return env


def dgd_dynamo_env(comp: dict) -> dict[str, str]:
    """The Dynamo runtime settings (``DYN_*``, literal values) the DGD puts on a component's main container, which the
    operator merges over its own defaults (e.g. the frontend's ``DYN_HTTP_BODY_LIMIT_MB``). The container's other env
    configures what the rig does not run (vLLM, NCCL/libfabric, the pod's cache volume paths)."""
    return {
        str(e["name"]): str(e["value"])
        for e in _container(comp).get("env") or []
        if str(e.get("name", "")).startswith("DYN_") and "value" in e
    }


# ---- processes --------------------------------------------------------------------------------------------------


def _without(args: list[str], flags: dict[str, int]) -> list[str]:
    """``args`` without each of ``flags`` and the number of values it takes (``--flag v`` or ``--flag=v``)."""
    out, skip = [], 0
    for a in args:
        if skip:
            skip -= 1
        elif a in flags:
            skip = flags[a]
        elif a.split("=", 1)[0] not in flags:
            out.append(a)
    return out


def free_port() -> int:
    """A loopback port free now, below 32768: ai-dynamo 1.5.0 reads DYN_SYSTEM_PORT as a signed 16-bit integer
    (a worker given 37641 exits with 'invalid value unsigned int `37641`, expected i16 for key "SYSTEM_PORT"'),
    so the kernel's ephemeral range (32768-60999 by default) cannot be used for it."""
    import random

    for _ in range(200):
        port = random.randint(20000, 32767)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    raise RigError("no free loopback port in 20000-32767")


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"<{e}>"


def _tails(logs: dict[str, Path], lines: int) -> str:
    return "\n".join(f"--- {name} ({path}), last {lines} lines:\n{_tail(path, lines)}" for name, path in logs.items())


def _get(url: str, timeout: float = 5) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


class _Procs:
    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.logs[name] = log
        with open(log, "wb") as out:
            # Own process group: the mocker and frontend start helper threads/processes; the group is ended together.
            self.procs[name] = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        log.with_suffix(".cmd").write_text(shlex.join(argv) + "\n")

    def check_alive(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise RigError(f"rig process(es) exited: {dead}\n{_tails({n: self.logs[n] for n in dead}, 40)}")

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)


def _wait(what: str, probe, deadline: float, procs: _Procs) -> None:
    """Poll ``probe()`` -> (done, last seen) until done or the deadline; on timeout say what was seen last."""
    last = "nothing yet"
    while True:
        procs.check_alive()
        try:
            done, last = probe()
        except (OSError, urllib.error.URLError) as e:
            done, last = False, f"{type(e).__name__}: {e}"
        if done:
            return
        if time.monotonic() > deadline:
            raise RigError(f"timed out waiting for {what}; last seen: {last}\n{_tails(procs.logs, 30)}")
        time.sleep(0.25)


@contextlib.contextmanager
def start_rig(dgd: dict, workdir: Path, timeout: float = 120) -> Iterator[Rig]:
    t0 = time.monotonic()
    deadline = t0 + timeout
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    env_dir = rig_env_dir()
    python = env_dir / "bin" / "python"
    model = served_model(dgd)
    model_path = _model_path(dgd, model)
    hf_home = workdir / "hf"
    layout_hf_cache(hf_home, model_path, tokenizer_file(env_dir))
    if model_path != model:
        layout_hf_cache(hf_home, model, tokenizer_file(env_dir))  # aiperf --tokenizer <served name>
    env = rig_env(env_dir, hf_home)
    # The rig's placement, over the operator's env: file discovery in this rig's own directory (no etcd/NATS, no
    # Kubernetes API) and loopback only (request/response planes and system servers on 127.0.0.1 / lo).
    placement = {
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(workdir / "discovery"),
        "DYN_TCP_RPC_HOST": HOST,
        "DYN_SYSTEM_HOST": HOST,
        "DYN_TCP_RESPONSE_STREAM_HOST": "lo",
        "DYN_EVENT_PLANE_HOST": HOST,
        "DYN_HTTP_RPC_HOST": HOST,
        "DYN_LOG": os.environ.get("RIG_DYN_LOG", "info"),
    }
    comps = {c["name"]: c for c in _components(dgd)}
    specs = _pods(dgd)
    procs = _Procs()
    pods: list[RigPod] = []
    frontend_url = ""
    try:
        for spec in specs:
            comp = comps[spec.component]
            args = _argv(comp)
            log = workdir / f"{spec.name}.log"
            port = free_port()
            pod_env = {**operator_env(dgd, spec), **dgd_dynamo_env(comp)}
            if spec.component_type == "frontend":
                pod_env.update({"DYNAMO_PORT": str(port), "DYN_HTTP_PORT": str(port)})
            else:
                pod_env["DYN_SYSTEM_PORT"] = str(port)
            proc_env = {**env, **pod_env, **placement}
            if spec.component_type == "frontend":
                # The DGD frontend container's own flags after `-m dynamo.frontend`, then the rig's placement.
                own = _without(
                    args[args.index("dynamo.frontend") + 1 :] if "dynamo.frontend" in args else [], ENGINE_FRONTEND_FLAGS
                )
                argv = [
                    str(python),
                    "-m",
                    "dynamo.frontend",
                    *own,
                    "--discovery-backend",
                    "file",
                    "--http-host",
                    HOST,
                    "--http-port",
                    str(port),
                ]
                procs.start(spec.name, argv, proc_env, log)
                frontend_url = f"http://{HOST}:{port}"
                pods.append(
                    RigPod(
                        spec.name,
                        spec.component,
                        spec.component_type,
                        spec.labels,
                        {n: port for n in spec.ports if n == FRONTEND_PORT_NAME},
                        pod_env,
                    )
                )
            else:
                engine = []
                for flag in SHARED_ENGINE_FLAGS:
                    v = _flag(args, flag)
                    if v is not None:
                        engine += [flag, v]
                argv = [
                    str(python),
                    "-m",
                    "dynamo.mocker",
                    "--model-path",
                    model_path,
                    "--model-name",
                    model,
                    "--disaggregation-mode",
                    WORKER_MODES[spec.component_type],
                    *engine,
                    "--speedup-ratio",
                    SPEEDUP_RATIO,
                    "--discovery-backend",
                    "file",
                ]
                # The operator's system-server env (operator_env) makes its /metrics scrapeable and its health turn
                # Ready when the `generate` endpoint serves.
                procs.start(spec.name, argv, proc_env, log)
                pods.append(
                    RigPod(
                        spec.name,
                        spec.component,
                        spec.component_type,
                        spec.labels,
                        {n: port for n in spec.ports if n == SYSTEM_PORT_NAME},
                        pod_env,
                    )
                )
        if not frontend_url:
            raise RigError(f"DGD {dgd['metadata']['name']}: no frontend component")
        for pod in pods:
            if pod.component_type != "frontend":
                url = f"http://{HOST}:{pod.ports[SYSTEM_PORT_NAME]}/health"
                _wait(f"{pod.name} {url}", lambda url=url: _probe_status(url), deadline, procs)

        def model_listed():
            code, body = _get(frontend_url + "/v1/models")
            ids = [m.get("id") for m in json.loads(body).get("data", [])] if code == 200 else []
            return model in ids, f"HTTP {code}: {body[:300]}"

        _wait(f"{model} in {frontend_url}/v1/models", model_listed, deadline, procs)
        rig = Rig(
            frontend_url=frontend_url, model=model, pods=pods, env=env, python=python, hf_home=hf_home, logs=dict(procs.logs)
        )
        print(
            f"rig: {dgd['metadata']['name']}: {len(pods)} processes serving {model} at {frontend_url} "
            f"after {time.monotonic() - t0:.1f}s"
        )
        yield rig
    finally:
        procs.stop()


def _probe_status(url: str) -> tuple[bool, str]:
    code, body = _get(url)
    return code == 200, f"HTTP {code}: {body[:300]}"
