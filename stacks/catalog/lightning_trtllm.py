"""Nemotron-3.5-Lightning on TensorRT-LLM (aggregated only, experimental upstream)."""
from __future__ import annotations

from .model import Target

TRTLLM_TARGETS: tuple[Target, ...] = ()


def trtllm_agg(t: Target) -> list[dict]:
    raise NotImplementedError("TensorRT-LLM base not written yet")
