"""Norm clipping of model-shaped payloads (dicts of tensors)."""
from __future__ import annotations

import torch


def global_norm(tensors: dict) -> torch.Tensor:
    vals = [v.float().pow(2).sum() for v in tensors.values() if v.is_floating_point()]
    return torch.sqrt(sum(vals)) if vals else torch.tensor(0.0)


def clip_by_global_norm(tensors: dict, max_norm: float) -> dict:
    """Scale all floating tensors together so their joint L2 norm is at most ``max_norm``."""
    factor = torch.clamp(max_norm / global_norm(tensors).clamp(min=1e-12), max=1.0)
    return {k: v * factor if v.is_floating_point() else v for k, v in tensors.items()}
