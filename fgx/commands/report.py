"""``fgx report`` (tables over run directories) and ``fgx plot`` (figures)."""
from __future__ import annotations

import sys


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v for item in values for v in item.split(",") if v]


def cmd_report(args) -> int:
    from fgx.report.runs import ReportError, find_runs
    from fgx.report.table import build_report, problems_text, readings, render

    try:
        runs = find_runs(args.paths)
        rep = build_report(runs, by=_split(args.by), metrics=_split(args.metric))
        text = render(rep, args.format)
    except ReportError as e:
        print(f"fgx report: {e}", file=sys.stderr)
        return 2
    done = len(runs) - len(rep.problems)
    # stdout holds the table alone for LaTeX and CSV (`> table.tex` is a file LaTeX reads); notes go to stderr
    notes = sys.stdout if args.format == "markdown" else sys.stderr
    if args.format != "csv":
        print(f"{done} completed run(s), grouped by {', '.join(rep.by)}; mean ± std (sample, ddof=1) over seeds, "
              f"test split, mean over clients", file=notes)
    if not args.output:       # with -o the table goes to the file, not also to the terminal
        print(text)
    if args.format != "csv" and (reading := readings(rep)):
        print("what the scores mean (test split; counts over every client's items):\n" + reading, file=notes)
    if rep.problems:
        print(problems_text(rep), file=notes)
    if args.output:
        from pathlib import Path

        from fgx.outputs import atomic_write_bytes
        atomic_write_bytes(Path(args.output), (text + "\n").encode())
        print(f"wrote {args.output}", file=sys.stderr)
    return 0 if done else 1


def cmd_plot(args) -> int:
    from fgx.report.plots import KINDS, render
    from fgx.report.runs import ReportError

    try:
        out = render(args.paths, kind=args.kind, output=args.output, metric=args.metric, x=args.x,
                   by=_split(args.by), split=args.split)
    except ReportError as e:
        print(f"fgx plot: {e}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(map(str, out)))
    assert args.kind in KINDS
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="paper-style table (mean ± std over seeds) from run/multirun directories")
    p.add_argument("paths", nargs="+", help="run or multirun directories (searched recursively)")
    p.add_argument("--by", action="append", help="config keys to group by (comma-separated; default: the keys "
                                                 "that vary between runs, seed excepted)")
    p.add_argument("--metric", action="append", help="metric column(s) (default: the runs' main metric)")
    p.add_argument("--format", default="markdown", choices=["markdown", "latex", "csv"])
    p.add_argument("--output", "-o", help="write the table to this file (instead of printing it)")
    p.set_defaults(func=cmd_report)

    from fgx.report.plots import KINDS
    q = sub.add_parser("plot", help="figures from run/multirun directories (PNG/SVG/PDF by the output's suffix)")
    q.add_argument("paths", nargs="+")
    q.add_argument("--kind", default="curve", choices=list(KINDS),
                   help="; ".join(f"{k}: {v}" for k, v in KINDS.items()))
    q.add_argument("--output", "-o", action="append",
                   help="file to write (.png, .svg or .pdf; repeatable; a name without a suffix writes NAME.pdf and "
                        "NAME.png; default <first path>/<kind>.png)")
    q.add_argument("--metric", help="y metric (default: the runs' main metric)")
    q.add_argument("--x", help="sweep/privacy: the swept config key on the x axis")
    q.add_argument("--by", action="append", help="keys that make one series each (default: varying keys)")
    q.add_argument("--split", default="test", choices=["train", "val", "test"])
    q.set_defaults(func=cmd_plot)
