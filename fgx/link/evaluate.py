"""The link task's evaluation (the trainer's Evaluator hands it over): every client's labelled pairs
scored by ``algo.predict`` (the model a client is scored with, as for every task), its metrics
(fgx/link/metrics.py) per client, their mean over clients, the pooled values over all clients' pairs,
and, when asked, each client's test pairs as :class:`LinkItems`: fgx/resampling.py keeps bootstrap
replicates of them (each positive drawn with its row of negatives, by its global pair id, from the one
stream every run draws from), which fgx/tables' ordering test reads as for the classification tasks."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from fgx.link.metrics import link_metrics, pos_neg
from fgx.metrics import SAMPLING_REPS, SAMPLING_SEED, clients_skipped, copy_draws, mean_over_clients

PAIRWISE_LIMIT = 4096      # positives up to which the bootstrap's ROC-AUC holds a positives x positives table
PAIR_ID_BASE = 1 << 31     # a pair's id: smaller global node id * base + larger (node ids stay below 2^31)


class LinkItems(NamedTuple):
    """One client's test pairs: positives' logits [k], their negatives' [k, m], each positive's global pair id."""
    pos: torch.Tensor
    neg: torch.Tensor
    ids: torch.Tensor
    hits_k: tuple[int, ...]


def evaluate_link(ctx, algo, splits, hits_k: list[int], local: bool, items: bool = False) -> dict[str, dict]:
    preds = [algo.predict(c, local=local, splits=splits) for c in ctx.clients]
    out = {}
    for split in splits:
        parts = [pos_neg(*p[split]) for p in preds]
        per = [link_metrics(pos, neg, hits_k) for pos, neg in parts]
        pooled = link_metrics(torch.cat([p for p, _ in parts]), _rows(parts), hits_k)
        out[split] = {"mean": mean_over_clients(per), "per_client": per, "pooled": pooled,
                      "skipped": clients_skipped(per)}
        if items and split == "test":
            out[split]["items"] = [LinkItems(pos, neg, positive_ids(c.data, split, pos.numel()), tuple(hits_k))
                                   for c, (pos, neg) in zip(ctx.clients, parts)]
    return out


def positive_ids(view, split: str, k: int) -> torch.Tensor:
    """Global ids of a client's ``split`` positives, in predict's order (the split's pairs come positives
    first: fgx/link/split.py); an undirected pair has one id whichever end is its source, so a cross-client
    pair two clients hold (cross_client=both) is one item."""
    pairs = view.link_index[:, getattr(view, f"link_{split}_mask")][:, :k]
    ends = view.global_node_id[pairs.cpu()].long()
    lo, hi = ends.min(0).values, ends.max(0).values
    return lo * PAIR_ID_BASE + hi


def _rows(parts) -> torch.Tensor:
    """Every client's [positives, negatives] rows (one task.eval_negatives for all clients of a split)."""
    rows = [neg for _, neg in parts if neg.numel()]
    return torch.cat(rows) if rows else torch.zeros(0, 1, dtype=torch.double)


def link_replicates(per_client: list[LinkItems], reps: int = SAMPLING_REPS, max_items: int = 2_000_000,
                    seed: int = SAMPLING_SEED) -> dict[str, np.ndarray]:
    """Bootstrap replicates of the mean-over-clients link metrics: each replicate draws the distinct
    positives (by global pair id, from the stream of fgx.metrics.bootstrap_replicates, so two runs on the
    same pairs pair their replicates) with replacement, every copy with its own row of negatives. ``reps``
    shrinks so that at most ``max_items`` scores are weighed per client and replicate (at least 20). The
    replicates are scored at once from each positive's multiplicity (``resampled_metrics``)."""
    hits_k = list(per_client[0].hits_k)
    names = ["roc_auc", "mrr"] + [f"hits@{k}" for k in hits_k]
    sizes = [p.pos.numel() for p in per_client]
    if sum(sizes) == 0:
        return {m: np.full(0, np.nan) for m in names}
    reps = max(20, min(reps, max_items // max(max(p.neg.numel() for p in per_client), 1)))
    counts = copy_draws(torch.cat([p.ids for p in per_client]), reps, seed).double()
    per, start = [], 0
    for p, k in zip(per_client, sizes):
        per.append(resampled_metrics(p.pos.double(), p.neg.double().view(k, -1), counts[:, start:start + k], hits_k))
        start += k
    out = {}
    for m in names:
        vals = torch.stack([p[m] for p in per])                  # [clients, reps]
        ok = ~torch.isnan(vals)
        out[m] = (torch.where(ok, vals, 0).sum(0) / ok.sum(0)).numpy()   # mean over the clients with the metric
    return out


def resampled_metrics(pos: torch.Tensor, neg: torch.Tensor, weights: torch.Tensor, hits_k: list[int]) -> dict:
    """link_metrics of every resample at once: ``weights`` [R, k] holds how often each positive (and its row of
    negatives) is drawn; a resample of w = Σ weights positives (k when it draws this client's positives
    alone, any number when it draws items shared by several clients; none: NaN). ROC-AUC from the counts c_ij
    of row j's negatives below positive i (ties: half), MRR from each positive's reciprocal rank, Hits@K from
    the K-th highest negative counted with multiplicity."""
    r, k = weights.shape
    nan = torch.full((r,), float("nan"), dtype=torch.double)
    names = ["roc_auc", "mrr"] + [f"hits@{h}" for h in hits_k]
    if k == 0 or not (torch.isfinite(pos).all() and torch.isfinite(neg).all()):
        return {m: nan for m in names}
    m = neg.size(1)
    w = weights.sum(1)
    drawn = torch.where(w > 0, w, torch.full_like(w, float("nan")))
    out = {}
    rows = neg.sort(1).values
    if k <= PAIRWISE_LIMIT:            # c [k rows j, k positives i]: below + half the ties
        values = pos[None, :].expand(k, k).contiguous()
        c = 0.5 * (torch.searchsorted(rows, values, right=False) + torch.searchsorted(rows, values, right=True)).double()
        out["roc_auc"] = ((weights @ c) * weights).sum(1) / (drawn * drawn * m)
    else:                              # too many pairs of positives to hold: one resample at a time
        out["roc_auc"] = torch.tensor([_binary_auc_weighted(pos, neg, w) for w in weights], dtype=torch.double)
    optimistic, pessimistic = (neg > pos[:, None]).sum(1), (neg >= pos[:, None]).sum(1)
    rr = 1.0 / (0.5 * (optimistic + pessimistic).double() + 1)
    out["mrr"] = weights @ rr / drawn
    flat, order = neg.reshape(-1).sort(descending=True)
    row = order // m
    kth = {h: torch.empty(r, dtype=torch.double) for h in hits_k}
    step = max(1, (1 << 22) // flat.numel())                 # resamples per pass: at most ~4M weights held
    for a in range(0, r, step):
        cum = weights[a:a + step, row].cumsum(1)             # negatives counted with their row's multiplicity
        for h in hits_k:
            kth[h][a:a + step] = flat[(cum < h).sum(1).clamp(max=flat.numel() - 1)]
    for h in hits_k:
        above = (weights * (pos[None, :] > kth[h][:, None])).sum(1) / drawn
        out[f"hits@{h}"] = torch.where(w * m >= h, above, torch.ones_like(above).where(w > 0, drawn))
    return out


def _binary_auc_weighted(pos: torch.Tensor, neg: torch.Tensor, w: torch.Tensor) -> float:
    idx = torch.repeat_interleave(torch.arange(pos.numel()), w.long())
    return link_metrics(pos[idx], neg[idx], [])["roc_auc"]
