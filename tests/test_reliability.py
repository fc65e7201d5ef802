"""Reliability: resume after SIGKILL, failure isolation in sweeps, output failures, no code from files."""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fgx.cli import main

REPO = Path(__file__).resolve().parents[1]


def read_jsonl(p: Path) -> list[dict]:
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()]


def test_sigkilled_run_resumes_to_the_same_final_metrics(tmp_path, tiny_cfg, run_fgx):
    cfg = [*tiny_cfg, "rounds=60", "eval_every=1", "algorithm.local_steps=3", "output.checkpoint_every_s=0"]
    run_dir = tmp_path / "killed"
    env = {**os.environ, "CI": "true"}
    proc = subprocess.Popen([sys.executable, "-m", "fgx.cli", "run", *cfg, f"hydra.run.dir={run_dir}"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            if metrics.exists() and (run_dir / "checkpoint.pt").exists() and \
                    sum(1 for _ in metrics.open()) >= 3 * 10:     # 10 rounds evaluated
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be killed; make it longer"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed = json.loads((run_dir / "summary.json").read_text())
    assert killed["status"] == "running"               # what a killed run leaves behind
    done_before = max(r["round"] for r in read_jsonl(metrics))
    assert done_before < 60

    # the documented command: the same overrides plus resume=true and the same run directory
    rc = main(["run", *cfg, "resume=true", f"hydra.run.dir={run_dir}"])
    assert rc == 0
    resumed = json.loads((run_dir / "summary.json").read_text())
    full = json.loads((run_fgx(*cfg) / "summary.json").read_text())
    assert resumed["status"] == "completed" and resumed["resumed_from"] == "running"
    # it continued the checkpoint: a run made again from round 1 would end the same and prove nothing
    log = (run_dir / "fgx.log").read_text()
    assert f"resumed from checkpoint at round {done_before}" in log or \
        f"resumed from checkpoint at round {done_before - 1}" in log, log[-2000:]
    assert resumed["final"] == full["final"] and resumed["per_client"] == full["per_client"]
    rows = read_jsonl(metrics)
    assert [r["round"] for r in rows if r["split"] == "test"] == list(range(1, 61))


def test_one_failing_job_does_not_stop_a_sweep_and_is_reported(tmp_path, monkeypatch, tiny_cfg, capsys):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    # 400 clients on 300 nodes passes config validation but fails when the graph is partitioned
    rc = main(["run", "-m", *tiny_cfg, "partitioner.num_clients=3,400,4", f"hydra.sweep.dir={sweep}"])
    assert rc == 1
    status = {d.name: json.loads((d / "summary.json").read_text())["status"] for d in sweep.iterdir() if d.is_dir()}
    assert status == {"0": "completed", "1": "failed", "2": "completed"}
    failed = json.loads((sweep / "1" / "summary.json").read_text())
    assert "DataError" in failed["error"] and "num_clients=400" in failed["error"] and failed["traceback"]
    capsys.readouterr()
    assert main(["report", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "1 run(s) not in the table" in out and "[failed]" in out and "num_clients=400" in out


@pytest.mark.parametrize("key", ["hydra.run.dir", "hydra.sweep.dir"])
def test_output_directory_that_cannot_exist_is_a_clear_error(tmp_path, monkeypatch, tiny_cfg, key):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    args = ["run", *(["-m"] if "sweep" in key else []), *tiny_cfg, f"{key}={tmp_path / 'afile' / 'sub'}"]
    with pytest.raises(SystemExit) as e:
        main(args)
    assert "output directory" in str(e.value) and "afile" in str(e.value) and "not a directory" in str(e.value)


def test_read_only_output_location_is_a_clear_error(tmp_path, monkeypatch, tiny_cfg):
    import fgx.launch as launch

    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(launch.tempfile, "mkdtemp", refuse)    # root ignores chmod, so simulate it
    with pytest.raises(SystemExit) as e:
        main(["run", *tiny_cfg, f"hydra.run.dir={tmp_path / 'out'}"])
    assert "not writable" in str(e.value) and "Permission denied" in str(e.value)
    assert not (tmp_path / "out").exists()


def test_a_full_disk_leaves_no_partial_json(tmp_path, monkeypatch):
    import fgx.outputs as outputs

    rd = outputs.RunDir(tmp_path / "run")
    rd.write_json("summary.json", {"status": "running", "round": 1})
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])            # half of it lands, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs.os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(outputs.OutputError, match="No space left on device"):
        rd.write_json("summary.json", {"status": "completed", "final": {"accuracy": 0.9}})
    monkeypatch.undo()
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == {"status": "running", "round": 1}
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["summary.json"]   # no temp file left


class _Exploit:
    """Unpickling this would run code (create a file)."""

    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_resume_never_unpickles_code_from_a_checkpoint(tmp_path, tiny_cfg, run_fgx):
    import torch

    run_dir = run_fgx(*tiny_cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "running"}))   # as if killed
    marker = tmp_path / "pwned"
    torch.save({"round": 1, "payload": _Exploit(str(marker))}, run_dir / "checkpoint.pt")
    rc = main(["run", *tiny_cfg, "resume=true", f"hydra.run.dir={run_dir}"])
    assert rc == 1 and not marker.exists()
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "failed" and "checkpoint" in s["error"] and "weights_only" in s["error"]


def test_no_unsafe_deserialisation_in_fgx_sources():
    """fgx's own formats are JSON/npz/torch weights: every torch.load passes weights_only=True, numpy
    never allows pickles, and pickle itself is not used."""
    # the one exception: Planetoid's raw files ARE pickles; fgx reads them with an Unpickler whose
    # find_class allows NumPy/SciPy/list classes only, before PyG would unpickle them unchecked
    # (tests/test_hostile_files.py shows a pickle that would run a command is refused and never runs)
    restricted = {"fgx/data/planetoid.py"}
    bad = []
    for f in (REPO / "fgx").rglob("*.py"):
        text = f.read_text()
        rel = f.relative_to(REPO).as_posix()
        if rel in restricted:
            assert "def find_class" in text and "PICKLE_GLOBALS" in text, rel
        for i, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            if "torch.load(" in code and "weights_only=True" not in code:
                bad.append(f"{rel}:{i}: {line.strip()}")
            if "allow_pickle=True" in code or "joblib.load" in code or "pd.read_pickle" in code or \
                    (rel not in restricted and ("pickle.load" in code or "import pickle" in code)):
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "unsafe deserialisation:\n" + "\n".join(bad)


def test_sampled_edge_runs_are_bit_identical_across_processes(tmp_path):
    """Multi-threaded CPU scatter once made two identical AML runs differ in the last bits, and the
    drift grew to 0.04 F1 over 40 rounds; runs in separate processes must agree exactly."""
    cfg = ["+experiment=ce_fedgnn_table1_aml", "rounds=1", "eval_every=1", "output.checkpoint=false"]
    finals = []
    for i in range(2):
        d = tmp_path / f"r{i}"
        subprocess.run([sys.executable, "-m", "fgx.cli", "run", *cfg, f"hydra.run.dir={d}"], cwd=tmp_path,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "CI": "true", "OMP_NUM_THREADS": "2"})
        finals.append([{k: r[k] for k in ("round", "split", "train_loss", "mean", "pooled", "per_client")}
                       for r in read_jsonl(d / "metrics.jsonl")])
    assert finals[0] == finals[1]


def test_resume_keeps_a_completed_run_with_the_same_config(tmp_path, tiny_cfg, run_fgx):
    """`resume=true` on a run that completed with the same config keeps it (an interrupted table
    continues where it stopped); with another config the run is made again."""
    run_dir = run_fgx(*tiny_cfg)
    first = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "checkpoint.pt").unlink()
    assert main(["run", *tiny_cfg, "resume=true", f"hydra.run.dir={run_dir}"]) == 0
    assert json.loads((run_dir / "summary.json").read_text()) == first
    assert main(["run", *tiny_cfg, "rounds=2", "resume=true", f"hydra.run.dir={run_dir}"]) == 0
    again = json.loads((run_dir / "summary.json").read_text())
    assert again["rounds"] == 2 and again["config_sha"] != first["config_sha"]


def test_resume_makes_again_a_completed_run_of_other_code(tmp_path, tiny_cfg, run_fgx):
    """A completed run whose code fingerprint names a source file that has changed since is not this
    run: `resume=true` (a resumed table, a spot check in a folder of earlier reruns) makes it again."""
    run_dir = run_fgx(*tiny_cfg)
    first = json.loads((run_dir / "summary.json").read_text())
    assert (run_dir / "checkpoint.pt").exists()            # its last round's checkpoint must not be resumed
    files = first["provenance"]["code"]["files"]
    assert "fgx/trainer.py" in files
    old = dict(first, provenance={**first["provenance"], "code": {**first["provenance"]["code"],
                                                                 "files": {**files, "fgx/trainer.py": "000000000000"}}})
    (run_dir / "summary.json").write_text(json.dumps(old))
    assert main(["run", *tiny_cfg, "resume=true", f"hydra.run.dir={run_dir}"]) == 0
    again = json.loads((run_dir / "summary.json").read_text())
    assert again["provenance"]["code"]["files"]["fgx/trainer.py"] == files["fgx/trainer.py"]
    assert again["provenance"]["date"] != old["provenance"]["date"] or again["wall_time_s"] != first["wall_time_s"]
    assert again["final"] == first["final"]                # the same code gives the same numbers
    assert "resumed from checkpoint" not in (run_dir / "fgx.log").read_text().split("other code")[-1]


@pytest.mark.parametrize("other", [["algorithm.lr=0.05"], ["seed=1"]])
def test_resume_never_continues_a_checkpoint_of_another_config_or_seed(tmp_path, tiny_cfg, run_fgx, other):
    """An interrupted run's checkpoint belongs to its config and seed: `resume=true` with another one
    starts from round 1, and ends where a fresh run of that config ends."""
    run_dir = run_fgx(*tiny_cfg)
    assert (run_dir / "checkpoint.pt").exists()
    first = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({k: first[k] for k in ("run_dir", "config_sha", "seed")}
                                                     | {"status": "running"}))   # as an interrupted run leaves it
    assert main(["run", *tiny_cfg, *other, "resume=true", f"hydra.run.dir={run_dir}"]) == 0
    assert "resumed from checkpoint" not in (run_dir / "fgx.log").read_text().split("run again from round 1")[-1]
    fresh = run_fgx(*tiny_cfg, *other)
    assert json.loads((run_dir / "summary.json").read_text())["final"] == \
        json.loads((fresh / "summary.json").read_text())["final"]
