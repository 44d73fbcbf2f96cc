"""Nemotron-3-Ultra (550B-A55B NVFP4): the Refresh profiles under their final Dynamo 1.6 names, and the deprecated
Day-0 256K profiles.

Upstream has no shared base: every profile is a hand-kept manifest whose
workers run a bash preflight and then ``exec python3 -m dynamo.vllm`` with the
flags written one per line. Here three builders produce them:

* ``vllm-refresh-agg``   -- two KV-routed aggregated workers (B200/GB200 TP4, H200 TP8), 256K or 1M;
* ``vllm-refresh-disagg`` -- 1P2D (256K) or 1P1D (1M) over UCX/RDMA, InfiniBand (B200/H200) or GKE RDMA (GB200);
* ``vllm-day0``          -- the first published profiles (one worker, expert parallel, MTP 1 or none; 1P1D disagg).

The engine flags come in two upstream orders (``_flags_a``: Blackwell agg, GKE
disagg, Day-0; ``_flags_b``: H200 agg and the InfiniBand disagg files, which
were derived from each other). Embedded scripts are module constants with
``@NAME@`` placeholders, kept byte-identical to upstream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from stacks import registry
from stacks.registry import versions
from stacks.catalog import k8s
from stacks.catalog.builders import Cache, Component, DownloadJob, RevisionPin, empty_dir, shm
from stacks.catalog.model import ModelFamily, Perf, Target
from stacks.catalog.ops import FRONTEND, WORKERS, Delete, EnvRemove, Op, Set

MODEL = "nemotron-3-ultra"
REPO = "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4"
CACHE_MOUNT = "/opt/models"
MODEL_PATH = f"{CACHE_MOUNT}/patched/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4"
CACHE = Cache(
    claim=k8s.CACHE_PVC,
    mount=CACHE_MOUNT,
    size="1200Gi",
    labels={"app.kubernetes.io/name": "nemotron-ultra-model-cache", "app.kubernetes.io/part-of": "nemotron-ultra"},
)
GPUS = {"b200": 4, "gb200": 4, "h200": 8}  # GPUs per worker (tensor parallel): TP4 Blackwell, TP8 Hopper
MAX_LEN = {"256k": 262144, "1m": 1048576}
# The Refresh profiles used their own label domain until upstream gave them their final names (Dynamo 1.6);
# the final files use the Day-0 domain again (../shared/reference/dynamo-next/INDEX.md, "What changed").
LABEL = "nemotron-ultra.nvidia.com"
PART_OF = {"refresh": "nemotron-3-ultra", "day0": "nemotron-ultra"}
CUBINS = "/usr/local/lib/python3.12/dist-packages/flashinfer_cubin/cubins/flashinfer"
ARTIFACTS_PVC = "nemotron-ultra-aiperf-artifacts"  # Day-0 disagg writes NIXL transfer traces here

# Per-GPU engine settings of the Refresh profiles.
REFRESH_GPU: dict[str, dict[str, Any]] = {
    "b200": {"batched": {"256k": 32768, "1m": 49152}, "util": "0.9"},
    "gb200": {"batched": {"256k": 32768, "1m": 49152}, "util": "0.9"},
    "h200": {"batched": {"256k": 24576, "1m": 24576}, "util": "0.95"},
}
DAY0_UTIL = {"b200": "0.9", "h200": "0.85"}

# --------------------------------------------------------------------------- embedded scripts (verbatim upstream)

MODEL_PREFLIGHT = """set -Eeuo pipefail
test -r "${MODEL_PATH}/config.json" || { echo "MODEL_PREFLIGHT_FAIL class=model_config_missing path=${MODEL_PATH}/config.json"; exit 42; }
test -r "${MODEL_PATH}/ultra_v3_reasoning_parser.py" || { echo "MODEL_PREFLIGHT_FAIL class=reasoning_parser_missing path=${MODEL_PATH}/ultra_v3_reasoning_parser.py"; exit 43; }
"""

# Refresh disagg workers name the reasoning-parser plugin once as ${PLUGIN}.
PLUGIN_PREFLIGHT = """set -Eeuo pipefail
test -r "${MODEL_PATH}/config.json" || { echo "MODEL_PREFLIGHT_FAIL class=model_config_missing path=${MODEL_PATH}"; exit 42; }
PLUGIN="${MODEL_PATH}/ultra_v3_reasoning_parser.py"
test -r "${PLUGIN}" || { echo "MODEL_PREFLIGHT_FAIL class=reasoning_parser_missing path=${PLUGIN}"; exit 43; }
"""

# B200/H200 disagg: count GPUs, then derive UCX_NET_DEVICES from the RDMA devices the pod was given.
IB_GUARD = """echo "PRESTART_GPU_GUARD_BEGIN role=@ROLE@"
visible_count="$(nvidia-smi -L | grep -c '^GPU ')"
test "${visible_count}" -eq @GPUS@ || { echo "PRESTART_GPU_GUARD_FAIL class=gpu_visibility_count_mismatch role=@ROLE@ visible_count=${visible_count}"; exit 96; }
nvidia-smi --query-gpu=index,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv,noheader,nounits
ls -l /dev/infiniband
UCX_NET_DEVICES=""
for uverbs in /dev/infiniband/uverbs*; do
  [ -e "${uverbs}" ] || continue
  index="${uverbs##*uverbs}"
  UCX_NET_DEVICES="${UCX_NET_DEVICES:+${UCX_NET_DEVICES},}mlx5_${index}:1"
done
test -n "${UCX_NET_DEVICES}" || { echo "RDMA_PREFLIGHT_FAIL class=no_uverbs role=@ROLE@"; exit 98; }
export UCX_NET_DEVICES
echo "RDMA_PREFLIGHT_PASS role=@ROLE@ UCX_NET_DEVICES=${UCX_NET_DEVICES}"
"""

# GB200 on GKE: clean GPUs, the four GKE RDMA interfaces/devices, and a NIXL UCX plugin.
GKE_GUARD = r"""echo "PRESTART_GPU_GUARD_BEGIN role=@ROLE@"
nvidia-smi -L
visible_count="$(nvidia-smi -L | grep -c '^GPU ')"
if [ "${visible_count}" -ne @GPUS@ ]; then
  echo "PRESTART_GPU_GUARD_FAIL class=gpu_visibility_count_mismatch role=@ROLE@ visible_count=${visible_count}"
  exit 96
fi
mem_rows="$(nvidia-smi --query-gpu=index,uuid,memory.used,utilization.gpu --format=csv,noheader,nounits)"
echo "${mem_rows}"
dirty_count="$(printf '%s\n' "${mem_rows}" | awk -F',' '{gsub(/ /,"",$3); if (($3+0)>1024) c++} END{print c+0}')"
if [ "${dirty_count}" -ne 0 ]; then
  echo "PRESTART_GPU_GUARD_FAIL class=gpu_memory_dirty role=@ROLE@ dirty_count=${dirty_count}"
  exit 97
fi
rdma_ifaces=""
for iface in rdma0 rdma1 rdma2 rdma3; do
  test -e "/sys/class/net/${iface}" || { echo "RDMA_PREFLIGHT_FAIL class=missing_gke_rdma_interface role=@ROLE@ interface=${iface}"; exit 98; }
  rdma_ifaces="${rdma_ifaces}${iface} "
done
for ibdev in mlx5_0 mlx5_1 mlx5_2 mlx5_3; do
  test -e "/sys/class/infiniband/${ibdev}" || { echo "RDMA_PREFLIGHT_FAIL class=missing_infiniband_device role=@ROLE@ device=${ibdev}"; exit 99; }
done
test -c /dev/infiniband/rdma_cm || { echo "RDMA_PREFLIGHT_FAIL class=missing_rdma_cm role=@ROLE@"; exit 100; }
for uverbs in uverbs0 uverbs1 uverbs2 uverbs3; do
  test -c "/dev/infiniband/${uverbs}" || { echo "RDMA_PREFLIGHT_FAIL class=missing_uverbs_device role=@ROLE@ device=${uverbs}"; exit 101; }
done
python3 -c 'import nixl; a=nixl.nixl_agent("ucx_preflight_@ROLE@"); assert "UCX" in a.get_plugin_list()'
unset UCX_NET_DEVICES
echo "TRANSPORT_PREFLIGHT_PASS role=@ROLE@ backend=UCX path=rdma platform=gcp attachment=extended-resource interfaces=${rdma_ifaces}"
echo "PRESTART_GPU_GUARD_PASS role=@ROLE@"
"""

# Day-0: refuse to start on GPUs that are missing, dirty or still running something.
DAY0_GUARD = r"""echo "PRESTART_GPU_GUARD_BEGIN @TAG@ ts=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi -L
nvidia-smi --query-gpu=index,uuid,memory.total,memory.used,memory.free,utilization.gpu --format=csv,noheader,nounits
visible_count="$(nvidia-smi -L | grep -c '^GPU ')"
if [ "${visible_count}" -ne @GPUS@ ]; then
  echo "PRESTART_GPU_GUARD_FAIL class=prestart_gpu_visibility_count_mismatch @TAG@ visible_count=${visible_count}"
  exit 96
fi
mem_rows="$(nvidia-smi --query-gpu=index,uuid,memory.used,utilization.gpu --format=csv,noheader,nounits)"
echo "${mem_rows}"
dirty_count="$(printf '%s\n' "${mem_rows}" | awk -F',' '{gsub(/ /,"",$3); if (($3+0)>1024) c++} END{print c+0}')"
if [ "${dirty_count}" -ne 0 ]; then
  echo "PRESTART_GPU_GUARD_FAIL class=prestart_gpu_memory_dirty @TAG@ dirty_count=${dirty_count}"
  exit 97
fi
compute_apps="$(nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits || true)"
if [ -n "${compute_apps}" ]; then
  printf '%s\n' "${compute_apps}"
  echo "PRESTART_GPU_GUARD_FAIL class=prestart_gpu_compute_apps_visible @TAG@"
  exit 98
fi
"""

DAY0_NIXL_DEBUG = """export ULTRA_NIXL_XFER_DEBUG_JSONL="/artifacts/runs/nemotron-ultra-1p1d/native/@ROLE@/${HOSTNAME}.jsonl"
mkdir -p "$(dirname "${ULTRA_NIXL_XFER_DEBUG_JSONL}")"
echo "ULTRA_NIXL_XFER_DEBUG_JSONL=${ULTRA_NIXL_XFER_DEBUG_JSONL} schema=${ULTRA_NIXL_XFER_DEBUG_SCHEMA}"
"""

# Day-0 frontends record the exact command line before exec.
DAY0_FRONTEND = r"""set -Eeuo pipefail
mkdir -p "${LOG_DIR:-/tmp/nemotron-ultra}/status"
frontend_args=(
  --router-mode kv
  --router-kv-events
  --kv-cache-block-size @BLOCK@
  --http-host 0.0.0.0
  --http-port 8000
)
printf '%q ' python3 -m dynamo.frontend "${frontend_args[@]}" >"${LOG_DIR:-/tmp/nemotron-ultra}/status/vllm_frontend_command.txt"
printf '\n' >>"${LOG_DIR:-/tmp/nemotron-ultra}/status/vllm_frontend_command.txt"
exec python3 -m dynamo.frontend "${frontend_args[@]}"
"""

ULIMIT = "ulimit -l unlimited\n"


def _fill(template: str, **values) -> str:
    for k, v in values.items():
        template = template.replace(f"@{k.upper()}@", str(v))
    return template


def _exec(module: str, flags: list[str], style: str = "lines") -> str:
    """``exec python3 -m <module>`` with upstream's layouts: one flag a line, first flag inline, or one line."""
    head = f"exec python3 -m {module}"
    if style == "oneline":
        return "   ".join([head] + flags) + "\n"
    if style == "inline-first":
        return " \\\n  ".join([f"{head}   {flags[0]}"] + flags[1:]) + "\n"
    return " \\\n  ".join([head] + flags) + "\n"


# --------------------------------------------------------------------------- engine flags

KV_EVENTS_LOCAL = "--kv-events-config '{\"enable_kv_cache_events\": true}'"
KV_EVENTS_ZMQ = (
    "--kv-events-config '"
    + json.dumps(
        {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:5571", "enable_kv_cache_events": True},
        separators=(",", ":"),
    )
    + "'"
)


def _kv_transfer(t: Target, role: str) -> str:
    """NIXL KV transfer; most files say ``kv_both`` on both sides, two final files ``kv_producer``/``kv_consumer``."""
    kv_role = dict(zip(("prefill", "decode"), t.params.get("kv_roles", ("kv_both", "kv_both"))))[role]
    return (
        "--kv-transfer-config '" + json.dumps({"kv_connector": "NixlConnector", "kv_role": kv_role}, separators=(",", ":")) + "'"
    )


BLACKWELL_BACKENDS = ["--attention-backend FLASHINFER", "--linear-backend cutlass", "--moe-backend flashinfer_trtllm"]
HOPPER_PARALLEL = ["--data-parallel-size 1", "--pipeline-parallel-size 1", "--decode-context-parallel-size 1"]
HOPPER_COMPILE = ["-cc.pass_config.fuse_norm_quant=True", "-cc.pass_config.fuse_act_quant=True"]
REFRESH_MAMBA = ["--mamba-cache-mode align", "--mamba-ssm-cache-dtype bfloat16"]
# Per-GPU flags of the Refresh files, as data (a GPU with Ultra Refresh targets adds its row), never derived from the
# GPU's generation: ``agg_layout``, the upstream file family of its aggregated profiles; ``backends``, the
# attention/linear/MoE backends its 256K disagg files pin; ``parallel``/``attention``/``compile``, what its
# ``_flags_b`` files (H200 agg, B200/H200 InfiniBand disagg) add.
REFRESH_FLAGS: dict[str, dict] = {
    "b200": {"agg_layout": "agg-blackwell", "backends": BLACKWELL_BACKENDS},
    "gb200": {"agg_layout": "agg-blackwell", "backends": BLACKWELL_BACKENDS},
    "h200": {
        "agg_layout": "agg-hopper",
        "parallel": HOPPER_PARALLEL,
        "attention": ["--attention-backend FLASH_ATTN"],
        "compile": HOPPER_COMPILE,
    },
}
FRONTEND_FLAGS = [
    "--router-mode kv",
    "--router-kv-events",
    "--kv-cache-block-size 64",
    "--router-track-prefill-tokens",
    "--router-kv-overlap-score-credit-decay 0.1",
    "--http-host 0.0.0.0",
    "--http-port 8000",
]


def _parsers(plugin: str) -> list[str]:
    return [
        "--dyn-tool-call-parser qwen3_coder",
        "--dyn-reasoning-parser nemotron3",
        f'--reasoning-parser-plugin "{plugin}"',
        "--reasoning-parser nemotron_v3",
    ]


def _spec(t: Target) -> list[str]:
    return ["--spec-method nemotron_h_mtp", f"--spec-tokens {t.params['spec_tokens']}"] if t.spec == "mtp" else []


def _head(t: Target) -> list[str]:
    return ['--model "${MODEL_PATH}"', '--served-model-name "${SERVED_MODEL_NAME}"', f"--tensor-parallel-size {GPUS[t.gpu]}"]


def _sizes(t: Target) -> list[str]:
    p = t.params
    assert t.context is not None, f"{t.id}: every Ultra target names its context"
    return [
        f"--max-model-len {MAX_LEN[t.context]}",
        f"--max-num-seqs {p['max_num_seqs']}",
        f"--max-num-batched-tokens {p['batched']}",
        f"--gpu-memory-utilization {p['util']}",
    ]


def _pinned_backends(t: Target) -> list[str]:
    """Only the 256K Refresh disagg profiles pin attention/linear/MoE backends, where their GPU's row names them."""
    pinned = t.profile == "refresh" and t.topology == "disagg" and t.context == "256k"
    return list(REFRESH_FLAGS[t.gpu].get("backends", ())) if pinned else []


def _flags_a(t: Target, role: str | None, plugin: str) -> list[str]:
    """Blackwell Refresh agg, GB200 (GKE) disagg and every Day-0 profile."""
    refresh = t.profile == "refresh"
    f = _head(t) + ["--trust-remote-code"] + (["--kv-cache-dtype fp8"] if refresh else []) + _sizes(t)
    f += _pinned_backends(t) + ["--no-enable-flashinfer-autotune", f"--block-size {t.params.get('block', 64)}"]
    if refresh:
        f += ([KV_EVENTS_LOCAL] if role is None else []) + [
            "--no-enable-expert-parallel",
            "--enable-prefix-caching",
            "--async-scheduling",
        ]
        f += REFRESH_MAMBA + ["--mamba-backend triton"]
    else:
        f += ["--enable-expert-parallel", "--mamba-cache-mode align", "--enable-prefix-caching"]
    f += _spec(t) + ([_kv_transfer(t, role)] if role else []) + _parsers(plugin) + ["--no-disable-hybrid-kv-cache-manager"]
    if role:
        f.append(f"--disaggregation-mode {role}")
    return f + ([KV_EVENTS_ZMQ] if role == "prefill" else [])


def _flags_b(t: Target, role: str | None, plugin: str) -> list[str]:
    """H200 Refresh agg and the B200/H200 (InfiniBand) Refresh disagg profiles."""
    g = REFRESH_FLAGS[t.gpu]
    f = _head(t) + list(g.get("parallel", ())) + ["--no-enable-expert-parallel", "--trust-remote-code", "--kv-cache-dtype fp8"]
    f += _sizes(t) + _pinned_backends(t) + ["--block-size 64"] + ([KV_EVENTS_LOCAL] if role is None else [])
    f += list(g.get("attention", ())) + ["--mamba-backend triton", "--no-enable-flashinfer-autotune"]
    f += REFRESH_MAMBA + ["--enable-prefix-caching", "--no-disable-hybrid-kv-cache-manager"] + _spec(t) + ["--async-scheduling"]
    f += list(g.get("compile", ())) + ([_kv_transfer(t, role), f"--disaggregation-mode {role}"] if role else [])
    return f + _parsers(plugin) + ([KV_EVENTS_ZMQ] if role == "prefill" else [])


# --------------------------------------------------------------------------- shared fragments


def _layout(t: Target) -> str:
    """Which upstream file family the target belongs to (they differ in labels, env order and pod details)."""
    if t.profile == "day0":
        return "day0"
    if t.topology == "agg":
        return REFRESH_FLAGS[t.gpu]["agg_layout"]
    return "disagg-gke" if t.fabric == "gke-rdma" else "disagg-ib"


HF_ENV = {"HF_HOME": CACHE_MOUNT, "HF_HUB_CACHE": f"{CACHE_MOUNT}/hub", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
MODEL_ENV = {"SERVED_MODEL_NAME": REPO, "MODEL_PATH": MODEL_PATH}
SCRATCH_ENV = {
    "HOME": "/tmp",
    "HF_MODULES_CACHE": "/tmp/hf_modules",
    "XDG_CACHE_HOME": "/tmp/cache",
    "TORCH_EXTENSIONS_DIR": "/tmp/torch_extensions",
    "TRITON_CACHE_DIR": "/tmp/triton",
    "VLLM_CACHE_ROOT": "/tmp/vllm",
    "PYTHONHASHSEED": "0",
    "VLLM_LOGGING_LEVEL": "INFO",
}
RUNTIME_ENV = {
    "NCCL_IB_DISABLE": "1",
    "NCCL_CUMEM_ENABLE": "1",
    "NCCL_NVLS_ENABLE": "1",
    "NCCL_DEBUG": "WARN",
    "DYN_LOG": "info,dynamo_kv_router=debug,dynamo_llm::kv_router=debug",
}
# Trailing DGD env (names from RUNTIME_ENV) per layout; B200 agg also disables NCCL IB (GB200 uses NVLink).
ENV_TAIL = {
    "agg-blackwell": ("NCCL_IB_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_DEBUG"),
    "agg-hopper": ("NCCL_IB_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE"),
    "disagg-ib": ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_DEBUG", "DYN_LOG"),
    "disagg-gke": ("DYN_LOG", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_DEBUG"),
    "day0-agg": ("NCCL_IB_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "DYN_LOG"),
    "day0-disagg": ("DYN_LOG",),
}


def _dgd_env(t: Target) -> list[dict]:
    """DGD-level env: offline HF cache, model path, scratch dirs under /tmp, vLLM and NCCL settings."""
    layout = _layout(t)
    long_ctx = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"} if t.context == "1m" else {}
    vllm = {
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        "VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
        "VLLM_DISABLED_KERNELS": "FlashInferFP8ScaledMMLinearKernel",
        "VLLM_SSM_CONV_STATE_LAYOUT": "SD" if t.topology == "agg" and t.profile == "refresh" else "DS",
    }
    chunked = {"VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE": "1"}
    # Dropped by the ai-dynamo versions with the 1.6 component names; kept by the fork files four targets follow.
    append = {"DYN_VLLM_APPEND_PREFILL_OUTPUT_TOKENS": "0"} if t.params.get("append_prefill_env", True) else {}
    if layout == "agg-blackwell":  # the short list of the first Refresh files
        env = {
            **HF_ENV,
            "HOME": "/tmp",
            **MODEL_ENV,
            "VLLM_CACHE_ROOT": "/tmp/vllm-cache",
            **long_ctx,
            **vllm,
            **chunked,
            **append,
        }
        tail: Sequence[str] = [n for n in ENV_TAIL[layout] if not (n == "NCCL_IB_DISABLE" and t.gpu == "gb200")]
    else:
        log_dir = {"LOG_DIR": "/artifacts/logs"} if layout in ("day0", "disagg-gke") else {}
        env = {**HF_ENV, **MODEL_ENV, **log_dir, **SCRATCH_ENV, **vllm, **chunked, **long_ctx, **append}
        tail = ENV_TAIL[f"day0-{t.topology}" if layout == "day0" else layout]
    env.update({n: RUNTIME_ENV[n] for n in tail})
    return k8s.envs(env)


def _labels(t: Target) -> dict:
    """DGD labels (Refresh and Day-0 use different label domains and keys)."""
    layout, name = _layout(t), {"app.kubernetes.io/name": t.dgd_name}
    assert t.profile is not None, f"{t.id}: every Ultra target names its profile"
    part = {"app.kubernetes.io/part-of": PART_OF[t.profile]}
    r = LABEL
    if layout == "agg-blackwell":
        return {**part, f"{r}/sku": t.gpu, f"{r}/context": t.context, f"{r}/topology": "agg-2worker", f"{r}/routing": "kv-aware"}
    if layout == "agg-hopper":
        return {
            **name,
            **part,
            f"{r}/backend": "vllm",
            f"{r}/topology": "agg-2worker",
            f"{r}/workload": t.workload,
            f"{r}/routing": "kv-aware",
        }
    if layout == "day0":
        d = LABEL
        return {
            **name,
            **part,
            f"{d}/backend": "vllm",
            f"{d}/topology": _topology_label(t),
            f"{d}/workload": t.workload,
            f"{d}/context": t.context,
        }
    return {
        **name,
        **part,
        f"{r}/sku": t.gpu,
        f"{r}/backend": "vllm",
        f"{r}/topology": _topology_label(t),
        f"{r}/context": t.context,
        f"{r}/workload": t.workload,
    }


def _topology_label(t: Target) -> str:
    tp = GPUS[t.gpu]
    if t.topology == "agg":  # Day-0 only
        return f"agg1-tp{tp}-" + ("mtp1" if t.spec == "mtp" else "nomtp")
    assert t.shape is not None, f"{t.id}: a disaggregated target names its shape"
    shape = t.shape.lower()
    return f"{shape}-tp{tp}" if _layout(t) == "disagg-ib" else f"{shape}-tp{tp}-tp{tp}"


def _pod_labels(t: Target, role: str) -> dict:
    layout = _layout(t)
    prefix = LABEL
    out = {f"{prefix}/role": role}
    if t.topology == "disagg":
        out[f"{prefix}/topology"] = _topology_label(t)
        if layout != "disagg-gke":
            out[f"{prefix}/recipe"] = t.dgd_name
        return out
    if layout != "agg-blackwell" or role != "frontend":
        assert t.workload is not None, f"{t.id}: every Ultra target names its workload"
        out[f"{prefix}/workload"] = t.workload
    if layout != "day0":
        out[f"{prefix}/routing"] = "kv-aware"
    return out


def _cache(t: Target) -> Cache:
    """The model cache, mounted read-only at /opt/models; only some files also mark the claim read-only."""
    ro = True if _layout(t) in ("agg-blackwell", "disagg-ib") else None
    return Cache(CACHE.claim, CACHE.mount, CACHE.size, read_only_volume=ro)


def _volumes(t: Target, *extra: str, shm_size: str | None = None) -> tuple[tuple[dict, dict], ...]:
    """(volume, mount) pairs after the model cache: /tmp scratch, plus ``extra`` by name."""
    names = (["artifact-root"] if _layout(t) == "day0" else []) + ["runtime-tmp"] + list(extra)
    out = []
    for n in names:
        if n == "dshm":
            assert shm_size is not None, "dshm needs shm_size"
            out.append(shm(shm_size))
        elif n == "flashinfer-cubins":
            out.append(empty_dir(n, CUBINS, "Memory"))
        elif n == "artifact-root" and t.topology == "disagg":
            out.append((k8s.pvc_volume(n, ARTIFACTS_PVC), k8s.mount(n, "/artifacts")))
        else:
            out.append(empty_dir(n, {"artifact-root": "/artifacts", "runtime-tmp": "/tmp"}[n]))
    return tuple(out)


def _frontend(t: Target) -> dict:
    layout = _layout(t)
    assert t.image is not None, f"{t.id}: every Ultra target has a runtime image"
    if layout == "day0":
        script = _fill(DAY0_FRONTEND, block=t.params.get("block", 64))
    else:
        script = "set -Eeuo pipefail\n" + _exec(
            "dynamo.frontend", FRONTEND_FLAGS, "oneline" if layout == "disagg-ib" else "lines"
        )
    resources = {"agg-blackwell": {"requests": {"cpu": "4", "memory": "16Gi"}}, "disagg-ib": FRONTEND_RESOURCES}.get(layout)
    return Component(
        "Frontend",
        "frontend",
        t.image,
        ("/bin/bash", "-lc"),
        (script,),
        resources=resources,
        cache=_cache(t),
        cache_read_only=True,
        volumes=_volumes(t),
        working_dir="/workspace" if layout == "agg-blackwell" else None,
        ports=({"name": "http", "containerPort": 8000},),
        startup_probe=None if layout == "agg-blackwell" else k8s.http_probe("/health", "http", 10, 10, 360),
        readiness_probe=k8s.http_probe("/health", "http", 10, 3, 3),
        pull_secrets=False,
        pod_labels=_pod_labels(t, "frontend"),
    ).build()


FRONTEND_RESOURCES = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"cpu": "8", "memory": "32Gi"}}
CAPS = {"capabilities": {"add": ["IPC_LOCK", "SYS_RESOURCE"]}, "runAsUser": 0, "runAsGroup": 0}
GKE_RDMA = {f"networking.gke.io.networks/rdma-{i}{ip}": "1" for i in range(4) for ip in ("", ".IP")}
GKE_ANNOTATIONS = {
    "networking.gke.io/default-interface": "eth0",
    "networking.gke.io/interfaces": json.dumps(
        [{"interfaceName": "eth0", "network": "default"}]
        + [{"interfaceName": f"rdma{i}", "network": f"rdma-{i}"} for i in range(4)],
        separators=(",", ":"),
    ),
}


def _placement(t: Target) -> dict:
    """runtimeClassName, nodeSelector and tolerations; arm64 (GB200) nodes are tainted ``nvidia.com/gpu=present``."""
    g = registry.gpu(t.gpu)
    arm = g.arch == "arm64"
    return {
        "runtime_class": None if _layout(t) in ("agg-blackwell", "disagg-gke") else "nvidia",
        "node_selector": {"nvidia.com/gpu.product": g.label, **({"kubernetes.io/arch": "arm64"} if arm else {})},
        "tolerations": (k8s.toleration("nvidia.com/gpu", "present"), k8s.toleration("kubernetes.io/arch", "arm64"))
        if arm
        else (k8s.toleration("nvidia.com/gpu", "true"),),
    }


UCX_ENV = {
    "UCX_TLS": "rc_x,rc,cuda_copy,cuda_ipc",
    "UCX_IB_ADDR_TYPE": "eth",
    "UCX_RNDV_SCHEME": "get_zcopy",
    "UCX_RNDV_THRESH": "0",
    "UCX_RC_TIMEOUT": "600s",
    "UCX_KEEPALIVE_INTERVAL": "300s",
    "NCCL_IB_DISABLE": "0",
}
SOCKET_ENV = {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}
NIXL_ENV = {"NCCL_STORE_TIMEOUT": "7200", "NIXL_LOG_LEVEL": "INFO"}


def _transfer_env(t: Target, role: str) -> list[dict]:
    """UCX over RDMA for the NIXL KV transfer (Day-0 pins one HCA; Refresh derives them at start-up)."""
    layout = _layout(t)
    if layout == "disagg-ib":
        return k8s.envs({**UCX_ENV, **NIXL_ENV, **SOCKET_ENV})
    env = dict(UCX_ENV)
    if layout == "day0":
        env = {"UCX_TLS": env.pop("UCX_TLS"), "UCX_NET_DEVICES": "mlx5_0:1", **env}
    env.update({**SOCKET_ENV, **NIXL_ENV})
    if layout == "day0":
        env.update(
            {
                "ULTRA_NIXL_XFER_DEBUG_SCHEMA": "ULTRA_NIXL_NATIVE_XFER_DEBUG_V1",
                "ULTRA_NIXL_XFER_DEBUG_ACTION_ID": "TURBO_NEMOTRON_ULTRA_1P1D_B200",
                "ULTRA_NIXL_XFER_DEBUG_ROLE": role,
                "ULTRA_NIXL_XFER_DEBUG_RUN_DIR": "nemotron-ultra-1p1d",
            }
        )
    return k8s.envs(env)


def _worker_script(t: Target, role: str | None) -> str:
    layout, gpus = _layout(t), GPUS[t.gpu]
    if layout == "day0":
        tag = f"role={role}" if role else f"role=agg workload={t.workload}"
        pre = MODEL_PREFLIGHT + _fill(DAY0_GUARD, tag=tag, gpus=gpus)
        if role:
            pre += "ls -l /dev/infiniband || true\n"
        pre += f'echo "PRESTART_GPU_GUARD_PASS {tag}"\n'
        if role:
            pre += _fill(DAY0_NIXL_DEBUG, role=role)
        return pre + ULIMIT + _exec("dynamo.vllm", _flags_a(t, role, "${MODEL_PATH}/ultra_v3_reasoning_parser.py"))
    if layout in ("agg-blackwell", "agg-hopper"):
        flags = (_flags_a if layout == "agg-blackwell" else _flags_b)(t, None, "${MODEL_PATH}/ultra_v3_reasoning_parser.py")
        return MODEL_PREFLIGHT + ULIMIT + _exec("dynamo.vllm", flags)
    if layout == "disagg-gke":
        return (
            PLUGIN_PREFLIGHT
            + _fill(GKE_GUARD, role=role, gpus=gpus)
            + ULIMIT
            + _exec("dynamo.vllm", _flags_a(t, role, "${PLUGIN}"))
        )
    return (
        PLUGIN_PREFLIGHT
        + _fill(IB_GUARD, role=role, gpus=gpus)
        + ULIMIT
        + _exec("dynamo.vllm", _flags_b(t, role, "${PLUGIN}"), "inline-first")
    )


def _worker(t: Target, name: str, kind: str, role: str | None, replicas: int) -> dict:
    """One GPU worker; ``role`` is prefill/decode for disagg, None for aggregated."""
    layout, gpus = _layout(t), GPUS[t.gpu]
    assert t.image is not None, f"{t.id}: every Ultra target has a runtime image"
    shm_size = t.params.get("shm", "128Gi" if layout == "disagg-gke" else "64Gi")
    extra = {"agg-blackwell": ("dshm",), "disagg-ib": ("dshm", "flashinfer-cubins")}.get(layout, ("flashinfer-cubins",))
    fabric = {"infiniband": {"rdma/ib": str(gpus)}, "gke-rdma": GKE_RDMA}.get(t.fabric, {})
    return Component(
        name,
        kind,
        t.image,
        ("/bin/bash", "-lc"),
        (_worker_script(t, role),),
        _transfer_env(t, role) if role else (),
        replicas=replicas,
        gpus=gpus,
        devices=fabric,
        requests={"memory": "750Gi", "ephemeral-storage": "20Gi"},
        shm=shm_size,
        cache=_cache(t),
        cache_read_only=True,
        volumes=_volumes(t, *extra, shm_size=shm_size),
        working_dir="/workspace",
        env_from_secret=k8s.HF_SECRET if layout == "day0" else None,
        security={"runAsUser": 0} if layout == "agg-blackwell" else CAPS,
        startup_probe=None
        if (layout == "day0" and role)
        else k8s.http_probe("/live", 9090, 60, 20, 60 if layout == "agg-blackwell" else 30),
        pull_secrets=False,
        pod_labels=_pod_labels(t, role or "aggregate-worker"),
        pod_annotations=GKE_ANNOTATIONS if layout == "disagg-gke" else None,
        **_placement(t),
    ).build()


def _dgd(t: Target, workers: list[dict]) -> dict:
    doc = k8s.dgd(t.dgd_name, "vllm", [_frontend(t)] + workers, with_labels=False, spec_env=_dgd_env(t))
    md = doc["metadata"]
    if t.profile == "refresh" and t.topology == "disagg":
        r = LABEL
        md["annotations"] = {
            f"{r}/mtp": "disabled",
            f"{r}/prefix-caching": "enabled",
            **({f"{r}/transport": "ucx-rdma-gke-extended-resources"} if t.fabric == "gke-rdma" else {}),
            f"{r}/async-scheduling": "enabled",
        }
    md["labels"] = _labels(t)
    return doc


# --------------------------------------------------------------------------- builders

# Component names: Dynamo 1.6.0 renamed the vLLM services (breaking change "vLLM worker services renamed": the
# v1.6.0 ledger https://docs.nvidia.com/dynamo/v1.6.0/reference/releases/deprecations, quoted in
# ../shared/reference/dynamo-next/INDEX.md); the deprecated Day-0 targets keep the names of their frozen files.
COMPONENTS = {
    "final": {"agg": "worker", "prefill": "prefill", "decode": "decode"},
    "pre-1.6": {"agg": "VllmWorker", "prefill": "VllmPrefillWorker", "decode": "VllmDecodeWorker"},
}


def _names(t: Target) -> dict[str, str]:
    return COMPONENTS["pre-1.6" if t.profile == "day0" else "final"]


def vllm_agg(t: Target) -> list[dict]:
    """Aggregated: Refresh runs two KV-routed replicas, Day-0 a single worker."""
    replicas = 2 if t.profile == "refresh" else 1
    return [_dgd(t, [_worker(t, _names(t)["agg"], "worker", None, replicas)])]


def vllm_disagg(t: Target) -> list[dict]:
    """1PnD: one prefill worker (publishes KV events for the router) and n decode workers."""
    assert t.shape is not None, f"{t.id}: a disaggregated target names its shape"
    decode, names = int(t.shape[2]), _names(t)
    return [
        _dgd(t, [_worker(t, names["prefill"], "prefill", "prefill", 1), _worker(t, names["decode"], "decode", "decode", decode)])
    ]


# --------------------------------------------------------------------------- catalog entries
#
# Where each target's upstream file comes from. The final profiles follow ../shared/reference/dynamo-next
# (each file transcribed from the stored index; INDEX.md there). Full commits:
AI_DYNAMO = "ai-dynamo/dynamo"
FORK = "yueying-AIHorizon/dynamo"
C8E08280 = "c8e08280f4c1f69f4bf7433a9ab4c18c064ee330"
C9089F56 = "9089f568dd6eec1fbc30db84bb02b2a3c8610e7b"
C140733A = "140733a1dc20acf54c99dfc0b2bcbcfb9d82feaa"
CBFF57C2 = "bff57c23d1346c5807cd62090cb6381282444d7e"
C3D74133 = "3d741331e55038cee2f24f4a0d3e3592cd89bbd3"
# Four final files exist with the 1.6.0 component names only in the fork above (3d741331), which still sets
# DYN_VLLM_APPEND_PREFILL_OUTPUT_TOKENS=0. Checked against ai-dynamo/dynamo's own stored versions of the same paths
# (read_file, ai-dynamo/dynamo @ 7a1734c5395eb0b3782a0d0bfe687ddb3f53716f): each is the fork file with the pre-1.6
# names (VllmWorker / VllmPrefillWorker / VllmDecodeWorker) and WITHOUT that env var (character counts 7096, 7071,
# 8103, 15523 = fork minus the two env lines, plus the longer names). So upstream has made both changes, but no
# stored file shows both; these targets follow the fork file (the newest with the 1.6 names) and keep the env var
# until a file with both changes can be verified (`python -m stacks drift` against a checkout will show it).
CHECKED_AGAINST = f"{AI_DYNAMO}@7a1734c5395eb0b3782a0d0bfe687ddb3f53716f"


def _refresh(
    dirname: str, gpu: str, topology: str, context: str, source: tuple[str, str], ops: tuple[Op, ...] = (), **params
) -> Target:
    """One of the 12 Refresh profiles under their final (Dynamo 1.6) names: MTP 5 at 256K aggregated only, 256 sequences.
    ``source``: (repo, commit) of the upstream file the target follows."""
    spec = "mtp" if topology == "agg" and context == "256k" else "none"
    shape = None if topology == "agg" else ("1P2D" if context == "256k" else "1P1D")
    fabric = "none" if topology == "agg" else ("gke-rdma" if gpu == "gb200" else "infiniband")
    dgd = f"ultra-agg-{gpu}-{context}-kv-router" if topology == "agg" else f"ultra-disagg-{gpu}-{context}"
    g = REFRESH_GPU[gpu]
    repo, commit = source
    fork = repo == FORK
    t = _target(
        dirname,
        gpu,
        topology,
        spec,
        "kv",
        fabric,
        dgd,
        "refresh",
        context,
        "agentic",
        shape,
        ops,
        {
            "spec_tokens": 5,
            "max_num_seqs": 256,
            "batched": g["batched"][context],
            "util": g["util"],
            "append_prefill_env": fork,
            **params,
        },
        "ultra-vllm-refresh",
    )
    src = f"{repo} recipes/{t.upstream} @ {commit}" + (f" (fork; checked against {CHECKED_AGAINST})" if fork else "")
    return replace(t, reference="dynamo-next", source=src)


DAY0_PERF = "nemotron-3-ultra/README.md@bd126e06"


def _day0(
    dirname: str,
    gpu: str,
    topology: str,
    workload: str,
    spec: str,
    max_num_seqs: int,
    batched: int = 32768,
    ops: tuple[Op, ...] = (),
    perf: tuple | None = None,
    *,
    successor: str,
    **params,
) -> Target:
    """A Day-0 256K profile (first published layout, kept upstream with explicit 256k ids).

    Deprecated: the final Ultra docs (v1.5.0-v1.6.1) and the fork tree no longer list the Day-0 profiles
    (../shared/reference/dynamo-next/INDEX.md, "Removed"); the target still renders its frozen file, and ``up``
    warns and names ``successor``, the final profile on the same GPU and topology."""
    if topology == "agg":
        dgd, routing, fabric, shape = f"ultra-agg-{gpu}-{workload}-{'mtp' if spec == 'mtp' else 'nomtp'}", "single", "none", None
    else:
        dgd, routing, fabric, shape = f"ultra-disagg-{gpu}-1p1d-{workload}-nomtp", "kv", "infiniband", "1P1D"
    # The README's Day-0 table names these recipes without "-256k" (renamed since) and has no TTFT column.
    row = (
        Perf(perf[0], None, perf[2], perf[1], DAY0_PERF, recipe=f"vllm/{dirname.replace('-256k', '')}/deploy.yaml")
        if perf
        else None
    )
    t = _target(
        dirname,
        gpu,
        topology,
        spec,
        routing,
        fabric,
        dgd,
        "day0",
        "256k",
        workload,
        shape,
        ops,
        {"spec_tokens": 1, "max_num_seqs": max_num_seqs, "batched": batched, "util": DAY0_UTIL[gpu], **params},
        "ultra-vllm-day0",
        perf=row,
    )
    return replace(
        t,
        successor=f"ultra-vllm-{successor}",
        source=f"frozen snapshot ../shared/reference/dynamo-recipes ({AI_DYNAMO} main 2a6da14c)",
    )


def _target(
    dirname, gpu, topology, spec, routing, fabric, dgd, profile, context, workload, shape, ops, params, image_key, perf=None
) -> Target:
    return Target(
        id=f"ultra-vllm-{dirname}",
        upstream=f"{MODEL}/vllm/{dirname}/deploy.yaml",
        model=MODEL,
        runtime="vllm",
        gpu=gpu,
        topology=topology,
        spec=spec,
        routing=routing,
        precision="nvfp4",
        fabric=fabric,
        dgd_name=dgd,
        family=f"vllm-{topology}",
        params=params,
        ops=ops,
        shape=shape,
        context=context,
        workload=workload,
        profile=profile,
        cache_jobs=("nemotron-ultra-model-download", "nemotron-ultra-model-validate"),
        image=versions.image(image_key),
        perf=perf,
    )


# H200 1M aggregated file: frontend gets CPU/memory bounds, the worker has no workingDir and a longer startup.
H200_AGG_1M = (
    Set("resources", FRONTEND_RESOURCES, on=FRONTEND),
    Delete("workingDir", on=WORKERS),
    Set("startupProbe/failureThreshold", 60, on=WORKERS),
)
NO_SOCKET_IFNAME = (EnvRemove(("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")),)  # the H200 disagg files leave NCCL/Gloo on defaults
DAY0_H200_MTP_TOPOLOGY = (Set(f"metadata/labels/{LABEL}~1topology", "agg1-tp8", scope="dgd"),)  # upstream label omits "-mtp1"

KV_PRODUCER_CONSUMER: dict[str, Any] = {"kv_roles": ("kv_producer", "kv_consumer")}

DAY0_B200_1P1D = "disagg-b200-agentic-256k-1p1d"
TARGETS = (
    # Refresh profiles, final names (Dynamo 1.6): aggregated, two KV-routed workers
    _refresh("agg-b200-agentic-256K-kv-router", "b200", "agg", "256k", (FORK, C3D74133)),
    _refresh("agg-b200-agentic-1M-kv-router", "b200", "agg", "1m", (FORK, C3D74133)),
    _refresh("agg-gb200-agentic-256K-kv-router", "gb200", "agg", "256k", (AI_DYNAMO, C9089F56)),
    _refresh("agg-gb200-agentic-1M-kv-router", "gb200", "agg", "1m", (AI_DYNAMO, C8E08280), shm="128Gi"),
    _refresh("agg-h200-agentic-256K-kv-router", "h200", "agg", "256k", (AI_DYNAMO, C8E08280)),
    _refresh("agg-h200-agentic-1M-kv-router", "h200", "agg", "1m", (FORK, C3D74133), ops=H200_AGG_1M),
    # disaggregated, 1P2D at 256K and 1P1D at 1M
    _refresh("disagg-b200-agentic-256K", "b200", "disagg", "256k", (AI_DYNAMO, C140733A)),
    _refresh("disagg-b200-agentic-1M", "b200", "disagg", "1m", (FORK, C3D74133)),
    _refresh("disagg-gb200-agentic-256K", "gb200", "disagg", "256k", (AI_DYNAMO, C9089F56)),
    _refresh("disagg-gb200-agentic-1M", "gb200", "disagg", "1m", (AI_DYNAMO, CBFF57C2), **KV_PRODUCER_CONSUMER),
    _refresh(
        "disagg-h200-agentic-256K", "h200", "disagg", "256k", (AI_DYNAMO, CBFF57C2), ops=NO_SOCKET_IFNAME, **KV_PRODUCER_CONSUMER
    ),
    _refresh("disagg-h200-agentic-1M", "h200", "disagg", "1m", (AI_DYNAMO, C9089F56), ops=NO_SOCKET_IFNAME),
    # Day-0 (256K), deprecated (dropped upstream): one aggregated worker per profile, and the B200 1P1D
    _day0(
        "agg-b200-agentic-256k-mtp",
        "b200",
        "agg",
        "agentic",
        "mtp",
        24,
        perf=(20, 80.6, 310.8),
        successor="agg-b200-agentic-256K-kv-router",
    ),
    _day0(
        "agg-b200-agentic-256k-nomtp",
        "b200",
        "agg",
        "agentic",
        "none",
        32,
        batched=65536,
        perf=(8, 99.5, 175.9),
        successor="agg-b200-agentic-256K-kv-router",
    ),
    _day0(
        "agg-b200-chat-256k-mtp",
        "b200",
        "agg",
        "chat",
        "mtp",
        64,
        perf=(18, 52.0, 201.4),
        successor="agg-b200-agentic-256K-kv-router",
    ),
    _day0(
        "agg-b200-chat-256k-nomtp",
        "b200",
        "agg",
        "chat",
        "none",
        40,
        block=32,
        perf=(16, 51.0, 181.3),
        successor="agg-b200-agentic-256K-kv-router",
    ),
    _day0(
        "agg-h200-agentic-256k-mtp",
        "h200",
        "agg",
        "agentic",
        "mtp",
        32,
        ops=DAY0_H200_MTP_TOPOLOGY,
        perf=(8, 53.2, 27.4),
        successor="agg-h200-agentic-256K-kv-router",
    ),
    _day0(
        "agg-h200-agentic-256k-nomtp",
        "h200",
        "agg",
        "agentic",
        "none",
        32,
        perf=(8, 52.3, 26.5),
        successor="agg-h200-agentic-256K-kv-router",
    ),
    _day0(
        "agg-h200-chat-256k-mtp",
        "h200",
        "agg",
        "chat",
        "mtp",
        16,
        ops=DAY0_H200_MTP_TOPOLOGY,
        perf=(10, 58.7, 46.8),
        successor="agg-h200-agentic-256K-kv-router",
    ),
    _day0(
        "agg-h200-chat-256k-nomtp",
        "h200",
        "agg",
        "chat",
        "none",
        32,
        perf=(8, 54.2, 43.0),
        successor="agg-h200-agentic-256K-kv-router",
    ),
    replace(
        _day0(
            "disagg-b200-agentic-256k",
            "b200",
            "disagg",
            "agentic",
            "none",
            32,
            perf=(32, 61.6, 231.1),
            successor="disagg-b200-agentic-256K",
        ),
        id=f"ultra-vllm-{DAY0_B200_1P1D}",
    ),
)

# Renamed upstream (Dynamo 1.6 final names; same topology and engine, new directory, DGD and component names):
# the old id resolves to its successor, and `up` warns that the DGD is renamed. Old path -> new path, as in
# ../shared/reference/dynamo-next/INDEX.md "Targets renamed".
RENAMED_PATHS = {
    f"{MODEL}/vllm/{old}/deploy.yaml": f"{MODEL}/vllm/{new}/deploy.yaml"
    for g in ("b200", "gb200", "h200")
    for old, new in (
        (f"agg-{g}-agentic-256k-2w-kv", f"agg-{g}-agentic-256K-kv-router"),
        (f"agg-{g}-agentic-1m-2w-kv", f"agg-{g}-agentic-1M-kv-router"),
        (f"disagg-{g}-agentic-256k-1p2d", f"disagg-{g}-agentic-256K"),
        (f"disagg-{g}-agentic-1m-1p1d", f"disagg-{g}-agentic-1M"),
    )
}
RENAMED = {f"ultra-vllm-{old.split('/')[2]}": f"ultra-vllm-{new.split('/')[2]}" for old, new in RENAMED_PATHS.items()}
# The Day-0 B200 1P1D file sits in upstream's disagg-b200-agentic-256k, which differs from the final disagg-b200-agentic-256K
# only by case: its target is ultra-vllm-disagg-b200-agentic-256k-1p1d (its shape), and the old id still names it.
RESPELLED = {"ultra-vllm-disagg-b200-agentic-256k": f"ultra-vllm-{DAY0_B200_1P1D}"}


# --------------------------------------------------------------------------- model cache

DOWNLOAD_SCRIPT = """set -Eeuo pipefail
python3 -m pip install --no-cache-dir -U huggingface_hub
export HF_HOME=/opt/models
python3 - <<'PY'
import os
from huggingface_hub import snapshot_download

model_repo = "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4"
model_revision = os.environ.get("MODEL_REVISION", "main")

model_path = "/opt/models/patched/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4"
os.makedirs(model_path, exist_ok=True)
snapshot_download(
    repo_id=model_repo,
    revision=model_revision,
    local_dir=model_path,
)
print(f"MODEL_DOWNLOAD_SNAPSHOT_DONE repo={model_repo} path={model_path}")
PY
MODEL_PATH="/opt/models/patched/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4"
test -r "${MODEL_PATH}/config.json"
test -r "${MODEL_PATH}/tokenizer.json"
test -r "${MODEL_PATH}/tokenizer_config.json"
test -r "${MODEL_PATH}/generation_config.json"
test -r "${MODEL_PATH}/ultra_v3_reasoning_parser.py"
echo "MODEL_DOWNLOAD_PASS path=${MODEL_PATH}"
"""

VALIDATE_SCRIPT = """set -Eeuo pipefail
required=(
  config.json
  tokenizer.json
  tokenizer_config.json
  generation_config.json
  ultra_v3_reasoning_parser.py
)
MODEL_PATH="/opt/models/patched/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4"
if [ ! -d "${MODEL_PATH}" ]; then
  echo "MODEL_VALIDATE_FAIL class=model_path_missing path=${MODEL_PATH}"
  echo "Run model-download.yaml or bind a platform shared-model-cache PVC containing the patched Ultra model view."
  exit 42
fi
for rel in "${required[@]}"; do
  if [ ! -r "${MODEL_PATH}/${rel}" ]; then
    echo "MODEL_VALIDATE_FAIL class=model_required_file_missing path=${MODEL_PATH}/${rel}"
    echo "Run model-download.yaml or fix the platform shared-model-cache contents."
    exit 43
  fi
done
python3 - <<'PY'
import json
from pathlib import Path
model_path = Path("/opt/models/patched/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4")
config = json.loads((model_path / "config.json").read_text())
print(
    "MODEL_VALIDATE_PASS",
    "hf_model=nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-NVFP4",
    "model_type=" + str(config.get("model_type")),
    "path=" + str(model_path),
)
PY
"""


CACHE_JOB_LABELS = {"app.kubernetes.io/part-of": "nemotron-ultra"}
# No-GPU Jobs on the shared cache: download (needs the HF token, writes) and validate (read-only).
DOWNLOAD_JOB = DownloadJob(
    "nemotron-ultra-model-download",
    versions.image("ultra-model-cache"),
    DOWNLOAD_SCRIPT,
    CACHE,
    ("/bin/bash", "-lc"),
    container="download",
    backoff_limit=1,
    image_pull_policy="IfNotPresent",
    labels={"app.kubernetes.io/name": "nemotron-ultra-model-download", **CACHE_JOB_LABELS},
    # upstream's script reads MODEL_REVISION (default main) and downloads into a local_dir the workers
    # load by path: dynamo:modelRevision only sets the variable
    revision=RevisionPin(),
)
VALIDATE_JOB = DownloadJob(
    "nemotron-ultra-model-validate",
    versions.image("ultra-model-cache"),
    VALIDATE_SCRIPT,
    CACHE,
    ("/bin/bash", "-lc"),
    container="validate",
    hf_token=False,
    read_only=True,
    backoff_limit=0,
    image_pull_policy="IfNotPresent",
    labels={"app.kubernetes.io/name": "nemotron-ultra-model-validate", **CACHE_JOB_LABELS},
)


FAMILY = ModelFamily(
    id=MODEL,
    short="ultra",
    served_model=REPO,
    cache=CACHE,
    builders={"vllm-agg": vllm_agg, "vllm-disagg": vllm_disagg},
    cache_job_builders={DOWNLOAD_JOB.name: DOWNLOAD_JOB, VALIDATE_JOB.name: VALIDATE_JOB},
    # model + gpu + topology alone picks the Refresh 256K agentic profile (MTP and KV routing when aggregated).
    defaults={
        "runtime": "vllm",
        "topology": "agg",
        "profile": "refresh",
        "context": "256k",
        "workload": "agentic",
        "spec": "mtp",
        "routing": "kv",
    },
    targets=TARGETS,
    renamed=RENAMED,
    renamed_paths=RENAMED_PATHS,
    respelled=RESPELLED,
)
