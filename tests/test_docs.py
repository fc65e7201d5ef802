"""The docs tested like code: every `fgx ...` command in README.md and docs/*.md resolves (fast), and
every cheap one runs (slow, `-m slow`). How commands are found and marked: tests/docs_commands.py."""
from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from docs_commands import (REPO, DocCommand, all_commands, compare_output, covering, doc_files, extract,
                           plan_run)


def _parser_path(parser, words: list[str]):
    """The (sub)parser reached by following subcommand words; the words left over."""
    import argparse

    for i, w in enumerate(words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or w not in subs[0].choices:
            return parser, words[i:]
        parser = subs[0].choices[w]
    return parser, []


def _option_names(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def check_resolves(cmd: DocCommand, runs_dir: Path, data_dir: Path) -> str | None:
    """None when the command resolves (or, marked `[refused]`, is refused); otherwise what is wrong with it."""
    if "refused" in cmd.marks:
        problem = _check_resolves(cmd, runs_dir, data_dir)
        return "documented as refused, but it resolves" if problem is None else None
    return _check_resolves(cmd, runs_dir, data_dir)


def _check_resolves(cmd: DocCommand, runs_dir: Path, data_dir: Path) -> str | None:
    from fgx.cli import build_parser, missing_hydra_plugin, prevalidate

    parser = build_parser()
    sub, rest = _parser_path(parser, cmd.argv)
    if sub is parser:
        return f"`fgx {cmd.subcommand}` is not an fgx command (commands: fgx run, " + ", ".join(
            f"fgx {c}" for c in sorted(_subcommands(parser))) + ")"
    if cmd.is_name:
        return None
    if cmd.is_pattern:
        if cmd.subcommand == "run":
            return None
        known = _option_names(sub)
        bad = [t.strip("[]") for t in rest if t.strip("[]").startswith("-") and t.strip("[]").split("=")[0] not in known]
        return f"unknown option(s) {bad} for `fgx {' '.join(cmd.argv[:len(cmd.argv) - len(rest)])}`" if bad else None
    argv = plan_run(cmd, runs_dir=runs_dir, data_dir=data_dir, rounds=None).argv
    if cmd.subcommand == "run":
        from fgx.launch import _overrides_of

        overrides = _overrides_of(argv[1:])
        missing = missing_hydra_plugin(overrides)
        if missing:   # an optional extra: the job configs are still checked without the plugin
            overrides = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
        try:
            prevalidate(overrides, cmd.multirun)
        except SystemExit as e:
            return str(e.code)
        return None
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            from fgx.cli import parse_command

            args = parse_command(parser, argv)
        except SystemExit:
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argument error"
    if hasattr(args, "dry_run"):
        args.dry_run = True
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = args.func(args)
            except SystemExit as e:
                return str(e.code)
        if rc:
            return err.getvalue().strip() or f"exit code {rc}"
    return None


def _subcommands(parser) -> list[str]:
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(subs[0].choices) if subs else []


def install_quick_compose(set_attr=setattr):
    """Composing a config costs ~0.1 s: each distinct job is composed once, and of a long sweep only the
    jobs that together hold every swept value (every job of every sweep is checked by `fgx run -m` itself).
    Compositions run under one Hydra initialisation, which the caller makes."""
    import functools

    from hydra import compose

    import fgx.launch as launch

    real_jobs = launch.job_overrides
    set_attr(launch, "job_overrides", lambda overrides, multirun: covering(real_jobs(overrides, multirun)))

    @functools.lru_cache(maxsize=None)
    def cached(overrides: tuple, hydra: bool):
        if hydra:
            return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
        return compose(config_name="config",
                       overrides=[o for o in overrides if not o.lstrip("+~").startswith("hydra")])

    set_attr(launch, "compose", lambda overrides, hydra=False: cached(tuple(overrides), hydra))
    # GPU examples resolve as they would on a machine with CUDA (the slow test skips them without one)
    set_attr(torch.cuda, "is_available", lambda: True)


def _start_resolver() -> None:
    """A worker process of the resolve test: the quick-compose shortcuts and one Hydra initialisation,
    kept for the worker's life."""
    from hydra import initialize_config_dir

    import fgx.cli as cli

    install_quick_compose()
    initialize_config_dir(config_dir=str(cli.conf_dir()), version_base="1.3")


def _resolve(job: tuple[DocCommand, Path]) -> str | None:
    cmd, tmp = job
    return check_resolves(cmd, tmp, tmp)


# what fgx says when a command needs an optional extra that is not installed (pyproject's extras; `all`: every one)
NEEDS_AN_EXTRA = ("is not installed here (pip install -e '.[", "install Ray first: pip install -e '.[ray]'",
                  "Could not find 'hydra/sweeper/optuna'", "Could not find 'hydra/launcher/")


def needs_an_absent_extra(problem: str) -> bool:
    """A command that needs an optional package absent here (the `test` extra alone): not a docs problem."""
    from fgx.launch import missing_hydra_plugin

    if "Could not find 'hydra/sweeper/optuna'" in problem:
        return missing_hydra_plugin(["hydra/sweeper=optuna"]) is not None
    return any(s in problem for s in NEEDS_AN_EXTRA)


def _resolution_key(c: DocCommand) -> tuple:
    """What a command's resolution depends on (not where it is written)."""
    return (tuple(c.argv), tuple(sorted(c.env.items())), tuple(sorted(c.marks.items())), c.inline,
            repr(c.output_options))


def test_every_documented_command_resolves(tmp_path):
    """Each distinct command once (`fgx repro --docs ...` is written in four places). Checking composes
    ~1,500 configs (every job of ~90 tables) in pure Python, so it is spread over the cores, in fresh
    processes (spawned: nothing of the test process's state, whose torch may hold threads)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    commands = all_commands()
    assert len(commands) > 100, "the extractor lost the docs' commands"
    by_key: dict[tuple, list[DocCommand]] = {}
    for c in commands:
        by_key.setdefault(_resolution_key(c), []).append(c)
    firsts = [same[0] for same in by_key.values()]
    workers = min(4, os.cpu_count() or 1)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_resolver) as pool:
        results = list(pool.map(_resolve, [(c, tmp_path) for c in firsts]))
    problems = [f"{c.where}: fgx {' '.join(c.argv)}\n    -> {p}"
                for first, p in zip(firsts, results) if p is not None and not needs_an_absent_extra(p)
                for c in by_key[_resolution_key(first)]]
    assert not problems, f"{len(problems)} documented command(s) do not resolve:\n" + "\n".join(problems)
    skipped = [f"fgx {' '.join(c.argv)}" for c, p in zip(firsts, results) if p is not None and needs_an_absent_extra(p)]
    if skipped:       # the `test` extra alone: CI (`all`) resolves them
        import warnings

        warnings.warn(f"{len(skipped)} documented command(s) need an optional extra not installed here, not "
                      f"resolved (pip install -e '.[all]'): " + "; ".join(skipped[:5]))


def test_marks_are_written_as_the_docs_test_reads_them():
    """A full-scale mark says how big and how long (measured, or `time not yet measured`: never a guess); a
    `[...]` in a comment that is no known mark is a typo."""
    import re

    bad = []
    for c in all_commands():
        for m in re.finditer(r"\[([a-z ]+)(:[^\]]*)?\]", c.comment):
            if m.group(1) not in ("your data", "your cluster", "full scale") and m.group(1).startswith(("your", "full")):
                bad.append(f"{c.where}: unknown mark [{m.group(1)}]")
        detail = c.marks.get("full scale")
        timed = detail and (re.search(r"~\s*\d+", detail) or detail.endswith("time not yet measured"))
        if "full scale" in c.marks and not (detail and re.search(r"\d", detail) and timed):
            bad.append(f"{c.where}: [full scale: SIZE, ~TIME] needs its size and expected time, got {detail!r}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------- the machinery itself can fail

def _write(tmp_path: Path, text: str) -> list[DocCommand]:
    (tmp_path / "docs").mkdir(exist_ok=True)
    p = tmp_path / "docs" / "page.md"
    p.write_text(text)
    return extract(p, tmp_path)


def test_extractor_finds_blocks_inline_continuations_and_marks(tmp_path):
    cmds = _write(tmp_path, """# page
Run `fgx run algorithm=fedavg` or see `fgx report`.

```bash
OMP_NUM_THREADS=1 fgx run -m seed=0,1 \\
    rounds=2           # two jobs
fgx data stats /path/to/Trans.csv   # [your data] a Kaggle CSV
python -m venv .venv && fgx list
```

    fgx privacy pndp --graph florentine

```text
fgx full load 27.6s   (output, not a command)
```

```console
$ fgx privacy metric-dp --rho 0.1 --sigma 1 --releases 2 --delta 1e-4 --json
{"releases": 2,
...
```
""")
    got = [(c.line, " ".join(c.argv), c.inline) for c in cmds]
    assert got == [(2, "run algorithm=fedavg", True), (2, "report", True),
                   (5, "run -m seed=0,1 rounds=2", False), (7, "data stats /path/to/Trans.csv", False),
                   (8, "list", False), (11, "privacy pndp --graph florentine", False),
                   (18, "privacy metric-dp --rho 0.1 --sigma 1 --releases 2 --delta 1e-4 --json", False)]
    assert cmds[2].env == {"OMP_NUM_THREADS": "1"} and cmds[3].marks == {"your data": ""}
    assert cmds[1].is_name and not cmds[0].is_name
    assert cmds[-1].expected_output == '{"releases": 2,\n...'


def test_covering_keeps_every_swept_value():
    jobs = [[f"a={a}", f"seed={s}"] for a in "xyz" for s in range(3)]
    got = covering(jobs)
    assert len(got) == 5 and {v for j in got for v in j} == {v for j in jobs for v in j}


def test_resolution_catches_a_bad_key_an_unknown_command_and_a_bad_preset_value(tmp_path):
    cmds = _write(tmp_path, """```bash
fgx run algorithm=fedavg algorithm.no_such_key=1
fgx rnu algorithm=fedavg
fgx run -m algorithm=fedavg,local rounds=0
fgx report --format pdf outputs/multirun/<date>/<time>
fgx repro no_such_preset
fgx run algorithm=fedavg rounds=2
fgx run ... algorithm.anything=1
```
""")
    got = [check_resolves(c, tmp_path, tmp_path) for c in cmds]
    assert "algorithm.no_such_key" in got[0]
    assert "not an fgx command" in got[1]
    assert "rounds=0" in got[2]
    assert "invalid choice: 'pdf'" in got[3]
    assert "no_such_preset" in got[4]
    assert got[5] is None and got[6] is None      # a valid command; a usage pattern


def test_plan_skips_by_mark_and_fills_in_placeholders(tmp_path):
    cmds = _write(tmp_path, """```bash
fgx run dataset=cora data_dir=<data root>
fgx data stats /path/to/HI-Small_Trans.csv   # [your data]
fgx run dataset=aml_hi_small   # [full scale: 5M transactions, ~20 min]
fgx report outputs/multirun/<date>/<time> --format csv
```
""")
    (tmp_path / "outputs" / "multirun" / "2026-01-01" / "10-00-00").mkdir(parents=True)
    (tmp_path / "outputs" / "multirun" / "2026-01-02" / "09-00-00").mkdir(parents=True)
    plans = [plan_run(c, runs_dir=tmp_path, data_dir=Path("/data"), rounds=1) for c in cmds]
    assert plans[0].argv == ["run", "dataset=cora", "data_dir=/data", "rounds=1"] and plans[0].skip is None
    assert plans[1].skip == "your data" and plans[2].skip == "full scale"
    assert plans[3].argv == ["report", str(tmp_path / "outputs/multirun/2026-01-02/09-00-00"), "--format", "csv"]


def test_output_comparison_holds_numbers_to_their_printed_digits():
    expected = "F1 0.3266 on 4 clients\n...\nwall time ... s"
    assert compare_output(expected, "F1 0.3266 on 4 clients\nextra\nlines\nwall time 12.3 s") is None
    assert compare_output(expected, "F1 0.3267 on 4 clients\nwall time 1 s") is None        # last digit +-1
    assert "0.3266" in compare_output(expected, "F1 0.3281 on 4 clients\nwall time 1 s")
    assert compare_output(expected, "F1 0.3266 on 5 clients\nwall time 1 s") is not None
    assert compare_output("a 0.30", "a 0.33", tolerance=0.05) is None
    assert compare_output("a\nb", "a") is not None


# ---------------------------------------------------------------- slow: run them

def _is_table_run(cmd: DocCommand) -> bool:
    """`fgx repro TABLE [overrides]` marked `[full scale: ...]` (the reproduction document's ~90 tables, hours
    each): the slow test composes and validates every job of it (`--dry-run`) instead of running it."""
    argv = cmd.argv
    return (cmd.subcommand == "repro" and len(argv) > 1 and not argv[1].startswith("-")
            and not any(t in ("--from", "--docs", "--list") for t in argv))


def _dry_run_tables(cmds: list[DocCommand], tmp_path: Path) -> list[str]:
    """`fgx repro TABLE --dry-run` of each command, over the cores in spawned workers (one Hydra
    initialisation each; one interpreter per table costs minutes on a busy machine)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not cmds:
        return []
    with ProcessPoolExecutor(min(4, os.cpu_count() or 1), mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_resolver) as pool:
        results = list(pool.map(_resolve, [(c, tmp_path) for c in cmds]))
    return [f"{c.where}: fgx {' '.join(c.argv)} --dry-run\n      {p}" for c, p in zip(cmds, results) if p is not None]


def test_a_marked_table_run_is_dry_run_by_the_slow_test(tmp_path):
    cmds = _write(tmp_path, """```bash
fgx repro ce_fedgnn_table6  # [full scale: 12 runs, ~5 min measured]
fgx repro --list   # [full scale: 1 run, ~1 min]
fgx run dataset=aml_hi_small   # [full scale: 5M transactions, ~20 min]
```
""")
    assert [_is_table_run(c) for c in cmds] == [True, False, False]
    assert _dry_run_tables(cmds[:1], tmp_path) == []
    bad = _write(tmp_path, "```bash\nfgx repro no_such_table  # [full scale: 1 run, ~1 min]\n```\n")
    assert "no_such_table" in _dry_run_tables(bad, tmp_path)[0]


@pytest.mark.slow
@pytest.mark.parametrize("page", [str(p.relative_to(REPO)) for p in doc_files()])
def test_documented_commands_run(page, data_root, tmp_path):
    """Each cheap command of a page runs (rounds=1, or as written where its config refuses rounds=1), and each
    table marked full scale is composed and validated (`fgx repro TABLE --dry-run`), in order, in one scratch directory (so a
    `fgx report outputs/multirun/<date>/<time>` reads the sweep an earlier command of the page wrote);
    a console block's output is compared with what its command prints (run as written)."""
    env = {**os.environ, "FGX_DATA_DIR": str(data_root), "CI": "true", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    failures, ran = [], 0
    commands = extract(REPO / page)
    # tables whose command carries a full-scale mark on this page (also where the page names them again
    # without it: the reproduction document's "run `fgx repro TABLE` again" of a stale record) are composed
    # and validated (`fgx repro TABLE --dry-run`), each table once, in worker processes as the fast test does
    marked = {c.argv[1] for c in commands if "full scale" in c.marks and _is_table_run(c)}
    tables = {c.argv[1]: c for c in commands if _is_table_run(c) and c.argv[1] in marked}
    failures += _dry_run_tables(list(tables.values()), tmp_path)
    for cmd in commands:
        plan = plan_run(cmd, runs_dir=tmp_path, data_dir=data_root, rounds=None if cmd.expected_output else 1)
        if plan.skip or (_is_table_run(cmd) and cmd.argv[1] in marked):
            continue
        ran += 1
        try:
            res = subprocess.run([sys.executable, "-m", "fgx.cli", *plan.argv], cwd=tmp_path,
                                 env={**env, **plan.env}, capture_output=True, text=True, timeout=plan.timeout)
            if plan.as_written and f"{plan.argv[-1]} is not allowed" in res.stderr + res.stdout:
                # the config ties rounds to something else (gossip: rounds = k * b): run it as written
                plan.argv = plan.as_written
                res = subprocess.run([sys.executable, "-m", "fgx.cli", *plan.argv], cwd=tmp_path,
                                     env={**env, **plan.env}, capture_output=True, text=True, timeout=plan.timeout)
        except subprocess.TimeoutExpired:
            failures.append(f"{cmd.where}: fgx {' '.join(plan.argv)}: still running after {plan.timeout} s; "
                            f"mark it [full scale: SIZE, ~TIME]")
            continue
        if res.returncode not in plan.ok_codes:
            tail = "\n      ".join((res.stderr or res.stdout).strip().splitlines()[-6:])
            failures.append(f"{cmd.where}: fgx {' '.join(plan.argv)}: exit {res.returncode}\n      {tail}")
        elif cmd.expected_output is not None:
            diff = compare_output(cmd.expected_output, res.stdout, tolerance=cmd.output_options.get("tolerance"))
            if diff:
                failures.append(f"{cmd.where}: fgx {' '.join(plan.argv)}: output differs from the docs: {diff}")
    assert not failures, f"{len(failures)} of {ran} command(s) of {page} fail:\n" + "\n".join(failures)
