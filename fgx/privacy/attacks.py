"""Attribute-inference attack on shared embeddings (CE-FedGNN App. E, Eq. 32).

The adversary knows the model, the target's neighbourhood B (nodes, edges and their features) and
sees the embedding the target's client released. It reconstructs the target's raw features by
gradient descent: x' = argmin ||h(x'; B ∪ {x}) - h_released||². Success is judged against the
average squared distance from a node to its nearest 1% of feature vectors: an error above that
baseline means the release says less about x than its nearest neighbours do."""
from __future__ import annotations

import torch


def reconstruct_features(embed_fn, target_release: torch.Tensor, init: torch.Tensor, steps: int = 500,
                         lr: float = 0.01) -> torch.Tensor:
    """Gradient descent on the unknown features ``x'`` so that ``embed_fn(x')`` matches the release."""
    x = init.clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = (embed_fn(x) - target_release).pow(2).sum()
        loss.backward()
        opt.step()
    return x.detach()


def nearest_percent_baseline(x: torch.Tensor, targets: torch.Tensor, percent: float = 1.0) -> float:
    """Mean over targets of the mean squared (per-feature) distance to their nearest ``percent``%
    of the other feature vectors."""
    k = max(1, int(round(x.size(0) * percent / 100)))
    d = torch.cdist(x[targets].double(), x.double()).pow(2) / x.size(1)
    d[torch.arange(targets.numel()), targets] = float("inf")
    return float(torch.topk(d, k, largest=False).values.mean())
