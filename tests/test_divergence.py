"""A run whose training loss diverges says so in its log and in summary.json (issue #38: the
documented DP-FedAvg command diverged silently), stops there and ends with status diverged: `fgx run`
exits 1, `fgx report` lists it apart from failed runs and never in a mean (issue #66)."""
import json
import math

from fgx.divergence import DivergenceWatch


def test_watch_flags_growth_and_non_finite_once():
    w = DivergenceWatch(factor=10.0)
    assert w.update(1, 1.5) is None and w.update(2, 14.0) is None      # within 10x of round 1
    assert w.update(3, 16.0) is None and w.update(4, 20.0) is None     # past it: rounds 1 and 2 in a row
    note = w.update(5, 17.0)                                          # the third
    assert "round 5" in note and w.event["round"] == 5 and w.event["first_loss"] == 1.5
    assert w.update(6, math.inf) is None                                # said once
    w2 = DivergenceWatch()
    assert w2.update(1, None) is None and w2.update(2, math.nan) is not None   # no finite loss yet: nan counts
    w3 = DivergenceWatch()
    assert w3.update(1, -0.5) is None and w3.update(2, -51.0) is not None      # 100x at once, either sign
    # a spike that comes back (FedSSP's consensus term switching on at tau 1000) is not divergence
    w4 = DivergenceWatch(cap=math.log(2))
    assert all(w4.update(r, x) is None for r, x in enumerate([0.63, 16.9, 7.0, 3.2, 2.3, 1.6], 1))
    # a classifier's first round that already blew up is measured against ln C, not against itself
    w5 = DivergenceWatch(cap=math.log(4))
    assert w5.update(1, 2e7) is not None and w5.event["round"] == 1 and w5.event["reference"] == math.log(4)
    w6 = DivergenceWatch(cap=math.log(4))
    assert w6.update(1, 13.0) is None and w6.update(2, 13.0) is None and w6.update(3, 14.0) is None
    assert w6.update(4, 14.0) is None and w6.update(5, 14.0) is not None      # 10 x ln 4 = 13.86, three in a row


def test_a_nan_loss_is_divergence_only_when_the_models_hold_a_nan():
    """A round without a training client reports a NaN loss too (mean_loss of none): the trainer counts a
    NaN loss as divergence only when the algorithm's state holds a NaN (tests/test_graph_methods.py runs
    rounds without clients to the end)."""
    import torch

    from fgx.divergence import holds_nan

    assert holds_nan({"global": {"w": torch.tensor([1.0, math.nan])}, "n": 3})
    assert holds_nan({"client_models": [{"w": torch.ones(2)}, {"w": torch.full((2,), math.nan)}]})
    assert not holds_nan({"global": {"w": torch.tensor([1.0, math.inf]), "steps": torch.tensor([3])}, "x": None})


def test_a_diverging_run_says_so_and_a_learning_one_does_not(run_fgx, tiny_cfg, caplog):
    ok = json.loads((run_fgx(*tiny_cfg) / "summary.json").read_text())
    assert ok["status"] == "completed" and "diverged" not in ok
    run = run_fgx(*tiny_cfg, "privacy=dp_fedavg", "algorithm.weighting=uniform", "privacy.noise_multiplier=1000",
                  "rounds=6", expect_rc=1)
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "diverged" and s["diverged"]["round"] >= 2
    assert "training diverged at round" in (run / "fgx.log").read_text()
    # it stopped at the diverged round, whose model was scored once
    rounds = {json.loads(line)["round"] for line in (run / "metrics.jsonl").read_text().splitlines()}
    assert max(rounds) == s["diverged"]["round"] < 6


def test_a_run_at_lr_100_ends_diverged_and_the_report_lists_it_apart(run_fgx, tiny_cfg, tmp_path, capsys):
    from fgx.cli import main

    bad = run_fgx(*tiny_cfg, "algorithm.lr=100", "rounds=5", "seed=1", expect_rc=1)
    s = json.loads((bad / "summary.json").read_text())
    assert s["status"] == "diverged" and s["diverged"]["round"] <= 5, s.get("diverged")
    good = run_fgx(*tiny_cfg, "seed=1")
    capsys.readouterr()
    assert main(["report", str(bad), str(good)]) == 0
    out = capsys.readouterr().out
    table, _, notes = out.partition("run(s) diverged")
    assert "| 1 |" in table and "1 completed run(s)" in table      # the mean holds the completed run only
    assert str(bad) in notes and f"diverged at round {s['diverged']['round']}" in notes
    assert "failed or incomplete" not in notes
    assert main(["report", str(bad)]) == 1                           # nothing completed: nothing to report


def test_a_sweep_lists_its_diverged_jobs_apart_from_failed_ones(tmp_path, monkeypatch, tiny_cfg, capsys):
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["run", "-m", *tiny_cfg, "algorithm.lr=0.01,100", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    err = capsys.readouterr().err
    assert rc == 0 and "1 job(s) diverged" in err and "failed" not in err.split("job(s) diverged")[1], err
    statuses = sorted(json.loads((tmp_path / "sweep" / j / "summary.json").read_text())["status"] for j in "01")
    assert statuses == ["completed", "diverged"]


def test_a_run_that_diverged_on_a_non_finite_loss_is_listed_not_a_traceback():
    """A NaN loss is written to summary.json as null: the table's list of diverged runs still reads it."""
    from pathlib import Path

    from fgx.report.runs import Run
    from fgx.report.table import build_report, problems_text

    s = {"status": "diverged", "main_metric": "accuracy", "final": {"accuracy": 0.1},
         "diverged": {"round": 3, "loss": None, "reference": 1.6}}
    text = problems_text(build_report([Run(Path("r/a"), "diverged", {"method": "a", "seed": "0"}, s)], by=["method"]))
    assert "diverged at round 3: loss nan against 1.6" in text
