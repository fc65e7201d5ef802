"""`fgx privacy pndp`: Fig. 2 of Bellet et al. (2025) — pairwise (PNDP) privacy loss of DP-D-SGD by
distance from the attacker, fgx's matrix-factorisation accounting against Cyffers et al. (2022)."""
from __future__ import annotations

import json
import sys

from fgx.commands.privacy import privacy_subparsers


def register(sub) -> None:
    p = privacy_subparsers(sub).add_parser(
        "pndp", help="PNDP privacy loss (Rényi, α) by distance from the attacker: MF accounting vs Cyffers et al. 2022")
    p.add_argument("--graph", default="florentine", help="florentine | karate | les_miserables | davis | "
                   "erdos_renyi | random_regular | ring | path | grid | torus | star | complete | edgelist")
    p.add_argument("--num-nodes", type=int, default=100, help="nodes of generated graphs")
    p.add_argument("--p", type=float, default=0.2, help="erdos_renyi edge probability")
    p.add_argument("--edgelist", help="edge-list file (graph=edgelist)")
    p.add_argument("--graph-seed", type=int, default=0)
    p.add_argument("--gossip", default="uniform", choices=["uniform", "metropolis_hastings"])
    p.add_argument("--steps", type=int, default=10, help="T (user-level: the victim takes part in every step)")
    p.add_argument("--attacker", type=int, default=0)
    p.add_argument("--alpha", type=float, default=2.0)
    p.add_argument("--sigma", type=float, default=1.0, help="noise std per unit of clip")
    p.add_argument("--json", action="store_true", help="print JSON (with the per-pair table)")
    p.set_defaults(func=pndp)


def pndp(args) -> int:
    from fgx.config import ConfigError
    from fgx.decentral.topology import GRAPHS, TopologyParams, build_graph, gossip_matrix
    from fgx.privacy.mf.pndp import pndp_table

    if args.graph not in GRAPHS:
        print(f"fgx privacy pndp: --graph {args.graph!r} is not one of {list(GRAPHS)}", file=sys.stderr)
        return 2
    try:
        tp = TopologyParams(graph=args.graph, num_nodes=args.num_nodes, p=args.p,
                            edgelist_path=args.edgelist, graph_seed=args.graph_seed)
        tp.validate("--graph")
        g = build_graph(tp)
    except ConfigError as e:
        print(f"fgx privacy pndp: {e}", file=sys.stderr)
        return 2
    n = g.number_of_nodes()
    if not 0 <= args.attacker < n or args.steps < 1 or args.steps * n > 6000:
        print(f"fgx privacy pndp: need 0 <= --attacker < {n}, --steps >= 1 and steps*nodes <= 6000", file=sys.stderr)
        return 2
    table = pndp_table(gossip_matrix(g, args.gossip), g, args.steps, args.attacker, 1, args.alpha, args.sigma)
    table["graph"], table["nodes"] = args.graph, n
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    print(f"PNDP privacy loss, Rényi divergence at α={args.alpha:g}: graph {args.graph} ({n} nodes), T={args.steps}, "
          f"σ={args.sigma:g}, attacker {args.attacker}; LDP level {table['ldp_rdp']:.4g}")
    print(f"{'distance':>8} {'nodes':>5}   {'fgx MF min':>10} {'mean':>10} {'max':>10}   "
          f"{'Cyffers min':>11} {'mean':>10} {'max':>10}")
    for r in table["by_distance"]:
        a, c = r["rdp"], r["cyffers_rdp"]
        print(f"{r['distance']:>8} {r['count']:>5}   {a['min']:>10.4g} {a['mean']:>10.4g} {a['max']:>10.4g}   "
              f"{c['min']:>11.4g} {c['mean']:>10.4g} {c['max']:>10.4g}")
    return 0
