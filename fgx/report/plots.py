"""Figures from run directories with matplotlib (Agg backend: no display needed)."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from fgx.report.runs import ReportError, Run, find_runs, group_label, metric_values, varying_keys
from fgx.report.table import default_metric

KINDS = {
    "curve": "metric against round (mean over seeds per group, band: ± std over seeds)",
    "sweep": "final metric against a swept key (--x), one series per other varying key",
    "privacy": "epsilon against a swept noise key (--x, default the varying key naming sigma)",
    "comm": "metric against cumulative MB communicated",
    "unlearning": "accuracy against number of removed items (unlearning.json)",
    "bounds": "gradient residual norm: worst-case, data-dependent and true, against removed items "
              "(ScaleGUN Fig. 2; runs with unlearning.report.bounds=true)",
    "heatmap": "the last recorded client-by-client matrices (FedGSP's collaboration graphs, fedgsp_graphs.jsonl)",
}


# what a reader calls a metric or a config key (axes, titles, legends); anything else: its last part, spaced
METRIC_NAMES = {"accuracy": "accuracy", "f1_minority": "minority-class F1", "f1_macro": "macro F1",
                "roc_auc": "ROC-AUC", "pr_auc": "PR-AUC", "mse": "MSE", "loss": "loss"}
KEY_NAMES = {"algorithm": "method", "method": "method", "unlearning.requests.type": "request type",
             "partitioner.num_clients": "clients", "partitioner": "partition", "dataset": "dataset", "model": "model",
             "privacy": "privacy", "rounds": "rounds", "algorithm.local_steps": "local steps"}
NAME_KEYS = ("algorithm", "method", "dataset", "model")     # their values name themselves in a legend


def metric_name(metric: str) -> str:
    """``ndcg@20`` -> ``NDCG@20``, ``f1_minority`` -> ``minority-class F1``, ``epsilon...`` -> ``ε``."""
    base, at, k = metric.partition("@")
    if at:
        head, _, group = k.partition("_")
        return f"{base.upper() if base == 'ndcg' else base.capitalize()}@{head}" + (f" ({group})" if group else "")
    if metric.startswith("epsilon"):
        return "ε" + metric[len("epsilon"):].replace("_", " ")
    return METRIC_NAMES.get(metric, metric.replace("_", " "))


def key_name(key: str) -> str:
    """A config key as a reader knows it: ``privacy.sigma0`` -> ``σ₀``, ``algorithm.lr`` -> ``lr``."""
    if key in KEY_NAMES:
        return KEY_NAMES[key]
    leaf = key.rsplit(".", 1)[-1]
    if leaf.startswith("sigma"):
        return "σ" + "".join("₀₁₂₃₄₅₆₇₈₉"[int(c)] if c.isdigit() else c for c in leaf[5:])
    if leaf in ("epsilon", "eps"):
        return "ε"
    return leaf.replace("_", " ")


def _label(by: list[str], key: tuple) -> str:
    if not by:
        return "all runs"
    return ", ".join(str(v) if k in NAME_KEYS or len(by) == 1 and k in KEY_NAMES and k.endswith("type")
                     else f"{key_name(k)} {v}" for k, v in zip(by, key))


def _band(ax, xs, means, stds, label) -> None:
    """The mean as a line, ± std over seeds as a band wherever a point has more than one seed."""
    line, = ax.plot(xs, means, marker="o", ms=3, label=label)
    if any(s > 0 for s in stds):
        lo = [m - s for m, s in zip(means, stds)]
        hi = [m + s for m, s in zip(means, stds)]
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, lw=0)


def _groups(runs: list[Run], by: list[str]) -> dict[tuple, list[Run]]:
    out: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        out[group_label(r, by)].append(r)
    return out


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def _series_over_rounds(runs: list[Run], split: str, metric: str, x_key: str):
    """Mean over seeds of metric at each x (round or bytes)."""
    per_x: dict[float, list[float]] = defaultdict(list)
    for r in runs:
        for row in _read_jsonl(r.path / "metrics.jsonl"):
            if row.get("split") != split:
                continue
            y = (row.get("mean") or {}).get(metric)
            x = row.get(x_key)
            if y is not None and x is not None:
                per_x[float(x) / (1e6 if x_key == "bytes_cumulative" else 1)].append(float(y))
    xs = sorted(per_x)
    return xs, [float(np.mean(per_x[x])) for x in xs], _stds(per_x, xs)


def _stds(per_x: dict, xs: list) -> list[float]:
    return [float(np.std(per_x[x], ddof=1)) if len(per_x[x]) > 1 else 0.0 for x in xs]


def _numeric(v: str, key: str) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ReportError(f"--x {key}: value {v!r} is not a number") from None


def make_figure(paths, kind: str = "curve", metric: str | None = None, x: str | None = None,
                by: list[str] | None = None, split: str = "test"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if kind not in KINDS:
        raise ReportError(f"unknown plot kind {kind!r}; choose one of {list(KINDS)}")
    runs = find_runs(paths)
    done = [r for r in runs if r.status == "completed"]
    if not done:
        raise ReportError("no completed run to plot")
    varying = varying_keys(runs)
    if kind == "heatmap":
        return _heatmap(done[0], plt)
    metric = metric or default_metric(runs)
    if kind in ("sweep", "privacy"):
        if x is None and kind == "privacy":
            x = next((k for k in varying if "sigma" in k), None)
        if x is None:
            raise ReportError(f"--x is required for --kind {kind} (the swept key; varying here: {varying})")
        if x not in varying:
            raise ReportError(f"--x {x!r} does not vary between these runs (varying: {varying})")
    by = by if by is not None else [k for k in varying if k != x]
    fig, ax = plt.subplots(figsize=(6, 4))
    groups = _groups(done, by)
    if kind in ("curve", "comm"):
        x_key = "round" if kind == "curve" else "bytes_cumulative"
        for key, rs in groups.items():
            xs, ys, sd = _series_over_rounds(rs, split, metric, x_key)
            _band(ax, xs, ys, sd, _label(by, key))
        ax.set_xlabel("round" if kind == "curve" else "MB communicated (cumulative)")
        ax.set_ylabel(f"{metric_name(metric)} ({split}, mean over clients)")
    elif kind in ("sweep", "privacy"):
        y_of = (lambda r: metric_values(r.summary).get(metric)) if kind == "sweep" else _epsilon
        for key, rs in groups.items():
            pts: dict[float, list[float]] = defaultdict(list)
            for r in rs:
                y = y_of(r)
                if y is not None:
                    pts[_numeric(r.value(x), x)].append(y)
            xs = sorted(pts)
            means = [float(np.mean(pts[v])) for v in xs]
            stds = [float(np.std(pts[v], ddof=1)) if len(pts[v]) > 1 else 0.0 for v in xs]
            ax.errorbar(xs, means, yerr=stds, marker="o", capsize=3, label=_label(by, key))
        ax.set_xlabel(key_name(x))
        ax.set_ylabel(f"final {metric_name(metric)} ({split})" if kind == "sweep" else "ε")
    elif kind == "unlearning":
        for key, rs in groups.items():
            xs, ys, sd = _unlearning_series(rs)
            _band(ax, xs, ys, sd, _label(by, key))
        ax.set_xlabel("removed items (cumulative)")
        ax.set_ylabel("test accuracy")
    elif kind == "bounds":
        return _bounds_figure(groups, by, plt)
    ax.grid(alpha=0.3)
    if len(groups) > 1 or by:
        ax.legend(fontsize=8)
    seeds = max(len(rs) for rs in groups.values())
    spread = f"; band: ± std over {seeds} seeds" if seeds > 1 and kind in ("curve", "comm", "unlearning") else \
        f"; bars: ± std over {seeds} seeds" if seeds > 1 and kind in ("sweep", "privacy") else ""
    titles = {"curve": f"{metric_name(metric)} per round", "comm": f"{metric_name(metric)} against communication",
              "sweep": f"{metric_name(metric)} against {key_name(x or '')}",
              "privacy": f"privacy budget ε against {key_name(x or '')}",
              "unlearning": "test accuracy while unlearning"}
    ax.set_title(titles[kind] + (f" (mean{spread})" if seeds > 1 else ""), fontsize=10)
    fig.tight_layout()
    return fig


def _bounds_figure(groups: dict, by: list[str], plt):
    """One panel per group (e.g. per request type, as the paper's Fig. 2): worst-case, data-dependent
    and true gradient residual norms against removed items, mean over seeds, log scale."""
    fields = (("worst_case_main", "worst-case bound", "-"), ("data_dependent_bound", "data-dependent bound", "--"),
              ("true_norm", "true norm", ":"))
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), squeeze=False)
    for ax, (key, rs) in zip(axes[0], groups.items()):
        for field, label, ls in fields:
            xs, ys, sd = _unlearning_series(rs, field)
            if not xs:
                raise ReportError(f"{rs[0].path}: no {field} in unlearning.json (run with unlearning.report.bounds=true)")
            line, = ax.plot(xs, ys, ls=ls, label=label)
            if any(sd):
                ax.fill_between(xs, [max(m - d, 1e-300) for m, d in zip(ys, sd)], [m + d for m, d in zip(ys, sd)],
                                color=line.get_color(), alpha=0.2, lw=0)
        ax.set_yscale("log")
        ax.set_xlabel("removed items (cumulative)")
        ax.set_title(_bounds_title(by, key), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("gradient residual norm")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def _bounds_title(by: list[str], key: tuple) -> str:
    """A panel of the bounds figure: ``edge removal`` for ``unlearning.requests.type=edge`` (as in the
    paper's Fig. 2), other keys as in a legend."""
    parts = [f"{v} removal" if k == "unlearning.requests.type" else _label([k], (v,)) for k, v in zip(by, key)]
    return ", ".join(parts) if parts else "all runs"


def _epsilon(r: Run) -> float | None:
    eps = [v for k, v in metric_values(r.summary).items() if k.startswith("epsilon")]
    return eps[0] if eps else None


def _unlearning_series(runs: list[Run], field: str = "accuracy"):
    per_x: dict[float, list[float]] = defaultdict(list)
    for r in runs:
        f = r.path / "unlearning.json"
        if not f.exists():
            raise ReportError(f"{r.path}: no unlearning.json (run with unlearning=<method>)")
        unl = json.loads(f.read_text())
        reqs = unl.get("requests") if isinstance(unl.get("requests"), list) else []
        batch = int((unl.get("summary") or {}).get("batch_size") or 1)
        removed = 0
        for q in reqs:
            removed = q.get("removed_total", removed + q.get("removed", batch))
            acc = q.get(field) if field != "accuracy" else q.get("accuracy", q.get("test_accuracy"))
            if acc is not None:
                per_x[float(removed)].append(float(acc))
    xs = sorted(per_x)
    return xs, [float(np.mean(per_x[v])) for v in xs], _stds(per_x, xs)


HEATMAP_SOURCES = ("collaboration.jsonl", "fedgsp_graphs.jsonl")


def _heatmap(run: Run, plt):
    rows = next((r for r in (_read_jsonl(run.path / n) for n in HEATMAP_SOURCES) if r), None)
    if not rows:
        raise ReportError(f"{run.path}: no collaboration matrices ({' or '.join(HEATMAP_SOURCES)}; "
                          f"algorithms that record them, e.g. fedgsp, write them)")
    last = rows[-1]
    mats = {k: np.asarray(v, dtype=float) for k, v in last.items()
            if isinstance(v, list) and np.asarray(v, dtype=object).ndim == 2}
    if not mats:
        raise ReportError(f"{run.path}/collaboration.jsonl: its last row holds no matrix")
    fig, axes = plt.subplots(1, len(mats), figsize=(4 * len(mats), 3.6), squeeze=False)
    for ax, (name, m) in zip(axes[0], mats.items()):
        im = ax.imshow(m, cmap="viridis")
        ax.set_title(f"{name} (round {last.get('round', '?')})")
        ax.set_xlabel("client")
        ax.set_ylabel("client")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig


def output_files(output: str | list[str] | None, default: Path) -> list[Path]:
    """Where the figure goes: each name given (``.png``, ``.svg``, ``.pdf``); a name without a suffix
    gives a PDF (for the paper) and a PNG (for a screen) of the same figure."""
    names = [output] if isinstance(output, str) else list(output or [])
    outs: list[Path] = []
    for name in names or [str(default)]:
        out = Path(name)
        if not out.suffix:
            outs += [out.with_suffix(".pdf"), out.with_suffix(".png")]
        elif out.suffix.lower() in (".png", ".svg", ".pdf"):
            outs.append(out)
        else:
            raise ReportError(f"--output {out}: use a .png, .svg or .pdf file name, or a name without a suffix "
                              f"for both a .pdf and a .png")
    return outs


def plot(paths, kind: str = "curve", output: str | list[str] | None = None, **kw) -> Path:
    """The figure written to ``output`` (see :func:`render`); the first file written."""
    return render(paths, kind, output, **kw)[0]


def render(paths, kind: str = "curve", output: str | list[str] | None = None, **kw) -> list[Path]:
    """One figure written to every file of ``output`` (e.g. a PDF and a PNG: ``output_files``)."""
    outs = output_files(output, Path(paths[0]) / f"{kind}.png")
    fig = make_figure(paths, kind=kind, **kw)
    import io

    from fgx.outputs import atomic_write_bytes
    for out in outs:
        buf = io.BytesIO()
        fig.savefig(buf, format=out.suffix.lstrip(".").lower(), dpi=150)
        atomic_write_bytes(out, buf.getvalue())
    import matplotlib.pyplot as plt
    plt.close(fig)
    return outs
