"""The cost of secure aggregation (issue 70): bytes and seconds per round of FedAvg on Cora (GCN, 96,391
parameters per update) with plain aggregation, pairwise masking (without and with 10 % dropouts)
and CKKS, at 10 and 100 clients, measured in one process one after another, with each scheme's ratio to
plain aggregation at the same number of clients.

A round is ``algo.round(r)``: every client's local steps, the updates up (in clear, masked or
encrypted), the server's aggregate, the global step (no evaluation). ``aggregate s`` is the time inside
FedAvg's aggregate phase alone: every client's masking or encryption and the server's work, all
simulated in this one process on one core, so at n clients it is the clients' n shares of the work plus
the server's. Bytes are the channel's ledger (fgx/federation/channel.py) per round: everything that
crossed (``total``) and the aggregation's own messages (``aggregation``: the clear ``update`` for plain,
every protocol message otherwise). Each configuration is built once and runs ``--rounds`` rounds; the
median round is reported.

    OMP_NUM_THREADS=1 nice -n 10 python scripts/bench_secure_aggregation.py --data-dir <data root>
    python scripts/bench_secure_aggregation.py --data-dir <data root> --clients 10 --rounds 2   # quick
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

SCHEMES = {
    "plain": ["secure_aggregation=none"],
    "pairwise_mask": ["secure_aggregation=pairwise_mask"],
    "pairwise_mask 10% dropout": ["secure_aggregation=pairwise_mask", "secure_aggregation.dropout=0.1"],
    "ckks": ["secure_aggregation=ckks"],
}


def measure(overrides: list[str], out: str, rounds: int) -> dict:
    from fgx import trainer
    from fgx.cli import compose
    from fgx.config import validate
    from fgx.outputs import RunDir

    job = trainer._build(validate(compose(overrides)), RunDir(out))
    algo, channel = job.algo, job.channel
    spent, spent_cpu = [], []
    real = algo.aggregate

    def timed(chosen, updates, r):
        t, c = time.perf_counter(), time.process_time()
        res = real(chosen, updates, r)
        spent.append(time.perf_counter() - t)
        spent_cpu.append(time.process_time() - c)
        return res

    algo.aggregate = timed
    times, cpu = [], []
    for r in range(1, rounds + 1):
        job.executor.start_round(job.v.top.seed, r)
        t, c = time.perf_counter(), time.process_time()
        algo.round(r)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    per_round = [channel.round_bytes(r) for r in range(1, rounds + 1)]
    # round 1 of CKKS also carries the public context (sent once): the steady rounds are 2.., when there are any
    steady = per_round[1:] or per_round
    total = statistics.median(sum(b.values()) for b in steady)
    agg = statistics.median(sum(v for k, v in b.items() if k != "global_weights") for b in steady)
    return {"clients": len(job.clients), "round_s": statistics.median(times), "aggregate_s": statistics.median(spent),
            "round_cpu_s": statistics.median(cpu), "aggregate_cpu_s": statistics.median(spent_cpu),
            "bytes_total": int(total), "bytes_aggregation": int(agg), "kinds": steady[-1],
            "once_bytes": {k: v for k, v in per_round[0].items() if k not in steady[-1]}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=list(SCHEMES))
    ap.add_argument("overrides", nargs="*", help="further fgx overrides for every run")
    args = ap.parse_args()
    import logging

    import torch

    torch.set_num_threads(1)
    logging.getLogger("fgx").setLevel(logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.clients:
            for k, scheme in enumerate(args.schemes):
                common = ["algorithm=fedavg", "dataset=cora", f"data_dir={args.data_dir}", f"partitioner.num_clients={n}",
                          "output.progress=off", "output.checkpoint=false", *args.overrides]
                row = {"scheme": scheme, "num_clients": n,
                       **measure(common + SCHEMES[scheme], f"{tmp}/{n}_{k}", args.rounds)}
                rows.append(row)
                print(f"measured {scheme} at {n} clients: {row['round_s']:.3f} s/round", file=sys.stderr, flush=True)
    print("| clients | scheme | bytes/round (aggregation) | × plain | bytes/round (all) | aggregate CPU s | × plain "
          "| round CPU s | × plain | round wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        base = next((b for b in rows if b["num_clients"] == row["num_clients"] and b["scheme"] == "plain"), row)
        print(f"| {row['num_clients']} | {row['scheme']} | {row['bytes_aggregation']:,} | "
              f"{row['bytes_aggregation'] / base['bytes_aggregation']:.2f} | {row['bytes_total']:,} | "
              f"{row['aggregate_cpu_s']:.3f} | {row['aggregate_cpu_s'] / base['aggregate_cpu_s']:.0f} | "
              f"{row['round_cpu_s']:.2f} | {row['round_cpu_s'] / base['round_cpu_s']:.2f} | {row['round_s']:.2f} |")
    print(json.dumps({"rounds": args.rounds, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
