"""``fgx`` command line. ``fgx run`` hands its arguments to Hydra after validating the composed
config (every job of a sweep), so a bad config fails at once and leaves no run directory.
Other subcommands live in ``fgx/commands/<name>.py`` and register themselves."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path

from fgx.config import ConfigError
# `fgx run` and the names other modules import from here live in fgx/launch.py (the library call)
from fgx.launch import compose, conf_dir, missing_hydra_plugin, prevalidate
from fgx.launch import run as cmd_run

__all__ = ["main", "compose", "conf_dir", "missing_hydra_plugin", "prevalidate"]   # re-exported from fgx.launch


def conf_component_name(path: Path) -> str | None:
    """The component a conf file selects, following a preset's `defaults: [base]` to its base file."""
    from omegaconf import OmegaConf

    node = OmegaConf.load(path)
    name = node.get("name")
    if name is None:
        for d in node.get("defaults", []) or []:
            if isinstance(d, str) and d != "_self_" and (path.parent / f"{d}.yaml").exists():
                name = conf_component_name(path.parent / f"{d}.yaml")
    return name


def cmd_list(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from fgx.registry import GROUPS

    groups = [args.group] if args.group else list(GROUPS)
    if args.group and args.group not in GROUPS:
        print(f"fgx: unknown group {args.group!r}; groups: {list(GROUPS)}", file=sys.stderr)
        return 2
    root = conf_dir()
    t = Table(title="fgx components")
    for col in ("group", "component", "conf files", "module"):
        t.add_column(col)
    for g in groups:
        by_name: dict[str, list[str]] = {}
        for f in sorted((root / g).glob("*.yaml")):
            name = conf_component_name(f)
            by_name.setdefault(name, []).append(f"conf/{g}/{f.name}")
        for name in GROUPS[g].names():
            e = GROUPS[g].get(name)
            t.add_row(g, name, ", ".join(by_name.get(name, [])) or "-", e.module)
    Console(width=None if sys.stdout.isatty() else 160).print(t)
    return 0


def _load_commands(sub) -> None:
    import fgx.commands as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        m = importlib.import_module(f"fgx.commands.{mod.name}")
        if hasattr(m, "register"):
            m.register(sub)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fgx", description="Federated graph learning experiments with privacy "
                                                        "and unlearning.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="run one experiment (Hydra overrides), -m for a sweep", add_help=False)
    pl = sub.add_parser("list", help="registered components per config group and their conf files")
    pl.add_argument("group", nargs="?")
    pl.set_defaults(func=cmd_list)
    _load_commands(sub)
    return p


def parse_command(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    args, extra = parser.parse_known_args(argv)
    if extra:
        # `fgx repro NAME --out DIR key=value`: overrides after an option land here; take them back
        if isinstance(getattr(args, "overrides", None), list) and not any(x.startswith("-") for x in extra):
            args.overrides += extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":
        try:
            return cmd_run(argv[1:])
        except ConfigError as e:
            print(f"fgx: {e}", file=sys.stderr)
            return 2
    parser = build_parser()
    args = parse_command(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if not argv else 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
