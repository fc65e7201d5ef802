"""A run whose training loss diverges says so in its log and in summary.json (issue #38: the
documented DP-FedAvg command diverged silently)."""
import json
import math

from fgx.divergence import DivergenceWatch


def test_watch_flags_growth_and_non_finite_once():
    w = DivergenceWatch(factor=10.0)
    assert w.update(1, 1.5) is None and w.update(2, 14.0) is None      # within 10x of round 1
    note = w.update(3, 16.0)
    assert "round 3" in note and w.event["round"] == 3 and w.event["first_loss"] == 1.5
    assert w.update(4, math.inf) is None                                # said once
    w2 = DivergenceWatch()
    assert w2.update(1, None) is None and w2.update(2, math.nan) is not None   # no finite loss yet: nan counts
    w3 = DivergenceWatch()
    assert w3.update(1, -0.5) is None and w3.update(2, -6.0) is not None       # magnitude, either sign


def test_a_diverging_run_says_so_and_a_learning_one_does_not(run_fgx, tiny_cfg, caplog):
    ok = json.loads((run_fgx(*tiny_cfg) / "summary.json").read_text())
    assert ok["status"] == "completed" and "diverged" not in ok
    run = run_fgx(*tiny_cfg, "privacy=dp_fedavg", "algorithm.weighting=uniform", "privacy.noise_multiplier=1000",
                  "rounds=4")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and s["diverged"]["round"] >= 2
    assert "training diverged at round" in (run / "fgx.log").read_text()
