"""Shared fixtures. Tests never reach the network: real data comes from a temporary copy of
../shared/data (which may be read-only), everything else is generated."""
from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("CI", "true")          # plain progress lines, no rich bars
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")   # `pytest -n N`: the N workers already use the cores
warnings.filterwarnings("ignore", category=FutureWarning)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FGX_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """A writable copy of ../shared/data (PyG writes processed/ next to raw/)."""
    if not SHARED_DATA.exists():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    root = tmp_path_factory.mktemp("data")
    for item in SHARED_DATA.iterdir():
        if item.is_dir():
            shutil.copytree(item, root / item.name)
    return root


@pytest.fixture
def run_fgx(tmp_path, monkeypatch):
    """Run `fgx run <overrides>` in-process with outputs under tmp_path; returns the run directory."""
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    counter = {"n": 0}

    def _run(*overrides: str, expect_rc: int = 0) -> Path:
        counter["n"] += 1
        run_dir = tmp_path / f"run{counter['n']}"
        rc = main(["run", *overrides, f"hydra.run.dir={run_dir}"])
        assert rc == expect_rc, f"fgx run {' '.join(overrides)} returned {rc}"
        return run_dir

    return _run


TINY = ["algorithm=fedavg", "dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=16", "partitioner=random",
        "partitioner.num_clients=3", "rounds=3", "eval_every=1", "model.hidden=16"]


@pytest.fixture
def tiny_cfg() -> list[str]:
    """Overrides for a few-second run on a generated graph."""
    return list(TINY)


@pytest.fixture
def recorded(monkeypatch):
    """Patch the trainer so the test sees every channel message as (kind, payload, src, dst, round)
    in ``["sent"]``, the global data (``["data"]``), the clients and the channel."""
    import fgx.trainer as trainer
    from fgx.federation.channel import Channel

    seen = {"sent": []}
    real_graph, real_clients = trainer.check_graph, trainer.check_clients

    def grab_graph(ds, name):
        seen["data"] = ds.data
        return real_graph(ds, name)

    def grab_clients(clients, info, name):
        seen["clients"] = clients
        return real_clients(clients, info, name)

    class RecordingChannel(Channel):
        def __init__(self, messages, **kw):
            kw.pop("auditor", None)
            super().__init__(messages, auditor=lambda *a: seen["sent"].append(a), **kw)
            seen["channel"] = self

    monkeypatch.setattr(trainer, "check_graph", grab_graph)
    monkeypatch.setattr(trainer, "check_clients", grab_clients)
    monkeypatch.setattr(trainer, "Channel", RecordingChannel)
    return seen


@pytest.fixture(autouse=True)
def _records_stay_out_of_the_repository(monkeypatch, tmp_path_factory):
    """`fgx repro` and `fgx tune` write results/*.json next to conf/; in tests they go to a temporary
    folder (a test of the committed records reads the repository's own with monkeypatch.delenv)."""
    monkeypatch.setenv("FGX_RESULTS_DIR", str(tmp_path_factory.mktemp("results")))


def pytest_collection_modifyitems(config, items):
    """Under scripts/mutation.sh: each mutant's tests run fastest first (durations from mutmut's
    stats run), so the first failing test, which ends the mutant's run, tends to come early."""
    stats = os.environ.get("FGX_MUTATION_STATS")
    if stats and os.path.exists(stats):
        import json

        durations = json.loads(Path(stats).read_text()).get("duration_by_test", {})
        items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))
