"""Whether a run learned: its task's headline number at the end of the run (summary.json's `final`, test
split, mean over clients) against what a model that learned nothing scores, by a stated margin.

| main metric | trivial baseline | learns when |
|---|---|---|
| accuracy | the test split's majority-class rate (`data.test_majority_rate`) | accuracy > baseline + 0.05 |
| roc_auc | 0.5 (a constant score) | ROC-AUC > 0.55 |
| f1_minority | flagging every item: F1 = 2p / (1 + p), p the minority rate | F1 > baseline + 0.05 |
| pr_auc | a constant score: average precision = p, the minority rate | PR-AUC > baseline + 0.05 |
| ndcg@20 | a random ranking (about 0.01 on MovieLens-100K) | NDCG@20 > 0.05 |
| mse | predicting the training targets' mean (`data.test_mean_mse`) | MSE < 0.95 x baseline |

A run that diverged (fgx/divergence.py) or failed did not learn, whatever its numbers. The learns-by-
default matrix (scripts/defaults_matrix.py, docs/defaults.md) computes every status with :func:`judge`."""
from __future__ import annotations

MARGIN = 0.05          # accuracy / ROC-AUC / minority-F1 points above the trivial baseline
NDCG_FLOOR = 0.05      # ranking: five times a random ranking's NDCG@20 on MovieLens-100K
MSE_SHARE = 0.95       # regression: at least 5 % below the mean predictor's MSE


def baseline(summary: dict) -> tuple[str, float | None, float | None, bool]:
    """(metric, trivial baseline, threshold, higher_is_better) for a run's main metric."""
    metric, data = summary.get("main_metric"), summary.get("data") or {}
    if metric == "accuracy":
        b = data.get("test_majority_rate")
        return metric, b, None if b is None else b + MARGIN, True
    if metric == "roc_auc":
        return metric, 0.5, 0.5 + MARGIN, True
    if metric == "f1_minority":
        maj = data.get("test_majority_rate")
        if maj is None:
            return metric, None, None, True
        p = 1.0 - maj
        b = 2 * p / (1 + p)
        return metric, b, b + MARGIN, True
    if metric == "pr_auc":       # binary: the minority rate is what the majority leaves
        maj = data.get("test_majority_rate")
        b = None if maj is None else 1.0 - maj
        return metric, b, None if b is None else b + MARGIN, True
    if metric and metric.startswith("ndcg"):
        return metric, None, NDCG_FLOOR, True
    if metric == "mse":
        b = data.get("test_mean_mse")
        return metric, b, None if b is None else MSE_SHARE * b, False
    return metric, None, None, True


def judge(summary: dict) -> dict:
    """``{"status": learns | does not learn | diverged | failed, "metric", "value", "baseline", "threshold"}``."""
    metric, b, threshold, higher = baseline(summary)
    value = (summary.get("final") or {}).get(metric)
    out = {"metric": metric, "value": value, "baseline": b, "threshold": threshold}
    status = summary.get("status")
    if status in ("diverged", "failed"):
        return {**out, "status": status}
    if status != "completed" or threshold is None or not isinstance(value, (int, float)) or value != value:
        return {**out, "status": "does not learn"}
    ok = value > threshold if higher else value < threshold
    return {**out, "status": "learns" if ok else "does not learn"}
