"""Mechanism diagnostics (issue #38): each personalised, regularised or noisy method writes the number
that shows its mechanism acting to metrics.jsonl; summary.json keeps last/min/max and `fgx report`
shows them as columns."""
import json

import pytest
import torch


def _rows(run, split="test"):
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if json.loads(l)["split"] == split]


def test_fedprox_regulariser_share_is_the_proximal_term_of_the_received_updates(recorded, run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=fedprox", "algorithm.mu=0.5", "rounds=1")
    row = _rows(run)[0]
    prox = [0.5 * 0.5 * sum(float(v.double().pow(2).sum()) for v in p.values() if v.is_floating_point())
            for k, p, *_ in recorded["sent"] if k == "update"]
    assert row["regulariser_share"] == pytest.approx(sum(prox) / len(prox) / row["train_loss"], rel=1e-4)
    assert row["regulariser_share"] > 0
    zero = _rows(run_fgx(*tiny_cfg, "algorithm=fedprox", "algorithm.mu=0", "rounds=1"))[0]
    assert zero["regulariser_share"] == 0.0


def test_fedgta_accepted_sets_and_weight_spread_follow_its_w(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "algorithm=fedgta", "rounds=2")
    recs = [json.loads(l) for l in (run / "fedgta_weights.jsonl").read_text().splitlines()]
    for row in _rows(run):
        W = torch.tensor(recs[row["round"] - 1]["W"], dtype=torch.float64)
        assert row["accepted_set_mean"] == pytest.approx(float((W > 0).sum(1).double().mean()))
        assert row["agg_weight_max_x_uniform"] == pytest.approx(float(W.max()) * W.size(0), rel=1e-5)
    s = json.loads((run / "summary.json").read_text())
    assert s["diagnostics"]["accepted_set_mean"]["last"] == _rows(run)[-1]["accepted_set_mean"]


def test_dp_fedavg_noise_to_signal_scales_with_the_noise(run_fgx, tiny_cfg):
    """Round 1 releases the same clipped updates whatever z is, and the same noise draws times z."""
    def nts(z):
        run = run_fgx(*tiny_cfg, "privacy=dp_fedavg", "algorithm.weighting=uniform", f"privacy.noise_multiplier={z}",
                      "rounds=1")
        return _rows(run)[0]["noise_to_signal"]
    a, b = nts(0.5), nts(1.5)
    assert a > 0 and b == pytest.approx(3 * a, rel=1e-6)


RECSYS = ["dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120", "dataset.mean_degree=12",
          "partitioner=random_users", "partitioner.num_clients=3", "rounds=2", "eval_every=2",
          "output.checkpoint=false", "model.dim=16"]


def test_regularised_recommenders_report_their_regulariser_share(run_fgx):
    TINY = RECSYS
    rap = _rows(run_fgx(*TINY, "algorithm=fedrap", "algorithm.local_epochs=1", "algorithm.schedule=fixed",
                        "eval_every=1"))
    assert all(0 < r["regulariser_share"] < 1 for r in rap)
    fair = run_fgx(*TINY, "algorithm=f2mf", "algorithm.local_epochs=1", "rounds=2", "eval_every=1")
    rows = _rows(fair)
    assert rows[0]["regulariser_share"] == 0.0          # round 1: no global group statistics yet
    assert rows[1]["regulariser_share"] > 0 and "fairness_gap" in rows[1]


def test_fgx_report_shows_the_diagnostics(run_fgx, tiny_cfg, tmp_path):
    from fgx.report.runs import find_runs
    from fgx.report.table import build_report, cells

    run_fgx(*tiny_cfg, "algorithm=fedpub", "rounds=1")
    run_fgx(*tiny_cfg, "algorithm=fedprox", "rounds=1")
    rep = build_report(find_runs([tmp_path]), by=["algorithm"])
    header, rows = cells(rep)
    assert {"agg_weight_min_x_uniform", "agg_weight_max_x_uniform", "regulariser_share"} <= set(header)
    assert all(len(r) == len(header) for r in rows)
