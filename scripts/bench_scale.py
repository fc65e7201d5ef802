"""How a round's cost grows with the graph and the number of clients (#41): FedAvg, FedGSP and CE-FedGNN
on generated graphs (csbm) of growing size, split by METIS (pymetis) into 10, 100 and 1,000 clients,
OpenFGL (openfgl-lib) beside fgx's FedAvg wherever it runs; CE-FedGNN also on the generated AML presets
(the edge task, by_bank clients). Every run is one `fgx run` (or one OpenFGL process) in a child
process under a memory limit and a timeout.

    OMP_NUM_THREADS=1 python scripts/bench_scale.py                          # 10k and 100k nodes, 10/100/1,000 clients
    OMP_NUM_THREADS=1 nice -n 19 python scripts/bench_scale.py --sizes 10k 100k aml_tiny --cpu-timeout 600 \
        --timeout 7200                                                       # on a shared machine (CPU-second limit)
    python scripts/bench_scale.py --sizes 10k 100k 1M 2.5M aml_tiny aml_hi_small --timeout 3600 \\
        --name full                                                          # the whole curve (hours)
    python scripts/bench_scale.py --quick                                    # smoke: 2k nodes, 10 clients, 1 round
    python scripts/bench_scale.py --markdown results/benchmarks/scale/bench_scale.json   # the docs' table
    python scripts/bench_scale.py --plot results/benchmarks/scale/bench_scale.json       # its plot again
    python scripts/bench_scale.py --combine results/benchmarks/scale/all.json full.json full_rest.json
                                  # one curve from a stopped bench and the run that finished it

Measured per run: seconds per round (the median of ``--rounds`` rounds after ``--warmup`` rounds; fgx:
``round_time_s`` of metrics.jsonl, the clients' local steps and the exchange, without evaluation;
OpenFGL: the time between its evaluations, without them), bytes per round (fgx: comm.json, the
median over the same rounds; OpenFGL does not count them), peak RSS of the process and all its
children (wait4 and a watchdog every 0.1 s), start-up (process start to round 1: generation,
partition, clients), the whole process and its CPU share (CPU seconds per wall second: near 1 on a
free core). A run whose resident memory passes ``--mem-limit-gb`` is killed and recorded as ``does not
fit``, one past ``--timeout`` (wall) or ``--cpu-timeout`` (CPU seconds) as ``timed out``; the larger
sizes of that tool, algorithm and client count are then skipped (``skipped``), so the largest
size that fits is the last ``ok`` of its line.

Repeats (``--repeats N``): every cell (algorithm, clients, size) runs N times, fgx and OpenFGL back to
back in each repeat, who runs first alternating; a row reports the medians and each repeat's values,
and wherever both tools ran, fgx's peak RSS is tested against OpenFGL's on the repeats paired by their
index (two-sided paired t-test at 5 %: ``below``, ``above`` or ``inconclusive``; ``memory_vs_openfgl``
in the JSON, a second table in the markdown). Identical runs' peaks differ by ~15 MB at 100k nodes, so
one run per tool cannot tell a gap of that size from noise.

    OMP_NUM_THREADS=1 python scripts/bench_scale.py --sizes 100k --clients 100 1000 --algorithms fedavg \
        --repeats 5 --name mem_100k_repeats                                 # is fgx's peak at or below OpenFGL's?

Settings: each algorithm at its own defaults (conf/algorithm/*.yaml) on csbm (64 features, 5
classes, average degree 8; its model: GCN, FedGSP's UniFilter), except FedAvg, which runs OpenFGL's
setting on both sides: OpenFGL's GCN (2 GCNConv layers, 64 hidden, dropout 0.5, no Linear head)
and ``--local-steps`` full-batch steps (OpenFGL's local epochs), with ``--executor`` (default
batched: client-batched where the algorithm allows it, else one client after another). OpenFGL
runs FedAvg on fgx's clients: a child writes fgx's csbm graph and METIS partition (the same code
and seed as the fgx run), scripts/peers/openfgl_run.py writes OpenFGL's files from them, and the
bench checks that both tools hold the same test nodes per client. OpenFGL has neither FedGSP nor
CE-FedGNN.

Output: a markdown table on stderr (``--markdown <name>.json`` prints it again), one JSON line on
stdout, and under ``--out`` (results/benchmarks/scale) ``<name>.json`` (the line, rewritten after every
run with ``"done": false`` until the end) and ``<name>.png`` (s/round and peak RSS against nodes, one
line per tool x algorithm x clients). The bench process itself never imports torch (a child's peak RSS
starts at its parent's)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fgx.bench import final_json, run_process  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from bench_peers import default_peer_python  # noqa: E402  (the same OpenFGL interpreter as bench_peers)

DRIVER = REPO / "scripts" / "peers" / "openfgl_run.py"
ALGORITHMS = ("fedavg", "fedgsp", "ce_fedgnn")
TOOLS = ("fgx", "openfgl")
OPENFGL_ALGORITHMS = ("fedavg",)           # of ALGORITHMS, those OpenFGL has
AML_SIZES = ("aml_tiny", "aml_hi_small", "aml_hi_medium", "aml_hi_large")
AML_ALGORITHMS = ("ce_fedgnn",)            # the edge task's algorithm here
OPENFGL_DATASET = "Cora"                   # a name OpenFGL's checks accept; it only names its folders
# CE-FedGNN's values on HI-Small before conf/algorithm_on_dataset/ce_fedgnn_aml_hi_small.yaml (issue 72; the lr of
# 65dc51c): the AML rows of results/benchmarks/scale were measured with them
AML_CE_FEDGNN_RECIPE = ["algorithm.local_optimizer=ema_sgd", "algorithm.lr=0.01", "algorithm.local_steps=8",
                        "algorithm.positive_share=null", "algorithm.class_weights=null", "dataset.ports=true",
                        "dataset.timestamp_feature=true"]
# OpenFGL's GCN (openfgl/model/gcn.py), as in scripts/bench_peers.py
OPENFGL_GCN = ["model=gcn", "model.classifier=none", "model.layers=2", "model.hidden=64", "model.dropout=0.5"]


def parse_size(tok: str) -> int | str:
    """``10k``, ``2.5M``, ``100000`` or an AML preset name."""
    if tok in AML_SIZES:
        return tok
    mult = {"k": 1_000, "m": 1_000_000}.get(tok[-1:].lower(), 1)
    try:
        n = float(tok[:-1] if mult > 1 else tok) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {tok!r}: a node count (10k, 2.5M, 100000) or one of {list(AML_SIZES)}")
    if n < 10 or n != int(n):
        raise argparse.ArgumentTypeError(f"size {tok!r}: a whole number of at least 10 nodes")
    return int(n)


def fgx_overrides(algo: str, size: int | str, clients: int, a, run_dir: Path) -> list[str]:
    over = [f"algorithm={algo}", f"seed={a.seed}", f"rounds={a.warmup + a.rounds}", "eval_every=1",
            "output.progress=off", "output.checkpoint=false", f"hydra.run.dir={run_dir}", f"executor={a.executor}",
            f"data_dir={a.data_dir}"]
    if isinstance(size, str):
        over += [f"dataset={size}", "partitioner=by_bank", f"partitioner.num_clients={clients}"]
        if algo == "ce_fedgnn":   # the recipe the committed curve measured, not HI-Small's design-card defaults
            over += AML_CE_FEDGNN_RECIPE                # (issue 72), so that a rerun's rows join the curve
    else:
        over += ["dataset=csbm", f"dataset.num_nodes={size}", f"dataset.num_features={a.features}",
                 "partitioner=metis", f"partitioner.num_clients={clients}"]
    if algo == "fedavg":
        over += [*OPENFGL_GCN, f"algorithm.local_steps={a.local_steps}"]
    return [*over, *a.fgx_overrides]


def write_graph(overrides: list[str], graph: Path, clients: Path) -> dict:
    """Child mode: fgx's dataset and partition for ``overrides`` (the code and seed of the fgx run),
    written for OpenFGL: the graph (x, edge_index, y) and the client of every node with the split."""
    import torch

    from fgx.cli import compose
    from fgx.config import validate
    from fgx.data.base import DataEnv
    from fgx.trainer import log

    v = validate(compose(overrides))
    ds = v.entries["dataset"].obj(v.params["dataset"], DataEnv(data_dir=Path(v.top.data_dir), seed=v.top.seed, log=log))
    parts = v.entries["partitioner"].obj(v.params["partitioner"], ds.data, ds.info, v.top.seed)
    d = ds.data
    owner = torch.full((d.num_nodes,), -1, dtype=torch.long)
    for c, nodes in enumerate(parts):
        owner[nodes] = c
    torch.save({"x": d.x, "edge_index": d.edge_index, "y": d.y}, graph)
    torch.save({"client": owner, "train_mask": d.train_mask, "val_mask": d.val_mask, "test_mask": d.test_mask}, clients)
    return {"test_nodes": [int(d.test_mask[n].sum()) for n in parts]}


def after_warmup(values: list[float], warmup: int) -> list[float]:
    return values[warmup:] or values[-1:]


def fgx_row(algo: str, size, clients: int, a, work: Path, rep: int = 0) -> dict:
    d = work / f"fgx_{algo}_{size}_{clients}{f'_r{rep}' if rep else ''}"
    over = fgx_overrides(algo, size, clients, a, d)
    r = run_process([sys.executable, "-m", "fgx.cli", "run", *over], timeout=a.timeout, cpu_timeout=a.cpu_timeout, raise_on_timeout=False,
                    mem_limit_mb=a.mem_limit_gb * 1024, env=a.child_env)
    row = {"tool": "fgx", "algorithm": algo, "clients": clients, "peak_rss_mb": round(r.peak_rss_mb, 1),
           "process_s": round(r.wall_s, 2), "cpu_share": cpu_share(r), "command": "fgx run " + " ".join(o for o in over if not o.startswith(
               ("hydra.run.dir=", "data_dir=")))}
    summary = d / "summary.json"
    if r.limit or r.returncode != 0:
        diverged = not r.limit and summary.exists() and json.loads(summary.read_text()).get("status") == "diverged"
        if not diverged:
            return {**row, **failure(r, work=work)}
    s = json.loads(summary.read_text())
    part = json.loads((d / "partition.json").read_text())
    comm = json.loads((d / "comm.json").read_text())
    by_round = {m["round"]: m["round_time_s"] for m in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())}
    rounds = sorted(by_round)
    times = after_warmup([by_round[k] for k in rounds], a.warmup)
    sent = after_warmup([sum(comm["per_round"].get(str(k), {}).values()) for k in rounds], a.warmup)
    # a run that diverged still measured its memory and its rounds up to the divergence: kept, under its own status
    status = {"status": "ok"} if s.get("status") != "diverged" else \
        {"status": "diverged", "diverged": {k: v for k, v in (s.get("diverged") or {}).items() if k != "run_dir"}}
    return {**row, **status, "nodes": sum(c["nodes"] for c in part["clients"]),
            "edges": sum(c["internal_edges"] for c in part["clients"]) + part["cross_client_edges"],
            "s_per_round": round(statistics.median(times), 4), "round_s": [round(t, 4) for t in times],
            "bytes_per_round": int(statistics.median(sent)), "startup_s": s.get("startup_s") and round(s["startup_s"], 2),
            "test_nodes": [c.get("test") for c in part["clients"]]}   # node task: the OpenFGL check


# What `import torch, torch_geometric` loads depends on what else is installed, and what it loads is resident
# memory charged to whichever tool runs on it: PyG 2.8 imports pandas (torch_geometric.llm) wherever pandas is
# installed, torch imports opt_einsum, urllib3 zstandard (together ~31 MB RSS). Memory is compared only
# between interpreters whose shared libraries have the same versions and load the same third-party modules.
SHARED_PACKAGES = ("torch", "torch_geometric", "numpy", "scipy", "pandas")
ENV_PROBE = """
import importlib.metadata as md, json, sys, torch, torch_geometric
def version(p):
    try:
        return md.version(p)
    except md.PackageNotFoundError:
        return None
loaded = {m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names)
print(json.dumps({"versions": {p: version(p) for p in %r},
                  "modules": sorted(m for m in loaded if not m.startswith("_") and m != "cython_runtime")}))
""" % (SHARED_PACKAGES,)


def environment(python: str) -> dict:
    """The shared libraries' versions in ``python``'s environment and the third-party modules (stdlib and
    private names left out) that importing torch and torch_geometric loads there."""
    out = subprocess.run([python, "-c", ENV_PROBE], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode != 0:
        raise SystemExit(f"bench_scale: {python} cannot import torch and torch_geometric: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def environment_differences(fgx: dict, peer: dict) -> list[str]:
    """What differs between fgx's and OpenFGL's environments in what both tools load (empty: comparable)."""
    out = [f"{p} {fgx['versions'].get(p)} under fgx, {peer['versions'].get(p)} under OpenFGL"
           for p in SHARED_PACKAGES if fgx["versions"].get(p) != peer["versions"].get(p)]
    extra_app = sorted(set(fgx["modules"]) - set(peer["modules"]) - {"fgx"})
    extra_peer = sorted(set(peer["modules"]) - set(fgx["modules"]) - {"openfgl"})
    if extra_app:
        out.append("loaded by `import torch, torch_geometric` under fgx only: " + ", ".join(extra_app))
    if extra_peer:
        out.append("loaded by `import torch, torch_geometric` under OpenFGL only: " + ", ".join(extra_peer))
    return out


def cpu_share(r) -> float:
    """The child's CPU seconds per wall second: about 1 (one thread) when it had a core to itself,
    far below when other work held the cores (its wall times are then inflated by about 1/share)."""
    return round(r.cpu_s / max(r.wall_s, 1e-9), 3)


def failure(r, peer_python: str | None = None, work: Path | None = None) -> dict:
    if r.limit == "memory":
        return {"status": "does not fit"}
    if r.limit == "timeout":
        return {"status": "timed out"}
    tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
    # the written file names no folder of this machine (the repository, the interpreter's environment)
    text = " | ".join(tail)
    if work is not None:                             # the runs' folder (--work-dir, or a temporary one)
        text = text.replace(str(work), "<work dir>")
    text = text.replace(str(REPO), "<repo>").replace(sys.prefix, "<venv>")
    if peer_python:                                  # OpenFGL's environment (not resolved: a venv's python is a link)
        text = text.replace(str(Path(os.path.abspath(peer_python)).parent.parent), "<venv-peers>")
    return {"status": "failed", "error": text[-400:]}


def openfgl_row(algo: str, size: int, clients: int, a, work: Path, fgx_test_nodes: list[int] | None,
                rep: int = 0) -> dict:
    d = work / f"openfgl_{algo}_{size}_{clients}{f'_r{rep}' if rep else ''}"     # a repeat starts from nothing
    d.mkdir(parents=True, exist_ok=True)
    graph, spec = d / "graph.pt", d / "clients.pt"
    row = {"tool": "openfgl", "algorithm": algo, "clients": clients}
    over = fgx_overrides(algo, size, clients, a, d / "unused")
    # the two steps that turn fgx's data into OpenFGL's files are the bench's, not OpenFGL's: no memory limit
    w = run_process([sys.executable, __file__, "--write-graph", str(graph), str(spec), "--", *over],
                    timeout=a.timeout, cpu_timeout=a.cpu_timeout, raise_on_timeout=False, env=a.child_env)
    if w.limit or w.returncode != 0:
        return {**row, **failure(w), "stage": "writing fgx's graph and clients"}
    written = json.loads(w.stdout.strip().splitlines()[-1])
    if fgx_test_nodes is not None and written["test_nodes"] != fgx_test_nodes:
        raise RuntimeError(f"the written clients of {size} nodes / {clients} clients are not the ones fgx trained on")
    cmd = [a.peer_python, str(DRIVER), "--root", str(d / "root"), "--data-dir", str(d), "--clients", str(spec),
           "--graph", str(graph), "--dataset", OPENFGL_DATASET, "--algorithm", algo,
           "--rounds", str(a.warmup + a.rounds), "--epochs", str(a.local_steps), "--num-clients", str(clients),
           "--seed", str(a.seed), "--out", str(d / "out.json")]
    env = {**a.child_env, "PYTHONWARNINGS": "ignore"}
    p = run_process([*cmd, "--prepare-only"], timeout=a.timeout, cpu_timeout=a.cpu_timeout, raise_on_timeout=False, env=env)
    if p.limit or p.returncode != 0:
        return {**row, **failure(p, a.peer_python), "stage": "writing OpenFGL's client files"}
    r = run_process(cmd, timeout=a.timeout, cpu_timeout=a.cpu_timeout, raise_on_timeout=False, mem_limit_mb=a.mem_limit_gb * 1024, env=env)
    row.update({"peak_rss_mb": round(r.peak_rss_mb, 1), "process_s": round(r.wall_s, 2), "cpu_share": cpu_share(r)})
    if r.limit or r.returncode != 0:
        return {**row, **failure(r, a.peer_python, work=work)}
    res = json.loads((d / "out.json").read_text())
    if fgx_test_nodes is not None and [c["test_nodes"] for c in res["per_client"]] != fgx_test_nodes:
        raise RuntimeError("OpenFGL did not train on fgx's clients (test nodes per client differ)")
    times = after_warmup(res["round_s"], a.warmup)
    return {**row, "status": "ok", "nodes": size, "s_per_round": round(statistics.median(times), 4),
            "round_s": [round(t, 4) for t in times], "bytes_per_round": None,
            "startup_s": res["startup_s"] and round(res["startup_s"], 2)}


def lanes_and_runs(a):
    """The runs in order (size ascending), each on its lane (tool, algorithm, clients, dataset kind)."""
    for size in sorted(a.sizes, key=lambda s: (isinstance(s, str), AML_SIZES.index(s) if isinstance(s, str) else s)):
        aml = isinstance(size, str)
        for clients in (a.aml_clients if aml else a.clients):
            if not aml and clients > size:
                continue
            for algo in a.algorithms:
                if aml and algo not in AML_ALGORITHMS:
                    continue
                for tool in a.tools:
                    if tool == "openfgl" and (aml or algo not in OPENFGL_ALGORITHMS):
                        continue
                    yield (tool, algo, clients, "aml" if aml else "csbm"), size


def cells(runs) -> list[list[tuple]]:
    """The runs of :func:`lanes_and_runs` grouped by what both tools measure (algorithm, clients, data,
    size): a cell's tools run side by side in every repeat."""
    out: list[list[tuple]] = []
    for lane, size in runs:
        if out and out[-1][0][0][1:] == lane[1:] and out[-1][0][1] == size:
            out[-1].append((lane, size))
        else:
            out.append([(lane, size)])
    return out


REPEATED = ("peak_rss_mb", "s_per_round", "process_s", "cpu_share")


def merge_repeats(runs: list[dict]) -> dict:
    """One row from a lane's repeats: the first run's fields, with the median of every repeated measure
    over the repeats that finished (``ok`` or ``diverged``) and each repeat's own values under
    ``repeats``. A repeat that failed makes the row that failure (the earlier repeats still listed)."""
    if len(runs) == 1:
        return runs[0]
    measured = [r for r in runs if r["status"] in ("ok", "diverged")]
    row = dict(runs[-1] if runs[-1]["status"] not in ("ok", "diverged") else runs[0])
    if row["status"] in ("ok", "diverged"):
        for k in REPEATED:
            vals = [r[k] for r in measured if r.get(k) is not None]
            row[k] = round(statistics.median(vals), 4) if vals else None
    row["repeats"] = [{"status": r["status"], **{k: r.get(k) for k in REPEATED}} for r in runs]
    return row


def memory_decision(fgx: list[float], peer: list[float], alpha: float = 0.05) -> dict:
    """fgx's peak RSS against OpenFGL's in one cell, from repeats paired by their index (repeat k of both
    tools ran back to back, so a slow or crowded phase of the machine hits both): the two-sided paired t-test
    of the mean difference (scipy's ``ttest_rel``) at ``alpha``. ``below`` / ``above``: fgx's peak is lower /
    higher at that level; ``inconclusive``: the difference is inside the run-to-run spread, decided
    neither way. Its false-decision rate at a zero gap is checked by simulation in tests/test_bench.py."""
    from scipy import stats       # imported only once every child has run (the bench's RSS is a child's floor)

    n = min(len(fgx), len(peer))
    d = [f - q for f, q in zip(fgx[:n], peer[:n])]
    out = {"n": n, "fgx_median_mb": statistics.median(fgx) if fgx else None,
           "openfgl_median_mb": statistics.median(peer) if peer else None,
           "differences_mb": [round(x, 1) for x in d]}
    if n < 2:
        return {**out, "decision": "inconclusive", "why": "fewer than 2 paired repeats: no test (--repeats)"}
    mean = statistics.fmean(d)
    if all(x == d[0] for x in d):     # no spread: the t statistic is undefined, the sign is the difference
        return {**out, "mean_mb": mean, "ci95_mb": [mean, mean], "p": 0.0 if mean else 1.0,
                "decision": "above" if mean > 0 else "below" if mean < 0 else "inconclusive",
                "why": "the same difference in every repeat"}
    t = stats.ttest_rel(fgx[:n], peer[:n])
    low, high = t.confidence_interval(1 - alpha)
    p = float(t.pvalue)
    decision = ("above" if mean > 0 else "below") if p < alpha else "inconclusive"
    return {**out, "mean_mb": round(mean, 2), "ci95_mb": [round(float(low), 2), round(float(high), 2)],
            "p": float(f"{p:.3g}"), "decision": decision,     # significant digits: a small p is not 0
            "why": "" if p < alpha else f"p = {p:.3g} >= {alpha}: the difference is inside the run-to-run spread"}


def peaks(row: dict) -> list[float]:
    """A row's peak RSS, one per repeat (in the order they ran)."""
    return [x["peak_rss_mb"] for x in row.get("repeats") or [row]]


def memory_comparison(rows: list[dict]) -> list[dict]:
    """Every cell where fgx and OpenFGL both ran: fgx's peak RSS against OpenFGL's (:func:`memory_decision`)."""
    out = []
    by_cell = {}
    for r in rows:
        by_cell.setdefault((r["algorithm"], r["clients"], r["dataset"], r.get("size") or r.get("nodes")), {})[r["tool"]] = r
    for (algo, clients, kind, size), tools in by_cell.items():
        f, q = tools.get("fgx"), tools.get("openfgl")
        if not f or not q or f["status"] != "ok" or q["status"] != "ok":
            continue
        cell = {"algorithm": algo, "clients": clients, "nodes": f["nodes"], **memory_decision(peaks(f), peaks(q))}
        if f.get("part") != q.get("part"):      # --combine: repeats of two benches are not paired in time
            cell.update(decision="inconclusive", why=f"fgx measured in {f['part']}, OpenFGL in {q['part']}: not paired")
            cell.pop("p", None)
        out.append(cell)
    return out


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    lines: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["status"] == "ok":
            lines.setdefault((r["tool"], r["algorithm"], r["clients"], r["dataset"]), []).append(r)
    for (tool, algo, clients, kind), pts in sorted(lines.items()):
        pts.sort(key=lambda r: r["nodes"])
        label = f"{tool} {algo}, {clients} clients" + (" (AML)" if kind == "aml" else "")
        style = dict(marker="o" if tool == "fgx" else "s", linestyle="-" if tool == "fgx" else "--")
        for ax, key in zip(axes, ("s_per_round", "peak_rss_mb")):
            ax.plot([r["nodes"] for r in pts], [r[key] for r in pts], label=label, **style)
    for ax, ylabel in zip(axes, ("s/round (median)", "peak RSS (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    if lines:
        axes[1].legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def limits_text(result: dict) -> str:
    """'24 GB', or '18/21 GB' for a combined file whose parts ran under other memory limits."""
    lim = result["mem_limit_gb"]
    return "/".join(f"{x:g}" for x in (lim if isinstance(lim, list) else [lim])) + " GB"


def plot_result(result: dict, path: Path) -> None:
    plot(result["rows"], path, f"fgx scale bench at {result['commit']}: median s/round of {result['rounds']} rounds after "
         f"{result['warmup']}, peak RSS; limit {limits_text(result)}, {result['omp_num_threads']} thread(s)"
         + ("" if result.get("done") else " (partial)"))


# the settings that make rows of two bench files comparable; a combined file refuses parts that differ.
# The memory limit is not one of them: it changes no measured figure, only where a run is stopped, so each
# row of a combined file keeps its own part's limit ("does not fit" is "passed that many GB").
COMPARABLE = ("rounds", "warmup", "executor", "fedavg_local_steps", "features", "seed",
              "omp_num_threads", "fgx_overrides", "repeats")


def combine(parts: list[dict], names: list[str]) -> dict:
    """One result from several bench files of the same settings (a bench stopped by hand and the run
    that measured what it left): each row keeps the commit and file it came from, and a run measured
    in a later part replaces the same run (tool, algorithm, clients, data, size) of an earlier one."""
    for name, part in zip(names, parts):
        if "parts" in part:
            raise SystemExit(f"bench_scale --combine: {name} is already a combined file; combine the parts it "
                             f"names ({', '.join(part['parts'])}) instead")
    for name, part in zip(names[1:], parts[1:]):
        differ = [k for k in COMPARABLE if part.get(k) != parts[0].get(k)]
        if differ:
            raise SystemExit(f"bench_scale --combine: {name} differs from {names[0]} in {', '.join(differ)}; "
                             "rows measured under other settings are not one curve")
    rows: dict[tuple, dict] = {}
    for name, part in zip(names, parts):
        for r in part["rows"]:
            key = (r["tool"], r["algorithm"], r["clients"], r["dataset"], r.get("size") or r.get("nodes"))
            if r["status"] == "skipped" and key in rows:
                continue
            rows[key] = {**r, "commit": part["commit"], "part": name, "mem_limit_gb": part["mem_limit_gb"]}
    merged = {k: parts[0].get(k) for k in COMPARABLE}
    limits = sorted({p["mem_limit_gb"] for p in parts})
    merged["mem_limit_gb"] = limits[0] if len(limits) == 1 else limits
    result = {"bench": "scale", "done": bool(parts[-1].get("done")),
              "commit": "+".join(dict.fromkeys(p["commit"] for p in parts)), "parts": names, **merged,
              "timeout_s": max(p["timeout_s"] for p in parts), "rows": list(rows.values()),
              # each part's interpreters (None: a part measured before environments were recorded)
              "environments": {name: part.get("environment") for name, part in zip(names, parts)}}
    result["largest_fit"] = largest_fit(result["rows"])
    result["memory_vs_openfgl"] = memory_comparison(result["rows"])
    return result


def markdown(result: dict) -> str:
    """The table of docs/performance.md from a written ``<name>.json``: one row per run."""
    parts = any("commit" in r for r in result["rows"])        # a --combine file: each row's commit
    out = ["| tool | algorithm | data | nodes | clients | status | s/round | MB/round | peak RSS MB | start-up s | CPU share |"
           + (" commit |" if parts else ""), "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if parts else "")]
    for r in result["rows"]:
        def cell(key: str, fmt: str, scale: float = 1.0) -> str:
            return format(r[key] / scale, fmt) if r.get(key) is not None else ""

        lines = r.get("error", "").split(" | ")
        why = next((x for x in reversed(lines) if "error" in x.lower()), lines[-1]).strip()
        status = r["status"] if r["status"] != "failed" else f"failed: {why[:140]}{'...' if len(why) > 140 else ''}"
        if r["status"] == "diverged":
            status += f" (round {r['diverged'].get('round')}: its memory and rounds measured, its metrics not results)"
        if r["status"] == "does not fit":
            status += f" (> {r.get('mem_limit_gb', result['mem_limit_gb']):g} GB)"
        out.append(f"| {r['tool']} | {r['algorithm']} | {r['size'] or 'csbm'} | {r['nodes'] or ''} | {r['clients']} | "
                   f"{status} | {cell('s_per_round', '.3f')} | {cell('bytes_per_round', '.3f', 1e6)} | "
                   f"{cell('peak_rss_mb', ',.0f')} | {cell('startup_s', '.1f')} | {cell('cpu_share', '.2f')} |"
                   + (f" {r.get('commit', '')} |" if parts else ""))
    if result.get("memory_vs_openfgl"):
        out += ["", "| algorithm | nodes | clients | fgx peak MB | OpenFGL peak MB | fgx − OpenFGL per repeat (MB) | "
                    "mean, 95% CI | p | fgx's peak |", "|---|---|---|---|---|---|---|---|---|"]
        for c in result["memory_vs_openfgl"]:
            ci = f"{c['mean_mb']:+.1f} [{c['ci95_mb'][0]:+.1f}, {c['ci95_mb'][1]:+.1f}]" if "ci95_mb" in c else ""
            out.append(f"| {c['algorithm']} | {c['nodes']} | {c['clients']} | {c['fgx_median_mb']:,.0f} | "
                       f"{c['openfgl_median_mb']:,.0f} | {', '.join(f'{d:+.0f}' for d in c['differences_mb'])} | {ci} | "
                       f"{'' if c.get('p') is None else format(c['p'], '.3g')} | {c['decision']} |")
    return "\n".join(out)


def git_commit() -> str | None:
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() or None


def largest_fit(rows: list[dict]) -> dict[str, dict]:
    """The largest size of every line (tool x algorithm x clients) that ran, and its first failure."""
    largest: dict[str, dict] = {}
    for r in rows:
        key = f"{r['tool']} {r['algorithm']} {r['clients']} clients" + (" aml" if r["dataset"] == "aml" else "")
        cur = largest.setdefault(key, {"largest_ok_nodes": None, "first_not_ok": None})
        if r["status"] == "ok":
            cur["largest_ok_nodes"] = max(cur["largest_ok_nodes"] or 0, r["nodes"])
        elif cur["first_not_ok"] is None and r["status"] != "skipped":
            cur["first_not_ok"] = f"{r['status']} at {r['nodes'] or r['size']}"
    return largest


def summarise(a, rows: list[dict], load_before, done: bool) -> dict:
    """The JSON line: the settings, the largest size of every line that ran, and every run (``done``:
    false while the bench still runs; the file is rewritten after every run)."""
    largest = largest_fit(rows)
    return {"bench": "scale", "done": done, "commit": git_commit(), "rounds": a.rounds, "warmup": a.warmup,
            "mem_limit_gb": a.mem_limit_gb, "timeout_s": a.timeout,
            "cpu_timeout_s": a.cpu_timeout, "executor": a.executor,
            "fedavg_local_steps": a.local_steps, "features": a.features, "seed": a.seed,
            "partitioner": "metis (pymetis) for csbm, by_bank for AML", "omp_num_threads": a.child_env["OMP_NUM_THREADS"],
            "cpus": os.cpu_count(), "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            "fgx_overrides": a.fgx_overrides, "environment": a.environment, "repeats": a.repeats,
            "largest_fit": largest, "rows": rows,
            # scipy only at the end: the bench process's own resident memory is every later child's floor
            **({"memory_vs_openfgl": memory_comparison(rows)} if done else {})}


def measure(a, lane: tuple, size, work: Path, stopped: dict, test_nodes: dict, rep: int) -> dict:
    """One run of one lane (its ``rep``-th repeat), or its skip when a smaller size of the lane did not fit."""
    tool, algo, clients, kind = lane
    base = {"tool": tool, "algorithm": algo, "clients": clients, "dataset": kind,
            "size": size if kind == "aml" else None}
    if lane in stopped:
        return {**base, "status": "skipped", "nodes": size if kind == "csbm" else None,
                "why": f"a smaller size {stopped[lane]}"}
    t = time.perf_counter()
    if tool == "fgx":
        row = {**base, **fgx_row(algo, size, clients, a, work, rep)}
        if algo == "fedavg" and row["status"] == "ok":
            test_nodes.setdefault((size, clients), row["test_nodes"])
    else:
        row = {**base, **openfgl_row(algo, size, clients, a, work, test_nodes.get((size, clients)), rep)}
    row.setdefault("nodes", size if kind == "csbm" else None)
    row.pop("test_nodes", None)
    if row["status"] in ("does not fit", "timed out"):
        stopped[lane] = f"{row['status']} ({row['nodes'] or size})"
    print(f"[scale] {tool:<8} {algo:<10} {kind} {size} nodes, {clients:>5} clients"
          + (f" (repeat {rep + 1}/{a.repeats})" if a.repeats > 1 else "") + f": {row['status']}"
          + (f", {row['s_per_round']:.3f} s/round, {row['peak_rss_mb']:.0f} MB peak" if row["status"] in ("ok", "diverged")
             else f" {row.get('error', '')}")
          + f" ({time.perf_counter() - t:.0f} s, CPU share {row.get('cpu_share')})", file=sys.stderr, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--markdown"]:                           # the docs' table from a written <name>.json
        print(markdown(json.loads(Path(argv[1]).read_text())))
        return 0
    if argv[:1] == ["--plot"]:                               # the plot again from a (partial) <name>.json
        written = Path(argv[1])
        plot_result(json.loads(written.read_text()), written.with_suffix(".png"))
        return 0
    if argv[:1] == ["--combine"]:                            # one file (and plot) from several of one setting
        out, names = Path(argv[1]), argv[2:]
        if not names:
            raise SystemExit("bench_scale --combine OUT.json PART.json [PART.json ...]")
        result = combine([json.loads(Path(n).read_text()) for n in names], [Path(n).name for n in names])
        out.write_text(json.dumps(result) + "\n")
        plot_result(result, out.with_suffix(".png"))
        print(f"written: {out}, {out.with_suffix('.png')} ({len(result['rows'])} runs)")
        return 0
    if argv[:1] == ["--write-graph"]:                        # internal: the child that writes OpenFGL's input
        graph, spec, _, *over = argv[1:]
        print(json.dumps(write_graph(over, Path(graph), Path(spec))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=parse_size, nargs="+", default=[10_000, 100_000],
                    help=f"csbm node counts (10k, 2.5M) and AML presets {list(AML_SIZES)} (CE-FedGNN only)")
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000], help="METIS clients of the csbm graphs")
    ap.add_argument("--aml-clients", type=int, nargs="+", default=[4], help="by_bank clients of the AML presets")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"comma-separated, from {list(ALGORITHMS)}")
    ap.add_argument("--tools", default="fgx,openfgl", help="comma-separated, from fgx,openfgl (OpenFGL: FedAvg on csbm)")
    ap.add_argument("--rounds", type=int, default=2, help="measured rounds per run (after --warmup)")
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and left out of the median")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of every cell, the tools interleaved (who runs first alternates); a row reports the "
                         "medians, and fgx's peak RSS is tested against OpenFGL's on the paired repeats (>= 2)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one run (one process) may take")
    ap.add_argument("--cpu-timeout", type=float, default=None,
                    help="CPU seconds one run may take (a shared machine's other work cannot shorten it)")
    ap.add_argument("--mem-limit-gb", type=float, default=24.0, help="resident memory one run may use")
    ap.add_argument("--local-steps", type=int, default=1, help="FedAvg's full-batch steps per round (both tools)")
    ap.add_argument("--features", type=int, default=64, help="csbm features")
    ap.add_argument("--executor", default="batched", help="fgx's executor (local | batched)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peer-python", default=default_peer_python(),
                    help="interpreter with openfgl-lib (default: $FGX_PEER_PYTHON, else this one if it has openfgl)")
    ap.add_argument("--data-dir", default=None, help="fgx data root (AML: real CSVs or generated data; default: "
                                                     "a temporary directory)")
    ap.add_argument("--work-dir", default=None, help="keep run directories here (default: a temporary directory)")
    ap.add_argument("--out", default=str(REPO / "results" / "benchmarks" / "scale"), help="folder of <name>.json/.png")
    ap.add_argument("--name", default="bench_scale", help="file name stem of the outputs")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2k nodes, 10 clients, 1 round, no warm-up")
    ap.add_argument("--allow-environment-difference", action="store_true",
                    help="run OpenFGL beside fgx although their interpreters load different versions or modules when "
                         "importing torch and torch_geometric (recorded under environment.differences)")
    ap.add_argument("fgx_overrides", nargs="*", help="extra fgx overrides for every fgx run (e.g. device=cuda)")
    a = ap.parse_args(argv)
    if a.quick:
        a.sizes, a.clients, a.rounds, a.warmup = [2000], [10], 1, 0
    a.algorithms = [x for x in a.algorithms.split(",") if x]
    a.tools = [x for x in a.tools.split(",") if x]
    bad = [x for x in a.algorithms if x not in ALGORITHMS] + [x for x in a.tools if x not in TOOLS]
    if bad:
        ap.error(f"unknown {bad}: --algorithms from {list(ALGORITHMS)}, --tools from {list(TOOLS)}")
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    if a.rounds < 1 or a.warmup < 0 or a.local_steps < 1 or a.mem_limit_gb <= 0 or a.timeout <= 0 or (
            a.cpu_timeout is not None and a.cpu_timeout <= 0):
        ap.error("--rounds and --local-steps must be >= 1, --warmup >= 0, --mem-limit-gb and the timeouts > 0")
    if min(a.clients + a.aml_clients) < 1:
        ap.error("--clients and --aml-clients must be >= 1")
    if "openfgl" in a.tools and not a.peer_python:
        ap.error("no OpenFGL interpreter: pip install -e '.[peers]' (after pinning torch), pass --peer-python, or "
                 "leave it out with --tools fgx")
    a.environment = {"fgx": environment(sys.executable)}
    if "openfgl" in a.tools:
        a.environment["openfgl"] = environment(a.peer_python)
        differ = environment_differences(a.environment["fgx"], a.environment["openfgl"])
        if differ and not a.allow_environment_difference:
            ap.error("fgx's and OpenFGL's environments differ in what both tools load, so their memory would not "
                     "compare: " + "; ".join(differ) + ". Install the same versions in both (e.g. "
                     f"`{a.peer_python} -m pip install pandas==<fgx's>`), or pass --allow-environment-difference "
                     "(the output records the differences)")
        a.environment["differences"] = differ
    # every child: one thread unless told otherwise, and fgx importable from the peer's driver's parent
    a.child_env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                   "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="fgx_bench_scale_") as tmp:
        work = Path(a.work_dir or tmp).resolve()
        work.mkdir(parents=True, exist_ok=True)
        a.data_dir = str(Path(a.data_dir or work / "data").resolve())
        stopped: dict[tuple, str] = {}
        test_nodes: dict[tuple, list[int]] = {}
        for cell in cells(lanes_and_runs(a)):
            done: dict[tuple, list[dict]] = {lane: [] for lane, _ in cell}
            for rep in range(a.repeats):
                for lane, size in (cell if rep % 2 == 0 else cell[::-1]):   # who runs first alternates
                    runs = done[lane]
                    if runs and runs[-1]["status"] != "ok":                   # a lane repeats while it runs ok
                        continue
                    runs.append(measure(a, lane, size, work, stopped, test_nodes, rep))
                    (out_dir / f"{a.name}.json").write_text(json.dumps(summarise(
                        a, rows + [merge_repeats(r) for r in done.values() if r], load_before, done=False)) + "\n")
            rows.extend(merge_repeats(done[lane]) for lane, _ in cell)
    result = summarise(a, rows, load_before, done=True)
    print(markdown(result), file=sys.stderr)
    (out_dir / f"{a.name}.json").write_text(json.dumps(result) + "\n")
    plot_result(result, out_dir / f"{a.name}.png")
    final_json(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
