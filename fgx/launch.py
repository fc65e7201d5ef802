"""Launching ``fgx run`` jobs as a library call: compose and validate every job of a command line (a
sweep's too) before any work, then hand it to Hydra. ``fgx run`` (fgx/cli.py) and the table runner
(fgx/tables/) both launch through :func:`run`, so the one place that turns overrides into run
directories is here."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from fgx.config import ConfigError, conf_dir  # noqa: F401 - conf_dir: fgx.cli and the commands import it from here

FAILED_JOBS: list[str] = []
DIVERGED_JOBS: list[str] = []


# Hydra plugins the docs name, and the pyproject extra that installs each
HYDRA_PLUGINS = {"hydra/launcher": {"joblib": "joblib", "ray": "ray-launcher", "submitit_local": "submitit",
                                    "submitit_slurm": "submitit"},
                 "hydra/sweeper": {"optuna": "optuna"}}


def missing_hydra_plugin(overrides: list[str]) -> str | None:
    """A message naming the extra to install when an override selects a Hydra launcher or sweeper
    that is not installed here (Hydra itself would print its config search path)."""
    from hydra.core.plugins import Plugins

    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key not in HYDRA_PLUGINS or not value:
            continue
        from hydra.plugins.launcher import Launcher
        from hydra.plugins.sweeper import Sweeper

        kind = Launcher if key == "hydra/launcher" else Sweeper
        have = {p.__module__.split(".")[1] for p in Plugins.instance().discover(kind)}
        package = {"joblib": "hydra_joblib_launcher", "ray": "hydra_ray_launcher", "submitit_local":
                   "hydra_submitit_launcher", "submitit_slurm": "hydra_submitit_launcher",
                   "optuna": "hydra_optuna_sweeper"}.get(value)
        if value in ("basic",) or package in have:
            continue
        extra = HYDRA_PLUGINS[key].get(value)
        how = f"pip install -e '.[{extra}]'" if extra else "install the Hydra plugin that provides it"
        return f"{key}={value} is not installed here ({how}; docs/scaling.md)"
    return None


def job_overrides(overrides: list[str], multirun: bool) -> list[list[str]]:
    """Every job's override list (one for a single run; the sweep's combinations for -m, including
    the values a preset sweeps in its own `hydra.sweeper.params`, as Hydra's basic sweeper does)."""
    mine = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    if not multirun:
        return [mine]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    preset = []
    # only a preset (conf/experiment/*.yaml, package _global_) can bring its own hydra.sweeper.params
    if any(o.lstrip("+~").startswith("experiment") for o in overrides):
        fixed = [o.input_line for o in parser.parse_overrides(overrides) if not o.is_sweep_override()]
        hydra_cfg = compose(fixed, hydra=True).hydra
        if hydra_cfg.sweeper.get("_target_", "").endswith("BasicSweeper"):
            preset = [f"{k}={v}" for k, v in (hydra_cfg.sweeper.get("params") or {}).items()]
    parsed = parser.parse_overrides(preset + mine)
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def compose(overrides: list[str], hydra: bool = False):
    """The config a command line resolves to (``hydra=True``: with the `hydra` node, so `hydra...`
    overrides apply; otherwise they are left out)."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        if hydra:
            return hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
        return hydra_compose(config_name="config",
                             overrides=[o for o in overrides if not o.lstrip("+~").startswith("hydra")])


def dataset_algorithm(overrides: list[str], multirun: bool) -> list[str]:
    """``[algorithm=X]`` when the command line names no algorithm (nor a preset, which names its own) and
    its dataset declares ``default_algorithm: X`` (graph, ranking and tabular datasets: the default job's
    ce_fedgnn has no such task), else ``[]``. Not a Hydra defaults-list override in the dataset's file:
    Hydra builds the defaults tree from the last entry to the first, so a choice the dataset made could
    reach the algorithm only if the dataset came after it, and then the model an algorithm brings
    (fedgsp -> unifilter) could no longer replace the dataset's. A sweep whose datasets declare different
    algorithms is refused with the fix."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from fgx.config import DATASET_ALGORITHM_KEY

    named = {o.lstrip("+~").split("=", 1)[0].split("@")[0] for o in overrides}
    if "dataset" not in named or named & {"algorithm", "experiment"}:
        return []
    try:
        wanted = {}
        for job in job_overrides(overrides, multirun):
            label = next(o for o in job if o.lstrip("+~").split("=", 1)[0] == "dataset")
            if label not in wanted:        # one composition per dataset of a sweep
                ds = compose(job).dataset
                wanted[label] = ds.get(DATASET_ALGORITHM_KEY) if ds is not None else None
    except (HydraException, OmegaConfBaseException, ValueError):
        return []          # prevalidate reports the command line's own error
    algos = set(wanted.values())
    if algos == {None}:
        return []
    if len(algos) > 1:
        raise SystemExit("fgx: the swept datasets run different algorithms when none is named ("
                         + "; ".join(f"{j}: {a or 'ce_fedgnn (the default job)'}" for j, a in wanted.items())
                         + "). Name one: algorithm=NAME, or sweep the datasets of one task together")
    return [f"algorithm={algos.pop()}"]


def keys_of_swept_groups(overrides: list[str], multirun: bool) -> list[str]:
    """The overrides with ``group.key=v`` made ``++group.key=v`` where a sweep's jobs choose different
    components (``-m dataset=chameleon_filtered,squirrel_filtered dataset.fixed_split_index=0``). Hydra
    composes a sweep's base config without its swept values first, where ``dataset`` is still the default
    job's and has no such key ("not in struct"); ``++`` sets the key in every job, and a job whose
    component has no such key is then refused by name before any work (fgx/config.py)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from fgx.config import GROUP_KEYS

    if not multirun:
        return overrides
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:  # noqa: BLE001 - prevalidate reports the command line's own syntax error
        return overrides
    swept = {o.key_or_group for o in parsed if o.is_sweep_override()}
    if not swept & set(GROUP_KEYS):
        return overrides
    from omegaconf import OmegaConf

    def group_key(o: str) -> bool:
        key = o.split("=", 1)[0]
        return o[0] not in "+~" and "." in key and key.split(".", 1)[0] in GROUP_KEYS

    try:
        base = compose([o.input_line for o in parsed if not o.is_sweep_override() and not group_key(o.input_line)])
    except Exception:  # noqa: BLE001 - prevalidate reports it
        return overrides
    return ["++" + o if group_key(o) and OmegaConf.select(base, o.split("=", 1)[0], default=None) is None else o
            for o in overrides]


def prevalidate(overrides: list[str], multirun: bool) -> None:
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    from fgx.config import validate

    missing = missing_hydra_plugin(overrides)
    if missing:
        raise SystemExit(f"fgx: {missing}")
    overrides = overrides + dataset_algorithm(overrides, multirun)     # what `fgx run` adds (no-op when added)
    try:
        jobs = job_overrides(overrides, multirun)
    except MissingConfigException as e:
        raise SystemExit(f"fgx: config error: {e}".rstrip()) from None
    except HydraException:
        # a sweeper-specific syntax (e.g. optuna's interval()): the config without it is checked here,
        # each trial's values when it starts
        jobs = [[o for o in overrides if not o.lstrip("+~").startswith("hydra") and "(" not in o]]
    for job in jobs:
        try:
            cfg = compose(job)
        except MissingConfigException as e:
            raise SystemExit(f"fgx: config error: {_did_you_mean(str(e), job)}{e}".rstrip()) from None
        except (HydraException, OmegaConfBaseException, ValueError) as e:
            raise SystemExit(f"fgx: config error: {_did_you_mean(str(e), job)}{str(e).strip()} "
                             f"(overrides: {' '.join(job)})") from None
        try:
            validate(cfg)
        except ConfigError as e:
            where = f" (job: {' '.join(job)})" if multirun else ""
            if multirun and any(o.startswith(f"++{e.key}=") for o in job):
                where += (f". {e.key} is a key of some of the swept {e.key.split('.')[0]}s only: sweep those "
                          f"apart, or leave the key out")
            raise SystemExit(f"fgx: {e}{where}") from None


def _did_you_mean(message: str, job: list[str]) -> str:
    """For Hydra's 'Could not override X' (a mistyped key or group: Hydra's advice to prepend `+` is for
    adding keys) and 'Could not find group/option': the closest known names, as a line above Hydra's."""
    import difflib
    import re

    if m := re.search(r"Could not find '([\w./-]+)/([\w.-]+)'", message):
        group, name = m.groups()
        known = [f.stem for f in (conf_dir() / group).glob("*.yaml")]
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        return f"no {group} '{name}'; did you mean {' or '.join(repr(c) for c in close)}?\n" if close else ""
    m = re.search(r"Could not override '([\w.]+)'", message)
    if not m:
        return ""
    key = m.group(1)
    parent, _, leaf = key.rpartition(".")
    try:
        node = compose([o for o in job if not o.lstrip("+~").startswith(key)])
        for part in filter(None, parent.split(".")):
            node = node[part]
        known = list(node.keys()) + ([d.name for d in conf_dir().iterdir() if d.is_dir()] if not parent else [])
    except Exception:  # noqa: BLE001 - no suggestion beats a second error
        return ""
    close = difflib.get_close_matches(leaf, list(dict.fromkeys(str(k) for k in known)), n=3, cutoff=0.6)
    if not close:
        return f"no key '{key}' in the config\n"
    return f"no key '{key}' in the config; did you mean {' or '.join(repr(f'{parent}.{c}' if parent else c) for c in close)}?\n"


def check_output_location(overrides: list[str], multirun: bool) -> None:
    """Fail before any work when the run/sweep directory cannot be created or written (Hydra would
    otherwise stop with a traceback, or a job would fail after its training)."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    target = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key), "outputs")
    static = Path(target.split("${", 1)[0] or ".")
    probe = static if static.is_absolute() else Path.cwd() / static
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise SystemExit(f"fgx: output directory {target}: {probe} is not a directory")
    try:
        Path(tempfile.mkdtemp(dir=probe, prefix=".fgx_probe_")).rmdir()
    except OSError as e:
        raise SystemExit(f"fgx: output directory {target} is not writable ({probe}: {e.strerror or e})") from None


def run(argv: list[str]) -> int:
    """`fgx run ARGV`: one job, or a sweep with -m; the exit code (0 ok, 1 a job failed, 2 refused)."""
    import hydra
    from hydra.core.hydra_config import HydraConfig

    passthrough = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--resolve", "--package", "-p",
                   "--shell-completion", "-sc"}
    multirun = "-m" in argv or "--multirun" in argv
    FAILED_JOBS.clear()
    DIVERGED_JOBS.clear()
    overrides = _overrides_of(argv)
    forced = keys_of_swept_groups(overrides, multirun)
    if forced != overrides:
        argv = [forced[overrides.index(a)] if a in overrides else a for a in argv]
        overrides = forced
    if "--help" not in argv and "-h" not in argv:
        brought = dataset_algorithm(overrides, multirun)
        argv, overrides = argv + brought, overrides + brought
    shows = {"--cfg", "-c", "--info", "-i", "--shell-completion", "-sc"}.intersection(argv)
    if multirun and shows:
        raise SystemExit(_multirun_show_message(sorted(shows)[0], overrides))
    if not passthrough.intersection(argv):
        prevalidate(overrides, multirun)
        check_output_location(overrides, multirun)
    elif {"--cfg", "-c"}.intersection(argv):
        # print the config as Hydra does, then say whether `fgx run` would accept it
        try:
            compose(overrides)
        except Exception as e:  # noqa: BLE001 - Hydra/OmegaConf composition errors
            raise SystemExit(f"fgx: config error: {str(e).strip()}") from None
        sys.argv = ["fgx run"] + argv
        hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(lambda cfg: None)()
        try:
            prevalidate(overrides, multirun=False)
        except SystemExit as e:
            print(f"{e.code}\n(the config above would be refused by `fgx run`)", file=sys.stderr)
            return 2
        return 0

    from fgx import trainer

    # launchers such as joblib run jobs in other processes: failed jobs are also noted in a file
    fd, failed_file = tempfile.mkstemp(prefix="fgx_failed_jobs_", suffix=".txt")
    os.close(fd)
    os.environ["FGX_FAILED_JOBS_FILE"] = failed_file

    early: list[str] = []

    def job(cfg):
        hc = HydraConfig.get()
        summary = trainer.run(cfg, hc.runtime.output_dir, multirun=multirun)
        if summary.get("run_dir_removed"):
            early.append(summary.get("error", ""))
            return None
        if summary.get("status") != "completed":
            diverged = summary.get("status") == "diverged"
            (DIVERGED_JOBS if diverged else FAILED_JOBS).append(hc.runtime.output_dir)
            with open(os.environ.get("FGX_FAILED_JOBS_FILE", failed_file), "a") as f:
                f.write(("diverged " if diverged else "") + hc.runtime.output_dir + "\n")
            return None
        _print_summary(summary)
        return summary.get("best", {}).get("val") if summary.get("best") else None

    sys.argv = ["fgx run"] + argv
    try:
        hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(job)()
    finally:
        noted = Path(failed_file).read_text().splitlines() if Path(failed_file).exists() else []
        for line in noted:
            bucket = DIVERGED_JOBS if line.startswith("diverged ") else FAILED_JOBS
            d = line.removeprefix("diverged ")
            if d not in bucket:
                bucket.append(d)
        Path(failed_file).unlink(missing_ok=True)
    if early:
        kind, _, msg = early[0].partition(": ")
        msg = msg if kind == "ConfigError" else f"data error: {msg}" if kind == "DataError" else early[0]
        print(f"fgx: {msg}\n(stopped before the first round; no run directory was kept)", file=sys.stderr)
        return 2
    if DIVERGED_JOBS:
        # listed apart from failures: they ran, and their loss diverged (summary.json: diverged)
        print(f"fgx: {len(DIVERGED_JOBS)} job(s) diverged (status diverged, not results; fgx/divergence.py); "
              "see summary.json in: " + ", ".join(DIVERGED_JOBS), file=sys.stderr)
    if FAILED_JOBS:
        print(f"fgx: {len(FAILED_JOBS)} job(s) failed; see summary.json in: " + ", ".join(FAILED_JOBS),
              file=sys.stderr)
        return 1
    # a single run that diverged did not produce a result: non-zero; a sweep lists its diverged jobs apart
    return 1 if DIVERGED_JOBS and not multirun else 0


# options of `fgx run` (Hydra's) that take a value
_VALUE_OPTIONS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                  "--config-dir", "-cd", "--experimental-rerun", "--shell-completion", "-sc", "--info", "-i"}


def _overrides_of(argv: list[str]) -> list[str]:
    """The Hydra overrides of an `fgx run` command line (its options and their values left out)."""
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a.startswith("-"):
            # --info and --shell-completion take an optional value: only a word that is not an override
            skip = a in _VALUE_OPTIONS and "=" not in a and i + 1 < len(argv) and (
                a not in ("--info", "-i", "--shell-completion", "-sc") or "=" not in argv[i + 1])
            continue
        out.append(a)
    return out


def _multirun_show_message(option: str, overrides: list[str]) -> str:
    first = ""
    try:
        jobs = job_overrides(overrides, multirun=True)
        show = "--cfg job" if option in ("--cfg", "-c") else option
        first = f"; the sweep's first job (of {len(jobs)}): fgx run {show} {' '.join(jobs[0])}"
    except Exception:  # noqa: BLE001 - only a hint; the message stands without it
        pass
    return (f"fgx: {option} shows one job and cannot be combined with -m/--multirun (Hydra runs one or the other). "
            f"Drop -m and give one value per swept key{first}")


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 100)
    algo = summary["components"]["algorithm"]
    preset = (summary.get("presets") or {}).get("algorithm")
    unl = summary.get("unlearning") or {}
    t = Table(title=f"fgx: {preset + f' ({algo})' if preset else algo} on {summary['data']['name']} "
                    f"({summary['data']['source']} data), test split, mean over clients"
                    + (", before unlearning" if unl else ""))
    n = (summary.get("partition") or {}).get("num_clients")
    skipped = summary.get("final_clients_skipped") or {}
    t.add_column("metric")
    t.add_column("mean over clients", justify="right")
    t.add_column("pooled", justify="right")    # every client's test items as one set
    if skipped:
        t.add_column("clients", justify="right")
    for k, val in summary["final"].items():
        if k.startswith("num_"):       # counts kept for bookkeeping (users evaluated per client), not metrics
            continue
        g = (summary.get("final_pooled") or {}).get(k)
        mark = " *" if k == summary["main_metric"] else ""
        row = [k + mark, "-" if val is None else f"{val:.4f}", "-" if g is None else f"{g:.4f}"]
        t.add_row(*row, *([f"{n - skipped[k]} of {n}" if k in skipped and n else str(n)] if skipped else []))
    console.print(t)
    from fgx.report.reading import describe

    if (reading := describe(summary)) is not None:      # the score beside what it means (fgx/reference.py)
        console.print(reading, highlight=False)
    if skipped:
        console.print("clients: the mean leaves out clients whose value is undefined (a test split of one class "
                      "for macro F1 and ROC-AUC, none of the minority class for its F1, or no test item)")
    if "final_test_accuracy" in unl:
        console.print(f"unlearning ({unl.get('method')}): {unl.get('requests')} {unl.get('type')} request(s); "
                      f"test accuracy {unl['initial_test_accuracy']:.4f} before, {unl['final_test_accuracy']:.4f} "
                      f"after (unlearning.json)")
    priv = summary.get("privacy") or {}
    if priv.get("mechanism") not in (None, "none"):
        console.print("privacy: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                              for k, v in priv.items()))
    console.print(f"wall time {summary['wall_time_s']:.1f}s, peak RSS {summary['peak_rss_mb']:.0f} MB, "
                  f"{summary['total_bytes'] / 1e6:.2f} MB communicated")
    console.print(f"run directory: {summary['run_dir']}")
