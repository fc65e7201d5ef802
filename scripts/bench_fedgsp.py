"""Wall time of a FedGSP run against FedAvg on the same data (default: real Cora, 10 disjoint METIS
clients, 100 rounds), printed side by side: the cells `method=fedgsp` and `method=fedavg_gcn` of the
table fedgsp_cora_disj_10 (FedGSP on UniFilter with the Cora row of the authors' config, K=7, hidden
512; FedAvg on the GCN backbone), both under the table's protocol (1 local step per round);
`--fedavg-steps 10` gives FedAvg ten.

    OMP_NUM_THREADS=1 nice -n 10 python scripts/bench_fedgsp.py --data-dir <data root>
    python scripts/bench_fedgsp.py --data-dir <data root> --rounds 20      # quicker
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def run(overrides: list[str], out: Path) -> dict:
    from fgx import trainer
    from fgx.cli import compose

    summary = trainer.run(compose(overrides), out)
    if summary["status"] != "completed":
        sys.exit(f"run failed: {summary.get('error')}")
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--fedavg-steps", type=int, default=None, help="FedAvg's local steps (default: the preset's)")
    a = ap.parse_args(argv)
    common = ["+experiment=fedgsp_cora_disj_10", f"data_dir={a.data_dir}", f"rounds={a.rounds}",
              f"partitioner.num_clients={a.clients}", "output.checkpoint=false", "output.progress=off",
              f"eval_every={a.rounds}"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("fedgsp", ["method=fedgsp"]),
                            ("fedavg", ["method=fedavg_gcn"] + ([f"algorithm.local_steps={a.fedavg_steps}"]
                                                                if a.fedavg_steps else []))):
            t = time.time()
            s = run(common + extra, Path(tmp) / name)
            rows.append((name, time.time() - t, s["train_time_s"], s["final"]["accuracy"]))
    print(f"Cora, {a.clients} METIS clients, {a.rounds} rounds")
    print(f"{'method':8s} {'wall s':>8s} {'train s':>8s} {'test acc':>9s}")
    for name, wall, train, acc in rows:
        print(f"{name:8s} {wall:8.1f} {train:8.1f} {acc:9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
