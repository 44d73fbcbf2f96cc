"""Loads the single versions manifest (stacks/registry/versions.yaml)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from stacks.registry import yaml_text

MANIFEST = Path(__file__).with_name("versions.yaml")


@lru_cache(maxsize=1)
def versions() -> dict:
    return yaml_text.load(MANIFEST.read_text())


def image(key: str) -> str:
    try:
        return versions()["images"][key]
    except KeyError:
        raise KeyError(f"image {key!r} is not in {MANIFEST.name}; known: {sorted(versions()['images'])}") from None
