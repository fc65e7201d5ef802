"""Paper-style tables from run directories: mean ± std over seeds per group of configs."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from fgx.diagnostics import MECHANISM_DIAGNOSTICS
from fgx.report.runs import ReportError, Run, frame, varying_keys

EXTRA_COLUMNS = ("epsilon", "MB", "wall_s")   # shown when present (epsilon* matches any percentile)


@dataclass
class Report:
    by: list[str]
    metrics: list[str]
    table: "object"            # pandas DataFrame: by columns, n, <m>_mean, <m>_std per metric
    problems: list[Run]        # failed / incomplete runs, never dropped silently
    runs: list[Run]


def default_metric(runs: list[Run]) -> str:
    names = Counter(r.summary.get("main_metric") for r in runs if r.status == "completed")
    names.pop(None, None)
    if not names:
        raise ReportError("no completed run to take the main metric from; pass --metric")
    return names.most_common(1)[0][0]


def build_report(runs: list[Run], by: list[str] | None = None, metrics: list[str] | None = None) -> Report:
    completed = [r for r in runs if r.status == "completed"]
    problems = [r for r in runs if r.status != "completed"]
    if by is None:
        by = varying_keys(runs) or ["algorithm"]
    metrics = list(metrics) if metrics else [default_metric(runs)] if completed else []
    import pandas as pd

    df = frame(runs, by)
    if completed:
        missing = [m for m in metrics if m not in df.columns]
        if missing:
            known = sorted(c for c in df.columns if c not in (*by, "seed", "run"))
            raise ReportError(f"metric {missing[0]!r} is in no completed run; available: {known}")
        extras = [c for c in df.columns if c not in metrics and (c in EXTRA_COLUMNS or c.startswith("epsilon")
                                                                 or c in MECHANISM_DIAGNOSTICS)]
        cols = metrics + extras
        g = df.groupby(by, sort=False, dropna=False)
        table = g.size().rename("n").to_frame()
        for c in cols:
            # sample standard deviation (ddof=1), as papers report over seeds
            table[f"{c}_mean"] = g[c].mean()
            table[f"{c}_std"] = g[c].std(ddof=1)
        table = table.reset_index()
        # a numeric sweep (K = 4, 8, 16, ...) reads in numeric order; records store runs sorted as strings
        # (other group keys keep their first-appearance order, and stay the outer keys where they come first)
        numeric = [b for b in by if pd.to_numeric(table[b], errors="coerce").notna().all()]
        if numeric:
            def order(col):
                if col.name in numeric:
                    return pd.to_numeric(col)
                return col.map({v: i for i, v in enumerate(pd.unique(col))})
            table = table.sort_values(list(by), key=order, kind="stable").reset_index(drop=True)
        metrics_out = cols
    else:
        table, metrics_out = pd.DataFrame(columns=by + ["n"]), []
    return Report(by, metrics_out, table, problems, runs)


def _fmt(mean: float, std: float, n: int, column: str) -> str:
    if mean != mean:
        return "-"
    wide = column in ("MB", "MB_per_round", "noise_to_signal") or column.startswith("epsilon")
    spec = ".1f" if column == "wall_s" else ".2f" if column == "s_per_round" else ".3g" if wide else ".4f"
    if n < 2 or std != std:
        return format(mean, spec)
    return f"{format(mean, spec)} ± {format(std, spec)}"


def cells(rep: Report) -> tuple[list[str], list[list[str]]]:
    header = rep.by + ["n"] + rep.metrics
    rows = []
    for _, row in rep.table.iterrows():
        n = int(row["n"])
        rows.append([str(row[b]) for b in rep.by] + [str(n)] +
                    [_fmt(row[f"{m}_mean"], row[f"{m}_std"], n, m) for m in rep.metrics])
    return header, rows


# Markdown and LaTeX are written by hand: pandas' to_markdown/to_latex need the optional
# tabulate/jinja2 packages for what is a few lines of string joining.
def to_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _tex(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("±", r"$\pm$")):
        s = s.replace(a, b)
    return s


def to_latex(header: list[str], rows: list[list[str]]) -> str:
    lines = [r"\begin{tabular}{" + "l" * len(header) + "}", r"\toprule",
             " & ".join(_tex(h) for h in header) + r" \\", r"\midrule"]
    lines += [" & ".join(_tex(c) for c in r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)


def problems_text(rep: Report) -> str:
    """The runs left out of the table: those that diverged (they ran; their loss diverged, so their
    numbers are no result) apart from those that failed or did not finish."""
    from fgx.divergence import RULE, describe

    if not rep.problems:
        return ""
    diverged = [r for r in rep.problems if r.status == "diverged"]
    other = [r for r in rep.problems if r.status != "diverged"]
    lines = []
    if diverged:
        lines.append(f"{len(diverged)} run(s) diverged, not in the table ({RULE}; fgx/divergence.py):")
        lines += [f"  - {r.path} {_label(r)}: {describe(_event(r.summary))}" for r in diverged]
    if other:
        lines.append(f"{len(other)} run(s) not in the table (failed or incomplete):")
        lines += [f"  - {r.path} [{r.status}] {_label(r)}: {r.error or ''}".rstrip(": ") for r in other]
    return "\n".join(lines)


def readings(rep: Report) -> str:
    """Each completed run's score beside what it means (summary.json's ``reference``; fgx/reference.py):
    the runs of a binary detection task (AML) only; empty when there are none."""
    from fgx.report.reading import describe

    lines = []
    for r in rep.runs:
        text = describe(r.summary) if r.status == "completed" else None
        if text is not None:
            lines.append(f"{r.path}:" + "".join(f"\n  {t}" for t in text.splitlines()))
    return "\n".join(lines)


def _event(summary: dict) -> dict:
    """A run's divergence event with a non-finite loss (NaN, written to JSON as null) read as NaN."""
    event = dict(summary.get("diverged") or {})
    for k in ("loss", "reference"):
        if k in event and not isinstance(event[k], (int, float)):
            event[k] = float("nan")
    return event


def _label(r: Run) -> str:
    return " ".join(f"{k}={v}" for k, v in r.overrides.items() if not k.startswith("hydra"))


def render(rep: Report, fmt: str = "markdown") -> str:
    if fmt == "csv":
        return rep.table.to_csv(index=False).rstrip("\n")
    header, rows = cells(rep)
    if fmt == "markdown":
        return to_markdown(header, rows)
    if fmt == "latex":
        return to_latex(header, rows)
    raise ReportError(f"unknown format {fmt!r}; choose markdown, latex or csv")
