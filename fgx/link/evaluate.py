"""The link task's evaluation (the trainer's Evaluator hands it over): every client's labelled pairs
scored by ``algo.predict`` (the model a client is scored with, as for every task), its metrics
(fgx/link/metrics.py) per client, their mean over clients, the pooled values over all clients' pairs,
and at the final evaluation the sampling error of the means (a bootstrap over each client's positives,
each drawn with its own negatives), which fgx/tables reads as for the classification tasks."""
from __future__ import annotations

import torch

from fgx.link.metrics import link_metrics, pos_neg
from fgx.metrics import clients_skipped, mean_over_clients

PAIRWISE_LIMIT = 4096      # positives up to which the bootstrap's ROC-AUC holds a positives x positives table


def evaluate_link(ctx, algo, splits, hits_k: list[int], local: bool, sampling_error: bool) -> dict[str, dict]:
    preds = [algo.predict(c, local=local, splits=splits) for c in ctx.clients]
    out = {}
    for split in splits:
        parts = [pos_neg(*p[split]) for p in preds]
        per = [link_metrics(pos, neg, hits_k) for pos, neg in parts]
        pooled = link_metrics(torch.cat([p for p, _ in parts]), _rows(parts), hits_k)
        out[split] = {"mean": mean_over_clients(per), "per_client": per, "pooled": pooled,
                      "skipped": clients_skipped(per)}
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
    positives can move. ``reps`` shrinks so that at most ``max_items`` scores are weighed per client and
    resample (at least 20). The resamples are scored at once from each positive's multiplicity
    (``resampled_metrics``), not one by one."""
    items = max((neg.numel() for _, neg in parts), default=1)
    reps = max(20, min(reps, max_items // max(items, 1)))
    g = torch.Generator().manual_seed(seed)
    names = ["roc_auc", "mrr"] + [f"hits@{k}" for k in hits_k]
    per = []
    for pos, neg in parts:
        k = pos.numel()
        idx = torch.randint(k, (reps, k), generator=g) if k else torch.zeros(reps, 0, dtype=torch.long)
        weights = torch.zeros(reps, k, dtype=torch.double).scatter_add_(1, idx, torch.ones(reps, k, dtype=torch.double))
        per.append(resampled_metrics(pos, neg, weights, hits_k))
    out = {}
    for m in names:
        vals = torch.stack([p[m] for p in per])                  # [clients, reps]
        ok = ~torch.isnan(vals)
        means = torch.where(ok, vals, 0).sum(0) / ok.sum(0)     # mean over the clients that have the metric
        means = means[~torch.isnan(means)]
        out[m] = float(means.std()) if means.numel() > 1 else float("nan")
    return out


def resampled_metrics(pos: torch.Tensor, neg: torch.Tensor, weights: torch.Tensor, hits_k: list[int]) -> dict:
    """link_metrics of every resample at once: ``weights`` [R, k] holds how often each positive (and its row of
    negatives) is drawn. ROC-AUC from the counts c_ij of row j's negatives below positive i (ties: half),
    MRR from each positive's reciprocal rank, Hits@K from the K-th highest negative counted with multiplicity."""
    r, k = weights.shape
    nan = torch.full((r,), float("nan"), dtype=torch.double)
    names = ["roc_auc", "mrr"] + [f"hits@{h}" for h in hits_k]
    if k == 0 or not (torch.isfinite(pos).all() and torch.isfinite(neg).all()):
        return {m: nan for m in names}
    m = neg.size(1)
    out = {}
    rows = neg.sort(1).values
    if k <= PAIRWISE_LIMIT:            # c [k rows j, k positives i]: below + half the ties
        values = pos[None, :].expand(k, k).contiguous()
        c = 0.5 * (torch.searchsorted(rows, values, right=False) + torch.searchsorted(rows, values, right=True)).double()
        out["roc_auc"] = ((weights @ c) * weights).sum(1) / (k * k * m)
    else:                              # too many pairs of positives to hold: one resample at a time
        out["roc_auc"] = torch.tensor([_binary_auc_weighted(pos, neg, w) for w in weights], dtype=torch.double)
    optimistic, pessimistic = (neg > pos[:, None]).sum(1), (neg >= pos[:, None]).sum(1)
    rr = 1.0 / (0.5 * (optimistic + pessimistic).double() + 1)
    out["mrr"] = weights @ rr / k
    flat, order = neg.reshape(-1).sort(descending=True)
    row = order // m
    kth = {h: torch.empty(r, dtype=torch.double) for h in hits_k}
    step = max(1, (1 << 22) // flat.numel())                 # resamples per pass: at most ~4M weights held
    for a in range(0, r, step):
        cum = weights[a:a + step, row].cumsum(1)             # negatives counted with their row's multiplicity
        for h in hits_k:
            kth[h][a:a + step] = flat[(cum < h).sum(1).clamp(max=flat.numel() - 1)]
    for h in hits_k:
        out[f"hits@{h}"] = (weights * (pos[None, :] > kth[h][:, None])).sum(1) / k if k * m >= h else \
            torch.ones(r, dtype=torch.double)
    return out


def _binary_auc_weighted(pos: torch.Tensor, neg: torch.Tensor, w: torch.Tensor) -> float:
    idx = torch.repeat_interleave(torch.arange(pos.numel()), w.long())
    return link_metrics(pos[idx], neg[idx], [])["roc_auc"]
