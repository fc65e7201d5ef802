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
    assert m["pr_auc"] == pytest.approx(average_precision_score(y == 1, prob[:, 1]), abs=1e-12)


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
    from fgx.metrics import clients_skipped

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

    assert "f1_minority" in metric_names(None, 2) and "f1_minority" not in metric_names(None, 7)
    assert "pr_auc" in metric_names(None, 2) and "pr_auc" not in metric_names(None, 7)
    assert metric_names(None, 7, main_metric="pr_auc") == ("accuracy", "f1_macro", "roc_auc", "pr_auc")
    assert metric_names(None, 7, main_metric="f1_minority") == ("accuracy", "f1_macro", "f1_minority", "roc_auc")
    assert metric_names(["accuracy", "f1_minority"], 7) == ("accuracy", "f1_minority")
    assert metric_names(["accuracy"], 2, main_metric="roc_auc") == ("accuracy", "roc_auc")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [2, 3])
def test_pr_auc_equals_sklearn_average_precision_with_ties(dtype, k):
    """PR-AUC is sklearn's average_precision_score of the minority class scored by its softmax probability
    (one threshold per distinct score), whatever the logits' dtype, on ties of every size and rare positives."""
    g = torch.Generator().manual_seed(7 + k)
    for trial in range(40):
        n = int(torch.randint(1, 400, (1,), generator=g))
        minority = int(torch.randint(0, k, (1,), generator=g))
        rate = float(torch.rand(1, generator=g)) * 0.3
        y = torch.where(torch.rand(n, generator=g) < rate, minority, (minority + 1) % k)
        scores = (torch.randn(n, k, generator=g, dtype=torch.float64) * 2).to(dtype)
        if trial % 2:
            scores = scores.round(decimals=trial % 3)              # many ties, runs of positives and negatives
        positive = (y == minority).numpy()
        prob = torch.softmax(scores.float().double(), -1)[:, minority].numpy()   # the evaluator scores float32 logits
        m = classification_metrics(scores, y, k, minority)
        if not positive.any():
            assert np.isnan(m["pr_auc"])                           # sklearn: 0 and a warning; here undefined
            continue
        assert m["pr_auc"] == pytest.approx(average_precision_score(positive, prob), abs=1e-12), trial


def test_pr_auc_by_hand():
    """Scores 0.9 (+), 0.8 (-), 0.8 (+), 0.1 (-), 0.1 (+): thresholds at each distinct score give precision
    1 at recall 1/3, 2/3 at recall 2/3 (the tie at 0.8 counts both items at once), 3/5 at recall 1:
    AP = (1 + 2/3 + 3/5) / 3."""
    from fgx.metrics import average_precision

    score = torch.tensor([0.9, 0.8, 0.8, 0.1, 0.1])
    positive = torch.tensor([True, False, True, False, True])
    assert average_precision(score, positive) == pytest.approx((1 + 2 / 3 + 3 / 5) / 3, abs=1e-15)
    assert average_precision(score[torch.tensor([1, 0, 4, 2, 3])], positive[torch.tensor([1, 0, 4, 2, 3])]) == \
        pytest.approx((1 + 2 / 3 + 3 / 5) / 3, abs=1e-15)     # the order items come in does not matter
    assert np.isnan(average_precision(score, torch.zeros(5, dtype=torch.bool)))
    assert average_precision(torch.ones(4), torch.tensor([True, False, False, False])) == 0.25   # one tie: the rate


def test_grouped_pr_auc_nan_for_a_group_without_positives_and_equal_to_each_group_alone():

    g = torch.Generator().manual_seed(3)
    n, G = 500, 5
    group = torch.randint(0, G, (n,), generator=g)
    y = (torch.rand(n, generator=g) < 0.1).long()
    y[group == 2] = 0                                             # a client without a positive item
    scores = torch.randn(n, 2, generator=g).round(decimals=1)
    rows = grouped_classification_metrics(scores, y, group, G, 2, minority=1, names=("pr_auc",))
    assert np.isnan(rows[2]["pr_auc"]) and all(set(r) == {"pr_auc"} for r in rows)
    for i in (0, 1, 3, 4):
        m = group == i
        alone = grouped_classification_metrics(scores[m], y[m], torch.zeros(int(m.sum()), dtype=torch.long), 1, 2, 1,
                                                names=("pr_auc",))[0]["pr_auc"]
        prob = torch.softmax(scores[m].double(), -1)[:, 1].numpy()
        assert rows[i]["pr_auc"] == alone
        assert alone == pytest.approx(average_precision_score(y[m].numpy() == 1, prob), abs=1e-12)
