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
    bench_peers = _script("bench_peers")
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


def _script(name: str):
    """A module of scripts/ (they import each other by plain name, so scripts/ goes on the path)."""
    import importlib
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


ALLOCATE = "b = bytearray(300 * 2**20); import time; time.sleep(20); print('survived')"


@pytest.mark.parametrize("where", ["child", "grandchild"])
def test_run_process_memory_limit_kills_the_child_and_its_descendants(where):
    """The watchdog reads the resident memory of the whole process tree: a grandchild's 300 MB kill
    the child too (wait4 of the child alone would see a small process). From a small parent, as the
    first test (a child's wait4 peak starts at its parent's RSS)."""
    code = ALLOCATE if where == "child" else (
        f"import subprocess, sys; subprocess.run([sys.executable, '-c', {ALLOCATE!r}]); print('survived')")
    probe = (
        "import sys, json; from fgx.bench import run_process\n"
        f"big = run_process([sys.executable, '-c', {code!r}], mem_limit_mb=150, timeout=60)\n"
        "small = run_process([sys.executable, '-c', 'print(1)'], mem_limit_mb=150)\n"
        "print(json.dumps([[r.limit, r.returncode, r.stdout, r.peak_rss_mb] for r in (big, small)]))")
    out = run_process([sys.executable, "-c", probe], env={"PYTHONPATH": str(REPO)}).check("probe")
    (limit, rc, text, rss), (small_limit, small_rc, small_text, small_rss) = json.loads(out.stdout)
    assert limit == "memory" and rc != 0 and "survived" not in text and rss > 150
    assert small_limit is None and small_rc == 0 and small_text.strip() == "1" and small_rss < 150


def test_run_process_counts_pages_a_child_shares_with_its_parent_once():
    """A child that starts processes (fgx runs `git` for its provenance) is, between clone and exec, two
    processes mapping the same pages: the tree's memory is the child's, not twice it. A forked worker's
    own allocation still counts."""
    starts = ("import subprocess, time\nb = bytearray(2**30)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
              "t = time.time()\nwhile time.time() - t < 6: subprocess.run(['true'])\n")
    r = run_process([sys.executable, "-c", starts], mem_limit_mb=100_000, timeout=120, poll_s=0.005)
    assert 1000 < r.peak_rss_mb < 1400          # summing each process's VmRSS read ~2,100 MB
    worker = ("import multiprocessing as mp, time\nb = bytearray(2**30)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
              "def own():\n    c = bytearray(2**29)\n    for i in range(0, len(c), 4096): c[i] = 1\n    time.sleep(2)\n"
              "if __name__ == '__main__':\n    mp.set_start_method('fork'); w = mp.Process(target=own); w.start(); w.join()\n")
    r = run_process([sys.executable, "-c", worker], mem_limit_mb=100_000, timeout=120, poll_s=0.05)
    assert 1450 < r.peak_rss_mb < 1900          # 1 GB + the worker's own 512 MB


def test_run_process_timeout_can_be_a_result_instead_of_an_error():
    r = run_process([sys.executable, "-c", "import time; time.sleep(20); print('survived')"], timeout=1,
                    raise_on_timeout=False)
    assert r.limit == "timeout" and "survived" not in r.stdout
    with pytest.raises(RuntimeError, match="ran past"):
        run_process([sys.executable, "-c", "import time; time.sleep(20)"], timeout=1)
    # a CPU-time limit counts the child's CPU seconds, not its sleep (the sleeper outlives a 1 s CPU limit)
    busy = run_process([sys.executable, "-c", "while True: pass"], cpu_timeout=1, timeout=120, raise_on_timeout=False)
    assert busy.limit == "timeout" and busy.cpu_s >= 1
    idle = run_process([sys.executable, "-c", "import time; time.sleep(1.5); print('survived')"], cpu_timeout=1)
    assert idle.limit is None and idle.stdout.strip() == "survived"


def test_bench_scale_sizes_and_runs():
    bs = _script("bench_scale")
    assert [bs.parse_size(t) for t in ("10k", "2.5M", "100000", "aml_tiny")] == [10_000, 2_500_000, 100_000, "aml_tiny"]
    for bad in ("ten", "1.5", "5"):
        with pytest.raises(Exception, match="size"):
            bs.parse_size(bad)
    a = Namespace(sizes=["aml_tiny", 100_000, 10_000], clients=[10, 1000], aml_clients=[4],
                  algorithms=["fedavg", "fedgsp", "ce_fedgnn"], tools=["fgx", "openfgl"])
    runs = list(bs.lanes_and_runs(a))
    assert [s for _, s in runs][0] == 10_000 and [s for _, s in runs][-1] == "aml_tiny"   # sizes ascending
    assert {lane[1] for lane, _ in runs if lane[0] == "openfgl"} == {"fedavg"}              # OpenFGL: FedAvg only
    assert {lane for lane, s in runs if s == "aml_tiny"} == {("fgx", "ce_fedgnn", 4, "aml")}
    assert len(runs) == 2 * 2 * 4 + 1


def test_bench_scale_combines_a_stopped_run_and_its_rest(tmp_path):
    """--combine: a later part replaces the same run of an earlier one (not with a skip), keeps each
    row's commit, recomputes the largest fit, and refuses parts measured under other settings."""
    bs = _script("bench_scale")
    settings = {k: 1 for k in bs.COMPARABLE}

    def row(tool, clients, nodes, status, s=None):
        return {"tool": tool, "algorithm": "fedavg", "clients": clients, "dataset": "csbm", "size": None,
                "nodes": nodes, "status": status, "s_per_round": s, "peak_rss_mb": 100}

    full = {**settings, "commit": "aaa", "done": False, "timeout_s": 1800,
            "rows": [row("fgx", 10, 1000, "ok", 1.0), row("openfgl", 1000, 2000, "failed")]}
    full["mem_limit_gb"] = 18
    full["rows"].append(row("fgx", 100, 2000, "does not fit"))
    # a later part under a higher memory limit: its rows keep their own limit
    rest = {**settings, "commit": "bbb", "done": True, "timeout_s": 1800, "mem_limit_gb": 21,
            "rows": [row("openfgl", 1000, 2000, "ok", 3.0), row("fgx", 10, 1000, "skipped")]}
    parts = []
    for name, part in (("full.json", full), ("rest.json", rest)):
        parts.append(tmp_path / name)
        parts[-1].write_text(json.dumps(part))
    out = tmp_path / "all.json"
    run_process([sys.executable, str(REPO / "scripts" / "bench_scale.py"), "--combine", str(out), *map(str, parts)],
                timeout=120).check("combine")
    result = json.loads(out.read_text())
    by_tool = {r["tool"]: r for r in result["rows"] if r["clients"] != 100}
    assert len(result["rows"]) == 3 and result["done"] and result["commit"] == "aaa+bbb"
    assert result["mem_limit_gb"] == [18, 21]
    assert (by_tool["fgx"]["mem_limit_gb"], by_tool["openfgl"]["mem_limit_gb"]) == (18, 21)
    assert "| does not fit (> 18 GB) |" in bs.markdown(result)
    assert (by_tool["fgx"]["status"], by_tool["fgx"]["commit"]) == ("ok", "aaa")
    assert (by_tool["openfgl"]["status"], by_tool["openfgl"]["commit"]) == ("ok", "bbb")
    assert result["largest_fit"]["openfgl fedavg 1000 clients"] == {"largest_ok_nodes": 2000, "first_not_ok": None}
    assert out.with_suffix(".png").stat().st_size > 0
    with pytest.raises(SystemExit, match="differs .* in rounds"):
        bs.combine([full, {**rest, "rounds": 5}], ["full.json", "rest.json"])
    with pytest.raises(SystemExit, match=r"all.json is already a combined file; combine the parts it names \(full.json, rest.json\)"):
        bs.combine([result, rest], ["all.json", "rest.json"])


def _bench_scale(tmp_path, *args: str) -> dict:
    out = run_process([sys.executable, str(REPO / "scripts" / "bench_scale.py"), "--out", str(tmp_path), *args],
                      env={"OMP_NUM_THREADS": "1"}, timeout=600).check("bench_scale")
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert json.loads((tmp_path / "bench_scale.json").read_text()) == line
    assert (tmp_path / "bench_scale.png").stat().st_size > 0
    return line


def test_bench_scale_quick_run_and_a_run_that_does_not_fit(tmp_path):
    """The smallest configuration through `fgx run` in a child: the JSON line's figures come from the
    run's own records (FedAvg's bytes per round: the GCN's parameters down and up for every client);
    under a tiny memory limit the child is killed, reported as not fitting, and the larger size skipped."""
    line = _bench_scale(tmp_path, "--quick", "--tools", "fgx", "--algorithms", "fedavg")
    (row,) = line["rows"]
    assert row["status"] == "ok" and row["nodes"] == 2000 and row["clients"] == 10 and len(row["round_s"]) == 1
    params = (64 * 64 + 64) + (64 * 5 + 5)           # OpenFGL's GCN on csbm: 64 features, 64 hidden, 5 classes
    assert row["bytes_per_round"] == 2 * 10 * 4 * params
    assert row["s_per_round"] > 0 and 100 < row["peak_rss_mb"] < 24 * 1024 and row["startup_s"] > 0
    assert 0 < row["cpu_share"] and row["command"].startswith("fgx run algorithm=fedavg")
    assert line["largest_fit"] == {"fgx fedavg 10 clients": {"largest_ok_nodes": 2000, "first_not_ok": None}}

    line = _bench_scale(tmp_path, "--tools", "fgx", "--algorithms", "fedavg", "--sizes", "2000", "4000",
                        "--clients", "10", "--rounds", "1", "--warmup", "0", "--mem-limit-gb", "0.05")
    assert [(r["nodes"], r["status"]) for r in line["rows"]] == [(2000, "does not fit"), (4000, "skipped")]
    assert line["rows"][0]["peak_rss_mb"] > 0.05 * 1024
    assert line["largest_fit"]["fgx fedavg 10 clients"] == {"largest_ok_nodes": None,
                                                            "first_not_ok": "does not fit at 2000"}


def test_bench_scale_keeps_a_diverged_runs_memory_under_its_own_status(tmp_path):
    """A run that diverged (fgx stops it, status diverged) still measured its peak RSS and its rounds: the
    row keeps them with status ``diverged`` and the rule that fired, and the line's largest fit does not
    count it as ok."""
    line = _bench_scale(tmp_path, "--tools", "fgx", "--algorithms", "fedavg", "--sizes", "2000", "--clients", "10",
                        "--rounds", "3", "--warmup", "0", "algorithm.lr=1e6")
    (row,) = line["rows"]
    assert row["status"] == "diverged" and row["diverged"]["round"] >= 2 and "rule" in row["diverged"]
    assert 100 < row["peak_rss_mb"] < 24 * 1024 and row["s_per_round"] > 0
    assert line["largest_fit"]["fgx fedavg 10 clients"] == {"largest_ok_nodes": None,
                                                            "first_not_ok": "diverged at 2000"}


def test_bench_scale_memory_decision_has_its_stated_error_rate():
    """fgx's peak RSS against OpenFGL's, decided on paired repeats (two-sided paired t-test at 5 %), checked
    by simulation: each run's peak is a base, plus the machine's phase shared by the two runs of a repeat
    (sd 60 MB), plus its own noise (sd 10 MB, Gaussian or skewed). At no gap it decides either way in at
    most ~5 % of benches; at a 90 MB gap (100k nodes x 1,000 clients, one run each) it decides it in
    nearly every bench of 5 repeats; fewer than 2 repeats decide nothing."""
    import numpy as np

    bs = _script("bench_scale")
    rng = np.random.default_rng(0)
    sims, n = 2000, 5

    def rate(gap: float, skewed: bool) -> dict[str, float]:
        counts = {"above": 0, "below": 0, "inconclusive": 0}
        for _ in range(sims):
            phase = rng.normal(0, 60, n)
            own = (rng.exponential(10, (2, n)) - 10) if skewed else rng.normal(0, 10, (2, n))
            fgx, peer = 600 + gap + phase + own[0], 600 + phase + own[1]
            counts[bs.memory_decision(list(fgx), list(peer))["decision"]] += 1
        return {k: v / sims for k, v in counts.items()}

    limit = 0.05 + 3 * (0.05 * 0.95 / sims) ** 0.5
    for skewed in (False, True):
        null = rate(0.0, skewed)
        assert null["above"] + null["below"] <= limit, null
        assert rate(90.0, skewed)["above"] >= 0.95 and rate(-90.0, skewed)["below"] >= 0.95
    one = bs.memory_decision([700.0], [600.0])
    assert one["decision"] == "inconclusive" and "fewer than 2" in one["why"] and one["differences_mb"] == [100.0]
    assert bs.memory_decision([700.0, 710.0], [600.0, 610.0])["decision"] == "above"    # no spread: its sign


def test_bench_scale_repeats_report_medians_and_a_failed_repeat():
    """A lane's repeats: the row carries the medians and every repeat's values; a repeat that failed makes
    the row that failure; the comparison table appears in the markdown for cells both tools ran."""
    bs = _script("bench_scale")

    def run(tool, peak, status="ok"):
        return {"tool": tool, "algorithm": "fedavg", "clients": 10, "dataset": "csbm", "size": None,
                "nodes": 1000, "status": status, "peak_rss_mb": peak, "s_per_round": peak / 1000,
                "process_s": 1.0, "cpu_share": 1.0}

    fgx = bs.merge_repeats([run("fgx", 700), run("fgx", 720), run("fgx", 690)])
    assert fgx["peak_rss_mb"] == 700 and [r["peak_rss_mb"] for r in fgx["repeats"]] == [700, 720, 690]
    peer = bs.merge_repeats([run("openfgl", 600), run("openfgl", 640), run("openfgl", 610)])
    failed = bs.merge_repeats([run("fgx", 700), run("fgx", 30000, "does not fit")])
    assert failed["status"] == "does not fit" and len(failed["repeats"]) == 2
    (cmp,) = bs.memory_comparison([fgx, peer])
    assert cmp["differences_mb"] == [100, 80, 80] and cmp["decision"] == "above" and cmp["n"] == 3
    assert bs.memory_comparison([failed, peer]) == []
    (apart,) = bs.memory_comparison([{**fgx, "part": "a.json"}, {**peer, "part": "b.json"}])   # --combine
    assert apart["decision"] == "inconclusive" and "not paired" in apart["why"]
    text = bs.markdown({"rows": [fgx, peer], "mem_limit_gb": 24, "memory_vs_openfgl": [cmp]})
    assert "| fedavg | 1000 | 10 | 700 | 610 | +100, +80, +80 |" in text and text.rstrip().endswith("above |")
    a = Namespace(sizes=[1000, 2000], clients=[10], aml_clients=[4], algorithms=["fedavg", "fedgsp"],
                  tools=["fgx", "openfgl"])
    assert [[lane[0] for lane, _ in c] for c in bs.cells(bs.lanes_and_runs(a))] == \
        [["fgx", "openfgl"], ["fgx"], ["fgx", "openfgl"], ["fgx"]]


def test_bench_scale_repeats_run_each_cell_again_from_nothing(tmp_path):
    """--repeats 2 on fgx: two runs of the cell in two folders (the second does not resume the first), the
    row's repeats list both; OpenFGL beside it (where installed) alternates who runs first and gets its
    paired decision."""
    work = tmp_path / "work"
    line = _bench_scale(tmp_path, "--quick", "--tools", "fgx", "--algorithms", "fedavg", "--repeats", "2",
                        "--work-dir", str(work))
    (row,) = line["rows"]
    assert row["status"] == "ok" and len(row["repeats"]) == 2 and line["repeats"] == 2
    assert all(r["status"] == "ok" and r["peak_rss_mb"] > 100 for r in row["repeats"])
    assert row["peak_rss_mb"] == round(sum(r["peak_rss_mb"] for r in row["repeats"]) / 2, 4)
    assert sorted(d.name for d in work.iterdir() if d.name.startswith("fgx_")) == \
        ["fgx_fedavg_2000_10", "fgx_fedavg_2000_10_r1"]
    assert line["memory_vs_openfgl"] == []


def test_bench_scale_openfgl_trains_on_fgx_clients(tmp_path):
    """OpenFGL beside fgx on the generated graph: its files are written from fgx's graph and METIS
    clients (the bench fails when the test nodes per client differ)."""
    pytest.importorskip("openfgl")
    line = _bench_scale(tmp_path, "--quick", "--algorithms", "fedavg")
    assert [(r["tool"], r["status"]) for r in line["rows"]] == [("fgx", "ok"), ("openfgl", "ok")]
    assert line["rows"][1]["s_per_round"] > 0 and line["rows"][1]["bytes_per_round"] is None


def test_fedpub_reference_loop_learns_on_fgx_clients_and_scores_each_client_at_its_best_round():
    """scripts/peers/fedpub_fedavg.py: the authors' FedAvg loop on fgx's clients of a small csbm graph
    learns (mean validation accuracy well above chance), and its best-client score takes each
    client's test value at that client's own best validation round."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fedpub_fedavg", REPO / "scripts" / "peers" / "fedpub_fedavg.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    curve = [{"round": 1, "val": [0.5, 0.9], "test": [0.4, 0.8]},
             {"round": 2, "val": [0.7, 0.6], "test": [0.6, 0.1]}]
    assert mod.best_client(curve) == pytest.approx((0.6 + 0.8) / 2)
    clients, k, lr, wd, hidden = mod.clients_of(["algorithm=fedavg", "model=gcn", "dataset=csbm", "dataset.num_nodes=300",
                                                 "dataset.num_features=16", "partitioner=metis",
                                                 "partitioner.num_clients=3", "seed=0"])
    out = mod.fedpub_loop(clients, k, lr, wd, 32, rounds=15, epochs=2, seed=0)
    assert len(out) == 15 and len(out[-1]["val"]) == 3
    assert mod.mean(out[-1]["val"]) > 1.0 / k + 0.3


def test_bench_scale_failure_text_names_no_folder_of_this_machine(tmp_path):
    """A failed run's error, as written into the committed JSON, names neither the repository, fgx's
    environment, OpenFGL's nor the runs' folder (<repo>, <venv>, <venv-peers>, <work dir>)."""
    import importlib.util
    import sys
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("bench_scale_mod", REPO / "scripts" / "bench_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    peer = tmp_path / "venv-peers" / "bin" / "python"
    err = f"{peer.parent.parent}/lib/site-packages/sklearn/x.py line 1\n{REPO}/scripts/a.py\n{sys.prefix}/lib/y.py"
    text = mod.failure(SimpleNamespace(limit=None, stderr=err, stdout=""), str(peer))["error"]
    assert str(tmp_path) not in text and str(REPO) not in text and sys.prefix not in text
    assert "<venv-peers>/lib/site-packages" in text and "<repo>/scripts" in text
    work = tmp_path / "runs"           # --work-dir: the runs' own folders
    text = mod.failure(SimpleNamespace(limit=None, stderr=f"see summary.json in: {work}/fgx_fedgsp_1000000_1000",
                                       stdout=""), work=work)["error"]
    assert text == "see summary.json in: <work dir>/fgx_fedgsp_1000000_1000"


def test_profile_memory_sums_the_peaks_allocations_by_their_innermost_fgx_line():
    """scripts/profile_memory.py: each allocation alive at the peak counts once, for the innermost frame
    under fgx/ (not a caller's fgx frame, not an installed package's path); no fgx frame: outside fgx."""
    profile_memory = _script("profile_memory")
    inner = ("_colnorm", "/repo/fgx/models/unifilter.py", 70)
    caller = ("client_bases", "/repo/fgx/models/unifilter.py", 156)
    torch_frame = ("matmul", "/venv/lib/python3.11/site-packages/torch/functional.py", 10)
    installed = ("f", "/venv/lib/python3.11/site-packages/fgx/models/unifilter.py", 1)
    records = [(100, [torch_frame, inner, caller]), (50, [inner, caller]), (7, [caller]),
               (3, [torch_frame]), (2, [installed])]
    assert profile_memory.by_fgx_line(records) == {"models/unifilter.py:70 _colnorm": 150,
                                                   "models/unifilter.py:156 client_bases": 7,
                                                   "(outside fgx)": 5}


def test_lpsfed_pruning_bounds_hold_and_are_exact_on_single_items():
    """scripts/lpsfed_pruning.py's figures (issue #41) mean something only if its bounds are bounds: each
    is >= f_Pred's exact pre-tanh score on every pair, and with the exact range of h over one item (a
    zero-width interval, no unstable ReLU) the linear relaxation is f_Pred itself."""
    import torch

    from fgx.models.graph_ranker import mlp
    pr = _script("lpsfed_pruning")
    torch.manual_seed(0)
    d, m, n = 8, 6, 40
    pred = mlp(3 * d, d, 1, 2).double()
    u, v = torch.tanh(torch.randn(m, d, dtype=torch.double) * 2), torch.tanh(torch.randn(n, d, dtype=torch.double) * 2)
    with torch.no_grad():
        uu, vv = u[:, None].expand(m, n, d), v[None].expand(m, n, d)
        exact = pred(torch.cat([uu, vv, uu * vv], 2)).squeeze(2)
        a, g, w2, b2 = pr.fpred_parts(pred, u)
        assert torch.allclose(a[:, :, None] + g @ v.T,
                              torch.einsum("kc,mnc->mkn", pred[0].weight, torch.cat([uu, vv, uu * vv], 2))
                              + pred[0].bias[None, :, None])
        ub = pr.crown_upper(a, g, w2, b2, *pr.box_ball_intervals(a, g, v), v)
        assert (ub >= exact - 1e-12).all() and (ub > exact + 1e-6).any()   # a bound, and not the score
        h = a[:, :, None] + g @ v.T
        # unstable ReLUs exist over all items, so the relaxation is exercised above
        assert ((h.min(2).values < 0) & (h.max(2).values > 0)).any()
        for j in range(n):
            one = pr.crown_upper(a, g, w2, b2, h[:, :, j], h[:, :, j], v[j:j + 1])
            assert torch.allclose(one[:, 0], exact[:, j], atol=1e-12)


def test_lpsfed_pruning_refuses_a_run_it_cannot_rebuild(tmp_path):
    pr = _script("lpsfed_pruning")
    with pytest.raises(SystemExit, match="no .hydra/config.yaml"):
        pr.load_run_models(tmp_path, tmp_path)
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(
        "seed: 0\nalgorithm: {name: fedavg}\ndataset: {name: movielens100k}\npartitioner: {name: spectral_bipartite}\n"
        "model: {name: lgcn, score: cosine, pred_layers: 2}\n")
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(SystemExit, match="not an LPSFed run"):
        pr.load_run_models(tmp_path, tmp_path)


def test_bench_peers_targets_compare_fedprox_with_fedavg_in_the_same_run():
    """Issue #68: FedProx's training time within 1.15x FedAvg's, computed from the run's own numbers."""
    targets_met = _script("bench_peers").targets_met
    row = {"time_ratio": 0.4, "acc_fgx": 0.79, "acc_peer": 0.79}
    start = {"fgx_startup_s": 3.0, "fgx_fail_fast_s": 0.2}
    ok = targets_met({"fedavg": {**row, "train_s_fgx": 2.0}, "fedprox": {**row, "train_s_fgx": 2.2}, "startup": start})
    slow = targets_met({"fedavg": {**row, "train_s_fgx": 2.0}, "fedprox": {**row, "train_s_fgx": 2.4}, "startup": start})
    assert ok["fgx.fedprox/fedavg=1.100<=1.15"] is True and slow["fgx.fedprox/fedavg=1.200<=1.15"] is False


def test_bench_scale_compares_memory_only_between_environments_that_load_the_same_modules():
    """Importing torch and torch_geometric loads whatever optional packages are installed (PyG 2.8: pandas),
    resident memory charged to the tool that runs there: the bench names every version or module that
    differs between fgx's and OpenFGL's interpreters, and nothing when they match."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("bench_scale_env", REPO / "scripts" / "bench_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    here = mod.environment(sys.executable)
    assert here["versions"]["torch"] and here["versions"]["torch_geometric"]
    assert {"torch", "torch_geometric", "numpy"} <= set(here["modules"])
    assert not any(m.startswith("_") or m in sys.stdlib_module_names for m in here["modules"])
    assert mod.environment_differences(here, here) == []
    without = {"versions": {**here["versions"], "pandas": None},
               "modules": [m for m in here["modules"] if m != "pandas"] + ["openfgl"]}
    with_pandas = {"versions": {**here["versions"], "pandas": "3.1.1"}, "modules": sorted({*here["modules"], "pandas", "fgx"})}
    differ = mod.environment_differences(with_pandas, without)
    assert differ == ["pandas 3.1.1 under fgx, None under OpenFGL",
                      "loaded by `import torch, torch_geometric` under fgx only: pandas"]


def test_trace_memory_phases_names_every_phase_of_every_round_with_its_resident_set_and_heap(tmp_path):
    """scripts/trace_memory_phases.py: the set-up steps, then each round's configure, clients' training,
    aggregate, server update and evaluation, in order, with resident sets that bound each other and glibc's
    heap; the record names no path of this machine."""
    import os
    import subprocess
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "trace_memory_phases.py"), "--name", "t", "--out",
                           str(out), "--env", f"FGX_TRACE_PROBE={REPO.parent}/x", "--", "algorithm=fedavg", "rounds=2", "eval_every=1", "executor=batched",
                           f"data_dir={REPO.parent / 'shared' / 'data'}", "dataset=csbm", "dataset.num_nodes=600",
                           "partitioner=metis", "partitioner.num_clients=3"],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads((out / "t.json").read_text())
    try:
        import ctypes
        glibc = bool(ctypes.CDLL(None).mallinfo2)
    except (OSError, AttributeError, TypeError):
        glibc = False
    phases = [(p["round"], p["phase"]) for p in rec["phases"]]
    assert phases[0] == (0, "set-up: start, data and partition")
    assert (0, "set-up: clients") in phases and (0, "set-up: partition statistics") in phases
    for r in (1, 2):
        mine = [ph for rr, ph in phases if rr == r]
        core = [ph for ph in mine if not ph.startswith("after")]
        assert core == ["configure", "clients' training", "aggregate", "server_update", "evaluation"], mine
    assert len(rec["round_s"]) == 2
    for p in rec["phases"]:
        assert p["rss_peak_mb"] >= max(p["rss_start_mb"], p["rss_end_mb"]) > 0
        assert rec["rss_peak_mb"] >= p["rss_peak_mb"] - 1      # the kernel's high-water mark bounds every sample
        if glibc:
            assert p["heap_in_use_mb"] > 0 and p["heap_free_mb"] >= 0 and p["mmapped_mb"] >= 0
    assert "data_dir=<data root>" in rec["command"] and str(REPO.parent) not in json.dumps(rec)
    assert rec["env"] == ["FGX_TRACE_PROBE=<repository parent>/x"]
