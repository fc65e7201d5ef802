"""fgx report / fgx plot on hand-made run directories (no training needed)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest

from fgx.cli import main
from fgx.report.runs import find_runs
from fgx.report.table import build_report

ALGOS = ["fedavg", "ce_fedgnn"]
SEEDS = [0, 1, 2]


def make_run(d: Path, overrides: list[str], summary: dict | None, metrics: list[dict] | None = None) -> Path:
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))
    if metrics:
        (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return d


def completed(acc: float, f1: float, seed: int, eps: float | None = None) -> dict:
    s = {"status": "completed", "main_metric": "accuracy", "seed": seed,
         "final": {"accuracy": acc, "f1_macro": f1}, "best": {"round": 3, "val": acc - 0.01},
         "total_bytes": 2_000_000, "wall_time_s": 3.0 + seed, "privacy": {"mechanism": "none"},
         "components": {"algorithm": "x"}}
    if eps is not None:
        s["privacy"] = {"mechanism": "metric_dp", "epsilon_p90": eps}
    return s


@pytest.fixture
def multirun(tmp_path) -> tuple[Path, pd.DataFrame]:
    """A 2 (algorithm) x 3 (seed) multirun plus one failed and one killed job."""
    rng = random.Random(7)
    root = tmp_path / "multirun"
    rows, n = [], 0
    for a in ALGOS:
        for s in SEEDS:
            acc, f1 = rng.random(), rng.random()
            metrics = [{"round": r, "split": "test", "mean": {"accuracy": acc * r / 3}, "bytes_cumulative": r * 1e6}
                       for r in (1, 2, 3)]
            make_run(root / str(n), ["dataset=cora", f"algorithm={a}", f"seed={s}"], completed(acc, f1, s), metrics)
            rows.append({"algorithm": a, "accuracy": acc, "f1_macro": f1})
            n += 1
    make_run(root / str(n), ["dataset=cora", "algorithm=fedavg", "seed=3"],
             {"status": "failed", "error": "DataError: client 2 has no training nodes"})
    make_run(root / str(n + 1), ["dataset=cora", "algorithm=ce_fedgnn", "seed=3"], {"status": "running"})
    return root, pd.DataFrame(rows)


def test_report_mean_std_match_pandas(multirun):
    root, expected = multirun
    rep = build_report(find_runs([root]), metrics=["accuracy", "f1_macro"])
    assert rep.by == ["algorithm"]          # dataset does not vary, seed is excluded
    want = expected.groupby("algorithm", sort=False).agg(["mean", "std"])
    got = rep.table.set_index("algorithm")
    for a in ALGOS:
        for m in ("accuracy", "f1_macro"):
            assert got.loc[a, f"{m}_mean"] == pytest.approx(want.loc[a, (m, "mean")], abs=1e-12)
            assert got.loc[a, f"{m}_std"] == pytest.approx(want.loc[a, (m, "std")], abs=1e-12)
        assert got.loc[a, "n"] == 3
    assert {p.status for p in rep.problems} == {"failed", "running"}


def test_report_cli_prints_table_and_lists_failed_runs(multirun, capsys):
    root, expected = multirun
    assert main(["report", str(root)]) == 0
    out = capsys.readouterr().out
    m = expected[expected.algorithm == "fedavg"].accuracy
    assert f"| fedavg | 3 | {m.mean():.4f} ± {m.std():.4f} |" in out
    assert "2 run(s) not in the table" in out
    assert "client 2 has no training nodes" in out and "[running]" in out


def test_report_formats_and_errors(multirun, tmp_path, capsys):
    root, _ = multirun
    assert main(["report", str(root), "--format", "csv", "-o", str(tmp_path / "t.csv")]) == 0
    df = pd.read_csv(tmp_path / "t.csv")
    assert list(df.algorithm) == ALGOS and "accuracy_mean" in df and "MB_mean" in df
    assert main(["report", str(root), "--format", "latex"]) == 0
    assert r"\begin{tabular}" in capsys.readouterr().out
    assert main(["report", str(root), "--format", "latex", "-o", str(tmp_path / "t.tex")]) == 0
    printed = capsys.readouterr()
    assert r"\begin{tabular}" in (tmp_path / "t.tex").read_text() and r"\begin{tabular}" not in printed.out
    assert "t.tex" in printed.err        # written to the file only; the terminal says where
    assert main(["report", str(root), "--metric", "nope"]) == 2
    assert "'nope' is in no completed run" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_report_shows_privacy_budget(tmp_path, capsys):
    for i, sigma in enumerate([0.5, 1.0]):
        make_run(tmp_path / str(i), [f"privacy.sigma0={sigma}"], completed(0.5, 0.4, 0, eps=4.0 / sigma))
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "epsilon_p90" in out and "| 0.5 | 1 | 0.5000 | 8 |" in out


def _series(fig) -> int:
    ax = fig.axes[0]
    return len(ax.lines) if not ax.containers else len(ax.containers)


def test_plots_are_pngs_with_labelled_axes_and_one_series_per_group(multirun, tmp_path):
    from fgx.report.plots import make_figure, plot

    root, _ = multirun
    for kind in ("curve", "comm"):
        out = plot([root], kind=kind, output=str(tmp_path / f"{kind}.png"))
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        fig = make_figure([root], kind=kind)
        assert _series(fig) == 2
        assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()
    sweep = tmp_path / "sweep"
    for i, (k, s) in enumerate([(k, s) for k in (1, 5, 10) for s in (0, 1)]):
        for a in ("ce_fedgnn", "fedgnn_st"):
            make_run(sweep / f"{a}{i}", [f"algorithm={a}", f"algorithm.local_steps={k}", f"seed={s}"],
                     completed(0.1 * k, 0.2, s))
    fig = make_figure([sweep], kind="sweep", x="algorithm.local_steps")
    assert _series(fig) == 2 and fig.axes[0].get_xlabel() == "local steps"
    out = plot([sweep], kind="sweep", x="algorithm.local_steps", output=str(tmp_path / "s.svg"))
    assert b"<svg" in out.read_bytes()[:400]


def test_plot_errors_are_clear(multirun, capsys):
    root, _ = multirun
    assert main(["plot", str(root), "--kind", "sweep"]) == 2
    assert "--x is required" in capsys.readouterr().err
    assert main(["plot", str(root), "--kind", "sweep", "--x", "dataset"]) == 2
    assert "does not vary" in capsys.readouterr().err
    assert main(["plot", str(root), "--kind", "heatmap"]) == 2
    assert "collaboration.jsonl" in capsys.readouterr().err


def test_report_on_a_real_multirun(tmp_path, monkeypatch, tiny_cfg, capsys):
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "mr"
    assert main(["run", "-m", *tiny_cfg, "rounds=2", "algorithm=fedavg,local", "seed=0,1",
                 f"hydra.sweep.dir={sweep}"]) == 0
    capsys.readouterr()
    assert main(["report", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "| fedavg | 2 |" in out and "| local | 2 |" in out


def test_heatmap_and_unlearning_plots_read_what_the_methods_write(tmp_path):
    from fgx.report.plots import make_figure

    run = make_run(tmp_path / "gsp", ["algorithm=fedgsp"], completed(0.5, 0.4, 0))
    rows = [{"round": r, "optimised": True, "W": [[0.5, 0.5], [0.2, 0.8]], "W_K": [[[1, 0], [0, 1]]] * 3,
             "similarity": [[1, 0.1], [0.1, 1]], "heterogeneity": 0.3} for r in (1, 2)]
    (run / "fedgsp_graphs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fig = make_figure([run], kind="heatmap")
    assert [ax.get_title() for ax in fig.axes if ax.images] == ["W (round 2)", "similarity (round 2)"]

    unl = make_run(tmp_path / "unl", ["unlearning=scalegun"], completed(0.8, 0.7, 0))
    reqs = [{"request": i, "test_accuracy": 0.8 - 0.001 * i} for i in range(1, 6)]
    (unl / "unlearning.json").write_text(json.dumps({"requests": reqs, "summary": {"batch_size": 25}}))
    fig = make_figure([unl], kind="unlearning")
    line = fig.axes[0].lines[0]
    assert list(line.get_xdata()) == [25, 50, 75, 100, 125]
    assert list(line.get_ydata()) == pytest.approx([0.799, 0.798, 0.797, 0.796, 0.795])


def test_latex_on_stdout_is_pure_latex_and_notes_go_to_stderr(multirun, capsys):
    root, _ = multirun
    assert main(["report", str(root), "--format", "latex"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.strip().splitlines()
    assert lines[0].startswith("\\") and lines[-1].startswith("\\"), lines
    assert "completed run(s)" not in cap.out and "not in the table" not in cap.out
    assert "completed run(s)" in cap.err and "client 2 has no training nodes" in cap.err


def test_by_reads_resolved_values_when_a_key_kept_its_default(tmp_path, capsys):
    """One run set partitioner.num_clients=10 on the command line, the other kept the default 10: both
    are grouped under 10 (not '-'); the algorithm is the conf file chosen (a preset), not the component."""
    for i, (over, algo) in enumerate([(["partitioner.num_clients=10", "algorithm=fedavg_lgcn"], "fedavg_lgcn"),
                                      (["algorithm=fedavg_lgcn"], "fedavg_lgcn"),
                                      (["partitioner.num_clients=5", "algorithm=lpsfed"], "lpsfed")]):
        d = make_run(tmp_path / str(i), over + [f"seed={i}"], completed(0.5 + i / 10, 0.4, i))
        k = 5 if "partitioner.num_clients=5" in over else 10
        (d / ".hydra" / "config.yaml").write_text(f"partitioner:\n  name: louvain\n  num_clients: {k}\n"
                                                  f"algorithm:\n  name: lpsfed\n  lr: 0.1\n")
        (d / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  runtime:\n    choices:\n      algorithm: {algo}\n"
                                                 f"      partitioner@_global_.partitioner: louvain\n")
    assert main(["report", str(tmp_path), "--by", "algorithm,partitioner.num_clients,partitioner,algorithm.lr"]) == 0
    out = capsys.readouterr().out
    assert "| fedavg_lgcn | 10 | louvain | 0.1 | 2 |" in out, out
    assert "| lpsfed | 5 | louvain | 0.1 | 1 |" in out, out


def test_find_runs_orders_numbered_and_named_run_dirs(tmp_path):
    """A sweep directory may hold numbered job dirs next to named ones (the preset's hydra.sweep.subdir
    changed between jobs): numbers first, by value, then names."""
    for name in ["10", "cgu_s1", "2", "ceu_s0"]:
        make_run(tmp_path / "sweep" / name, ["algorithm=fedavg"], completed(0.5, 0.5, 0))
    assert [r.path.name for r in find_runs([tmp_path / "sweep"])] == ["2", "10", "ceu_s0", "cgu_s1"]


def test_a_numeric_sweep_reads_in_numeric_order(tmp_path):
    # records store runs sorted as strings (16 < 4 < 64 < 8); the table must read K = 4, 8, 16, 64
    for i, k in enumerate(["16", "4", "64", "8", "16"]):
        make_run(tmp_path / str(i), [f"algorithm.local_steps={k}", f"seed={i}"], completed(0.5, 0.1 * i, i))
    rep = build_report(find_runs([tmp_path]), by=["algorithm.local_steps"], metrics=["accuracy"])
    assert [str(x) for x in rep.table["algorithm.local_steps"]] == ["4", "8", "16", "64"]
    assert list(rep.table["n"]) == [1, 1, 2, 1]
    named = build_report(find_runs([tmp_path]), by=["seed"], metrics=["accuracy"])
    assert [str(x) for x in named.table["seed"]] == ["0", "1", "2", "3", "4"]


def test_a_numeric_key_is_sorted_inside_the_groups_that_come_first(tmp_path):
    for i, (a, k) in enumerate([("zeta", "16"), ("alpha", "4"), ("zeta", "4"), ("alpha", "16")]):
        make_run(tmp_path / str(i), [f"algorithm={a}", f"algorithm.local_steps={k}", f"seed={i}"], completed(0.5, 0.1, i))
    rep = build_report(find_runs([tmp_path]), by=["algorithm", "algorithm.local_steps"], metrics=["accuracy"])
    assert [(str(a), str(k)) for a, k in zip(rep.table["algorithm"], rep.table["algorithm.local_steps"])] == \
        [("zeta", "4"), ("zeta", "16"), ("alpha", "4"), ("alpha", "16")]


def test_the_printed_run_summary_shows_metrics_not_bookkeeping_counts(capsys):
    from fgx.launch import _print_summary

    _print_summary({"components": {"algorithm": "lpsfed"}, "data": {"name": "movielens100k", "source": "real"},
                    "final": {"ndcg@20": 0.21234, "recall@20": 0.3, "num_users": 235.75},
                    "final_pooled": {}, "main_metric": "ndcg@20", "wall_time_s": 1.0, "peak_rss_mb": 10,
                    "total_bytes": 0, "run_dir": "r"})
    out = capsys.readouterr().out
    assert "ndcg@20 *" in out and "0.2123" in out and "num_users" not in out and "235.7500" not in out


def test_curves_have_a_band_over_seeds_and_reader_names(multirun, tmp_path):
    """Mean ± std over seeds as a band (one per group), axis and title from metric and method names, no
    config keys; remove the band and this fails."""
    from matplotlib.collections import PolyCollection

    from fgx.report.plots import make_figure

    root, _ = multirun
    fig = make_figure([root], kind="curve")
    ax = fig.axes[0]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2 == len(ax.lines)                  # one band per method
    line, band = ax.lines[0], bands[0]
    ys = line.get_ydata()
    lo, hi = band.get_paths()[0].vertices[:, 1].min(), band.get_paths()[0].vertices[:, 1].max()
    assert lo < min(ys) and hi > max(ys)                     # the band spreads around the mean
    assert "=" not in ax.get_title() + "".join(t.get_text() for t in ax.get_legend().get_texts())
    assert ax.get_xlabel() == "round" and "accuracy" in ax.get_ylabel() and "std over 3 seeds" in ax.get_title()


def test_one_plot_command_writes_the_figure_as_pdf_and_png(multirun, tmp_path, capsys):
    root, _ = multirun
    assert main(["plot", str(root), "--kind", "curve", "-o", str(tmp_path / "fig")]) == 0
    assert (tmp_path / "fig.pdf").read_bytes()[:5] == b"%PDF-"
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "fig.pdf" in capsys.readouterr().out


def test_reader_names_for_metrics_and_keys():
    from fgx.report.plots import _bounds_title, key_name, metric_name

    assert metric_name("ndcg@20") == "NDCG@20" and metric_name("f1_minority") == "minority-class F1"
    assert metric_name("roc_auc") == "ROC-AUC" and key_name("privacy.sigma0") == "σ₀"
    assert key_name("algorithm.local_steps") == "local steps" and key_name("algorithm") == "method"
    assert _bounds_title(["unlearning.requests.type"], ("edge",)) == "edge removal"
