"""Per-round wall time of CE-FedGNN against FedAvg on the same data, measured side by side.

Both run the same model, clients, K local steps and seed batch size; the ratio
ce_fedgnn / fedavg is the paper's Table 4 comparison (1.02-1.09 there).

    python scripts/bench_round_cost.py                           # csbm, 8 clients
    python scripts/bench_round_cost.py --dataset cora --data-dir /path/to/data --clients 16
    python scripts/bench_round_cost.py --dataset aml_tiny --partitioner by_bank --model gine --clients 4
    python scripts/bench_round_cost.py --dataset aml_hi_small --partitioner by_bank --model pna --clients 4 \
        --local-steps 32 --batch-size 1024 --device cuda 'algorithm.fanouts=[100,100]'   # Table 4 setting
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path


def run(overrides: list[str], out: Path) -> dict:
    from fgx.cli import compose
    from fgx import trainer

    cfg = compose(overrides)
    summary = trainer.run(cfg, out)
    if summary["status"] != "completed":
        sys.exit(f"run failed: {summary.get('error')}")
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="csbm")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--partitioner", default="louvain")
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--local-steps", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs per algorithm; the median is reported")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto (both algorithms run on it)")
    ap.add_argument("overrides", nargs="*", help="further fgx overrides for both runs, e.g. algorithm.fanouts=[100,100]")
    args = ap.parse_args()
    common = [f"dataset={args.dataset}", f"partitioner={args.partitioner}", f"model={args.model}",
              f"partitioner.num_clients={args.clients}", f"rounds={args.rounds}", f"eval_every={args.rounds}",
              f"algorithm.local_steps={args.local_steps}", f"algorithm.batch_size={args.batch_size}",
              "output.progress=off", "output.checkpoint=false", f"device={args.device}", *args.overrides]
    if args.data_dir:
        common.append(f"data_dir={args.data_dir}")
    results: dict[str, dict] = {}
    times: dict[str, list[float]] = {"fedavg": [], "ce_fedgnn": []}
    with tempfile.TemporaryDirectory() as tmp:
        # interleaved repeats, median per algorithm: one pair of runs on a shared machine is noisy
        for rep in range(args.repeats):
            for algo in ("fedavg", "ce_fedgnn"):
                extra = ["algorithm.weighting=uniform"] if algo == "fedavg" else []
                out = Path(tmp) / f"{algo}-{rep}"
                s = run(common + [f"algorithm={algo}", *extra], out)
                times[algo].append(s["train_time_s"] / args.rounds)
                results[algo] = {"bytes_per_round": s["total_bytes"] / args.rounds,
                                 s["main_metric"]: s["final"][s["main_metric"]]}
    for algo, ts in times.items():
        results[algo]["per_round_s"] = statistics.median(ts)
    ratio = results["ce_fedgnn"]["per_round_s"] / results["fedavg"]["per_round_s"]
    print(f"data={args.dataset} clients={args.clients} model={args.model} K={args.local_steps} "
          f"batch={args.batch_size} rounds={args.rounds} device={args.device} repeats={args.repeats} (median)")
    print(f"{'algorithm':<12}{'s/round':>10}{'MB/round':>10}")
    for algo, r in results.items():
        print(f"{algo:<12}{r['per_round_s']:>10.3f}{r['bytes_per_round'] / 1e6:>10.3f}")
    print(f"ratio ce_fedgnn/fedavg: {ratio:.2f} (target <= 1.3; paper Table 4: 1.02-1.09)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
