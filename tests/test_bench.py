"""The benchmark harness (fgx.bench) and the pieces of scripts/bench_peers.py that run without OpenFGL."""
from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from fgx.bench import Bench, run_process

REPO = Path(__file__).resolve().parents[1]


def test_run_process_reports_the_childs_own_peak_rss_and_exit_status():
    # from a small parent (this pytest process's own RSS would be every child's floor)
    probe = (
        "import sys, json; from fgx.bench import run_process\n"
        "big = run_process([sys.executable, '-c', 'b = bytearray(300 * 2**20)'])\n"
        "small = run_process([sys.executable, '-c', 'print(1)'])\n"
        "print(json.dumps([big.peak_rss_mb, small.peak_rss_mb, small.stdout]))")
    out = run_process([sys.executable, "-c", probe], env={"PYTHONPATH": str(REPO)}).check("probe")
    big, small, text = json.loads(out.stdout)
    assert text.strip() == "1"
    assert big > small + 250 and small < 100        # the child's own, not the largest child's
    bad = run_process([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert bad.returncode == 3
    with pytest.raises(RuntimeError, match="exit status 3"):
        bad.check("the child")


def test_bench_interleaves_repeats_and_reports_median_and_range():
    order = []
    bench = Bench(repeats=3, log=lambda m: None)
    bench.run({"a": lambda rep: order.append(("a", rep)) or {"t": [5.0, 1.0, 3.0][rep]},
               "b": lambda rep: order.append(("b", rep)) or {"t": 2.0, "label": "x"}}, warmup=True)
    assert order == [("a", -1), ("b", -1), ("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert bench.stats("a") == {"t": {"median": 3.0, "min": 1.0, "max": 5.0, "n": 3}}
    assert "label" not in bench.stats("b")


@pytest.mark.parametrize("scenario", ["node", "graph"])
def test_bench_peers_partition_is_the_one_fgx_trains_on(data_root, run_fgx, tmp_path, scenario):
    """The file bench_peers writes once is what fgx's partitioner=file reads: same clients, same split
    (graph level: the same graphs per client and the same test graphs)."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import bench_peers
    finally:
        sys.path.pop(0)
    a = Namespace(data_dir=str(data_root), seed=0, clients=4, rounds=2, eval_model="local", fgx_overrides=[],
                  scenario=scenario)
    written = bench_peers.write_clients(a, tmp_path / "clients.pt")
    over = bench_peers.fgx_overrides("fedavg", a, tmp_path / "clients.pt", tmp_path / "unused")
    over = [o for o in over if not o.startswith("hydra.run.dir")]
    d = run_fgx(*over)
    part = json.loads((d / "partition.json").read_text())
    assert [c["graphs" if scenario == "graph" else "nodes"] for c in part["clients"]] == written["client_sizes"]
    assert [c["test"] for c in part["clients"]] == written["test_nodes"]
    s = json.loads((d / "summary.json").read_text())
    assert s["eval_model"] == "local" and s["components"]["partitioner"] == "file"
    # a time, measured from the process start: no bound (a busy machine makes it anything; issue #42)
    assert s["startup_s"] is None or s["startup_s"] > 0
