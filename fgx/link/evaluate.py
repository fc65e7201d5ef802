"""The link task's evaluation (the trainer's Evaluator hands it over): every client's labelled pairs
scored by ``algo.predict`` (the model a client is scored with, as for every task), its metrics
(fgx/link/metrics.py) per client, their mean over clients, the pooled values over all clients' pairs,
and at the final evaluation the sampling error of the means (a bootstrap over each client's positives,
each drawn with its own negatives), which fgx/tables reads as for the classification tasks."""
from __future__ import annotations

import numpy as np
import torch

from fgx.link.metrics import link_metrics, pos_neg
from fgx.metrics import mean_over_clients


def evaluate_link(ctx, algo, splits, hits_k: list[int], local: bool, sampling_error: bool) -> dict[str, dict]:
    preds = [algo.predict(c, local=local, splits=splits) for c in ctx.clients]
    out = {}
    for split in splits:
        parts = [pos_neg(*p[split]) for p in preds]
        per = [link_metrics(pos, neg, hits_k) for pos, neg in parts]
        pooled = link_metrics(torch.cat([p for p, _ in parts]), _rows(parts), hits_k)
        out[split] = {"mean": mean_over_clients(per), "per_client": per, "global": pooled}
        if sampling_error:
            out[split]["sampling_se"] = bootstrap_se(parts, hits_k, seed=ctx.seed)
    return out


def _rows(parts) -> torch.Tensor:
    """Every client's [positives, negatives] rows (one task.eval_negatives for all clients of a split)."""
    rows = [neg for _, neg in parts if neg.numel()]
    return torch.cat(rows) if rows else torch.zeros(0, 1, dtype=torch.double)


def bootstrap_se(parts, hits_k: list[int], reps: int = 100, max_items: int = 2_000_000, seed: int = 0) -> dict:
    """Standard deviation, over resamples of each client's positives (each with its negatives, within the
    client), of the mean-over-clients metrics: a gap between two methods below it is one a few test
    positives can move. ``reps`` shrinks so at most ``max_items`` scores are ranked (at least 20)."""
    items = sum(neg.numel() + pos.numel() for pos, neg in parts)
    reps = max(20, min(reps, max_items // max(items, 1)))
    g = torch.Generator().manual_seed(seed)
    means = []
    for _ in range(reps):
        per = []
        for pos, neg in parts:
            idx = torch.randint(pos.numel(), (pos.numel(),), generator=g) if pos.numel() else pos.new_zeros(0).long()
            per.append(link_metrics(pos[idx], neg[idx], hits_k))
        means.append(mean_over_clients(per))
    out = {}
    for m in means[0]:
        vals = np.array([x[m] for x in means], dtype=float)
        vals = vals[~np.isnan(vals)]
        out[m] = float(vals.std(ddof=1)) if vals.size > 1 else float("nan")
    return out
