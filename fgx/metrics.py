"""Classification metrics per client, mean over clients, and pooled (every client's items as one set)."""
from __future__ import annotations

import numpy as np
import torch

CLASSIFICATION = ("accuracy", "f1_macro", "f1_minority", "roc_auc", "pr_auc")
# computed by default on binary tasks only (on more classes "the minority class" is one of several rare
# ones); named in `metrics:` or as the main metric, they are computed on any classification task
BINARY_ONLY = ("f1_minority", "pr_auc")

# metrics where a smaller value is better: the best round / trial is the one that minimises them
LOWER_IS_BETTER = frozenset({"mse", "rmse", "mae", "loss"})


def improves(new: float, old: float, metric: str) -> bool:
    """Whether `new` is strictly better than `old` for `metric`."""
    return new < old if metric in LOWER_IS_BETTER else new > old

def minority_class(train_labels: torch.Tensor, num_classes: int) -> int:
    """The class with the fewest training labels (for binary AML: the illicit class)."""
    counts = torch.bincount(train_labels, minlength=num_classes)
    return int(torch.argmin(counts))


def classification_metrics(scores: torch.Tensor, labels: torch.Tensor, num_classes: int,
                           minority: int) -> dict[str, float]:
    """``scores``: logits [n, C]; ``labels``: [n]. Metrics undefined on the data are nan and skipped
    by the means: every metric without items; ROC-AUC and macro F1 on labels of one class; the minority
    class's F1 and PR-AUC without an item of that class.

    ``pr_auc``: the average precision of the minority class (for binary AML, the illicit class) against
    the rest, its items ranked by the minority class's softmax probability; one threshold per distinct
    score (ties as sklearn's average_precision_score). sklearn returns 0 with a warning when no item is
    of that class; here it is nan (undefined, skipped by the means like the minority F1).

    Computed in torch rather than with sklearn.metrics: evaluation runs per client and split every
    few rounds, and sklearn's per-call input validation (~0.1 s) dominated whole runs. The values
    equal sklearn's f1_score(average="macro"/labels=[minority]), roc_auc_score(multi_class="ovr",
    average="macro") and average_precision_score(labels == minority, probability of minority) where
    they are defined; tests/test_metrics.py checks that."""
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
    nan = float("nan")
    out = {
        "accuracy": float((pred == y).double().mean()),
        "f1_macro": float(f1.mean()) if int((support > 0).sum()) >= 2 else nan,
        "f1_minority": float(f1[minority]) if support[minority] > 0 else nan,
        "roc_auc": _roc_auc_ovr(scores, y, k),
        "pr_auc": average_precision(torch.softmax(scores.double(), -1)[:, minority], y == minority),
    }
    return out


def minority_counts(scores: torch.Tensor, labels: torch.Tensor, minority: int) -> dict[str, int]:
    """How many items the model flags (predicts the minority class for), how many of those are of that
    class, how many are, and how many items there are: the counts behind the minority F1
    (F1 = 2 true_positives / (predicted + actual))."""
    flagged = scores.detach().argmax(-1).cpu() == minority
    actual = labels.cpu() == minority
    tn, fp, fn, tp = torch.bincount(actual.long() * 2 + flagged.long(), minlength=4).tolist()
    return {"predicted": fp + tp, "true_positives": tp, "actual": fn + tp, "items": tn + fp + fn + tp}


def average_precision(score: torch.Tensor, positive: torch.Tensor) -> float:
    """Average precision of ``positive`` items ranked by ``score`` (nan without a positive item): the
    grouped computation with one group, so a client's value is the same to the last bit either way."""
    g = torch.zeros(score.numel(), dtype=torch.long)
    return float(_grouped_average_precision(score, positive, g, 1)[0])


def _grouped_average_precision(score: torch.Tensor, positive: torch.Tensor, g: torch.Tensor, G: int) -> torch.Tensor:
    """Average precision per group: sum over the distinct scores s of (positives scored s) x (precision of
    flagging every item scored >= s), over the group's positives; nan for a group without a positive.
    One stable sort over all groups (by group, then score); the sums run over the runs of tied scores
    in ascending order within each group."""
    score, pos = score.double(), positive.bool()
    n_pos = torch.bincount(g, weights=pos.double(), minlength=G)
    if score.numel() == 0:
        return torch.full((G,), float("nan"), dtype=torch.double)
    order = torch.argsort(score, stable=True)
    order = order[torch.argsort(g[order], stable=True)]                # by group, then score
    gs, ss, ps = g[order], score[order], pos[order].double()
    new_run = torch.ones_like(gs, dtype=torch.bool)
    new_run[1:] = (gs[1:] != gs[:-1]) | (ss[1:] != ss[:-1])
    run = torch.cumsum(new_run.long(), 0) - 1
    run_group = gs[new_run]
    counts = torch.bincount(run).double()
    run_pos = torch.bincount(run, weights=ps)
    size = torch.bincount(g, minlength=G).double()
    # items (and positives) of the run's group scored at least the run's score: the group's total less
    # those in the group's earlier (lower-scored) runs; counts are integers, exact in float64
    before = torch.cumsum(counts, 0) - counts - (torch.cumsum(size, 0) - size)[run_group]
    pos_before = torch.cumsum(run_pos, 0) - run_pos - (torch.cumsum(n_pos, 0) - n_pos)[run_group]
    precision = (n_pos[run_group] - pos_before) / (size[run_group] - before)
    total = torch.bincount(run_group, weights=run_pos * precision, minlength=G)
    return torch.where(n_pos > 0, total / n_pos.clamp(min=1), torch.full_like(total, float("nan")))


def binary_auc(score: torch.Tensor, positive: torch.Tensor) -> float:
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
        return binary_auc(prob[:, 1], y == 1)
    aucs = [binary_auc(prob[:, c], y == c) for c in range(k)]
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


def clients_skipped(per_client: list[dict[str, float]]) -> dict[str, int]:
    """How many clients each mean over clients left out: their value is undefined (nan; e.g. F1 on a
    client whose split holds one class, or no item). Only metrics with at least one such client."""
    keys = per_client[0].keys() if per_client else []
    out = {k: sum(1 for c in per_client if isinstance(c.get(k), float) and np.isnan(c[k])) for k in keys}
    return {k: n for k, n in out.items() if n}


def metric_names(requested, num_classes: int, main_metric: str | None = None) -> tuple[str, ...]:
    """The classification metrics an evaluation computes: ``requested`` (null: all), with the main
    metric always in, and f1_minority and pr_auc only on a binary task (on more classes "the minority
    class" is one of several rare ones) unless asked for by name."""
    names = list(requested or [m for m in CLASSIFICATION if num_classes == 2 or m not in BINARY_ONLY])
    if main_metric in CLASSIFICATION and main_metric not in names:
        names.append(main_metric)          # the metric that picks the best round is always computed
    return tuple(m for m in CLASSIFICATION if m in names)


def grouped_classification_metrics(scores: torch.Tensor, labels: torch.Tensor, group: torch.Tensor,
                                   num_groups: int, num_classes: int, minority: int,
                                   names: tuple[str, ...] = CLASSIFICATION) -> list[dict[str, float]]:
    """:func:`classification_metrics` of every group (client) at once: the same values, computed
    with one pass of bincounts and one sort over all items instead of a Python loop over clients and
    classes (evaluating every client every round made that loop a large share of a run). ``names``:
    the metrics to compute (ROC-AUC and PR-AUC, the costly ones (a sort each), only when asked)."""
    k, G = num_classes, num_groups
    y = labels.long().cpu()
    g = group.long().cpu()
    scores = scores.detach().float().cpu()
    pred = scores.argmax(-1) if y.numel() else y
    n = torch.bincount(g, minlength=G).double()
    correct = torch.bincount(g, weights=(pred == y).double(), minlength=G)
    cm = torch.bincount((g * k + y) * k + pred, minlength=G * k * k).view(G, k, k).double()
    tp = cm.diagonal(dim1=1, dim2=2)
    support = cm.sum(2)
    denom = support + cm.sum(1)
    f1 = torch.where(denom > 0, 2 * tp / denom.clamp(min=1), torch.zeros_like(tp))
    # undefined, as ROC-AUC: macro F1 on a group whose labels hold one class (every prediction right
    # scores 1 on that class and 0 on the others), a class's F1 on a group without that class's items
    one_class = (support > 0).sum(1) < 2
    auc = _grouped_roc_auc_ovr(scores, y, g, G, k) if "roc_auc" in names else None
    ap = (_grouped_average_precision(torch.softmax(scores.double(), -1)[:, minority], y == minority, g, G)
          if "pr_auc" in names else None)
    nan = float("nan")
    out = []
    for i in range(G):
        if n[i] == 0:
            out.append({m: nan for m in names})
            continue
        row = {"accuracy": float(correct[i] / n[i]), "f1_macro": nan if one_class[i] else float(f1[i].mean()),
               "f1_minority": float(f1[i, minority]) if support[i, minority] > 0 else nan,
               "roc_auc": float(auc[i]) if auc is not None else None,
               "pr_auc": float(ap[i]) if ap is not None else None}
        out.append({m: row[m] for m in names})
    return out


def _grouped_roc_auc_ovr(scores: torch.Tensor, y: torch.Tensor, g: torch.Tensor, G: int, k: int) -> torch.Tensor:
    """Macro one-vs-rest ROC-AUC per group (binary: of class 1), nan where a group's labels have fewer
    than two classes or (k > 2) miss a class, as sklearn and ``_roc_auc_ovr``. All (class, group) pairs
    are ranked in one stable sort; ties get their average rank (Mann-Whitney U)."""
    nan = torch.full((G,), float("nan"), dtype=torch.double)
    if y.numel() == 0:
        return nan
    prob = torch.softmax(scores.double(), -1)
    cols = [1] if k == 2 else list(range(k))
    c = len(cols)
    s = prob[:, cols].t().reshape(-1)                                  # class-major: [c * n]
    key = (torch.arange(c).repeat_interleave(y.numel()) * G + g.repeat(c))   # (class, group) id
    pos = (y[None, :] == torch.tensor(cols)[:, None]).reshape(-1)
    order = torch.argsort(s, stable=True)
    order = order[torch.argsort(key[order], stable=True)]              # by key, then score
    ks, ss, ps = key[order], s[order], pos[order]
    new_run = torch.ones_like(ks, dtype=torch.bool)
    new_run[1:] = (ks[1:] != ks[:-1]) | (ss[1:] != ss[:-1])
    run = torch.cumsum(new_run.long(), 0) - 1
    counts = torch.bincount(run).double()
    ends = torch.cumsum(counts, 0)
    avg_pos = (ends - (counts - 1) / 2)[run]                           # 1-based, averaged over ties
    size = torch.bincount(ks, minlength=c * G).double()
    start = torch.cumsum(size, 0) - size                                # items before each key
    rank = avg_pos - start[ks]
    n_pos = torch.bincount(ks, weights=ps.double(), minlength=c * G)
    n_neg = size - n_pos
    rank_sum = torch.bincount(ks, weights=rank * ps.double(), minlength=c * G)
    auc = ((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).view(c, G)
    classes_present = torch.zeros(G, k, dtype=torch.bool)
    classes_present[g, y] = True
    bad = (classes_present.sum(1) < 2) | (((n_pos == 0) | (n_neg == 0)).view(c, G).any(0) if k > 2 else False)
    total = auc[0]
    for row in auc[1:]:          # left to right, as the per-client sum, so values match to the last bit
        total = total + row
    return torch.where(bad, nan, total / c)


# Every run draws its bootstrap resamples from this one stream over its distinct test items (sorted by id):
# two runs on the same test items (two methods of one seed, or seeds that share the split) get the same
# resamples, so a replicate's difference between them is a paired resample of the difference (fgx/tables/stats.py)
SAMPLING_SEED = 0
SAMPLING_REPS = 200


def _resample_counts(gen: torch.Generator, r: int, n_distinct: int) -> torch.Tensor:
    """[r, n_distinct] draw counts: each replicate draws n_distinct items with replacement."""
    draw = (torch.rand(r, n_distinct, generator=gen, dtype=torch.double) * n_distinct).long()
    draw += torch.arange(r).unsqueeze(1) * n_distinct
    return torch.bincount(draw.reshape(-1), minlength=r * n_distinct).view(r, n_distinct)


def _distinct(items: torch.Tensor | None, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted distinct ids, each copy's position among them); without ids each copy is its own item."""
    if items is None:
        return torch.arange(n), torch.arange(n)
    return torch.unique(items.long().cpu(), return_inverse=True)


def copy_draws(items: torch.Tensor, reps: int, seed: int = SAMPLING_SEED) -> torch.Tensor:
    """[reps, copies] how often each replicate of the shared stream draws each copy's item (``items``: each
    copy's item id): the first ``reps`` draws :func:`bootstrap_replicates` makes on these items."""
    _, pos = _distinct(items, items.numel())
    return _resample_counts(torch.Generator().manual_seed(seed), reps, int(pos.max()) + 1)[:, pos]


def bootstrap_replicates(scores: torch.Tensor, labels: torch.Tensor, group: torch.Tensor, num_groups: int,
                         num_classes: int, minority: int, names: tuple[str, ...] = CLASSIFICATION,
                         items: torch.Tensor | None = None, reps: int = SAMPLING_REPS, max_items: int = 2_000_000,
                         seed: int = SAMPLING_SEED, chunk_items: int = 1 << 16) -> dict[str, np.ndarray]:
    """Bootstrap replicates of the mean-over-clients metrics over the split's items: each replicate draws
    the distinct items (``items``: each copy's item id, e.g. its global node id) with replacement, and
    every copy of an item (a node two overlapping clients hold) carries its item's draw count, so an item
    is resampled once, not once per client that holds it. Without ``items`` each copy is an item.
    Resamples are scored by :func:`grouped_classification_metrics` (replicate r, client c is group
    r·G + c), as many at once as hold at most ``chunk_items`` items (at least one): memory stays bounded
    on million-item splits, and the draws and results do not depend on it. ``reps`` shrinks so that at
    most ``max_items`` items are scored (at least 20). A client without items in a replicate is skipped
    by its mean, as in the run's own mean. Not scipy.stats.bootstrap: it resamples one sample per call,
    and here the draws are shared across runs (SAMPLING_SEED) and scored by the grouped metric in one pass."""
    n = labels.numel()
    if n == 0:
        return {m: np.full(0, np.nan) for m in names}
    reps = max(20, min(reps, max_items // n))
    g = group.long().cpu()
    scores, labels = scores.detach().cpu(), labels.cpu()
    _, pos = _distinct(items, n)
    n_distinct = int(pos.max()) + 1
    gen = torch.Generator().manual_seed(seed)
    per_pass = max(1, min(reps, chunk_items // n))
    means = []
    for first in range(0, reps, per_pass):
        r = min(per_pass, reps - first)
        copies = _resample_counts(gen, r, n_distinct)[:, pos].reshape(-1)     # [r * n] draws of each copy
        flat = torch.repeat_interleave(torch.arange(r * n), copies)
        idx, rep = flat % n, flat // n
        rows = grouped_classification_metrics(scores[idx], labels[idx], rep * num_groups + g[idx], r * num_groups,
                                              num_classes, minority, names)
        means += [mean_over_clients(rows[q * num_groups:(q + 1) * num_groups]) for q in range(r)]
    return {m: np.array([x[m] if x.get(m) is not None else np.nan for x in means], dtype=float) for m in names}


def bootstrap_item_means(values: dict[str, torch.Tensor], group: torch.Tensor, num_groups: int,
                         items: torch.Tensor | None = None, reps: int = SAMPLING_REPS,
                         seed: int = SAMPLING_SEED, chunk_items: int = 1 << 20) -> dict[str, np.ndarray]:
    """Bootstrap replicates of a mean over clients of per-item means (a ranking metric: the mean over a
    client's users; a regression error: the mean over test rows), with the draws of
    :func:`bootstrap_replicates`: distinct items (``items``: a user's or a row's id) resampled once
    whatever the number of clients holding them; at most ``chunk_items`` weights held at once."""
    g = group.long().cpu()
    n = g.numel()
    if n == 0:
        return {m: np.full(0, np.nan) for m in values}
    _, pos = _distinct(items, n)
    n_distinct = int(pos.max()) + 1
    gen = torch.Generator().manual_seed(seed)
    vals = {m: v.detach().double().cpu().reshape(-1) for m, v in values.items()}
    out: dict[str, list] = {m: [] for m in values}
    per_pass = max(1, min(reps, chunk_items // n))
    for first in range(0, reps, per_pass):
        r = min(per_pass, reps - first)
        counts = _resample_counts(gen, r, n_distinct)[:, pos].double()           # [r, n]
        for m, v in vals.items():
            ok = ~torch.isnan(v)
            c = counts[:, ok]
            total = torch.zeros(r, num_groups, dtype=torch.double).index_add_(1, g[ok], c * v[ok])
            w = torch.zeros(r, num_groups, dtype=torch.double).index_add_(1, g[ok], c)
            per_client = torch.where(w > 0, total / w.clamp(min=1e-300), torch.full_like(total, float("nan")))
            with np.errstate(all="ignore"):
                out[m].append(np.nanmean(per_client.numpy(), axis=1))
    return {m: np.concatenate(v) for m, v in out.items()}


def bootstrap_standard_error(scores: torch.Tensor, labels: torch.Tensor, group: torch.Tensor, num_groups: int,
                             num_classes: int, minority: int, names: tuple[str, ...] = CLASSIFICATION,
                             reps: int = 100, max_items: int = 2_000_000, seed: int = 0,
                             chunk_items: int = 1 << 16, items: torch.Tensor | None = None) -> dict[str, float]:
    """The sampling error of the mean-over-clients metrics on this split: the standard deviation of
    :func:`bootstrap_replicates`."""
    reps_ = bootstrap_replicates(scores, labels, group, num_groups, num_classes, minority, names, items, reps,
                                 max_items, seed, chunk_items)
    return {m: replicate_sd(v) for m, v in reps_.items()}


def replicate_sd(v: np.ndarray) -> float:
    v = np.asarray(v, dtype=float)
    v = v[~np.isnan(v)]
    return float(v.std(ddof=1)) if v.size > 1 else float("nan")


def encode_replicates(v: np.ndarray) -> dict:
    """Replicates as a record keeps them: their mean, and each one's deviation from it as little-endian
    float16 in base64 (200 replicates in ~0.5 kB). The deviations are what a test's variance is made of;
    float16 keeps them to ~1e-3 of their size, far below any variance a table compares."""
    import base64

    v = np.asarray(v, dtype=float)
    mean = float(np.nanmean(v)) if v.size and not np.isnan(v).all() else float("nan")
    return {"m": mean, "d": base64.b64encode((v - mean).astype("<f2").tobytes()).decode("ascii")}


def decode_replicates(kept: dict) -> np.ndarray:
    import base64

    return kept["m"] + np.frombuffer(base64.b64decode(kept["d"]), dtype="<f2").astype(float)


def split_key(items: torch.Tensor | None) -> str | None:
    """A short hash of the distinct test items' ids: runs with the same key were scored on the same items
    (the same split), so their resamples are joint. None when the items have no ids."""
    import hashlib

    if items is None:
        return None
    ids = torch.unique(items.long().cpu()).numpy().astype("<i8")
    return hashlib.sha256(ids.tobytes()).hexdigest()[:12]
