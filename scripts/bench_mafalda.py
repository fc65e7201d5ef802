"""Time and peak memory of the MAFALDA factorisation (closed-form Lemma-10 Gram H + constrained
solver) for a 148-node graph with T = 380 ((k, b) = (20, 19), the paper's Facebook-Ego setting).

    python scripts/bench_mafalda.py [--edgelist 414.edges] [--max-iter 2000]

Without --edgelist an Erdős–Rényi stand-in with 148 nodes is used (the SNAP ego graph is a user file).
The reference approach materialises the nT × nT workload (56,240² doubles ≈ 25 GB); fgx never does."""
from __future__ import annotations

import argparse
import resource
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--edgelist")
    ap.add_argument("--nodes", type=int, default=148)
    ap.add_argument("--p", type=float, default=0.05)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--b", type=int, default=19)
    ap.add_argument("--max-iter", type=int, default=2000)
    args = ap.parse_args()
    from fgx.decentral.topology import TopologyParams, build_graph, gossip_matrix
    from fgx.privacy.mf.correlations import build_correlation
    from fgx.privacy.mf.workloads import gossip_gram

    tp = (TopologyParams(graph="edgelist", edgelist_path=args.edgelist) if args.edgelist
          else TopologyParams(graph="erdos_renyi", num_nodes=args.nodes, p=args.p))
    g = build_graph(tp)
    w = gossip_matrix(g)
    steps = args.k * args.b
    c0 = time.process_time()
    t0 = time.perf_counter()
    gossip_gram(w, steps)
    t_h = time.perf_counter() - t0
    t0 = time.perf_counter()
    corr = build_correlation("mafalda", w, args.k, args.b, max_iter=args.max_iter)
    total = time.perf_counter() - t0
    cpu = time.process_time() - c0
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2
    ident = build_correlation("identity", w, args.k, args.b)
    print(f"graph: {g.number_of_nodes()} nodes, {g.number_of_edges()} edges; T = {steps} (k={args.k}, b={args.b})")
    print(f"closed-form H: {t_h:.2f} s")
    print(f"MAFALDA factorisation (H + solver, {corr.iterations} iterations, {corr.solver_status}, projected gradient "
          f"{corr.solver_grad_ratio:.1e} of the start): {total:.2f} s wall "
          f"(process CPU time for H twice + solver: {cpu:.2f} s)")
    print(f"peak memory (process max RSS): {peak_gb:.3f} GB")
    print(f"surrogate objective: MAFALDA {corr.objective:.4g} vs DP-D-SGD {ident.objective:.4g} "
          f"(x{corr.objective / ident.objective:.3f})")
    print(f"dense nT x nT workload would be {(g.number_of_nodes() * steps) ** 2 * 8 / 1e9:.1f} GB")


if __name__ == "__main__":
    main()
