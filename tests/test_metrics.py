import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

from fgx.metrics import (
    classification_metrics,
    grouped_classification_metrics,
    mean_over_clients,
    metric_names,
    minority_class,
)


@pytest.mark.parametrize("k,n,seed", [(2, 200, 0), (2, 57, 1), (5, 300, 2), (7, 1000, 3)])
def test_metrics_equal_sklearn(k, n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, k, (n,), generator=g)
    y[:k] = torch.arange(k)
    scores = torch.randn(n, k, generator=g) + torch.nn.functional.one_hot(y, k) * 0.8
    scores[::7] = torch.round(scores[::7])            # ties in the scores
    m = classification_metrics(scores, y, k, minority=1)
    pred = scores.argmax(-1).numpy()
    assert m["accuracy"] == pytest.approx((pred == y.numpy()).mean())
    assert m["f1_macro"] == pytest.approx(f1_score(y, pred, average="macro", labels=list(range(k)), zero_division=0))
    assert m["f1_minority"] == pytest.approx(f1_score(y, pred, labels=[1], average="macro", zero_division=0))
    prob = torch.softmax(scores.double(), -1).numpy()
    ref = roc_auc_score(y, prob[:, 1]) if k == 2 else roc_auc_score(y, prob, multi_class="ovr", labels=list(range(k)))
    assert m["roc_auc"] == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(6))
def test_pr_auc_equals_sklearns_average_precision_per_client(dtype, seed):
    """PR-AUC of the minority class, each group on its own, equals sklearn's average_precision_score on the
    same softmax probabilities: ties (rounded scores) form one threshold; a group without a positive is nan."""
    g = torch.Generator().manual_seed(seed)
    n, G, minority = 400, 4, 1
    y = (torch.rand(n, generator=g) < 0.1).long()
    group = torch.randint(0, G, (n,), generator=g)
    y[group == 3] = 0                                   # a client without laundering: undefined
    scores = (torch.randn(n, 2, generator=g) + torch.nn.functional.one_hot(y, 2) * 0.7).to(dtype)
    if seed % 2:
        scores = torch.round(scores * 2) / 2            # many tied scores
    rows = grouped_classification_metrics(scores, y, group, G, 2, minority)
    prob = torch.softmax(scores.float().double(), -1)[:, minority].numpy()
    for i in range(G):
        m = (group == i).numpy()
        if i == 3:
            assert np.isnan(rows[i]["pr_auc"])
            continue
        assert rows[i]["pr_auc"] == pytest.approx(average_precision_score(y.numpy()[m], prob[m]), abs=1e-12)
    whole = classification_metrics(scores, y, 2, minority)
    assert whole["pr_auc"] == pytest.approx(average_precision_score(y.numpy(), prob), abs=1e-12)


def test_pr_auc_by_hand_and_only_for_binary_tasks_by_default():
    # scores 0.9 (+), 0.8 (-), 0.7 (+), 0.1 (-): precision 1 at recall 1/2, 2/3 at recall 1 -> AP = 5/6
    p = torch.tensor([0.9, 0.8, 0.7, 0.1])
    logits = torch.stack([torch.zeros(4), torch.log(p / (1 - p))], 1)
    y = torch.tensor([1, 0, 1, 0])
    assert grouped_classification_metrics(logits, y, torch.zeros(4), 1, 2, 1)[0]["pr_auc"] == pytest.approx(5 / 6)
    assert "pr_auc" in metric_names(None, 2) and "pr_auc" not in metric_names(None, 5)
    assert "pr_auc" in metric_names(["pr_auc"], 5)


def test_undefined_metrics_are_nan_and_skipped_in_means():
    m = classification_metrics(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), 2, 1)
    assert np.isnan(m["roc_auc"]) and m["accuracy"] == 1.0
    empty = classification_metrics(torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), 2, 1)
    assert all(np.isnan(v) for v in empty.values())
    assert mean_over_clients([m, empty])["accuracy"] == 1.0


def test_minority_class_is_the_rarest_training_label():
    assert minority_class(torch.tensor([0, 0, 0, 1, 2, 2]), 3) == 1


@pytest.mark.parametrize("k", [2, 3, 7])
def test_grouped_metrics_equal_the_per_client_ones_bit_for_bit(k):
    """The evaluator scores all clients in one call; each client's values must be exactly what the
    per-client function (checked against sklearn above) gives, ties, empty and one-class clients included."""
    from fgx.metrics import grouped_classification_metrics

    g = torch.Generator().manual_seed(k)
    for trial in range(12):
        G, n = 6, int(torch.randint(0, 80, (1,), generator=g))
        group = torch.randint(0, G - 1, (n,), generator=g)          # the last client has no items
        y = torch.randint(0, k, (n,), generator=g)
        y[group == 1] = 0                                          # a one-class client
        scores = torch.randn(n, k, generator=g).round(decimals=1)  # many ties
        got = grouped_classification_metrics(scores, y, group, G, k, minority=k - 1)
        for i in range(G):
            m = group == i
            ref = classification_metrics(scores[m], y[m], k, k - 1)
            for key, v in ref.items():
                assert (v != v and got[i][key] != got[i][key]) or v == got[i][key], (trial, i, key)
    only = grouped_classification_metrics(scores, y, group, G, k, k - 1, names=("accuracy",))
    assert all(set(r) == {"accuracy"} for r in only)


def test_a_one_class_client_has_no_f1_and_the_mean_says_it_skipped_it():
    """Issue #66: under label skew a client whose test split holds one class scored accuracy 1, macro F1
    0.5 and minority F1 0, and those two dragged the means over clients. Both are undefined there now
    (as ROC-AUC), the means leave such clients out, and clients_skipped counts them."""
    from fgx.metrics import clients_skipped, grouped_classification_metrics

    y = torch.tensor([0, 0, 0, 0, 1, 0, 1])
    group = torch.tensor([0, 0, 0, 1, 1, 2, 2])       # client 0: one class (the majority), all right
    scores = torch.nn.functional.one_hot(y, 2).float()
    pc = grouped_classification_metrics(scores, y, group, 3, 2, minority=1)
    assert pc[0]["accuracy"] == 1.0
    assert all(np.isnan(pc[0][m]) for m in ("f1_macro", "f1_minority", "roc_auc", "pr_auc"))
    assert pc[1]["f1_macro"] == 1.0 and pc[1]["f1_minority"] == 1.0
    assert mean_over_clients(pc)["f1_macro"] == 1.0 and mean_over_clients(pc)["accuracy"] == 1.0
    assert clients_skipped(pc) == {"f1_macro": 1, "f1_minority": 1, "roc_auc": 1, "pr_auc": 1}
    # a one-class client of the minority class: its minority F1 is defined, macro F1 is not
    only_minority = classification_metrics(torch.tensor([[0.0, 1.0]]), torch.tensor([1]), 2, 1)
    assert only_minority["f1_minority"] == 1.0 and np.isnan(only_minority["f1_macro"])


def test_f1_minority_is_computed_for_binary_tasks_only_unless_named():
    from fgx.metrics import metric_names

    assert "f1_minority" in metric_names(None, 2) and "f1_minority" not in metric_names(None, 7)
    assert metric_names(None, 7, main_metric="f1_minority") == ("accuracy", "f1_macro", "f1_minority", "roc_auc")
    assert metric_names(["accuracy", "f1_minority"], 7) == ("accuracy", "f1_minority")
    assert metric_names(["accuracy"], 2, main_metric="roc_auc") == ("accuracy", "roc_auc")
