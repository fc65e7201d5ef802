"""Classification metrics per client, mean over clients, and pooled ("global")."""
from __future__ import annotations

import numpy as np
import torch

CLASSIFICATION = ("accuracy", "f1_macro", "f1_minority", "roc_auc")


def minority_class(train_labels: torch.Tensor, num_classes: int) -> int:
    """The class with the fewest training labels (for binary AML: the illicit class)."""
    counts = torch.bincount(train_labels, minlength=num_classes)
    return int(torch.argmin(counts))


def classification_metrics(scores: torch.Tensor, labels: torch.Tensor, num_classes: int,
                           minority: int) -> dict[str, float]:
    """``scores``: logits [n, C]; ``labels``: [n]. Metrics undefined on the data (no items, one
    class for ROC-AUC) are nan and skipped by the means.

    Computed in torch rather than with sklearn.metrics: evaluation runs per client and split every
    few rounds, and sklearn's per-call input validation (~0.1 s) dominated whole runs. The values
    equal sklearn's f1_score(average="macro"/labels=[minority]) and roc_auc_score(multi_class="ovr",
    average="macro"); tests/test_metrics.py checks that."""
    if labels.numel() == 0:
        return {m: float("nan") for m in CLASSIFICATION}
    y = labels.long().cpu()
    scores = scores.detach().float().cpu()
    pred = scores.argmax(-1)
    k = num_classes
    cm = torch.bincount(y * k + pred, minlength=k * k).view(k, k).double()
    tp = cm.diag()
    support, predicted = cm.sum(1), cm.sum(0)
    denom = support + predicted
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.zeros_like(tp))
    out = {
        "accuracy": float((pred == y).double().mean()),
        "f1_macro": float(f1.mean()),
        "f1_minority": float(f1[minority]),
        "roc_auc": _roc_auc_ovr(scores, y, k),
    }
    return out


def _binary_auc(score: torch.Tensor, positive: torch.Tensor) -> float:
    """Mann-Whitney U statistic with average ranks for ties (= the area under the ROC curve)."""
    n_pos = int(positive.sum())
    n_neg = positive.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = torch.argsort(score.double(), stable=True)
    s = score.double()[order]
    ranks = torch.empty_like(s)
    # average rank of each run of tied scores
    uniq, inverse, counts = torch.unique_consecutive(s, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    avg = ends - (counts.double() - 1) / 2
    ranks[order] = avg[inverse]
    rank_sum = ranks[positive].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _roc_auc_ovr(scores: torch.Tensor, y: torch.Tensor, k: int) -> float:
    if len(torch.unique(y)) < 2:
        return float("nan")
    prob = torch.softmax(scores.double(), -1)
    if k == 2:
        return _binary_auc(prob[:, 1], y == 1)
    aucs = [_binary_auc(prob[:, c], y == c) for c in range(k)]
    if any(a != a for a in aucs):
        return float("nan")   # sklearn refuses OvR AUC when a class is absent from the labels
    return float(sum(aucs) / k)


def mean_over_clients(per_client: list[dict[str, float]]) -> dict[str, float]:
    keys = per_client[0].keys() if per_client else []
    out = {}
    for k in keys:
        vals = [c[k] for c in per_client if c.get(k) is not None and not np.isnan(c[k])]
        out[k] = float(np.mean(vals)) if vals else float("nan")
    return out
