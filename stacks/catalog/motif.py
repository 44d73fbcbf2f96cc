"""Placeholder family: filled in by the catalog work for this model."""
from __future__ import annotations

from .model import ModelFamily

FAMILY = ModelFamily(id="motif-pending", short="motif", served_model="", cache_size="1Gi", cache_mount="/model-cache",
                     builders={}, cache_job_builders={}, defaults={}, targets=())
