"""Bench: ScaleGUN lazy local propagation against exact re-propagation on an ogbn-arxiv-sized graph.

    nice -n 10 python scripts/bench_unlearning.py [--nodes 169343] [--edges 1166243] [--features 128]
        [--batch 25] [--batches 20] [--r-max 1e-8] [--selection low_degree|random] [--seed 0] [--json FILE]

Generates a Chung-Lu random graph (heavy-tailed degrees, ogbn-arxiv's node/edge counts) with 128
row-normalised Gaussian features, runs the initial push (Algorithm 2), then for each batch of random
edges (default as in the paper's Table 1 arxiv protocol: edges with an endpoint of degree < 10;
``random``: uniform edges, which mostly touch hubs): the lazy batch removal (Algorithm 4) and, on the same new graph, exact 2-hop re-propagation
(what CGU and retraining pay per batch). Prints per-batch times, the speed-up of the medians and the
largest column error of the lazy embedding against the exact one next to the Lemma 3.1 bound."""
from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from fgx.unlearning.propagation import GPRPropagator, exact_propagation, symmetric_adjacency


def chung_lu_edges(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """About m distinct undirected non-loop edges with endpoint probability proportional to a
    lognormal weight (degree spread like a citation graph)."""
    w = rng.lognormal(0.0, 1.0, n)
    p = w / w.sum()
    found = np.empty((2, 0), dtype=np.int64)
    while found.shape[1] < m:
        k = int((m - found.shape[1]) * 1.05) + 1000
        e = np.vstack([rng.choice(n, k, p=p), rng.choice(n, k, p=p)])
        e = np.vstack([e.min(0), e.max(0)])
        e = e[:, e[0] != e[1]]
        found = np.unique(np.hstack([found, e]), axis=1)
    keep = rng.choice(found.shape[1], m, replace=False)
    return found[:, keep]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--r-max", type=float, default=1e-8,
                    help="threshold before scaling by the mean column L1 norm (ScaleGUN's arxiv setting)")
    ap.add_argument("--selection", choices=["low_degree", "random"], default="low_degree")
    ap.add_argument("--max-degree", type=int, default=10, help="low_degree: an endpoint has fewer neighbours")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    t_start = time.perf_counter()
    rng = np.random.default_rng(a.seed)

    t0 = time.perf_counter()
    edges = chung_lu_edges(a.nodes, a.edges, rng)
    adj = symmetric_adjacency(edges, a.nodes)
    x = rng.standard_normal((a.nodes, a.features))
    x /= np.linalg.norm(x, axis=1).max()           # ||x_i|| <= 1 (Assumption 4.1(5))
    r_max = a.r_max * float(np.abs(x).sum(0).mean())
    t_gen = time.perf_counter() - t0
    weights = [0.0, 0.0, 1.0]

    t0 = time.perf_counter()
    prop = GPRPropagator(adj, x, weights, r_max)
    t_init = time.perf_counter() - t0
    print(f"graph: {a.nodes} nodes, {edges.shape[1]} edges, {a.features} features (generated in {t_gen:.1f}s); "
          f"r_max {r_max:.3g}; initial push {t_init:.2f}s", flush=True)

    lazy, exact, rows = [], [], []
    current = prop.edges()
    if a.selection == "low_degree":
        nbrs = prop.deg - 1
        current = current[:, np.minimum(nbrs[current[0]], nbrs[current[1]]) < a.max_degree]
    order = rng.permutation(current.shape[1])[: a.batch * a.batches]
    for b in range(a.batches):
        batch = current[:, order[b * a.batch:(b + 1) * a.batch]]
        t0 = time.perf_counter()
        changed = prop.remove_edges(batch)
        lazy.append(time.perf_counter() - t0)
        new_adj = prop.current_adjacency()
        t0 = time.perf_counter()
        z_exact = exact_propagation(new_adj, prop.x, weights)
        exact.append(time.perf_counter() - t0)
        rows.append(int(changed.size))
        print(f"batch {b + 1:3d}: lazy {lazy[-1] * 1e3:8.2f} ms ({rows[-1]} rows changed)   "
              f"exact {exact[-1] * 1e3:8.1f} ms", flush=True)
    err = float(np.linalg.norm(prop.Z - z_exact, axis=0).max())
    speedup = float(np.median(exact) / np.median(lazy))
    result = {
        "selection": a.selection, "nodes": a.nodes, "edges": int(edges.shape[1]), "features": a.features, "batch": a.batch,
        "batches": a.batches, "r_max_effective": r_max, "initial_push_s": t_init,
        "lazy_ms_median": 1e3 * float(np.median(lazy)), "lazy_ms_mean": 1e3 * float(np.mean(lazy)),
        "exact_ms_median": 1e3 * float(np.median(exact)), "exact_ms_mean": 1e3 * float(np.mean(exact)),
        "speedup_median": speedup, "max_column_error": err, "lemma31_bound": prop.error_bound(),
        "total_s": time.perf_counter() - t_start,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
    }
    print(f"\nper batch of {a.batch} edges: lazy {result['lazy_ms_median']:.2f} ms (median), exact "
          f"{result['exact_ms_median']:.1f} ms (median) -> speed-up {speedup:.1f}x")
    print(f"lazy vs exact after {a.batch * a.batches} removals: max column error {err:.3g} "
          f"(Lemma 3.1 bound {prop.error_bound():.3g})")
    print(f"whole bench {result['total_s']:.1f}s, peak RSS {result['peak_rss_gb']:.2f} GB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if err <= prop.error_bound() else 1


if __name__ == "__main__":
    raise SystemExit(main())
