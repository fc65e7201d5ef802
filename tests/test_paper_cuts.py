"""A newcomer's paper cuts (issue #24, point 5): what fgx prints and writes says what happened."""
from __future__ import annotations

import json
import os
import stat

import pytest

from fgx.cli import main

RANK = ["dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120", "dataset.mean_degree=12",
        "partitioner=random_users", "partitioner.num_clients=3", "rounds=1", "output.checkpoint=false"]


def test_banner_after_unlearning_shows_accuracy_before_and_after(run_fgx, capsys):
    d = run_fgx("algorithm=certified_lr", "unlearning=scalegun", "dataset=csbm", "dataset.num_nodes=300",
                "dataset.num_features=8", "partitioner=random", "partitioner.num_clients=2", "rounds=1",
                "unlearning.requests.num_requests=10")
    out = " ".join(capsys.readouterr().out.split())
    s = json.loads((d / "unlearning.json").read_text())["summary"]
    assert s["initial_test_accuracy"] != s["final_test_accuracy"] or s["requests"] == 10
    assert "before unlearning" in out
    assert (f"test accuracy {s['initial_test_accuracy']:.4f} before, {s['final_test_accuracy']:.4f} after"
            in out), out
    # certified_lr solves in closed form: its progress line shows no (nan) training loss
    rounds = [ln for ln in (d / "fgx.log").read_text().splitlines() if "round 1/1" in ln]
    assert rounds and "loss nan" not in rounds[0] and "val accuracy" in rounds[0], rounds


@pytest.mark.parametrize("preset", ["fedavg_lgcn", "local_lgcn", "lpsfed_bpr"])
def test_banner_names_the_algorithm_preset_that_ran(run_fgx, capsys, preset):
    d = run_fgx(*RANK, f"algorithm={preset}")
    title = " ".join(capsys.readouterr().out.split())
    summary = json.loads((d / "summary.json").read_text())
    assert summary["presets"]["algorithm"] == preset
    assert f"fgx: {preset} ({summary['components']['algorithm']}) on" in title, title


def test_progress_line_names_the_split_it_shows(run_fgx):
    """diabetes has no validation split: the progress line shows the test value and says so."""
    d = run_fgx("dataset=diabetes", "algorithm=dsgd", "rounds=20", "eval_every=10", "output.progress=plain")
    lines = [ln for ln in (d / "fgx.log").read_text().splitlines() if "round 10/20" in ln]
    assert lines and "test mse" in lines[0] and "val mse" not in lines[0], lines


def test_a_long_round_reports_each_clients_step_out_of_its_total(run_fgx, tiny_cfg, monkeypatch):
    """Inside a round the log says which local step of how many a client is at (rate-limited to one line
    every 10 s; here every tick logs). Seed-5 mutation sample: the total passed as None, which logging
    cannot format, survived: the line was lost, never written."""
    from fgx.progress import Activity

    real = Activity.start
    monkeypatch.setattr(Activity, "start", lambda self, every, prefix="": real(self, None if every is None else 0.0, prefix))
    d = run_fgx(*tiny_cfg, "algorithm.local_steps=3", "rounds=1", "output.progress=plain")
    log = (d / "fgx.log").read_text()
    assert all(f"round 1/1: client 0 step {i}/3" in log for i in (1, 2, 3)), log[-2000:]


def test_multirun_with_cfg_gets_a_message_not_a_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["run", "-m", "--cfg", "job", "algorithm=fedavg,local", "seed=0,1"])
    msg = str(e.value.code)
    assert "cannot be combined with -m" in msg
    assert "fgx run --cfg job algorithm=fedavg seed=0" in msg and "(of 4)" in msg
    assert not (tmp_path / "outputs").exists()


def test_cfg_job_says_when_the_printed_config_would_be_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--cfg", "job", "algorithm=fedavg", "rounds=3"]) == 0
    assert "rounds: 3" in capsys.readouterr().out
    assert main(["run", "--cfg", "job", "algorithm=fedavg", "algorithm.lr=-1"]) == 2
    cap = capsys.readouterr()
    assert "lr: -1" in cap.out and "algorithm.lr=-1" in cap.err and "would be refused" in cap.err


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_fgx_writes_follow_the_umask(tmp_path, umask, mode):
    from fgx.outputs import RunDir, atomic_write_bytes
    from fgx.report.plots import plot

    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "a.csv", b"x\n")
        rd = RunDir(tmp_path / "run")
        rd.write_json("summary.json", {"status": "completed"})
        rd.save_checkpoint({"round": 1})
        from fgx.data.aml.cache import generate_csv
        csv, _ = generate_csv(tmp_path / "aml", "tiny", 0.05, 0)
        files = [tmp_path / "a.csv", rd.file("summary.json"), rd.file("checkpoint.pt"), csv,
                 csv.parent / "Patterns.csv"]
    finally:
        os.umask(old)
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == mode, (f, oct(f.stat().st_mode))
    assert plot is not None      # plots go through atomic_write_bytes (fgx/report/plots.py)


def test_readme_marks_its_full_scale_example():
    from docs_commands import REPO, extract

    big = [c for c in extract(REPO / "README.md") if any(t.startswith("dataset=aml_hi_small") for t in c.argv)]
    assert big and all("full scale" in c.marks for c in big), [(c.where, c.comment) for c in big]
