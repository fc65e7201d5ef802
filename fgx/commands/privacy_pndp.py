"""`fgx privacy pndp`: pairwise privacy loss of decentralised SGD by distance from the attacker — Fig. 2
of Bellet et al. (2025) by default (DP-D-SGD, user level, fgx's matrix-factorisation accounting
against Cyffers et al. 2022), and for any correlation, participation and trust model the same
table a run with privacy=mf_gdp writes into privacy.json."""
from __future__ import annotations

import json
import sys

from fgx.commands.privacy import privacy_subparsers


def register(sub) -> None:
    from fgx.privacy.mf.correlations import CORRELATIONS
    from fgx.privacy.mf.sensitivity import BOUNDS

    p = privacy_subparsers(sub).add_parser(
        "pndp", help="pairwise (PNDP / SecLDP) privacy loss by distance from the attacker, for any correlation "
                     "and participation (Fig. 2: DP-D-SGD against Cyffers et al. 2022)")
    p.add_argument("--graph", default="florentine", help="florentine | karate | les_miserables | davis | "
                   "erdos_renyi | random_regular | ring | path | grid | torus | star | complete | edgelist")
    p.add_argument("--num-nodes", type=int, default=100, help="nodes of generated graphs")
    p.add_argument("--p", type=float, default=0.2, help="erdos_renyi edge probability")
    p.add_argument("--degree", type=int, default=3, help="random_regular degree")
    p.add_argument("--rows", type=int, default=4, help="grid/torus rows")
    p.add_argument("--cols", type=int, default=4, help="grid/torus columns")
    p.add_argument("--edgelist", help="edge-list file (graph=edgelist)")
    p.add_argument("--graph-seed", type=int, default=0)
    p.add_argument("--gossip", default="uniform", choices=["uniform", "metropolis_hastings"])
    p.add_argument("--gossip-steps", type=int, default=1, help="K messages per step (Muffliato)")
    p.add_argument("--steps", type=int, help="T (default 10, or k*b)")
    p.add_argument("--k", type=int, help="participations of each record (with --b: T = k*b, record level)")
    p.add_argument("--b", type=int, help="batches per node per epoch")
    p.add_argument("--participation", choices=["record", "user"],
                   help="record: cyclic (k, b); user: every step (default: record with --k/--b, else user)")
    p.add_argument("--correlation", default="identity", choices=list(CORRELATIONS),
                   help="local noise correlation (identity = DP-D-SGD)")
    p.add_argument("--trust-model", default="pndp", choices=["pndp", "secldp"])
    p.add_argument("--secret-scale", type=float, default=0.0, help="secldp: DECOR secret std relative to the local noise")
    p.add_argument("--attacker", type=int, default=0, help="the attacker node (Fig. 2: node 0)")
    p.add_argument("--attackers", help="'all' or comma-separated node ids, each attacking alone (overrides --attacker)")
    p.add_argument("--sens-bound", default="abs_sum_capped", choices=list(BOUNDS))
    p.add_argument("--alpha", type=float, default=2.0)
    p.add_argument("--sigma", type=float, default=1.0, help="noise multiplier: noise std per unit of sensitivity")
    p.add_argument("--mu", type=float, help="calibrate σ to μ-GDP under LDP as a run does (overrides --sigma)")
    p.add_argument("--delta", type=float, default=1e-6)
    p.add_argument("--solver-max-iter", type=int, default=2000)
    p.add_argument("--solver-tol", type=float, default=1e-8)
    p.add_argument("--json", action="store_true", help="print JSON (with the per-pair table)")
    p.set_defaults(func=pndp)


def _fail(msg: str) -> int:
    print(f"fgx privacy pndp: {msg}", file=sys.stderr)
    return 2


def pndp(args) -> int:
    import numpy as np

    from fgx.config import ConfigError
    from fgx.decentral.topology import GRAPHS, TopologyParams, build_graph, gossip_matrix
    from fgx.privacy.mf.correlations import build_correlation
    from fgx.privacy.mf.pndp import ldp_sens2, pairwise_table
    from fgx.privacy.mf.trust import accounting_cost

    if args.graph not in GRAPHS:
        return _fail(f"--graph {args.graph!r} is not one of {list(GRAPHS)}")
    if (args.k is None) != (args.b is None):
        return _fail("--k and --b go together")
    if args.k is not None:
        if args.k < 1 or args.b < 1:
            return _fail("--k and --b must be >= 1")
        if args.steps is not None and args.steps != args.k * args.b:
            return _fail(f"--steps {args.steps} != --k * --b = {args.k * args.b}")
        k, b = args.k, args.b
    else:
        k, b = (args.steps or 10), 1
    steps = k * b
    participation = args.participation or ("record" if args.k is not None else "user")
    if steps < 1 or args.gossip_steps < 1 or args.alpha <= 1 or args.sigma <= 0 or (args.mu is not None and args.mu <= 0) \
            or not 0 < args.delta < 1 or args.secret_scale < 0:
        return _fail("need T >= 1, --gossip-steps >= 1, --alpha > 1, --sigma > 0, --mu > 0, 0 < --delta < 1, --secret-scale >= 0")
    if args.trust_model == "secldp" and args.secret_scale <= 0:
        return _fail("--trust-model secldp needs --secret-scale > 0 (without secrets SecLDP is PNDP)")
    try:
        tp = TopologyParams(graph=args.graph, num_nodes=args.num_nodes, p=args.p, degree=args.degree, rows=args.rows,
                            cols=args.cols, edgelist_path=args.edgelist, graph_seed=args.graph_seed)
        tp.validate("--graph")
        g = build_graph(tp)
    except ConfigError as e:
        return _fail(str(e))
    n = g.number_of_nodes()
    if args.attackers is None:
        attackers = [args.attacker]
    elif args.attackers == "all":
        attackers = list(range(n))
    else:
        try:
            attackers = [int(a) for a in args.attackers.split(",")]
        except ValueError:
            return _fail(f"--attackers {args.attackers!r}: 'all' or comma-separated node ids")
    if any(not 0 <= a < n for a in attackers):
        return _fail(f"attacker ids must lie in [0, {n - 1}] (the graph has {n} nodes)")
    w = gossip_matrix(g, args.gossip)
    cost = max((accounting_cost(w, steps, [a], args.gossip_steps, g.number_of_edges()) for a in attackers),
               key=lambda c: c["bytes"])
    if cost["bytes"] > 8 * 2 ** 30:
        return _fail(f"the accounting would need {cost['bytes'] / 2 ** 30:.1f} GB for the best-connected attacker; "
                     f"use fewer steps or attackers")
    w_util = np.linalg.matrix_power(w, args.gossip_steps)
    corr = build_correlation(args.correlation, w_util, k, b, args.solver_max_iter, args.solver_tol)
    b_acc = b if participation == "record" else 1
    sigma = args.sigma
    if args.mu is not None:
        sigma = float(np.sqrt(ldp_sens2(corr.c_local, steps, b_acc, args.sens_bound).max()) / args.mu)
    table = pairwise_table(w, g, steps, b_acc, corr.c_local, attackers, args.trust_model, sigma, args.alpha, args.delta,
                           args.sens_bound, args.secret_scale, args.gossip_steps)
    table.update(graph=args.graph, nodes=n, correlation=args.correlation, participation=participation,
                 k=k if participation == "record" else steps, solver=corr.solver_report())
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    cyf = bool(table["by_distance"]) and "cyffers_rdp" in table["by_distance"][0]
    who = f"attacker {attackers[0]}" if len(attackers) == 1 else f"{len(attackers)} attackers, each alone"
    print(f"{args.trust_model.upper()} privacy loss, Rényi divergence at α={args.alpha:g}: graph {args.graph} ({n} nodes), "
          f"T={steps}, {participation} level (k={table['k']}, b={b_acc}), correlation {args.correlation}, "
          f"σ={sigma:.4g}, {who}; LDP level {table['ldp']['rdp']:.4g} (ε {table['ldp']['epsilon']:.4g} at δ={args.delta:g})")
    head = f"{'distance':>8} {'pairs':>5}   {'fgx MF min':>10} {'mean':>10} {'max':>10}"
    print(head + (f"   {'Cyffers min':>11} {'mean':>10} {'max':>10}" if cyf else ""))
    for r in table["by_distance"]:
        a = r["rdp"]
        line = f"{r['distance']:>8} {r['count']:>5}   {a['min']:>10.4g} {a['mean']:>10.4g} {a['max']:>10.4g}"
        if cyf:
            c = r["cyffers_rdp"]
            line += f"   {c['min']:>11.4g} {c['mean']:>10.4g} {c['max']:>10.4g}"
        print(line)
    wp = table["worst_pair"]
    if wp:
        print(f"worst pair: victim {wp['victim']} → attacker {wp['attacker']} (distance {wp['distance']}): "
              f"μ {wp['mu']:.4g}, ε {wp['epsilon']:.4g} at δ={args.delta:g}")
    return 0
