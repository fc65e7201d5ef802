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
    class for ROC-AUC) are nan and skipped by the means."""
    from sklearn.metrics import f1_score, roc_auc_score

    if labels.numel() == 0:
        return {m: float("nan") for m in CLASSIFICATION}
    y = labels.cpu().numpy()
    pred = scores.argmax(-1).cpu().numpy()
    out = {
        "accuracy": float((pred == y).mean()),
        "f1_macro": float(f1_score(y, pred, average="macro", labels=list(range(num_classes)), zero_division=0)),
        "f1_minority": float(f1_score(y, pred, labels=[minority], average="macro", zero_division=0)),
    }
    try:
        prob = torch.softmax(scores.float(), -1).cpu().numpy()
        if len(np.unique(y)) < 2:
            raise ValueError
        if num_classes == 2:
            out["roc_auc"] = float(roc_auc_score(y, prob[:, 1]))
        else:
            out["roc_auc"] = float(roc_auc_score(y, prob, multi_class="ovr", labels=list(range(num_classes))))
    except ValueError:
        out["roc_auc"] = float("nan")
    return out


def mean_over_clients(per_client: list[dict[str, float]]) -> dict[str, float]:
    keys = per_client[0].keys() if per_client else []
    out = {}
    for k in keys:
        vals = [c[k] for c in per_client if c.get(k) is not None and not np.isnan(c[k])]
        out[k] = float(np.mean(vals)) if vals else float("nan")
    return out
