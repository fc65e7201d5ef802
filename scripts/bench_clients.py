"""Many clients (#41): FedAvg's seconds per round with 10 and with 1,000 clients on the same generated
graph (the same nodes, the same total work), the per-client loop (executor=local) beside the batched
path (executor=batched, fgx/federation/batched.py), measured in one process, one after another.

A round is ``algo.round(r)``: every client's local steps, its update through the channel, the server's
average (no evaluation). Each configuration is built once (data, METIS partition, clients) and runs
``--rounds`` rounds; the median round is reported (the first batched round also builds the
block-diagonal batch, so it is left out of the median with --warmup 1). Prints a table, the ratios and
one JSON line.

    OMP_NUM_THREADS=1 nice -n 10 python scripts/bench_clients.py                 # 100k nodes, 10 vs 1,000
    python scripts/bench_clients.py --nodes 20000 --clients 10 100 --rounds 3    # a quick look
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time


def build(overrides: list[str], out: str):
    from fgx.cli import compose
    from fgx.config import validate
    from fgx.outputs import RunDir
    from fgx import trainer

    v = validate(compose(overrides))
    t = time.perf_counter()
    job = trainer._build(v, RunDir(out))
    return job, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 1000])
    ap.add_argument("--partitioner", default="metis")
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--algorithm", default="fedavg")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1, help="first rounds left out of the median")
    ap.add_argument("--local-steps", type=int, default=10)
    ap.add_argument("--group-nodes", type=int, default=None, help="executor.group_nodes of the batched runs")
    ap.add_argument("overrides", nargs="*", help="further fgx overrides for every run (e.g. device=cuda)")
    args = ap.parse_args()
    import logging
    import torch

    logging.getLogger("fgx").setLevel(logging.WARNING)
    common = [f"algorithm={args.algorithm}", "dataset=csbm", f"dataset.num_nodes={args.nodes}",
              f"dataset.num_features={args.features}", f"partitioner={args.partitioner}", f"model={args.model}",
              f"algorithm.local_steps={args.local_steps}", "output.progress=off", "output.checkpoint=false",
              *args.overrides]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in args.clients:
            for ex in ("local", "batched"):
                extra = [f"executor.group_nodes={args.group_nodes}"] if ex == "batched" and args.group_nodes else []
                job, build_s = build([*common, f"partitioner.num_clients={c}", f"executor={ex}", *extra],
                                     f"{tmp}/{c}-{ex}")
                times, cpu = [], []
                for r in range(1, args.rounds + 1):
                    job.executor.start_round(job.v.top.seed, r)
                    t, tc = time.perf_counter(), time.process_time()
                    loss = job.algo.round(r)["loss"]
                    if job.ctx.device.type == "cuda":
                        torch.cuda.synchronize()
                    times.append(time.perf_counter() - t)
                    cpu.append(time.process_time() - tc)
                sizes = [cl.num_owned for cl in job.clients]
                job_device = str(job.ctx.device)
                # the partitioner alone, once more on the same graph (the build above includes it)
                part = job.v.entries["partitioner"]
                t = time.perf_counter()
                part.obj(job.v.params["partitioner"], job.ds.data, job.info, job.v.top.seed)
                rows.append({"clients": c, "executor": ex, "s_per_round": statistics.median(times[args.warmup:]),
                             "cpu_s_per_round": statistics.median(cpu[args.warmup:]), "first_round_s": times[0],
                             "build_s": build_s, "partition_s": time.perf_counter() - t, "loss": loss,
                             "nodes_per_client": [min(sizes), max(sizes)]})
                print(f"  {c:>5} clients {ex:<8} {rows[-1]['s_per_round']:8.3f} s/round, cpu "
                      f"{rows[-1]['cpu_s_per_round']:.3f} (first {times[0]:.3f}, build {build_s:.1f} s, "
                      f"partition {rows[-1]['partition_s']:.1f} s, loss {loss:.4f})", file=sys.stderr, flush=True)
                del job
    base = {r["executor"]: r["s_per_round"] for r in rows if r["clients"] == args.clients[0]}
    base_cpu = {r["executor"]: r["cpu_s_per_round"] for r in rows if r["clients"] == args.clients[0]}
    print(f"{args.algorithm} / {args.model}, csbm {args.nodes} nodes, {args.features} features, {args.partitioner} "
          f"partition, K={args.local_steps} full-batch steps, median of rounds {args.warmup + 1}..{args.rounds}, "
          f"torch threads {torch.get_num_threads()}, device {job_device}"
          + (f", group_nodes {args.group_nodes}" if args.group_nodes else ""))
    fewest = args.clients[0]
    print(f"{'clients':>8} {'executor':<9} {'s/round':>9} {'cpu s/round':>12} {f'x {fewest}-client loop':>18} "
          f"{'loop/batched':>13} {'nodes/client':>14} {'partition s':>12}")
    for r in rows:
        same = next(x for x in rows if x["clients"] == r["clients"] and x["executor"] == "local")
        r["ratio_to_fewest_loop"] = r["s_per_round"] / base["local"]
        r["cpu_ratio_to_fewest_loop"] = r["cpu_s_per_round"] / base_cpu["local"]
        r["loop_over_batched"] = same["s_per_round"] / r["s_per_round"] if r["executor"] == "batched" else None
        lob = f"{r['loop_over_batched']:.2f}" if r["loop_over_batched"] else ""
        print(f"{r['clients']:>8} {r['executor']:<9} {r['s_per_round']:>9.3f} {r['cpu_s_per_round']:>12.3f} "
              f"{r['ratio_to_fewest_loop']:>18.2f} {lob:>13} {'%d-%d' % tuple(r['nodes_per_client']):>14} "
              f"{r['partition_s']:>12.1f}")
    most = args.clients[-1]
    batched_most = next(r for r in rows if r["clients"] == most and r["executor"] == "batched")
    target = batched_most["s_per_round"] / base["local"]
    print(f"acceptance (#41): {most} clients batched / {fewest} clients per-client loop = {target:.2f} s/round "
          f"({batched_most['cpu_ratio_to_fewest_loop']:.2f} in CPU time; target <= 3)")
    print(json.dumps({"bench": "clients", "nodes": args.nodes, "algorithm": args.algorithm, "model": args.model,
                      "partitioner": args.partitioner, "local_steps": args.local_steps, "rows": rows,
                      "acceptance_ratio": target}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
