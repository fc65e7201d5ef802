"""Run every fgx algorithm end to end on each given device and print the results side by side.

    python scripts/check_device.py --devices cpu cuda --data-dir <copy of shared/data>
    # in parallel: --shard 0/4 ... --shard 3/4, each with --out sI.json, then --table s*.json

Each case is a short run (2 rounds) of one algorithm on its natural data: generated graphs, the real
Cora / Minesweeper / MovieLens-100K copies, generated AML transactions, tabular data on a gossip
graph, certified unlearning. The table shows each device's status, main metric and wall time, and
the largest metric difference from the first device (floating-point reductions differ between CPU
and CUDA kernels, so small differences are expected; a crash or NaN is not). Exit status 1 if any
run failed. Every algorithm in conf/algorithm must appear in some case (checked before running), so
a new algorithm without a device check is caught here.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

NODE = ["dataset=csbm", "dataset.num_nodes=400", "dataset.num_features=16", "partitioner=random",
        "partitioner.num_clients=3", "model.hidden=16"]
HETERO = ["dataset=hetero_homophily", "dataset.num_communities=5", "dataset.nodes_per_community=60",
          "dataset.num_features=8", "partitioner=by_community", "model=unifilter", "model.K=3", "model.hidden=16"]
RECSYS = ["dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120", "dataset.mean_degree=12",
          "partitioner=random_users", "partitioner.num_clients=3", "algorithm.local_epochs=2", "model.dim=16"]
ML100K = ["+experiment=lpsfed_table1_ml100k", "dataset.download=false", "partitioner=random_users",
          "partitioner.num_clients=2", "algorithm.local_epochs=1", "algorithm.warmup_rounds=1"]
GOSSIP = ["dataset=diabetes", "partitioner=topology", "partitioner.graph=florentine", "model=mlp_tabular",
          "model.hidden=8", "algorithm.k=2", "algorithm.b=2", "rounds=4"]
GRAPH = ["dataset=graph_synth", "dataset.groups=2", "dataset.num_graphs=120", "partitioner=cross_dataset",
         "partitioner.clients_per_dataset=3", "model.hidden=8", "model.layers=2"]
UNLEARN = ["dataset=csbm", "dataset.num_nodes=400", "dataset.num_features=16", "partitioner=random",
           "partitioner.num_clients=3", "algorithm=certified_lr", "rounds=1",
           "unlearning.requests.num_requests=4", "unlearning.requests.batch_size=2"]

# (label, overrides, needs the real data directory)
CASES: list[tuple[str, list[str], bool]] = [
    *[(a, [*NODE, f"algorithm={a}"], False) for a in
      ("local", "fedavg", "fedprox", "fedper", "gcfl", "fedpub", "swift_fedgnn", "fedgnn_st",
       "ce_fedgnn_no_sharing", "ce_fedgnn_no_gma", "scaffold", "moon", "fedproto", "fedtgp", "feddc")],
    # FedGSP's baselines; fedgta and fediih bring their backbones (gamlp, disengcn)
    *[(a, [*NODE, f"algorithm={a}"], False) for a in ("fedgnn", "fedgta", "adafgl", "fedtad", "fediih")],
    ("single_client", [*NODE, "algorithm=single_client"], False),
    ("fedavg executor=batched", [*NODE, "algorithm=fedavg", "executor=batched"], False),
    # graph classification (generated graphs of two groups, one dataset per group of clients)
    *[(f"{a} (graph level)", [*GRAPH, f"algorithm={a}"], False) for a in ("fedavg", "gcfl")],
    ("gcfl_plus (graph level)", [*GRAPH, "algorithm=gcfl_plus", "algorithm.warmup_rounds=0"], False),
    ("fedstar (graph level)", [*GRAPH, "algorithm=fedstar", "model.n_rw=4", "model.n_dg=4"], False),
    ("fedssp_graph", [*GRAPH, "algorithm=fedssp_graph", "model.heads=2", "model.layers=1"], False),
    ("fedavg_w_only AML gine", ["+experiment=ce_fedgnn_table1_aml", "algorithm=fedavg_w_only"], False),
    ("fedavg MUTAG (gin)", ["+experiment=graph_mutag", "method=fedavg_gin"], True),
    ("fedgcn (2-hop)", [*NODE, "algorithm=fedgcn", "dataset.features_public=true"], False),
    ("fedsage_plus", [*NODE, "model=sage", "algorithm=fedsage_plus", "algorithm.fgen_hidden=[16,32]",
                      "algorithm.latent_dim=16", "algorithm.local_gen_epochs=3", "algorithm.fed_gen_epochs=2"], False),
    ("fedavg + dp_fedavg + sampler", [*NODE, "algorithm=fedavg", "privacy=dp_fedavg", "algorithm.weighting=uniform",
                                      "algorithm.batch_size=16", "algorithm.fanouts=[5,5]"], False),
    ("ce_fedgnn + metric_dp", [*NODE, "algorithm=ce_fedgnn", "privacy=metric_dp", "privacy.k=5",
                                 "privacy.public_messages=[update,grad_estimator]"], False),
    ("fedgsp (unifilter)", [*HETERO, "algorithm=fedgsp", "algorithm.k_principal=2"], False),
    ("ce_fedgnn AML gine", ["+experiment=ce_fedgnn_table1_aml", "algorithm=ce_fedgnn"], False),
    ("ce_fedgnn AML pna", ["+experiment=ce_fedgnn_table1_aml", "algorithm=ce_fedgnn", "model=pna"], False),
    ("local AML mlp_edge", ["dataset=aml_tiny", "partitioner=by_bank", "partitioner.num_clients=4",
                            "model=mlp_edge", "algorithm=local"], False),
    *[(f"{u} unlearning", [*UNLEARN, f"unlearning={u}"], False) for u in ("scalegun", "cgu", "retrain")],
    ("fedmf (mf)", [*RECSYS, "model=mf", "algorithm=fedmf"], False),
    ("pfedrec (lightgcn)", [*RECSYS, "model=lightgcn", "algorithm=pfedrec"], False),
    *[(f"{a} (mf)", [*RECSYS, "model=mf", f"algorithm={a}"], False) for a in ("fedrap", "f2mf", "fedhgnn")],
    ("fedpergnn (gat_ranker)", [*RECSYS, "model=gat_ranker", "algorithm=fedpergnn"], False),
    ("fedssp (lgcn)", [*RECSYS, "model=lgcn", "algorithm=fedssp"], False),
    ("fedpub ranking (lgcn)", [*RECSYS, "model=lgcn", "algorithm=fedpub"], False),
    *[(f"{a} ML-100K", [*ML100K, f"algorithm={a}"], True) for a in
      ("lpsfed", "lpsfed_bpr", "fedavg_lgcn", "local_lgcn")],
    ("dsgd", [*GOSSIP, "algorithm=dsgd"], False),
    *[(a, [*GOSSIP, f"algorithm={a}", "privacy=mf_gdp"], False) for a in ("mafalda_sgd", "muffliato", "antipgd", "dmf")],
    ("dp_dsgd", [*GOSSIP, "algorithm=dp_dsgd", "privacy=mf_gdp", "privacy.mu=1.0"], False),
    ("mf_dsgd pndp", [*GOSSIP, "algorithm=mf_dsgd", "privacy=mf_gdp", "privacy.correlation=mafalda_message",
                      "privacy.trust_model=pndp"], False),
    ("ce_fedgnn Cora table 2", ["+experiment=ce_fedgnn_table2_cora", "algorithm=ce_fedgnn"], True),
    ("fedavg Cora baselines", ["+experiment=baselines_cora", "method=fedavg_gcn"], True),
    ("fedgsp Minesweeper", ["+experiment=fedgsp_minesweeper_disj_10", "method=fedgsp"], True),
    ("scalegun Cora table 8", ["+experiment=scalegun_cora_table8", "unlearning.requests.num_requests=20",
                               "unlearning.requests.batch_size=10"], True),
]


def uncovered_algorithms() -> set[str]:
    names = {p.stem for p in (REPO / "conf" / "algorithm").glob("*.yaml")}
    named = {o.split("=", 1)[1] for _, over, _ in CASES for o in over if o.startswith("algorithm=")}
    return names - named


def run_case(over: list[str], device: str, run_dir: Path, rounds: int) -> dict:
    from fgx.cli import main

    t0 = time.perf_counter()
    config_error = None
    try:
        extra = [] if any(o.startswith("rounds=") for o in over) else [f"rounds={rounds}"]
        rc = main(["run", *over, *extra, "eval_every=1", f"device={device}", "output.progress=off",
                   "output.checkpoint=false", f"hydra.run.dir={run_dir}"])
    except SystemExit as e:  # config errors exit before a run starts, with the message as the code
        rc, config_error = (e.code, None) if isinstance(e.code, int) else (1, str(e.code))
    wall = time.perf_counter() - t0
    summary_path = run_dir / "summary.json"
    s = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    final = s.get("final") or {}
    metric = s.get("main_metric")
    value = final.get(metric) if metric else None
    if value is None and final:
        metric, value = next(iter(final.items()))
    return {"rc": rc, "status": s.get("status", "no summary"), "metric": metric, "value": value,
            "wall_s": wall, "error": s.get("error") or config_error, "traceback": s.get("traceback")}


def print_table(results: list[dict], devices: list[str]) -> int:
    """The side-by-side table; returns the number of failed runs."""
    ref = devices[0]
    print()
    print("| case | " + " | ".join(f"{d} status | {d} metric | {d} s" for d in devices) + " | max abs diff |")
    print("|---|" + "---|---|---|" * len(devices) + "---|")
    failed = 0
    for row in results:
        cells, diffs = [], []
        for d in devices:
            r = row[d]
            ok = r["status"] == "completed" and (r["value"] is None or math.isfinite(r["value"]))
            failed += not ok
            v = "-" if r["value"] is None else f"{r['value']:.4f}"
            cells.append(f"{r['status']} | {r['metric']}={v} | {r['wall_s']:.1f}")
            if d != ref and r["value"] is not None and row[ref]["value"] is not None:
                diffs.append(abs(r["value"] - row[ref]["value"]))
        print(f"| {row['case']} | " + " | ".join(cells) + f" | {max(diffs):.4f} |" if diffs else
              f"| {row['case']} | " + " | ".join(cells) + " | - |")
    print(f"\n{len(results)} cases on {', '.join(devices)}: {failed} failed runs")
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    ap.add_argument("--data-dir", type=Path, default=None,
                    help="a writable copy of shared/data; the cases that need it are skipped without it")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="run only the cases whose label contains one of these")
    ap.add_argument("--shard", default=None, metavar="I/N",
                    help="run every N-th case from the I-th (0-based): N processes in parallel cover all cases")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--table", nargs="+", type=Path, default=None, metavar="JSON",
                    help="print one table from the --out files of earlier (sharded) runs, in case order, and exit")
    args = ap.parse_args()
    os.environ.setdefault("CI", "true")

    if args.table:
        order = {label: i for i, (label, _, _) in enumerate(CASES)}
        results = sorted((r for f in args.table for r in json.loads(f.read_text())),
                         key=lambda r: order.get(r["case"], len(order)))
        lacking = sorted({d for r in results for d in args.devices if d not in r})
        if lacking:
            ap.error(f"--table: the files hold no runs on {lacking}; pass the --devices they were run with")
        return 1 if print_table(results, args.devices) else 0
    missing = uncovered_algorithms()
    if missing:
        print(f"algorithms without a device case: {sorted(missing)}", file=sys.stderr)
        return 2
    cases = [c for c in CASES if args.only is None or any(s in c[0] for s in args.only)]
    if args.shard:
        try:
            i, n = (int(x) for x in args.shard.split("/"))
        except ValueError:
            ap.error(f"--shard {args.shard}: expected I/N, e.g. 0/4")
        if not 0 <= i < n:
            ap.error(f"--shard {args.shard}: need 0 <= I < N")
        cases = cases[i::n]
    results = []
    with tempfile.TemporaryDirectory(prefix="fgx-device-") as tmp:
        for i, (label, over, needs_data) in enumerate(cases):
            if needs_data:
                if args.data_dir is None:
                    print(f"skip {label}: needs --data-dir", flush=True)
                    continue
                over = [*over, f"data_dir={args.data_dir.resolve()}"]
            row = {"case": label, "overrides": over}
            for dev in args.devices:
                r = run_case(over, dev, Path(tmp) / f"{i}-{dev}", args.rounds)
                row[dev] = r
                print(f"{label:32s} {dev:5s} {r['status']:10s} {r['metric']}={r['value']} {r['wall_s']:.1f}s"
                      + (f"  ERROR {r['error']}" if r["error"] else ""), flush=True)
                if r["traceback"]:
                    print("\n".join(r["traceback"].rstrip().splitlines()[-8:]), flush=True)
            results.append(row)
            if args.out:            # after every case: a run stopped by a time limit keeps what it did
                args.out.write_text(json.dumps(results, indent=1, default=str))

    failed = print_table(results, args.devices)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
