"""Link-prediction metrics of one client's split (or of all clients' pooled), OGB's definitions
(ogb.linkproppred.Evaluator; tests/test_link_task.py checks them against it on the same scores):

- ``roc_auc``: ROC-AUC of the positives against all negatives (fgx.metrics' Mann-Whitney form, ties averaged);
- ``mrr``: each positive ranked among its own negatives (the same source, other destinations), ties at
  the mean of the optimistic and pessimistic rank (OGB's citation2/wikikg2 MRR);
- ``hits@K``: the share of positives scoring strictly above the K-th highest of all the split's negatives
  (OGB's collab/ddi/ppa Hits@K; 1 when there are fewer than K negatives).

Scores are the decoder's logits s; ``neg`` is [positives, negatives per positive]."""
from __future__ import annotations

import torch

from fgx.metrics import _binary_auc


def link_metrics(pos: torch.Tensor, neg: torch.Tensor, hits_k: list[int]) -> dict[str, float]:
    names = ["roc_auc", "mrr"] + [f"hits@{k}" for k in hits_k]
    pos, neg = pos.double().view(-1), neg.double().view(pos.numel(), -1)
    if pos.numel() == 0 or not (torch.isfinite(pos).all() and torch.isfinite(neg).all()):
        return {m: float("nan") for m in names}     # no positive, or a diverged model: no score
    flat = neg.reshape(-1)
    out = {"roc_auc": _binary_auc(torch.cat([pos, flat]),
                              torch.cat([torch.ones_like(pos, dtype=torch.bool), torch.zeros_like(flat, dtype=torch.bool)]))}
    optimistic = (neg > pos[:, None]).sum(1)
    pessimistic = (neg >= pos[:, None]).sum(1)
    out["mrr"] = float((1.0 / (0.5 * (optimistic + pessimistic).double() + 1)).mean())
    for k in hits_k:
        if flat.numel() < k:
            out[f"hits@{k}"] = 1.0
        else:
            kth = torch.topk(flat, k).values[-1]
            out[f"hits@{k}"] = float((pos > kth).double().mean())
    return out


def pos_neg(scores: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits s of a split's positives [k] and negatives [k, m] from predict's [0, s] rows, which
    come positives first, then each positive's m negatives (fgx/link/split.py)."""
    s = (scores[:, 1] - scores[:, 0]).double()
    y = labels.bool()
    k = int(y.sum())
    if k == 0:
        return s[:0], s[:0].view(0, 1)
    if not bool(y[:k].all()) or (s.numel() - k) % k:
        raise ValueError("link pairs must come positives first, then m negatives per positive")
    return s[:k], s[k:].view(k, -1)
