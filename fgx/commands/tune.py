"""``fgx tune TABLE``: every method of a table tuned on the validation split with the same budget;
the chosen values are written to conf/tuned/TABLE/<method>.yaml (see fgx/tables/tune.py)."""
from __future__ import annotations

import json
import sys


def cmd_tune(args) -> int:
    from fgx.launch import conf_dir
    from fgx.report.runs import ReportError
    from fgx.tables import tune_table

    try:
        res = tune_table(conf_dir(), args.name, methods=args.methods.split(",") if args.methods else None,
                   overrides=args.overrides, out=args.out, dry_run=args.dry_run)
    except ReportError as e:
        print(f"fgx tune: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(json.dumps(res, indent=2))
        return 0
    for m, r in res["methods"].items():
        print(f"{m:28s} {r['select']} val {r['val']:.4f}  chosen {r['chosen']}")
    print(f"written: conf/tuned/{args.name}/<method>.yaml, results/{args.name}.tune.json")
    return 0


def register(sub) -> None:
    p = sub.add_parser("tune", help="tune every method of a table on validation with the same budget "
                                    "(conf/experiment/NAME.yaml: table.tune)")
    p.add_argument("name", help="table name (conf/experiment/NAME.yaml)")
    p.add_argument("overrides", nargs="*", help="bookkeeping/launcher overrides only (data_dir=..., "
                                                "hydra/launcher=joblib hydra.launcher.n_jobs=2)")
    p.add_argument("--methods", help="comma-separated: tune only these (the budget is still checked for all)")
    p.add_argument("--out", help="where the trial runs go (default outputs/tune/NAME/<time>); an existing one "
                                 "keeps its completed trials")
    p.add_argument("--dry-run", action="store_true", help="print each method's grid and the budget, run nothing")
    p.set_defaults(func=cmd_tune)
