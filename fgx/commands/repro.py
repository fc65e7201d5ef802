"""``fgx repro NAME``: run a paper table as one Hydra multirun, record it (the output folder, or with
``--record`` the project's results/NAME.json) and print it beside the paper's numbers with the computed
status (fgx/tables/)."""
from __future__ import annotations

import sys
import time
from pathlib import Path


def cmd_repro(args) -> int:
    from fgx.launch import conf_dir
    from fgx.outputs import atomic_write_bytes
    from fgx.report.runs import ReportError
    from fgx.tables import identical_rows, load_targets, markdown, record_result, reproduce, reproduction_markdown, \
        table_names

    conf = conf_dir()
    if args.dry_run and args.name:
        try:
            t = load_targets(conf, args.name)
        except ReportError as e:
            print(f"fgx repro: {e}", file=sys.stderr)
            return 2
        if t["accounting"] is None and not t.get("command"):
            from fgx.launch import job_overrides, prevalidate
            job = [f"+experiment={args.name}", *args.overrides]
            prevalidate(job, multirun=True)   # exits with the config error of the first bad job
            same = identical_rows(args.name)
            if same:
                print(f"fgx repro: {args.name}: rows that cannot differ from another row: {'; '.join(same)}",
                      file=sys.stderr)
                return 2
            print(f"{args.name}: {len(job_overrides(job, multirun=True))} job(s), all valid")
        else:
            print(f"{args.name}: {'accounting' if t['accounting'] is not None else t['command']}, nothing to compose")
        return 0
    if args.spot_check:
        return _spot_check(conf, args)
    try:
        if args.tally:
            import json

            from fgx.tables import tally_tables
            text = json.dumps(tally_tables(conf), indent=1, ensure_ascii=False) + "\n"
            if args.dry_run:                     # computed, written nowhere (as --docs)
                print(f"would write {args.tally}")
                return 0
            atomic_write_bytes(Path(args.tally), text.encode())
            print(f"wrote {args.tally}")
            return 0
        if args.docs:
            if args.dry_run:
                reproduction_markdown(conf)      # renders, writes nothing
                print(f"would write {args.docs}")
                return 0
            atomic_write_bytes(Path(args.docs), (reproduction_markdown(conf) + "\n").encode())
            print(f"wrote {args.docs}")
            return 0
        if args.list or not args.name:
            for name in table_names(conf):
                t = load_targets(conf, name)
                res = record_result(conf, name, t)
                why = f" ({'; '.join(res.stale[:3])}{' …' if len(res.stale) > 3 else ''})" if res.stale else ""
                print(f"{name:34s} {t['paper']}: {t['item']} [{t['data']}; {res.status}]{why}")
            return 0
        res = reproduce(conf, args.name, out=args.out, overrides=args.overrides,
                        existing=Path(args.from_dir) if args.from_dir else None, record=args.record)
    except ReportError as e:
        print(f"fgx repro: {e}", file=sys.stderr)
        return 2
    print(markdown(res))
    print(f"\nwritten: {', '.join(str(f) for f in res.files)}")
    return 0 if all(c.ok is not False for c in res.checks) and not res.problems else 1


def _spot_check(conf: Path, args) -> int:
    from fgx.tables import TOLERANCE, spot_check

    if not args.name:
        print("fgx repro: --spot-check needs a table name", file=sys.stderr)
        return 2
    seed = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("seed=")), None)
    rest = [o for o in args.overrides if not o.startswith("seed=")]
    # a fresh folder per check by default: reruns are what is checked (an --out that holds runs of this
    # code and config, e.g. an interrupted check, keeps them; runs of other code are made again)
    out = Path(args.out) if args.out else Path("outputs") / "spot_check" / args.name / time.strftime("%Y-%m-%d_%H-%M-%S")
    from fgx.report.runs import ReportError     # the table's runs are read by fgx/report (TablesError is one too)
    try:
        res = spot_check(conf, args.name, out, seed=seed, overrides=rest)
    except ReportError as e:
        print(f"fgx repro: {e}", file=sys.stderr)
        return 2
    print(f"{args.name}: seed {res.seed} rerun for {res.compared} row(s), {res.numbers} numbers compared, "
          f"largest difference {res.max_diff:.2g} (tolerance {TOLERANCE:g})")
    for m in res.missing:
        print(f"  no rerun for {m}")
    for d in res.differences:
        print(f"  differs: {d}")
    if res.ok:
        for r in res.retired:
            print(f"  retired (a binary-only metric the record held on a multi-class task; dropped): {r}")
        print(f"same numbers: the record now carries today's code and config fingerprints ({res.written})")
        return 0
    if res.other_kernels:
        # the same code and libraries give other floating-point results under other kernels (docs/tables.md)
        print("  the differing rows were recorded under other CPU kernels than this machine's, where the same code "
              "gives other floating-point results:")
        for k in res.other_kernels:
            print(f"    {k}")
        rows = sorted({k.split(":", 1)[0] for k in res.other_kernels})
        print(f"  to carry the record here: rerun those rows (`fgx repro {args.name} <their method=...> --record`), "
              f"then this spot check again with the same --out (its finished reruns are kept)")
        print(f"  rows: {'; '.join(rows)}")
    print(f"not carried over: run `fgx repro {args.name} --record` again")
    return 1


def register(sub) -> None:
    p = sub.add_parser("repro", help="run a paper table (conf/experiment/NAME) as one multirun, record it (--record: in "
                                     "results/NAME.json) and compare with the paper (conf/targets/NAME)")
    p.add_argument("name", nargs="?", help="table name; without it, the list of tables and their statuses")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for the runs (e.g. data_dir=..., "
                                                "hydra/launcher=joblib, method=a,b to run some methods only)")
    p.add_argument("--out", help="output directory (default outputs/repro/NAME/<time>); an existing one keeps "
                                 "its completed runs")
    p.add_argument("--from", dest="from_dir", help="compare existing runs in this directory (never recorded)")
    p.add_argument("--record", action="store_true", help="merge the completed cells into the project's record "
                                                         "results/NAME.json (the maintainer's command); without it "
                                                         "the record goes into the output folder only")
    p.add_argument("--spot-check", action="store_true",
                   help="rerun one seed (seed=N, default the table's first) of every row of the record and, when "
                        "each gives the recorded numbers, carry the record over to today's code and config")
    p.add_argument("--list", action="store_true", help="list the tables and their computed statuses")
    p.add_argument("--dry-run", action="store_true", help="check every job of the table (configs composed and "
                                                           "validated) and run nothing")
    p.add_argument("--docs", metavar="PATH", help="write the reproduction document (docs/REPRODUCTION.md) from the "
                                                  "records and exit")
    p.add_argument("--tally", metavar="PATH", help="write every table's status, decision and ordering outcomes as "
                                                   "JSON (counts before and after a change to how tables decide)")
    p.set_defaults(func=cmd_repro)
