"""`fgx privacy <tool>`: privacy accounting without training.

Other modules add tools with ``privacy_subparsers(sub).add_parser(...)``."""
from __future__ import annotations

import json
import sys


def privacy_subparsers(sub):
    """The `fgx privacy` sub-command group, created on first use."""
    existing = getattr(sub, "_fgx_privacy", None)
    if existing is None:
        p = sub.add_parser("privacy", help="privacy accounting tools (no training)")
        existing = p.add_subparsers(dest="privacy_tool", metavar="TOOL")
        p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
        sub._fgx_privacy = existing
    return existing


def register(sub) -> None:
    p = privacy_subparsers(sub).add_parser(
        "metric-dp", help="ε(ρ) table of metric-DP for Gaussian embedding releases (CE-FedGNN Tables 6/7)")
    p.add_argument("--rho", type=float, nargs="+", required=True, help="distances ρ (e.g. k-NN percentiles)")
    p.add_argument("--sigma", type=float, nargs="+", required=True, help="embedding noise σ0 values")
    p.add_argument("--releases", type=int, required=True, help="releases per node R'")
    p.add_argument("--delta", type=float, required=True)
    p.add_argument("--percentiles", type=int, nargs="+", help="label the ρ rows with these percentiles")
    p.add_argument("--exact", action="store_true", help="also the tight (PLD) ε of the composed Gaussian")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=metric_dp)


def metric_dp(args) -> int:
    from fgx.privacy.metric_dp_accounting import epsilon_table

    if args.percentiles and len(args.percentiles) != len(args.rho):
        print("fgx privacy metric-dp: --percentiles needs one value per --rho", file=sys.stderr)
        return 2
    rhos = dict(zip(args.percentiles, args.rho)) if args.percentiles else list(args.rho)
    try:
        rows = epsilon_table(rhos, args.sigma, args.releases, args.delta, exact=args.exact)
    except ValueError as e:
        print(f"fgx privacy metric-dp: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"releases": args.releases, "delta": args.delta, "rows": rows}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"(ε, δ)-metric-DP at distance ρ: R' = {args.releases}, δ = {args.delta:g}")
    t.add_column("row")
    for s in args.sigma:
        t.add_column(f"σ0={s:g}", justify="right")
    for r in rows:
        label = f"{r['percentile']}th (ρ={r['rho']:.4f})" if r["percentile"] is not None else f"ρ={r['rho']:.4f}"
        t.add_row(label, *[f"{r['eps'][float(s)]:.3f}" for s in args.sigma])
        if args.exact:
            t.add_row("  exact", *[f"{r['eps_exact'][float(s)]:.3f}" for s in args.sigma])
    Console(width=None if sys.stdout.isatty() else 160).print(t)
    return 0
