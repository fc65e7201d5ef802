"""Homophily measures of labelled graphs (Platonov et al. 2023; FedGSP appendix §VI).

``edge_index`` may list both directions of an undirected edge (PyG's convention): every measure
is then computed over directed edges, which gives the same values as over undirected ones.
Nodes with a negative label (unlabelled, e.g. halo rows) and the edges touching them are ignored."""
from __future__ import annotations

import torch


def _labelled_edges(edge_index: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    keep = (y[edge_index[0]] >= 0) & (y[edge_index[1]] >= 0)
    return edge_index[:, keep]


def edge_homophily(edge_index: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of edges whose endpoints share a label (nan for a graph without edges)."""
    if edge_index.numel() == 0:
        return float("nan")
    return (y[edge_index[0]] == y[edge_index[1]]).float().mean().item()


def node_homophily(edge_index: torch.Tensor, y: torch.Tensor) -> float:
    """Mean over nodes with neighbours of the share of their neighbours with the same label (Eq. 36);
    nodes without neighbours are skipped."""
    ei = _labelled_edges(edge_index, y)
    if ei.numel() == 0:
        return float("nan")
    n = y.numel()
    same = (y[ei[0]] == y[ei[1]]).double()
    deg = torch.zeros(n, dtype=torch.double).index_add_(0, ei[0], torch.ones_like(same))
    hit = torch.zeros(n, dtype=torch.double).index_add_(0, ei[0], same)
    has = deg > 0
    return float((hit[has] / deg[has]).mean())


def adjusted_homophily(edge_index: torch.Tensor, y: torch.Tensor) -> float:
    """Edge homophily corrected for the degree-weighted class distribution (Eq. 37):
    (h_edge - sum_k p(k)^2) / (1 - sum_k p(k)^2), p(k) = D_k / 2|E|. Near 0: as random; < 0 heterophilous."""
    ei = _labelled_edges(edge_index, y)
    if ei.numel() == 0:
        return float("nan")
    h = edge_homophily(ei, y)
    num_classes = int(y.max()) + 1
    # D_k: sum of the degrees of class-k nodes = number of directed edge ends in class k
    d_k = torch.bincount(y[ei[0]], minlength=num_classes).double()
    p = d_k / d_k.sum()
    expected = float((p * p).sum())
    if expected >= 1.0:
        return float("nan")   # one class only: undefined
    return (h - expected) / (1.0 - expected)


def train_edge_homophily(edge_index: torch.Tensor, y: torch.Tensor, train_mask: torch.Tensor,
                         default: float = 0.75) -> float:
    """Homophily estimate a client can make from its training labels only (UniFilter's ĥ): the
    same-label share of edges with both endpoints in the training set; ``default`` without such edges."""
    if edge_index.numel() == 0:
        return default
    both = train_mask[edge_index[0]] & train_mask[edge_index[1]]
    if not bool(both.any()):
        return default
    return edge_homophily(edge_index[:, both], y)
