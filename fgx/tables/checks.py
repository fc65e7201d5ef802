"""The checks of a table and its computed status.

A table's status is never typed: it is computed here from a record (or run directories) and the
targets. Checks: paper values within a tolerance; orderings, each tested on paired seeds and the test
items (fgx/tables/stats.py) and adjusted together by Holm's step-down: holds, fails or inconclusive;
equalities (two rows within a tolerance on every paired seed: one computation done two ways); a floor
over the trivial predictor; equal effort (every method given its values the same way); rows that differ
in outcome; and, shown, whether the methods were still improving at the end of the protocol.
"reproduced" needs at least one paper value, ordering or equality that holds; a row the record lacks is
"not run"; a row whose every recorded seed diverged (fgx/divergence.py) is "diverged": it ran, and its
numbers are no result. Diverged runs are in no mean and no paired test; a row where only some seeds
diverged is compared on its completed seeds, and a note says how many diverged.
"""
from __future__ import annotations

import json
import statistics

import numpy as np
from dataclasses import dataclass, field
from pathlib import Path

from fgx.tables.stats import SIGN_TEST, TEST_NAME, Paired, SeedTerm, adjust, divergence_outcome, paired_outcome

_OUTCOME_OF = {True: "holds", False: "fails", None: "shown"}
# what a check is of: a paper's number (accounting tables' checks too), an ordering, an equality of two rows
# on every seed (the same computation done two ways), the floor over the trivial predictor, equal effort,
# rows that differ in outcome
KINDS = ("paper", "ordering", "equal", "floor", "effort", "rows")
CLAIMS = ("paper", "ordering", "equal")     # the kinds that test a claim: "reproduced" needs one of them


@dataclass
class Check:
    what: str
    paper: str
    fgx: str
    ok: bool | None          # True: holds; False: fails; None: shown only, inconclusive or not run (see outcome)
    outcome: str = ""        # holds | fails | inconclusive | diverged | not run | shown
    kind: str = "paper"
    test: Paired | None = field(default=None, repr=False, compare=False)   # an ordering's test

    def __post_init__(self):
        if not self.outcome:
            self.outcome = _OUTCOME_OF[self.ok]

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "test"}


@dataclass
class ReproResult:
    name: str
    targets: dict
    table_markdown: str
    checks: list[Check] = field(default_factory=list)
    problems: str = ""
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)      # what changed since the record: configs, code, targets
    record: dict | None = None
    extra: dict = field(default_factory=dict)          # the table as JSON rows, the metric compared
    notes: list[str] = field(default_factory=list)     # e.g. methods still improving at the end

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.checks)

    @property
    def verdict(self) -> str:
        decided = [c for c in self.checks if c.outcome != "shown"]
        if not decided:
            return "no checks"
        if all(c.outcome == "holds" for c in decided):
            return "all checks hold"
        parts = [f"{self.count('holds')}/{len(decided)} checks hold"]
        parts += [f"{self.count(o)} {o}" for o in ("fails", "diverged", "inconclusive", "not run") if self.count(o)]
        return ", ".join(parts)

    @property
    def status(self) -> str:
        """Computed, never typed: reproduced only when every check holds on a record that is current and
        at least one of them tested a paper value, an ordering or an equality of rows (floors and effort
        alone: runs as expected); refused when two rows came out equal in every number."""
        if self.record is None:
            return "not yet run"
        if self.stale:
            return "stale"
        decided = [c for c in self.checks if c.outcome != "shown"]
        if not decided:
            return "shown only"
        outcomes = {c.outcome for c in decided}
        if any(c.kind == "rows" and c.outcome == "fails" for c in decided):
            return "refused"
        if "fails" in outcomes:
            return "not reproduced"
        if "diverged" in outcomes:
            return "diverged"
        if "not run" in outcomes:
            return "incomplete"
        if "inconclusive" in outcomes:
            return "inconclusive"
        if any(c.kind in CLAIMS for c in decided):
            return "reproduced"
        return "runs as expected"


STATUSES = ("reproduced", "runs as expected", "inconclusive", "incomplete", "not reproduced", "diverged", "refused", "stale",
            "not yet run", "shown only")


def _group_means(rep, metric: str) -> list[tuple[dict, float, float, int]]:
    out = []
    for _, row in rep.table.iterrows():
        out.append(({b: str(row[b]) for b in rep.by}, float(row[f"{metric}_mean"]),
                    float(row[f"{metric}_std"]), int(row["n"])))
    return out


def _canon(v) -> str:
    """A config value as the checks compare it: numbers by value (a target's `1e-5` is the run's `1e-05`)."""
    try:
        return repr(float(v))
    except (TypeError, ValueError):
        return str(v)


def _seed_values(rep, metric: str) -> dict[tuple, dict[str, float]]:
    """Per group (its by-values), the metric of each seed: what a paired comparison pairs."""
    from fgx.report.runs import frame

    df = frame(rep.runs, rep.by)
    out: dict[tuple, dict[str, float]] = {}
    if df.empty or metric not in df.columns:
        return out
    for _, row in df.iterrows():
        key = tuple(str(row[b]) for b in rep.by)
        out.setdefault(key, {})[str(row["seed"])] = float(row[metric])
    return out


def base_metric(metric: str) -> str:
    """The metric a reported column is computed from (`best_client_accuracy` -> `accuracy`)."""
    for prefix in ("best_client_", "best_"):
        if metric.startswith(prefix):
            return metric[len(prefix):]
    return metric


def _state_metric(summary: dict, metric: str) -> tuple[str, str] | None:
    """The model state and metric a reported column is read from (``best_client_accuracy``: the
    best_client state's accuracy), when the run reports it as a test metric; None for other columns
    (unlearning costs, bytes)."""
    for prefix, state in (("best_client_", "best_client"), ("best_", "best"), ("", "final")):
        if metric.startswith(prefix):
            base = metric[len(prefix):]
            node = summary.get(state) if state == "final" else (summary.get(state) or {}).get("test")
            if isinstance(node, dict) and base in node:
                return state, base
    if metric in ((summary.get("threat") or {}).get("sampling") or {}):
        return "threat", metric     # an attack's rate on its own test items (a backdoor's asr), with replicates
    return None


def _kept(summary: dict, state: str, base: str) -> tuple[dict | None, str | None]:
    """A run's replicates of ``base`` on ``state`` and the key of the items they resample: a model state's
    from ``sampling``, an attack's from ``threat.sampling`` (fgx/threats/backdoor.py)."""
    if state == "threat":
        node = (summary.get("threat") or {}).get("sampling") or {}
        return node.get(base), node.get("split")
    return ((summary.get("sampling") or {}).get(state) or {}).get(base), \
        ((summary.get("sampling") or {}).get("split") or {}).get(state)


def seed_terms(rep, ga: dict, gb: dict, metric: str) -> dict[str, SeedTerm | None]:
    """Per seed both groups ran, the evaluation-data term of their difference (fgx/tables/stats.py): the
    difference of their test-item replicates where both runs kept them on the same items, else the bound
    se_a + se_b from their standard errors, else None (no term)."""
    from fgx.metrics import decode_replicates
    from fgx.report.runs import group_label

    runs: dict[tuple, dict] = {}
    for r in rep.runs:
        if r.status == "completed":
            runs[(tuple(str(x) for x in group_label(r, rep.by)), str(r.seed))] = r.summary
    ka, kb = (tuple(str(g[b]) for b in rep.by) for g in (ga, gb))
    out = {}
    for (key, seed), sa in runs.items():
        if key != ka or (kb, seed) not in runs:
            continue
        sb = runs[(kb, seed)]
        where = _state_metric(sa, metric)
        if where is None or _state_metric(sb, metric) != where:
            out[seed] = None
            continue
        state, base = where
        kept, splits = zip(*(_kept(s, state, base) for s in (sa, sb)))
        if all(isinstance(k, dict) for k in kept):
            ra, rb = (decode_replicates(k) for k in kept)
            if ra.size == rb.size and splits[0] == splits[1]:
                out[seed] = SeedTerm(ra - rb, splits[0])
            else:       # not the same items: the two runs' draws are not paired
                out[seed] = SeedTerm(bound=float(np.nanstd(ra, ddof=1) + np.nanstd(rb, ddof=1)))
            continue
        ses = [(s.get("sampling_se") or {}).get(base) for s in (sa, sb)]
        ok = all(isinstance(x, (int, float)) and x == x for x in ses)
        out[seed] = SeedTerm(bound=float(ses[0] + ses[1])) if ok else None
    return out


def compare(rep, t: dict, metric: str) -> list[Check]:
    """Paper values (within a tolerance) and orderings (each tested on paired seeds and test items, then
    adjusted together by Holm's step-down: the table's family-wise error at 5 %)."""
    groups = _group_means(rep, metric)
    checks = []
    for row in t.get("rows") or []:
        where = {k: str(v) for k, v in row["where"].items()}
        hit = [g for g in groups if all(_canon(g[0].get(k)) == _canon(v) for k, v in where.items())]
        label = ", ".join(f"{k}={v}" for k, v in where.items())
        paper = row.get("paper")
        paper_s = "-" if paper is None else f"{paper:.4f}" if isinstance(paper, (int, float)) else str(paper)
        if not hit:
            checks.append(_absent(rep, f"{metric} of {label}", paper_s, [label], [where], "paper"))
            continue
        _, mean, std, n = hit[0]
        tol = row.get("tolerance")
        ok = None if tol is None or paper is None else abs(mean - float(paper)) <= float(tol)
        std_s = f" ± {std:.4f}" if n > 1 and std == std else ""
        what = f"{metric} of {label}" + (f" (|Δ| ≤ {tol})" if tol is not None else "")
        checks.append(Check(what, paper_s, f"{mean:.4f}{std_s}", ok))
    checks += [c for e in t.get("equal") or [] for c in equality_checks(rep, e, metric)]
    orderings = [c for o in t.get("ordering") or [] for c in ordering_checks(rep, o, o.get("metric", metric))]
    adjust([c.test for c in orderings if c.test is not None])
    for c in orderings:
        if c.test is not None:
            c.outcome, c.fgx = c.test.outcome, c.test.describe()
            c.ok = {"holds": True, "fails": False}.get(c.outcome)
    return checks + orderings


def ordering_checks(rep, o: dict, metric: str) -> list[Check]:
    """One check per adjacent pair of ``o['order']`` (a ≥ b, b ≥ c, ...), each tested on the seeds both
    ran and their test items (fgx/tables/stats.py), not yet adjusted (``compare`` adjusts a table's
    orderings together). A row the record lacks is "not run". ``o['rows']`` (row selectors, e.g.
    ``{threat: sign_flip, aggregator: median}``) in place of ``key``/``order``/``where`` compares rows that
    differ in several keys; ``o['margin']`` m tests a ≥ b − m (non-inferiority: a's values shifted by m,
    the same paired test of the shifted gap)."""
    lower = bool(o.get("lower_is_better", False))
    margin = float(o.get("margin", 0.0))
    sign = " ≤ " if lower else " ≥ "
    if "rows" in o:
        selectors = [{k: str(v) for k, v in sel.items()} for sel in o["rows"]]
        labels = ["(" + ", ".join(f"{k}={v}" for k, v in sel.items()) + ")" for sel in selectors]
        scope, title = "", "ordering of rows"
    else:
        key, order = o["key"], [str(x) for x in o["order"]]
        where = {k: str(v) for k, v in (o.get("where") or {}).items()}
        selectors, labels = [{**where, key: x} for x in order], order
        scope = f" where {', '.join(f'{k}={v}' for k, v in where.items())}" if where else ""
        title = f"ordering of {metric} by {key}"
    chosen = _chosen_rows(rep, selectors, metric)
    # a row the record lacks is "not run"; a row that diverged on every seed is compared by its divergence
    # (fgx/tables/stats.py divergence_outcome) with rows that completed, and "diverged" beside another such row
    gone = {i: diverged_seed_set(rep, selectors[i]) for i in range(len(selectors)) if i not in chosen}
    if not chosen or not all(gone.values()):
        return [_absent(rep, f"{title}{scope}", sign.join(labels), labels, selectors, "ordering", chosen)]
    shift = margin if not lower else -margin
    slack = "" if not margin else (f" − {margin:g}" if not lower else f" + {margin:g}")
    out = []
    for i in range(len(selectors) - 1):
        a, b = labels[i], labels[i + 1]
        claim = f"{a}{sign}{b}{slack}"
        if i in gone and i + 1 in gone:
            out.append(_absent(rep, f"{metric}: {claim}{scope}", claim, [a, b], selectors[i:i + 2], "ordering"))
            continue
        if i in gone or i + 1 in gone:
            ran = [set(chosen[j][1]) if j in chosen else set() for j in (i, i + 1)]
            div = [gone.get(j, set()) | (diverged_seed_set(rep, selectors[j]) if j in chosen else set())
                   for j in (i, i + 1)]
            p = divergence_outcome(ran[0], div[0], ran[1], div[1], a, b)
            out.append(Check(f"{metric}: {claim}{scope}", claim, p.describe(), {"holds": True, "fails": False}.get(
                p.outcome), p.outcome, kind="ordering", test=p))
            continue
        (ga, va), (gb, vb) = chosen[i], chosen[i + 1]
        p = paired_outcome({s: v + shift for s, v in va.items()}, vb, lower_is_better=lower,
                           items=seed_terms(rep, ga, gb, metric))
        ok = {"holds": True, "fails": False}.get(p.outcome)
        out.append(Check(f"{metric}: {claim}{scope}", claim, p.describe(), ok, p.outcome, kind="ordering", test=p))
    return out


def _diverged_runs(rep, sel: dict[str, str] | None = None):
    """(group key, run) of each diverged run of the report whose group ``sel`` matches (every one without it)."""
    from fgx.report.runs import group_label

    for r in rep.problems:
        if r.status != "diverged":
            continue
        key = tuple(str(x) for x in group_label(r, rep.by))
        g = dict(zip(rep.by, key))
        if sel is None or all(k in g and _canon(g[k]) == _canon(v) for k, v in sel.items()):
            yield key, r


def diverged_seeds(rep, sel: dict[str, str] | None = None) -> dict[tuple, int]:
    """Per group of the report (its by-values) with diverged runs, how many; only the groups that
    ``sel`` matches when given."""
    out: dict[tuple, int] = {}
    for key, _ in _diverged_runs(rep, sel):
        out[key] = out.get(key, 0) + 1
    return out


def diverged_seed_set(rep, sel: dict[str, str]) -> set[str]:
    """The seeds of the runs matching ``sel`` that diverged."""
    return {str(r.seed) for _, r in _diverged_runs(rep, sel)}


def _absent(rep, what: str, claim: str, labels: list[str], selectors: list[dict], kind: str,
            chosen: dict | None = None, suffix: str = "") -> Check:
    """The check of rows the table has no completed run of: "diverged" where such a row's runs all
    diverged (they ran; their numbers are no result), else "not run" (the record lacks the row)."""
    absent = [i for i in range(len(selectors)) if i not in (chosen or {})]
    div = {labels[i]: sum(diverged_seeds(rep, selectors[i]).values()) for i in absent}
    gone = [f"{lab} ({n} seed(s), every one)" for lab, n in div.items() if n]
    if gone:
        return Check(what, claim, f"diverged: {', '.join(gone)}{suffix}", None, "diverged", kind=kind)
    text = "no completed run" if kind == "paper" else f"not run: {[labels[i] for i in absent]}{suffix}"
    return Check(what, claim, text, None, "not run", kind=kind)


def _chosen_rows(rep, selectors: list[dict[str, str]], metric: str) -> dict[int, tuple[dict, dict]]:
    """Per selector (its index), the first group of the table it matches and that group's ``metric`` per seed;
    a selector no group matches is left out."""
    per_seed = _seed_values(rep, metric)
    groups = [{b: str(row[b]) for b in rep.by} for _, row in rep.table.iterrows()]
    chosen: dict[int, tuple[dict, dict]] = {}
    for i, sel in enumerate(selectors):
        for g in groups:
            if all(k in g and _canon(g[k]) == _canon(v) for k, v in sel.items()):
                chosen[i] = (g, per_seed.get(tuple(str(g[b]) for b in rep.by), {}))
                break
    return chosen


def equality_checks(rep, e: dict, metric: str) -> list[Check]:
    """Row a equals row b on every seed both ran, in each of ``e['metrics']`` (default: the table's
    ``metric``), within ``e['tolerance']`` (absolute): a claim of exactness or of a stated precision (the
    same computation done another way: secure aggregation's sum against the plain average), decided seed
    by seed and not by a test of means, since one seed off by more than the tolerance breaks it. Rows are
    ``e['pair']`` (two values of ``e['key']``, within ``e['where']``) or ``e['rows']`` (two selectors, as an
    ordering's). holds: every paired seed within the tolerance; fails: the largest gap, its metric and seed
    (a metric undefined, NaN, in either row on a seed fails: it cannot be shown equal); not run: a row the
    record lacks, or no seed both ran."""
    tol = float(e["tolerance"])
    metrics = list(e.get("metrics") or [metric])
    if "rows" in e:
        selectors = [{k: str(v) for k, v in sel.items()} for sel in e["rows"]]
        labels = ["(" + ", ".join(f"{k}={v}" for k, v in sel.items()) + ")" for sel in selectors]
        scope = ""
    else:
        where = {k: str(v) for k, v in (e.get("where") or {}).items()}
        selectors, labels = [{**where, e["key"]: str(x)} for x in e["pair"]], [str(x) for x in e["pair"]]
        scope = f" where {', '.join(f'{k}={v}' for k, v in where.items())}" if where else ""
    if len(selectors) != 2:
        raise ValueError(f"an equality compares two rows, not {len(selectors)}: {labels}")
    claim = f"{labels[0]} = {labels[1]} ± {tol:g}"
    what = f"{', '.join(metrics)}: {claim}{scope}"
    gaps: dict[str, dict[str, float]] = {}
    for m in metrics:
        chosen = _chosen_rows(rep, selectors, m)
        missing = [labels[i] for i in range(2) if i not in chosen]
        if missing:
            return [_absent(rep, what, claim, labels, selectors, "equal", chosen, f" ({m})")]
        (_, va), (_, vb) = chosen[0], chosen[1]
        shared = sorted(set(va) & set(vb), key=lambda s: (len(s), s))
        if not shared:
            return [Check(what, claim, f"not run: no seed both rows ran ({m})", None, "not run", kind="equal")]
        gaps[m] = {s: abs(va[s] - vb[s]) for s in shared}     # NaN (undefined on a side) breaks it
    worst_m, worst_s = max(((m, s) for m in gaps for s in gaps[m]), key=lambda ms: _nan_last(gaps[ms[0]][ms[1]]))
    worst = gaps[worst_m][worst_s]
    n = len(next(iter(gaps.values())))
    per_metric = ", ".join(f"{m} {max(g.values(), key=_nan_last):.2g}" for m, g in gaps.items())
    ok = worst <= tol          # a NaN, undefined in either row, is never within the tolerance
    # no "|" in the text: it is a cell of a markdown table
    fgx = f"largest gap over {n} paired seed(s): {per_metric}" + ("" if ok else f" (seed {worst_s}, {worst_m})")
    return [Check(what, claim, fgx, ok, kind="equal")]


def _nan_last(x: float) -> float:
    """A gap as ``max`` should rank it: NaN (a metric one row lacks) above every number."""
    return float("inf") if x != x else x


def _with_main(t: dict, main: str) -> dict:
    t = dict(t)
    if isinstance(t.get("metric"), str):
        t["metric"] = t["metric"].replace("{main}", main)
    t["ordering"] = [{**o, "metric": o["metric"].replace("{main}", main)} if o.get("metric") else o
                     for o in t.get("ordering") or []]
    return t


def floor_checks(rep, runs: list, metric: str, margin: float) -> list[Check]:
    """Every group must clear the trivial predictor by ``margin``: for accuracy the test split's
    majority-class rate (summary data.test_majority_rate), for ROC-AUC 0.5."""
    import statistics

    from fgx.report.runs import group_label

    groups = _group_means(rep, metric)
    key = lambda g: tuple(g[b] for b in rep.by)
    if "roc_auc" in metric:
        trivial = {key(g): 0.5 for g, *_ in groups}
        label = "ROC-AUC 0.5"
    elif "accuracy" in metric:
        rates: dict[tuple, list[float]] = {}
        for r in runs:
            v = (r.summary.get("data") or {}).get("test_majority_rate")
            if r.status == "completed" and isinstance(v, (int, float)):
                rates.setdefault(tuple(str(x) for x in group_label(r, rep.by)), []).append(float(v))
        trivial = {k: statistics.mean(v) for k, v in rates.items()}
        label = "the majority-class rate"
    else:
        return []
    out = []
    for g, mean, _, _ in groups:
        if key(g) not in trivial:
            continue
        floor = trivial[key(g)] + margin
        what = f"{', '.join(f'{k}={v}' for k, v in g.items())}: {metric} ≥ {label} + {margin:g}"
        out.append(Check(what, f"≥ {floor:.4f}", f"{mean:.4f}", mean >= floor, kind="floor"))
    done = {key(g) for g, *_ in groups}
    for k, n in diverged_seeds(rep).items():        # a row with no completed run does not clear any floor
        if k not in done:
            what = f"{', '.join(f'{b}={v}' for b, v in zip(rep.by, k))}: {metric} ≥ {label} + {margin:g}"
            out.append(Check(what, "-", f"diverged: {n} seed(s), every one", None, "diverged", kind="floor"))
    return out



# the optimisation values rows must share under `table.effort: shared` (when two or more rows have them)
SHARED_KEYS = ("rounds", "algorithm.lr", "algorithm.weight_decay", "algorithm.optimizer", "algorithm.local_steps",
               "algorithm.local_epochs", "algorithm.batch_size", "model")
EFFORTS = ("tuned", "shared", "authors")


def _tuned_values_unused(conf: Path, source: str, method: str, key: str, record: dict) -> list[str]:
    """The runs of one row whose recorded config lacks a value of the row's tuned file (a record made
    before the tuning, or a preset that does not load the file)."""
    from omegaconf import OmegaConf

    from fgx.loggers import flatten
    from fgx.tables.tune import same_value, tuned_path

    want = flatten(OmegaConf.to_container(OmegaConf.load(tuned_path(conf, source, method))) or {})
    configs = record.get("configs") or {}
    out = []
    for e in record.get("runs", []):
        if e.get("overrides", {}).get(key) != method:
            continue
        have = flatten(configs.get(e.get("config_sha")) or {})
        bad = [k for k, v in want.items() if not same_value(have.get(k), v)]
        if bad:
            out.append(f"{method} seed {e['overrides'].get('seed', '?')} ({bad[0]}: {have.get(bad[0])} ≠ {want[bad[0]]})")
    return out


def tuning_open_edges(entry: dict, tune: dict | None = None) -> list[str]:
    """The keys a tune record's row chose at an open edge of its grid: as `fgx tune` recorded them
    (``open_edges``), or, for a record made before it grew grids, found from its grid and choice."""
    from fgx.tables.tune import Grid, open_edges

    if "open_edges" in entry:
        return list(entry["open_edges"])
    grid = entry.get("grid") or {}
    return open_edges(Grid(list(grid), list(grid.values()), ""), entry.get("chosen") or {}, (tune or {}).get("bounds"))


def row_key(sweep: dict) -> str | None:
    """The key whose values are a table's rows (methods): `method`, else a swept `algorithm`."""
    return "method" if "method" in sweep else "algorithm" if "algorithm" in sweep else None


def effort_check(conf: Path, name: str, record: dict, t: dict, tune: dict, sweep: dict,
                 tuned_from: str | None = None) -> Check | None:
    """Equal effort (see _effort_check), a check of kind ``effort``."""
    c = _effort_check(conf, name, record, t, tune, sweep, tuned_from)
    if c is not None:
        c.kind = "effort"
    return c


def _effort_check(conf: Path, name: str, record: dict, t: dict, tune: dict, sweep: dict,
                  tuned_from: str | None = None) -> Check | None:
    """Equal effort, strictly: the rows of one comparison were given their values the same way, as the
    targets declare in ``effort`` (``tune``: the preset's ``table.tune``) and the files show:

    - ``tuned``: every row has a `fgx tune` file (conf/tuned/NAME/) from the same number of trials, and
      each grid holds every `table.tune.hinge` key the row's config has (the knob the comparison hinges
      on: a BPR temperature, FedProx's mu); every run of a row used its tuned values; choices at a grid
      edge are named. With ``tuned_from`` (another configuration of the same data: `table.tuned_from`
      and the preset's ``override /tuned@_global_``) the files and trials are that table's;
    - ``shared``: ablations of one method; every row runs the same optimisation values (checked here);
    - ``authors``: ``sources`` names, for every row, where its values come from, none "defaults".

    No declaration, some rows tuned and others not, unequal budgets, a missing source: fails. None for a
    table without several rows to compare (a parameter sweep of one method)."""
    key = row_key(sweep)
    rows = sorted({e["overrides"][key] for e in record.get("runs", []) if key and key in e.get("overrides", {})})
    if len(rows) < 2:
        return None
    from fgx.tables.records import results_dir
    from fgx.tables.tune import tuned_path

    what, paper = "equal effort", "every row given its values the same way"
    effort = t.get("effort")
    source = tuned_from or name
    tuned_files = [m for m in rows if key == "method" and tuned_path(conf, source, m).exists()]
    own = [m for m in rows if tuned_from and tuned_path(conf, name, m).exists()]
    if own:
        return Check(what, paper, f"runs the values tuned for {tuned_from}, but conf/tuned/{name}/ also has files "
                     f"for {', '.join(own)}, which it does not read", False)
    if effort not in EFFORTS:
        return Check(what, paper, f"effort (targets) is {effort!r}, not one of {list(EFFORTS)}"
                     + (f"; tuned: {', '.join(tuned_files)}" if tuned_files else ""), False)
    if effort == "tuned":
        tune_file = results_dir(conf) / f"{source}.tune.json"
        tuned = json.loads(tune_file.read_text()).get("methods", {}) if tune_file.exists() else {}
        left = [m for m in rows if m not in tuned_files or m not in tuned]
        if key != "method" or left:
            return Check(what, paper, f"declared tuned; not tuned by `fgx tune {source}`: {', '.join(left or rows)}",
                         False)
        # the budget is the base grid every row starts from (a grid grown past an open edge adds points)
        trials = {m: tuned[m].get("base_points", len(tuned[m].get("trials", []))) for m in rows}
        if len(set(trials.values())) > 1:
            return Check(what, paper, f"unequal tuning budgets (trials: {trials})", False)
        hinge = list((tune or {}).get("hinge") or [])
        lacking = []
        if hinge:
            configs = record.get("configs") or {}
            row_config = {e["overrides"][key]: configs.get(e.get("config_sha")) or {}
                          for e in record.get("runs", []) if key in e.get("overrides", {})}
            for m in rows:
                h = tuned[m].get("hinge")
                if h is None:
                    lacking.append(f"{m}: tuned before hinge keys were recorded")
                    continue
                lacking += [f"{m}: {k}" for k, in_grid in h.items() if not in_grid]
                # a knob the preset requires now, which the row has, but its tuning never judged
                lacking += [f"{m}: {k}" for k in hinge if k not in h and any(
                    _select(row_config.get(m, {}), alt.strip()) is not None for alt in k.split("|"))]
        if lacking:
            return Check(what, paper, f"the grid leaves out the knob the comparison hinges on ({'; '.join(lacking)})",
                         False)
        unused = [u for m in rows for u in _tuned_values_unused(conf, source, m, key, record)]
        if unused:
            return Check(what, paper, "runs without their row's tuned values: " + "; ".join(unused[:4])
                         + (f" (and {len(unused) - 4} more)" if len(unused) > 4 else ""), False)
        edges = [f"{m} {k}" for m in rows for k in tuning_open_edges(tuned[m], tune)]
        one_seed = sorted(m for m in rows if len(tuned[m].get("seeds") or [0]) < 2)
        how = (f"every row tuned by `fgx tune {source}` ({next(iter(trials.values()))} trials each"
               + (f", on validation of {source}, applied to this configuration alike" if tuned_from else "")
               + (f"; hinge keys {hinge}" if hinge else "") + ")")
        if edges or one_seed:
            return Check(what, paper, how + (f"; chosen at an open grid edge (the optimum may lie outside; "
                                             f"`fgx tune {source}` grows the grid): {', '.join(edges)}" if edges else "")
                         + (f"; tuned on one seed: {', '.join(one_seed)}" if one_seed else ""), False)
        return Check(what, paper, how, True)
    if tuned_files:
        return Check(what, paper, f"declared {effort}, but tuned files exist for {', '.join(tuned_files)}", False)
    if effort == "authors":
        sources = t.get("sources") or {}
        bad = [m for m in rows if not str(sources.get(m) or "").strip() or "default" in str(sources.get(m)).lower()]
        if bad:
            return Check(what, paper, f"no authors' source for {', '.join(bad)} (sources in the targets)", False)
        return Check(what, paper, "the authors' values for every row: " +
                     "; ".join(f"{m}: {sources[m]}" for m in rows), True)
    # shared: every row resolves to the same optimisation values
    configs = record.get("configs") or {}
    by_row: dict[str, dict] = {}
    for e in record.get("runs", []):
        c = configs.get(e.get("config_sha"))
        if key in e.get("overrides", {}) and isinstance(c, dict):
            by_row.setdefault(e["overrides"][key], c)
    differ = []
    for k in SHARED_KEYS:
        vals = {m: _select(c, k) for m, c in by_row.items()}
        present = {m: v for m, v in vals.items() if v is not None}
        if len(present) > 1 and len({json.dumps(v, sort_keys=True, default=str) for v in present.values()}) > 1:
            differ.append(k)
    if differ or len(by_row) < len(rows):
        return Check(what, paper, f"declared shared, but rows differ in {differ}" if differ else
                     "declared shared; some rows' configs are missing from the record", False)
    return Check(what, paper, f"one method's ablations on the same values ({', '.join(SHARED_KEYS)})", True)


def _select(cfg: dict, dotted: str):
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def progress_notes(record: dict, sweep: dict, threshold: float = 0.005) -> list[str]:
    """Rows whose validation score still improved by more than ``threshold`` (mean over seeds) in the last
    10 % of rounds: under-trained at the table's protocol. Shown with every table."""
    key = row_key(sweep) or "table"
    gains: dict[str, list[float]] = {}
    for e in record.get("runs", []):
        if (e.get("summary") or {}).get("status", "completed") != "completed":
            continue        # a diverged run's validation curve says nothing of under-training
        g = (e.get("progress") or {}).get("gain_last_10pct")
        if isinstance(g, (int, float)):
            gains.setdefault(e.get("overrides", {}).get(key, "-"), []).append(float(g))
    climbing = {m: statistics.mean(v) for m, v in gains.items() if statistics.mean(v) > threshold}
    out = []
    if gains:
        out.append("Validation gain in the last 10 % of rounds (mean over seeds): " +
                   ", ".join(f"{m} {statistics.mean(v):+.4f}" for m, v in sorted(gains.items())) + ".")
    if climbing:
        out.append(f"Still improving at the end (gain > {threshold:g}): {', '.join(sorted(climbing))}; "
                   f"these rows are under-trained at this protocol.")
    return out


def equal_rows_checks(record: dict, sweep: dict) -> list[Check]:
    """Rows whose every evaluated number equals another row's on every seed both ran (at least two):
    the row's mechanism never made it differ (GCFL whose split condition never held is FedAvg), so the
    row is that other method relabelled, whatever its config says. Refused like two rows that resolve
    to one config (a failing check of kind ``rows``: the table reads "refused")."""
    key = row_key(sweep)
    if key is None:
        return []
    runs: dict[str, dict[str, str]] = {}
    for e in record.get("runs", []):
        s, o = e.get("summary") or {}, e.get("overrides") or {}
        if key in o:
            runs.setdefault(str(o[key]), {})[str(o.get("seed"))] = json.dumps(
                [s.get("final"), s.get("best"), s.get("best_client")], sort_keys=True)
    rows, out = sorted(runs), []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            shared = set(runs[a]) & set(runs[b])
            if len(shared) >= 2 and all(runs[a][s] == runs[b][s] for s in shared):
                out.append(Check(f"rows differ: {key}={a}, {key}={b}", "rows that can differ",
                                 f"equal in every number on all {len(shared)} shared seeds: its mechanism never "
                                 f"acted in this protocol, so {a} is {b} relabelled; change the preset so it can "
                                 f"act, or drop the row", False, kind="rows"))
    return out


def _partly_diverged(rep) -> list[str]:
    """A note naming the rows where some seeds diverged and others completed: their means and paired
    tests use the completed seeds only, which flatters them."""
    done = {tuple(str(x) for x in row[rep.by]): int(row["n"]) for _, row in rep.table.iterrows()}
    part = [(k, n) for k, n in diverged_seeds(rep).items() if k in done]
    if not part:
        return []
    rows = "; ".join(f"{', '.join(f'{b}={v}' for b, v in zip(rep.by, k))}: {n} of {n + done[k]}" for k, n in part)
    return [f"Seeds that diverged in rows that also completed (not in their means, not paired; a row's mean over "
            f"the seeds that completed flatters it): {rows}."]


def table_from_runs(name: str, t: dict, runs: list) -> ReproResult:
    """The table (mean ± std per group) and the checks of ``t`` over ``runs`` (run directories or a
    record's runs). ``{main}`` in a metric name stands for the runs' main metric."""
    from fgx.report.table import build_report, default_metric, problems_text, render

    main = default_metric(runs) if any(r.status == "completed" for r in runs) else "?"
    t = _with_main(t, main)
    metric = t.get("metric")
    extra = [o["metric"] for o in t.get("ordering") or [] if o.get("metric") and o["metric"] != metric]
    extra += [m for e in t.get("equal") or [] for m in e.get("metrics") or [] if m != metric]
    extra += [c for c in t.get("columns") or [] if c != metric]     # shown only (threat_graph: asr_clean)
    metrics = ([metric] if metric else []) + list(dict.fromkeys(extra))
    rep = build_report(runs, by=t.get("by"), metrics=metrics or None)
    metric = metric or rep.metrics[0] if rep.metrics else metric
    # with no completed run the checks still run: each says its rows diverged or were not run
    checks = compare(rep, t, metric) if metric else []
    if t.get("floor") is not None and metric:
        checks += floor_checks(rep, runs, metric, float(t["floor"]))
    res = ReproResult(name, t, render(rep, "markdown"), checks, problems_text(rep))
    res.notes += _partly_diverged(rep)
    res.extra = {"table": json.loads(rep.table.to_json(orient="records")), "metric": metric}
    if t.get("ordering"):
        res.notes.append(f"Orderings: {TEST_NAME} (docs/tables.md). Seeds are paired (same partition, split and "
                         f"initialisation), and so are the test items: each run keeps bootstrap replicates "
                         f"drawn alike over its test items' ids. holds/fails: Holm-adjusted p < 0.05; "
                         f"inconclusive otherwise, or without two paired seeds or an evaluation-data term.")
    if any(c.test is not None and c.test.data.endswith(SIGN_TEST) for c in checks):
        res.notes.append("An ordering against a row that diverged on every seed: a seed where only one of the two "
                         "diverged is won by the one that completed, and the wins take the exact two-sided sign "
                         "test, in the same Holm adjustment (docs/tables.md).")
    return res
