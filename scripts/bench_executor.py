"""Per-round wall time of the in-process executor against executor=ray, side by side, for several
client counts on a generated AML preset (FedAvg, GINE: docs/scaling.md).

One local Ray (``--num-cpus``) is started once and reused by every Ray run, so the table's steady
rounds measure client work and data movement, not Ray's start-up; round 1 (actors start and receive
their clients' data) is shown on its own. Both executors must reach the same final metric.

    nice -n 10 python scripts/bench_executor.py                       # aml_tiny, 4/16/32 clients
    python scripts/bench_executor.py --clients 4 16 --rounds 3 --num-cpus 4
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


ROUND_TIMES: list[float] = []


def time_rounds() -> None:
    """Time every FedAvg round (the trainer's round_time_s is only written at evaluations, and
    evaluating every round would dominate the measurement)."""
    from fgx.algorithms.fedavg import FedAvg

    original = FedAvg.round

    def timed(self, r: int):
        t = time.perf_counter()
        out = original(self, r)
        ROUND_TIMES.append(time.perf_counter() - t)
        return out

    FedAvg.round = timed


def run(overrides: list[str], out: Path) -> tuple[dict, list[float]]:
    from fgx import trainer
    from fgx.cli import compose

    ROUND_TIMES.clear()
    summary = trainer.run(compose(overrides), out)
    if summary["status"] != "completed":
        raise RuntimeError(summary.get("error"))
    return summary, list(ROUND_TIMES)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="aml_tiny", help="a generated AML preset: aml_tiny or aml_synth")
    ap.add_argument("--partitioner", default="metis", help="by_bank works up to the preset's bank count (25 in aml_tiny)")
    ap.add_argument("--clients", type=int, nargs="+", default=[4, 16, 32])
    ap.add_argument("--rounds", type=int, default=4, help="round 1 is reported apart; the rest averaged")
    ap.add_argument("--local-steps", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--fanouts", default=None, help="e.g. [10,10]: sampled mini-batches (slower evaluation); "
                                                    "default: each step on the whole client graph")
    ap.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch threads of the in-process run and of each Ray actor: the same count on both sides "
                         "sums floats in the same order, so the final metrics can be compared exactly")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args()

    import ray
    import torch

    torch.set_num_threads(args.torch_threads)
    time_rounds()
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, configure_logging=False)
    base = [f"dataset={args.dataset}", f"partitioner={args.partitioner}", "model=gine", "algorithm=fedavg",
            f"rounds={args.rounds}", f"eval_every={args.rounds}", f"seed={args.seed}",
            f"algorithm.local_steps={args.local_steps}", f"algorithm.batch_size={args.batch_size}",
            f"algorithm.fanouts={args.fanouts or 'null'}", "model.dropout=0.0", "model.final_dropout=0.0",
            "output.checkpoint=false", "output.progress=off"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fgx_bench_executor_") as tmp:
        for n in args.clients:
            row = {"clients": n}
            for name, extra in (("local", ["executor=local"]),
                                ("ray", ["executor=ray", f"executor.torch_threads={args.torch_threads}"])):
                t = time.time()
                try:
                    summary, times = run([*base, f"partitioner.num_clients={n}", *extra], Path(tmp) / f"{name}{n}")
                except RuntimeError as e:   # report it in the table and go on with the other sizes
                    row["error"] = f"{name}: {e}"
                    break
                steady = times[1:] or times
                row[name] = {"round1_s": times[0], "steady_round_s": statistics.mean(steady),
                             "wall_s": time.time() - t, "final": summary["final"][summary["main_metric"]]}
            rows.append(row)
            if "error" in row:
                print(f"... {n} clients failed: {row['error']}", file=sys.stderr, flush=True)
                continue
            row["same_final"] = row["local"]["final"] == row["ray"]["final"]
            print(f"... {n} clients: {json.dumps(row)}", file=sys.stderr, flush=True)
    ray.shutdown()

    print(f"\nper-round time, {args.dataset} / {args.partitioner}, FedAvg + GINE, K={args.local_steps}, "
          f"batch {args.batch_size}, fanouts {args.fanouts}, {args.rounds} rounds, local Ray with {args.num_cpus} CPUs, "
          f"{args.torch_threads} torch thread(s) in-process and per actor")
    print(f"{'clients':>7} | {'in-process s/round':>18} | {'ray s/round':>11} | {'ray/in-proc':>11} | "
          f"{'ray round 1 s':>13} | same final metric")
    print("-" * 90)
    for r in rows:
        if "error" in r:
            print(f"{r['clients']:>7} | failed: {r['error']}")
            continue
        lo, ra = r["local"], r["ray"]
        print(f"{r['clients']:>7} | {lo['steady_round_s']:>18.3f} | {ra['steady_round_s']:>11.3f} | "
              f"{ra['steady_round_s'] / lo['steady_round_s']:>11.2f} | {ra['round1_s']:>13.2f} | "
              f"{'yes' if r['same_final'] else 'no'} ({lo['final']:.4f} / {ra['final']:.4f})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
