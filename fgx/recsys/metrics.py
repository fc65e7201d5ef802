"""Top-K ranking metrics by full ranking: every item a client holds is scored for every user, the
user's training items are masked out, and Recall@K / NDCG@K are taken over the held-out items."""
from __future__ import annotations

import numpy as np
import torch


def topk_with_mask(scores: torch.Tensor, exclude: torch.Tensor, k: int) -> torch.Tensor:
    """Indices [U, k] of the highest scores per row after setting ``exclude`` pairs ([2, E]) to -inf."""
    s = scores.clone()
    if exclude.numel():
        s[exclude[0], exclude[1]] = float("-inf")
    return torch.topk(s, min(k, s.size(1)), dim=1).indices


def recall_ndcg(topk: torch.Tensor, truth: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-user Recall@K and NDCG@K (binary relevance, log2 discount) for users with >= 1 truth item.
    ``truth`` is [2, E] (user, item). Returns (users, recall, ndcg)."""
    n_users, n_items = topk.size(0), int(max(topk.max().item() if topk.numel() else 0,
                                            truth[1].max().item() if truth.numel() else 0)) + 1
    rel = torch.zeros(n_users, n_items, dtype=torch.bool)
    if truth.numel():
        rel[truth[0], truth[1]] = True
    n_true = rel.sum(1)
    users = (n_true > 0).nonzero().view(-1)
    hits = torch.gather(rel, 1, topk).float()[users]
    kk = topk.size(1)
    disc = 1.0 / torch.log2(torch.arange(2, kk + 2, dtype=torch.float))
    dcg = (hits * disc).sum(1)
    ideal = torch.cumsum(disc, 0)[(n_true[users].clamp(max=kk) - 1)]
    recall = hits.sum(1) / n_true[users].float()
    return users, recall, dcg / ideal


def ranking_metrics(scores: torch.Tensor, train: torch.Tensor, truth: torch.Tensor, k: int = 20,
                    item_group: torch.Tensor | None = None, users_global: torch.Tensor | None = None) -> dict:
    """Mean Recall@K and NDCG@K over users with held-out items. With ``item_group`` (0 tail,
    1 mid, 2 head per item) also NDCG@K restricted to each group's held-out items. With ``users_global``
    (each row's dataset user id) also ``_items``: the per-user values the means are taken over, by user,
    which a table's ordering test resamples (fgx/resampling.py; the evaluator takes them out)."""
    topk = topk_with_mask(scores, train, k)
    users, rec, ndcg = recall_ndcg(topk, truth, k)
    out = {f"recall@{k}": float(rec.mean()) if users.numel() else float("nan"),
           f"ndcg@{k}": float(ndcg.mean()) if users.numel() else float("nan"),
           "num_users": int(users.numel())}
    if users_global is not None:
        out["_items"] = (users_global[users].cpu(), {f"recall@{k}": rec.cpu(), f"ndcg@{k}": ndcg.cpu()})
    if item_group is not None:
        # group NDCG: the same full ranking, relevance restricted to the group's held-out items
        for g, name in enumerate(("tail", "mid", "head")):
            sel = item_group[truth[1]] == g
            if sel.any():
                _, _, nd = recall_ndcg(topk, truth[:, sel], k)
                out[f"ndcg@{k}_{name}"] = float(nd.mean())
            else:
                out[f"ndcg@{k}_{name}"] = float("nan")
    return out


def popularity_groups(train_items: torch.Tensor, num_items: int, head: float = 0.2, tail: float = 0.5) -> torch.Tensor:
    """Item groups by training degree: the top ``head`` share of items is head (2), the bottom
    ``tail`` share is tail (0), the rest mid (1). Ties keep item order (stable sort)."""
    deg = torch.bincount(train_items, minlength=num_items)
    order = torch.argsort(deg, descending=True, stable=True)
    grp = torch.ones(num_items, dtype=torch.long)
    n_head, n_tail = int(np.ceil(head * num_items)), int(np.floor(tail * num_items))
    grp[order[:n_head]] = 2
    if n_tail:
        grp[order[num_items - n_tail:]] = 0
    return grp
