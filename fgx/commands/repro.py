"""``fgx repro NAME``: run a paper preset and print its table beside the paper's numbers."""
from __future__ import annotations

import sys
from pathlib import Path


def cmd_repro(args) -> int:
    from fgx.cli import conf_dir
    from fgx.outputs import atomic_write_bytes
    from fgx.report.repro import load_targets, markdown, reproduce, reproduction_markdown, targets_dir
    from fgx.report.runs import ReportError

    conf = conf_dir()
    if args.docs:
        atomic_write_bytes(Path(args.docs), (reproduction_markdown(conf) + "\n").encode())
        print(f"wrote {args.docs}")
        return 0
    if args.list or not args.name:
        for tf in sorted(targets_dir(conf).glob("*.yaml")):
            t = load_targets(conf, tf.stem)
            print(f"{tf.stem:34s} {t['paper']} {t['item']} [{t['data']}, {t['status']}]")
        return 0
    try:
        res = reproduce(conf, args.name, out=args.out, overrides=args.overrides,
                        existing=Path(args.from_dir) if args.from_dir else None)
    except ReportError as e:
        print(f"fgx repro: {e}", file=sys.stderr)
        return 2
    print(markdown(res))
    print(f"\nwritten: {', '.join(str(f) for f in res.files)}")
    return 0 if all(c.ok is not False for c in res.checks) else 1


def register(sub) -> None:
    p = sub.add_parser("repro", help="run a paper preset (conf/experiment/NAME) and compare with the paper "
                                     "(conf/targets/NAME)")
    p.add_argument("name", nargs="?", help="preset name; without it, the list of reproducible presets")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for the runs (e.g. data_dir=...)")
    p.add_argument("--out", help="output directory (default outputs/repro/NAME/<time>)")
    p.add_argument("--from", dest="from_dir", help="compare existing runs in this directory instead of running")
    p.add_argument("--list", action="store_true", help="list the presets that have targets")
    p.add_argument("--docs", metavar="PATH", help="write the reproduction index (docs/REPRODUCTION.md) and exit")
    p.set_defaults(func=cmd_repro)
