"""Bench: ScaleGUN lazy local propagation against exact re-propagation on a generated graph.

    python scripts/bench_unlearning.py                                   # ogbn-arxiv size (169,343 / 1,166,243 / 128)
    OMP_NUM_THREADS=1 python scripts/bench_unlearning.py --nodes 2500000 --edges 60000000 --features 100

Generates a Chung-Lu random graph (lognormal degree weights, so hubs and low-degree nodes as in OGB
graphs) with Gaussian features scaled so ||x_i|| <= 1, runs the initial push (Algorithm 2), then a
sequence of deletion requests of ``--batch`` edges each (default 1; endpoints as in the paper's Table 1
protocol: an endpoint with fewer than ``--max-degree`` neighbours; ``--selection random``: uniform
edges, which mostly touch hubs), timing each lazy update (Algorithm 4). Exact 2-hop re-propagation on
the same current graph (what CGU, CEU and retraining pay per request) is timed ``--exact`` times.

Printed and written (``--json``): peak memory (RSS of the process, and the bytes the propagation
state holds), the initial propagation time, per-request lazy propagation times (median, 90th
percentile, max) beside the exact re-propagation time, the rows each request touched, and an error
check: after all requests, the lazy embedding is compared column by column with an exact float64
propagation of ``--check-columns`` columns, against the residue bound (Eq. 1 from the residues
held) and the Lemma 3.1 bound sqrt(n) L r_max. r_max follows the certified model's default scaling
(``--r-max-scale inv_sqrt_n_nt``: r_max / sqrt(n n_t), so sqrt(n) L r_max = L r_max / sqrt(n_t) does
not grow with the graph; n_t = ``--train-fraction`` of n). Exit status 1 if an error exceeds its bound.

``--model cg|factored|both``: the whole request instead, through fgx's certified model and accountant
(``RequestProcessor``, one client): labels from a random linear map of the features (``--classes``),
the model trained to the optimum, then ``--requests`` requests timed per part - propagation (lazy update
and the changed training rows), model update (Delta and the Newton solve; ``factored``: anchor factors
plus the changed rows, its one-off anchor build reported apart), certificate (||Z'||, ||Z'v||, residue
sums) - with the ratio model update / propagation, and one full retraining (exact re-propagation +
training from scratch) beside them; ``both`` runs cg then factored on the same graph and requests."""
from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from fgx.unlearning.propagation import GPRPropagator, exact_propagation, symmetric_adjacency


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def chung_lu_edges(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """m distinct undirected non-loop edges (2, m), u < v, with endpoint probability proportional to a
    lognormal weight (degree spread like a citation or co-purchase graph). Endpoints are drawn by
    inverse CDF from sorted uniforms (cache-friendly), paired through a permutation, and deduplicated
    by one sort of int64 keys u n + v."""
    cdf = np.cumsum(rng.lognormal(0.0, 1.0, n))
    cdf /= cdf[-1]

    def endpoints(k: int) -> np.ndarray:
        return np.searchsorted(cdf, np.sort(rng.random(k))).astype(np.int64)

    keys = np.empty(0, dtype=np.int64)
    while keys.size < m:
        k = int((m - keys.size) * 1.08) + 1000
        parts = [keys]
        for lo in range(0, k, 1 << 24):
            step = min(1 << 24, k - lo)
            u, v = endpoints(step), endpoints(step)[rng.permutation(step)]
            a, b = np.minimum(u, v), np.maximum(u, v)
            del u, v
            parts.append(a[a != b] * n + b[a != b])
            del a, b
        keys = np.unique(np.concatenate(parts))
        del parts
    keys = keys[np.sort(rng.choice(keys.size, m, replace=False))] if keys.size > m else keys
    return np.vstack([keys // n, keys % n])


def gaussian_features(n: int, f: int, rng: np.random.Generator, dtype) -> np.ndarray:
    x = np.empty((n, f), dtype=dtype)
    step = 1 << 18
    for lo in range(0, n, step):
        x[lo:lo + step] = rng.standard_normal((min(step, n - lo), f), dtype=np.float32)
    top = max(float(np.linalg.norm(x[lo:lo + step], axis=1).max()) for lo in range(0, n, step))
    for lo in range(0, n, step):
        x[lo:lo + step] /= top                     # ||x_i|| <= 1 (Assumption 4.1(5))
    return x


def implied_residue_drift(prop, x) -> dict:
    """The residues that make Lemma 3.2 hold exactly for the stored reserves, r_l = A D^-1 Q[l-1] - Q[l]
    (r_0 = D^1/2 x - Q[0]), in float64 over the whole state, against the residues the state tracks:
    their difference is what the state's rounding adds to 1^T R."""
    from fgx.unlearning.propagation import scaled_product

    defect = np.zeros(prop.F)
    absolute = np.zeros(prop.F)
    d0 = np.sqrt(prop.deg)[:, None] * x.astype(np.float64) - prop.Q[0] - prop.R[0].dense()
    defect += d0.sum(0)
    absolute += np.abs(d0).sum(0)
    del d0
    prev = prop.Q[0].astype(np.float64)
    for lvl in range(1, prop.L + 1):
        cur = prop.Q[lvl].astype(np.float64)
        d = scaled_product(prop.adj, prev, 1.0 / prop.deg) - cur
        if lvl < prop.L:
            d -= prop.R[lvl].dense()
        defect += d.sum(0)
        absolute += np.abs(d).sum(0)
        prev = cur
    tracked = prop.residue_colsum()
    return {"tracked": float(np.linalg.norm(tracked)), "implied": float(np.linalg.norm(tracked + defect)),
            "signed_drift": float(np.linalg.norm(defect)), "absolute_drift": float(np.linalg.norm(absolute))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=169_343)
    ap.add_argument("--edges", type=int, default=1_166_243)
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--requests", type=int, default=50, help="deletion requests (sequential)")
    ap.add_argument("--batch", type=int, default=1, help="edges per request")
    ap.add_argument("--exact", type=int, default=3, help="exact re-propagations to time (spread over the run)")
    ap.add_argument("--r-max", type=float, default=None, help="threshold before scaling (default: certified_lr's)")
    ap.add_argument("--r-max-scale", choices=["inv_sqrt_n_nt", "none", "feature_l1_mean"], default=None)
    ap.add_argument("--train-fraction", type=float, default=0.08, help="n_t / n for the r_max scaling")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--selection", choices=["low_degree", "random"], default="low_degree")
    ap.add_argument("--max-degree", type=int, default=10, help="low_degree: an endpoint has fewer neighbours")
    ap.add_argument("--check-columns", type=int, default=8, help="columns in the float64 error check")
    ap.add_argument("--rounding-check", action="store_true",
                    help="after the requests, recompute the residues the stored reserves imply (float64 full pass) "
                         "and report how far the tracked ||1^T R|| is from them (the state's rounding)")
    ap.add_argument("--model", choices=["cg", "factored", "both"], default=None,
                    help="time whole requests through the certified model with this solver (see above)")
    ap.add_argument("--classes", type=int, default=40, help="--model: classes of the generated labels")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.model:
        return model_bench(a)
    from fgx.algorithms.certified_lr import PropagationParams, effective_r_max

    defaults = PropagationParams()
    r_max = defaults.r_max if a.r_max is None else a.r_max
    scale = defaults.r_max_scale if a.r_max_scale is None else a.r_max_scale
    t_start = time.perf_counter()
    rng = np.random.default_rng(a.seed)
    weights = [0.0, 0.0, 1.0]

    t0 = time.perf_counter()
    edges = chung_lu_edges(a.nodes, a.edges, rng)
    t_edges = time.perf_counter() - t0
    t0 = time.perf_counter()
    adj = symmetric_adjacency(edges, a.nodes)
    del edges
    t_adj = time.perf_counter() - t0
    x = gaussian_features(a.nodes, a.features, rng, np.dtype(a.dtype))
    l1_mean = float(np.mean([np.abs(x[:, j]).sum(dtype=np.float64) for j in range(a.features)]))
    n_t = max(1, int(round(a.train_fraction * a.nodes)))
    r_eff = effective_r_max(r_max, scale, a.nodes, n_t, l1_mean)
    print(f"graph: {a.nodes:,} nodes, {(adj.nnz - a.nodes) // 2:,} edges, {a.features} features "
          f"(edges {t_edges:.1f}s, CSR {t_adj:.1f}s); r_max {r_max:g} ({scale}) -> {r_eff:.3g}; "
          f"{a.dtype}; peak RSS so far {peak_rss_gb():.2f} GB", flush=True)

    t0 = time.perf_counter()
    prop = GPRPropagator(adj, x, weights, r_eff, dtype=a.dtype)
    t_init = time.perf_counter() - t0
    del adj
    state_gb = prop.memory_bytes() / 1024 ** 3
    print(f"initial propagation (push) {t_init:.1f}s; state {state_gb:.2f} GB "
          f"({prop.stored_residue_rows():,} residue rows stored); peak RSS {peak_rss_gb():.2f} GB", flush=True)

    need = a.requests * a.batch
    pool = prop.sample_edges(need, rng, a.max_degree if a.selection == "low_degree" else None)
    exact_at = set(np.linspace(0, a.requests - 1, a.exact).round().astype(int).tolist()) if a.exact else set()
    lazy, exact, touched = [], [], []
    for i in range(a.requests):
        t0 = time.perf_counter()
        changed = prop.remove_edges(pool[:, i * a.batch:(i + 1) * a.batch])
        lazy.append(time.perf_counter() - t0)
        touched.append(int(changed.size))
        line = f"request {i + 1:4d}: lazy {lazy[-1] * 1e3:9.2f} ms ({touched[-1]:,} rows)"
        if i in exact_at:
            t0 = time.perf_counter()
            z = exact_propagation(prop.adj, x, weights, prop.deg)
            exact.append(time.perf_counter() - t0)
            del z
            line += f"   exact re-propagation {exact[-1]:8.2f} s"
        print(line, flush=True)

    cols = np.arange(min(a.check_columns, a.features))
    z_ref = exact_propagation(prop.adj, x[:, cols].astype(np.float64), weights, prop.deg)
    errs = np.linalg.norm(prop.columns(cols) - z_ref, axis=0)
    # the state's own rounding: a few roundings of relative size u per entry of each column
    roundings = (2.0 ** -24 if a.dtype == "float32" else 2.0 ** -53) * 8 * np.linalg.norm(z_ref, axis=0)
    del z_ref
    res_bound, lemma = prop.residue_error_bound(), prop.error_bound()
    drift = implied_residue_drift(prop, x) if a.rounding_check else None
    worst = int(np.argmax(errs - roundings))
    err, rounding = float(errs[worst]), float(roundings[worst])
    lazy_ms = 1e3 * np.asarray(lazy)
    result = {
        "nodes": a.nodes, "edges": a.edges, "features": a.features, "dtype": a.dtype, "selection": a.selection,
        "batch": a.batch, "requests": a.requests, "r_max": r_max, "r_max_scale": scale, "r_max_effective": r_eff,
        "n_t": n_t, "initial_propagation_s": t_init, "state_gb": state_gb,
        "lazy_ms_median": float(np.median(lazy_ms)), "lazy_ms_p90": float(np.percentile(lazy_ms, 90)),
        "lazy_ms_max": float(lazy_ms.max()), "lazy_ms_mean": float(lazy_ms.mean()),
        "rows_touched_median": float(np.median(touched)),
        "exact_s": exact, "exact_s_median": float(np.median(exact)) if exact else None,
        "speedup_median": float(np.median(exact) / np.median(lazy)) if exact else None,
        "max_column_error": err, "residue_error_bound": res_bound, "lemma31_bound": lemma,
        "rounding_allowance": rounding, "column_errors": errs.tolist(),
        "residue_rows_stored": prop.stored_residue_rows(), "rounding_drift": drift, "residue_colsum_norm": float(np.linalg.norm(prop.residue_colsum())),
        "peak_rss_gb": peak_rss_gb(), "total_s": time.perf_counter() - t_start,
    }
    print(f"\n{a.requests} requests of {a.batch} edge(s): lazy propagation median {result['lazy_ms_median']:.2f} ms, "
          f"p90 {result['lazy_ms_p90']:.2f} ms, max {result['lazy_ms_max']:.2f} ms "
          f"(median {result['rows_touched_median']:.0f} rows touched)")
    if exact:
        print(f"exact re-propagation median {result['exact_s_median']:.2f} s -> speed-up {result['speedup_median']:.0f}x")
    print(f"initial propagation {t_init:.1f} s; peak RSS {result['peak_rss_gb']:.2f} GB (state {state_gb:.2f} GB)")
    ok = bool(np.all(errs <= res_bound + roundings)) and res_bound <= lemma
    print(f"error after {need} removals, {cols.size} columns vs exact float64: {err:.3g} <= residue bound "
          f"{res_bound:.3g} (+ {a.dtype} rounding {rounding:.2g}) <= Lemma 3.1 {lemma:.3g}: "
          f"{'ok' if ok else 'VIOLATED'}")
    if drift is not None:
        print(f"rounding: ||1^T R|| tracked {drift['tracked']:.3g}, implied by the stored reserves "
              f"{drift['implied']:.3g} (signed drift {drift['signed_drift']:.3g}, absolute {drift['absolute_drift']:.3g})")
    print(f"whole bench {result['total_s']:.1f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if ok else 1


def model_bench(a) -> int:
    """Whole requests through the certified model (see the module docstring, ``--model``)."""
    from fgx.federation.channel import Channel
    from fgx.unlearning.certified import MESSAGES, CertifiedServer, PartyState, certificate_budget
    from fgx.unlearning.scalegun import CertifiedUnlearningParams, RequestProcessor
    from fgx.algorithms.certified_lr import PropagationParams, effective_r_max

    rng = np.random.default_rng(a.seed)
    edges = chung_lu_edges(a.nodes, a.edges, rng)
    x = gaussian_features(a.nodes, a.features, rng, np.float32)
    y = np.argmax(x @ rng.normal(size=(a.features, a.classes)).astype(np.float32)
                  + 0.5 * rng.gumbel(size=(a.nodes, a.classes)).astype(np.float32) / np.sqrt(a.features), axis=1)
    order = rng.permutation(a.nodes)
    n_t = max(1, int(round(a.train_fraction * a.nodes)))
    masks = {s: np.zeros(a.nodes, dtype=bool) for s in ("train", "val", "test")}
    masks["train"][order[:n_t]] = True
    masks["test"][order[n_t:2 * n_t]] = True
    defaults = PropagationParams()
    r_max = defaults.r_max if a.r_max is None else a.r_max
    scale = defaults.r_max_scale if a.r_max_scale is None else a.r_max_scale
    pool = None
    results = {"nodes": a.nodes, "edges": a.edges, "features": a.features, "classes": a.classes, "n_t": n_t,
               "requests": a.requests, "batch": a.batch, "dtype": a.dtype, "solvers": {}}
    for solver in (["cg", "factored"] if a.model == "both" else [a.model]):
        party = PartyState(0, edges, x, y, masks)
        server = CertifiedServer([party], a.classes, 1e-4, 0.1, Channel(MESSAGES), seed=a.seed)
        server.preprocess("row_max", dtype=np.dtype(a.dtype))
        r_eff = effective_r_max(r_max, scale, a.nodes, n_t, server.feature_l1_mean() if scale == "feature_l1_mean" else 0)
        t0 = time.perf_counter()
        party.build_propagation([0.0, 0.0, 1.0], r_eff, False, a.dtype)
        init_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        server.train()
        train_s = time.perf_counter() - t0
        print(f"{solver}: graph {a.nodes:,} nodes, {party.prop.num_edges():,} edges, {a.features} features, "
              f"{a.classes} classes, n_t {n_t:,}, {a.dtype}, r_max {r_max:g} ({scale}) -> {r_eff:.3g}; "
              f"initial propagation {init_s:.2f} s, training {train_s:.2f} s", flush=True)
        params = CertifiedUnlearningParams()
        params.solver = solver
        budget = certificate_budget(0.1, params.certificate.epsilon, params.certificate.delta)
        proc = RequestProcessor(server, params, budget)
        if pool is None:
            pool = party.prop.sample_edges(a.requests * a.batch, rng,
                                           a.max_degree if a.selection == "low_degree" else None)
        rows = []
        for i in range(a.requests):
            row = proc.process({0: pool[:, i * a.batch:(i + 1) * a.batch]}, evaluate=False)
            build = row.get("anchor_build_s", 0.0)
            rows.append({k: row[k] for k in ("propagation_s", "model_update_s", "certificate_s", "retrain_s",
                                              "cg_iterations", "action", "bound")} | {"anchor_build_s": build})
            print(f"{solver:8s} request {i + 1:4d}: propagation {1e3 * row['propagation_s']:8.2f} ms  model update "
                  f"{1e3 * (row['model_update_s'] - build):8.2f} ms{f' (+ anchor build {build:.2f} s)' if build else ''}"
                  f"  certificate {1e3 * row['certificate_s']:7.2f} ms  {row['action']}", flush=True)
        t0 = time.perf_counter()
        re = server.retrain_exact()
        full = time.perf_counter() - t0
        med = {k: float(np.median([r[k] - (r["anchor_build_s"] if k == "model_update_s" else 0) for r in rows]))
               for k in ("propagation_s", "model_update_s", "certificate_s")}
        out = {"initial_propagation_s": init_s, "train_s": train_s, "median": med,
               "mean_model_update_s_with_builds": float(np.mean([r["model_update_s"] for r in rows])),
               "anchor_builds_s": [r["anchor_build_s"] for r in rows if r["anchor_build_s"]],
               "ratio_model_to_propagation": med["model_update_s"] / med["propagation_s"],
               "retrains": int(sum(r["action"] != "newton" for r in rows)), "full_retrain_s": full, **re}
        results["solvers"][solver] = out
        print(f"{solver}: median per request - propagation {1e3 * med['propagation_s']:.2f} ms, model update "
              f"{1e3 * med['model_update_s']:.2f} ms ({out['ratio_model_to_propagation']:.1f}x propagation), certificate "
              f"{1e3 * med['certificate_s']:.2f} ms; mean model update with anchor builds "
              f"{1e3 * out['mean_model_update_s_with_builds']:.2f} ms; retrains {out['retrains']}; full retrain "
              f"{full:.2f} s (exact re-propagation {re['repropagation_s']:.2f} s + training {re['train_s']:.2f} s)",
              flush=True)
        del server, party, proc
    print(f"peak RSS {peak_rss_gb():.2f} GB")
    results["peak_rss_gb"] = peak_rss_gb()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
