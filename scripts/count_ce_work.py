"""How much a CE-FedGNN round computes: the seed nodes, sampled rows and sampled edges of every client's
local steps in one round (issue 69). With fanouts a client's step runs on the subgraph fgx.sampler draws
around its seeds, so these counts are the round's work, whatever executes it; bench_scale's seconds per
round divided by them compares client counts at equal work.

    OMP_NUM_THREADS=1 python scripts/count_ce_work.py --nodes 100000 --clients 10 1000
    python scripts/count_ce_work.py --nodes 1000000 --clients 10 1000 --out results/benchmarks/scale/ce69_work.json

Each count is one `fgx run` of one round (the bench's settings: csbm, METIS, executor=batched, seed 0) in
this process with fgx.sampler's NeighborSampler._sample wrapped to count what it returns; evaluation
is left out (only what the sampler draws inside the clients' local rounds is counted)."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def count(nodes: int, clients: int, features: int, seed: int) -> dict:
    import fgx.sampler as sampler
    from fgx.algorithms import ce_fedgnn
    from fgx.cli import main

    got = {"steps": 0, "seeds": 0, "rows": 0, "edges": 0}
    real, rounds = sampler.NeighborSampler._sample, ce_fedgnn.CEFedGNN._local_rounds
    inside = []

    def local_rounds(self, *a):          # count the local steps only, not evaluation
        inside.append(True)
        try:
            return rounds(self, *a)
        finally:
            inside.pop()

    def counted(self, seeds, seed_edges, generator):
        s = real(self, seeds, seed_edges, generator)
        if not inside:
            return s
        got["steps"] += 1
        got["seeds"] += s.num_seed_nodes
        got["rows"] += s.nodes.numel()
        got["edges"] += s.edge_ids.numel()
        return s

    sampler.NeighborSampler._sample, ce_fedgnn.CEFedGNN._local_rounds = counted, local_rounds
    try:
        with tempfile.TemporaryDirectory() as d:
            rc = main(["run", "algorithm=ce_fedgnn", f"seed={seed}", "rounds=1", "eval_every=1000",
                       "output.progress=off", "output.checkpoint=false", "executor=batched", "dataset=csbm",
                       f"dataset.num_nodes={nodes}", f"dataset.num_features={features}", "partitioner=metis",
                       f"partitioner.num_clients={clients}", f"hydra.run.dir={d}/run"])
    finally:
        sampler.NeighborSampler._sample, ce_fedgnn.CEFedGNN._local_rounds = real, rounds
    if rc:
        raise SystemExit(f"fgx run failed ({rc}) at {nodes} nodes x {clients} clients")
    return {"nodes": nodes, "clients": clients, **got}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 1000])
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="JSON file the rows are added to (same nodes x clients replaced)")
    a = ap.parse_args()
    rows = [count(a.nodes, c, a.features, a.seed) for c in a.clients]
    for r in rows:
        print(json.dumps(r), file=sys.stderr)
    if a.out:
        old = json.loads(a.out.read_text())["rows"] if a.out.exists() else []
        keys = {(r["nodes"], r["clients"]) for r in rows}
        kept = [r for r in old if (r["nodes"], r["clients"]) not in keys]
        a.out.write_text(json.dumps({"what": "CE-FedGNN work per round (scripts/count_ce_work.py)",
                                     "rows": sorted(kept + rows, key=lambda r: (r["nodes"], r["clients"]))},
                                    indent=1) + "\n")


if __name__ == "__main__":
    main()
