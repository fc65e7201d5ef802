"""Homophily measures of labelled graphs."""
from __future__ import annotations

import torch


def edge_homophily(edge_index: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of edges whose endpoints share a label (nan for a graph without edges)."""
    if edge_index.numel() == 0:
        return float("nan")
    return (y[edge_index[0]] == y[edge_index[1]]).float().mean().item()
