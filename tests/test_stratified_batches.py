"""Class-stratified batches (algorithm.positive_share): k rare items in every batch, loss weights corrected so
that a batch's weighted loss is the uniform batch's in expectation."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fgx.federation.stratified import stratified_batches


def _labels(n=5000, rare=40, seed=0):
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:rare]] = 1
    return y


def test_every_batch_holds_k_rare_items_without_repeats():
    y = _labels()
    plan = stratified_batches(y, 256, 0.1)
    assert plan.k == 26 and plan.correction.tolist() == pytest.approx([(1 - 40 / 5000) / (1 - 26 / 256), (40 / 5000) / (26 / 256)])
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        pick = plan.draw(g)
        assert pick.numel() == 256 and pick.unique().numel() == 256 and int(y[pick].sum()) == 26


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_corrected_weighted_loss_is_the_uniform_batchs_in_expectation(dtype):
    """Per-item losses l and class weights w: E over uniform batches of sum(w_y l) equals E over stratified
    batches of sum(w_y c_y l) (c the correction), exactly, computed over the item distribution of each scheme."""
    y = _labels(n=2000, rare=30, seed=2)
    loss = torch.rand(2000, generator=torch.Generator().manual_seed(3), dtype=dtype)
    w = torch.tensor([1.0, 6.275], dtype=dtype)
    b = 128
    plan = stratified_batches(y, b, 0.2)
    c = plan.correction.to(dtype)
    uniform = b * (w[y] * loss).mean()                                   # each item in a batch w.p. b / n
    rare, common = y == 1, y == 0
    strat = plan.k * (w[1] * c[1] * loss[rare]).mean() + (b - plan.k) * (w[0] * c[0] * loss[common]).mean()
    assert strat.item() == pytest.approx(uniform.item(), rel=1e-6 if dtype == torch.float32 else 1e-12)
    # and the weight sum (the weighted mean's denominator) is the uniform batch's expected one, every batch
    assert (plan.k * w[1] * c[1] + (b - plan.k) * w[0] * c[0]).item() == pytest.approx(
        (b * w[y].mean()).item(), rel=1e-6)


def test_uniform_where_stratifying_means_nothing():
    y = _labels()
    assert stratified_batches(y, 256, None) is None                      # not asked for
    assert stratified_batches(y, None, 0.1) is None                      # full batches
    assert stratified_batches(torch.zeros(100, dtype=torch.long), 16, 0.1) is None     # one class only
    assert stratified_batches(torch.randint(0, 3, (100,)), 16, 0.1) is None             # not binary
    assert stratified_batches(torch.rand(100), 16, 0.1) is None                         # regression targets
    few = stratified_batches(_labels(n=300, rare=3), 64, 0.5)
    assert few.k == 3                                                    # at most the rare items there are


def test_a_run_with_positive_share_trains_on_stratified_batches(run_fgx, monkeypatch):
    """In a FedAvg run on AML, every local batch holds round(share x batch) laundering transactions."""
    import fgx.federation.client as client

    seen: list[int] = []
    real = client.sampled_forward

    def spy(state, seeds, fanouts, generator):
        logits, y = real(state, seeds, fanouts, generator)
        seen.append(int(y.sum()))
        return logits, y
    monkeypatch.setattr(client, "sampled_forward", spy)
    run_fgx("algorithm=fedavg", "dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2",
            "model.hidden=8", "algorithm.local_steps=4", "algorithm.batch_size=40", "algorithm.fanouts=[3,3]",
            "algorithm.positive_share=0.25", "rounds=1", "output.checkpoint=false")
    assert len(seen) == 8 and set(seen) == {10}


def test_the_run_weights_the_loss_by_the_correction(run_fgx, monkeypatch):
    """The class weights a stratified step hands the cross-entropy are the configured ones times rate/share."""
    import fgx.federation.client as client

    weights: list[list[float]] = []
    labels: list[torch.Tensor] = []
    real_ce = torch.nn.functional.cross_entropy
    real_targets = client.targets

    def ce(out, y, weight=None, **kw):
        weights.append(weight.tolist())
        return real_ce(out, y, weight=weight, **kw)

    def targets(view, task, split):
        mask, y = real_targets(view, task, split)
        labels.append(y)
        return mask, y
    monkeypatch.setattr(client.nn.functional, "cross_entropy", ce)
    monkeypatch.setattr(client, "targets", targets)
    run_fgx("algorithm=fedavg", "dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2",
            "model.hidden=8", "algorithm.local_steps=2", "algorithm.batch_size=40", "algorithm.fanouts=[3,3]",
            "algorithm.positive_share=0.25", "algorithm.class_weights=[1.0,6.0]", "rounds=1",
            "output.checkpoint=false", "eval.splits=[test]")
    assert len(weights) == 4
    train = [y for y in labels if y.numel()][:2]          # each client's training labels, in client order
    for client_y, w in zip(train, weights[::2]):
        p = float(client_y.float().mean())
        assert w == pytest.approx([1.0 * (1 - p) / (1 - 0.25), 6.0 * p / 0.25], rel=1e-6)


def test_ce_fedgnn_steps_on_stratified_batches_with_the_corrected_weights(run_fgx, monkeypatch):
    """CE-FedGNN's own step loop draws the same stratified batches and corrected loss weights."""
    import fgx.algorithms.ce_fedgnn as ce

    weights: list[list[float]] = []
    positives: list[int] = []
    real_ce = torch.nn.functional.cross_entropy

    def spy(out, y, weight=None, **kw):
        if kw.get("reduction") == "none":          # the training step's loss (evaluation reduces)
            weights.append(weight.tolist())
            positives.append(int(y.sum()))
        return real_ce(out, y, weight=weight, **kw)
    monkeypatch.setattr(ce.nn.functional, "cross_entropy", spy)
    run_fgx("algorithm=ce_fedgnn", "dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2",
            "model.hidden=8", "algorithm.local_steps=3", "algorithm.batch_size=40", "algorithm.fanouts=[3,3]",
            "algorithm.positive_share=0.25", "algorithm.class_weights=[1.0,6.0]", "rounds=1", "output.checkpoint=false")
    assert len(positives) == 6 and set(positives) == {10}
    for w in weights:
        assert w[0] > 1.0 and w[1] < 6.0 * 0.5          # (1 - p)/(1 - q) > 1 and 6 p / q with p < 1/8


@pytest.mark.parametrize("algo,extra,why", [
    ("fedavg", [], "null with full batches"),
    ("ce_fedgnn", ["algorithm.batch_size=null"], "null with full batches"),
])
def test_a_share_that_would_change_nothing_is_refused_before_training(tmp_path, algo, extra, why):
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "fgx.cli", "run", f"algorithm={algo}", "dataset=aml_tiny",
                          "dataset.scale=0.25", "algorithm.positive_share=0.2", "rounds=1", "data_dir=.", *extra],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert res.returncode != 0 and why in res.stderr + res.stdout
