"""Dataset preparation under concurrency (fgx/data/prepare.py): parallel `fgx run` jobs on one
fresh data root prepare each dataset once (under a file lock, into a temporary folder renamed into
place) and all complete with the same data; a lock left by a killed job, or a half-written
processed file from one, blocks nobody."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SHARED_DATA

REPO = Path(__file__).resolve().parents[1]
JOBS = 6
CORA = ["dataset=cora", "partitioner=random", "partitioner.num_clients=2", "algorithm=local", "rounds=1",
        "algorithm.local_steps=1", "model.hidden=8", "output.checkpoint=false", "output.progress=off"]
AML = ["dataset=aml_tiny", "dataset.scale=0.1", "partitioner=by_bank", "partitioner.num_clients=2", "model=mlp_edge",
       "algorithm=local", "rounds=1", "algorithm.local_steps=1", "output.checkpoint=false", "output.progress=off"]


@pytest.fixture
def fresh_root(tmp_path) -> Path:
    if not (SHARED_DATA / "Cora" / "raw").is_dir():
        pytest.skip(f"Cora not found under {SHARED_DATA}")
    root = tmp_path / "data"
    # raw files only: nothing processed yet (even where a run has processed the shared copy in place)
    shutil.copytree(SHARED_DATA / "Cora" / "raw", root / "Cora" / "raw")
    return root


def _forked_job(args: list[str], barrier) -> None:
    import torch

    torch.set_num_threads(1)
    from fgx.cli import main

    barrier.wait()                   # every job reaches the data at the same moment
    os._exit(main(["run", *args]))


def run_parallel_forked(jobs: list[list[str]]) -> list[int]:
    """`fgx run` in parallel processes forked from this one (no import cost per job)."""
    from fgx.cli import prevalidate
    from fgx.registry import GROUPS

    for registry in GROUPS.values():      # import every component once, before forking
        registry.names()
    prevalidate(jobs[0], multirun=False)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(jobs))
    procs = [ctx.Process(target=_forked_job, args=(j, barrier)) for j in jobs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    return [p.exitcode for p in procs]


def run_parallel_cli(jobs: list[list[str]], cwd: Path) -> list[int]:
    """`fgx run` as separate interpreter processes, started together."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1", "CI": "true"}
    procs = [subprocess.Popen([sys.executable, "-m", "fgx.cli", "run", *j], cwd=cwd, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for j in jobs]
    return [p.wait(timeout=900) for p in procs]


def data_stats(run_dir: Path) -> dict:
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "completed", s.get("error")
    data = {k: v for k, v in s["data"].items() if k != "cache_hit"}
    return {"data": data, "partition": json.loads((run_dir / "partition.json").read_text())}


def check_jobs(tmp_path: Path, root: Path, run, per_dataset: int) -> None:
    """``per_dataset`` jobs on Cora and as many on the generated AML preset, all started together."""
    jobs = []
    for name, cfg in (("cora", CORA), ("aml", AML)):
        jobs += [[*cfg, f"data_dir={root}", "seed=0", f"hydra.run.dir={tmp_path / f'{name}{i}'}"]
                 for i in range(per_dataset)]
    assert run(jobs) == [0] * len(jobs)
    for name in ("cora", "aml"):
        stats = [data_stats(tmp_path / f"{name}{i}") for i in range(per_dataset)]
        assert all(s == stats[0] for s in stats), name
    logs = "".join((tmp_path / f"cora{i}" / "fgx.log").read_text() for i in range(per_dataset))
    assert logs.count("': preparing ") == 1                         # processed once, reused by the others
    hits = [json.loads((tmp_path / f"aml{i}" / "summary.json").read_text())["data"]["cache_hit"]
            for i in range(per_dataset)]
    assert hits.count(False) == 1                                # generated once
    assert (root / "Cora" / "processed" / ".fgx-complete").is_file()
    assert not [p for p in root.rglob("*") if ".tmp" in p.name]  # no temporary file or folder left


def test_six_parallel_runs_on_a_fresh_data_root_prepare_each_dataset_once(tmp_path, fresh_root, monkeypatch):
    """6 `fgx run` processes at once (3 on the Cora copy, 3 on the generated AML preset)."""
    monkeypatch.chdir(tmp_path)
    check_jobs(tmp_path, fresh_root, run_parallel_forked, per_dataset=JOBS // 2)


@pytest.mark.slow
def test_twelve_parallel_fgx_processes_on_a_fresh_data_root(tmp_path, fresh_root):
    """6 separate `python -m fgx.cli run` interpreters per dataset, 12 at once."""
    check_jobs(tmp_path, fresh_root, lambda jobs: run_parallel_cli(jobs, tmp_path), per_dataset=JOBS)


def test_a_lock_held_by_a_killed_job_blocks_nobody(tmp_path, fresh_root, run_fgx, monkeypatch):
    lock = fresh_root / ".Cora.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from filelock import FileLock; "
                               f"held = FileLock({str(lock)!r}); held.acquire(); print('locked', flush=True); time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        os.kill(holder.pid, signal.SIGKILL)          # killed while preparing: its lock file stays behind
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert lock.exists()
    monkeypatch.setenv("FGX_LOCK_TIMEOUT", "1")   # a lock that blocked would fail the run (after one wait)
    run = run_fgx(*CORA, f"data_dir={fresh_root}")
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_a_half_written_processed_file_from_a_killed_job_is_rebuilt(tmp_path, fresh_root, run_fgx):
    processed = fresh_root / "Cora" / "processed"
    processed.mkdir()
    (processed / "data.pt").write_bytes(b"PK\x03\x04 half a zip")     # what a job killed mid-write leaves
    (fresh_root / ".Cora.lock").write_text("left by a killed job")
    run = run_fgx(*CORA, f"data_dir={fresh_root}")
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert (processed / ".fgx-complete").is_file()


def test_a_hung_lock_holder_gives_a_clear_error_after_the_timeout(tmp_path, monkeypatch):
    from filelock import FileLock

    import fgx.data.prepare as prepare
    from fgx.data.base import DataError

    monkeypatch.setenv("FGX_LOCK_TIMEOUT", "0.2")
    monkeypatch.setattr(prepare, "WAIT_LOG_S", 0.1)
    lock = tmp_path / ".x.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import time; from filelock import FileLock; "
                               f"held = FileLock({str(lock)!r}); held.acquire(); print('locked', flush=True); time.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DataError, match=r"another process has been preparing it .* FGX_LOCK_TIMEOUT"):
            with prepare.preparation_lock(lock, "dataset 'x'"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with FileLock(str(lock), timeout=5):   # released by the kernel when its holder died
        pass
