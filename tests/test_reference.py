"""A result that explains itself (issue #72): an AML run's summary.json `reference` block, the line `fgx run`
and `fgx report` print from it, and its pieces (fgx/reference.py): the trivial detectors, the paper's
figure (conf/reference/aml_paper.yaml) and the centralised ceiling record."""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from fgx.reference import CEILING_FILE, PAPER_FILE, ceiling, paper_figure
from fgx.report.reading import describe

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO.parent / "shared" / "specs" / "ce_fedgnn.md"

RECORD = {"preset": "tiny", "scale": 0.25, "data_seed": 0, "model": "gine",
          "setting": "centralised GINe, one client, adam lr 0.005, batch 512, fanouts [10, 10]", "steps": 12000,
          "wall_s": 3500.0, "test": {"f1_minority": 0.3, "pr_auc": 0.2, "roc_auc": 0.95},
          "val": {"f1_minority": 0.31}, "command": "fgx run ...", "commit": "0" * 40}


def write_ceiling(root: Path, content) -> Path:
    path = root / CEILING_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.fixture(scope="module")
def aml_run(tmp_path_factory):
    """One short CE-FedGNN run on aml_tiny (a quarter of it), with a ceiling record for that data; its run
    directory and what `fgx run` printed."""
    import os
    from contextlib import redirect_stdout
    from io import StringIO

    from fgx.cli import main

    tmp = tmp_path_factory.mktemp("aml_reference")
    results = tmp / "results"
    # a second record of the same data with a lower score and one of other data: the best match is the ceiling
    write_ceiling(results, {"records": [RECORD, {**RECORD, "model": "mlp_edge", "test": {"f1_minority": 0.1}},
                                        {**RECORD, "scale": 1.0, "test": {"f1_minority": 0.9}}]})
    saved = {k: os.environ.get(k) for k in ("FGX_RESULTS_DIR", "FGX_DATA_DIR")}
    os.environ.update(FGX_RESULTS_DIR=str(results), FGX_DATA_DIR=str(tmp / "data"))
    out = StringIO()
    try:
        with redirect_stdout(out):
            rc = main(["run", "dataset=aml_tiny", "dataset.scale=0.25", "rounds=3", "eval_every=1",
                       "output.progress=off", "output.checkpoint=false", f"hydra.run.dir={tmp / 'run'}"])
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert rc == 0
    return tmp / "run", out.getvalue()


def test_an_aml_runs_summary_counts_its_pooled_test_positives(aml_run):
    """The counts are the pooled test split's: precision and recall from them give the pooled test minority
    F1, the items are the test items the run kept (sampling.copies), and the trivial baselines follow."""
    s = json.loads((aml_run[0] / "summary.json").read_text())
    ref, f1 = s["reference"], s["final_pooled"]["f1_minority"]
    pos = ref["positives"]
    assert pos["items"] == s["sampling"]["copies"]["final"] and 0 < pos["actual"] < pos["items"]
    assert 0 < pos["true_positives"] <= min(pos["predicted"], pos["actual"])
    precision, recall = pos["true_positives"] / pos["predicted"], pos["true_positives"] / pos["actual"]
    assert 2 * precision * recall / (precision + recall) == pytest.approx(f1, abs=1e-9)
    p = pos["actual"] / pos["items"]
    assert ref["trivial"] == {"positive_rate": p, "f1_minority": {"flag_nothing": 0.0, "flag_all": 2 * p / (1 + p)},
                              "pr_auc": p, "roc_auc": 0.5}
    assert ref["ceiling"]["value"] == 0.3 and ref["ceiling"]["steps"] == 12000 and ref["ceiling"]["model"] == "gine"
    assert ref["paper"] == {"value": None, "reason": "the paper reports no tiny preset (only hi_small, hi_medium, "
                                                     "hi_large, li_small, li_medium, li_large)"}
    assert "pr_auc" in s["final"] and "pr_auc" in s["final_pooled"]


def test_fgx_run_and_fgx_report_print_the_score_beside_what_it_means(aml_run, capsys):
    from fgx.cli import main

    run, printed = aml_run
    s = json.loads((run / "summary.json").read_text())
    pos = s["reference"]["positives"]
    want = (f"test f1_minority {s['final']['f1_minority']:.4f} (flag nothing 0, flag all "
            f"{s['reference']['trivial']['f1_minority']['flag_all']:.3g}; centralised ceiling 0.3000 at 12,000 steps) — "
            f"flagged {pos['predicted']:,} of {pos['items']:,}, {pos['true_positives']:,} of {pos['actual']:,} "
            f"laundering found")
    assert describe(s).splitlines()[0] == want
    assert want in " ".join(printed.split())            # rich wraps the line at the console's width
    assert main(["report", str(run)]) == 0
    shown = capsys.readouterr().out
    assert want in shown and f"test PR-AUC {s['final']['pr_auc']:.4f}" in shown


def test_a_run_without_f1_minority_as_main_metric_gets_no_reference(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, "rounds=1", "output.progress=off")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and "reference" not in s and describe(s) is None


AML = {"name": "aml_hi_small", "source": "generated", "preset": "hi_small", "scale": 1.0, "data_seed": 0}


def test_ceiling_lookup_matches_preset_scale_and_seed_or_says_why_not(tmp_path, caplog):
    path = tmp_path / "ceiling.json"
    assert ceiling(AML, path) == {"value": None, "reason": "not recorded (preset hi_small, scale 1.0, data_seed 0; "
                                                            "no results/benchmarks/aml_ceiling/ceiling.json)"}
    rec = {**RECORD, "preset": "hi_small", "scale": 1.0}
    path.write_text(json.dumps({"records": [rec]}))
    got = ceiling(AML, path)
    assert got["value"] == 0.3 and got["test"] == rec["test"] and got["command"] == rec["command"]
    assert ceiling({**AML, "data_seed": 1}, path)["reason"] == "not recorded (preset hi_small, scale 1.0, data_seed 1)"
    assert ceiling({**AML, "scale": 0.5}, path)["value"] is None
    assert ceiling({**AML, "source": "real"}, path)["reason"].endswith("none applies to the real CSV")
    for bad, why in (("{not json", "JSONDecodeError"), ('{"records": {}}', "'records' is not a list"),
                     (json.dumps({"records": [{**rec, "test": {}}]}), "test.f1_minority is missing"),
                     (json.dumps({"records": [{**rec, "scale": "1"}]}), "'scale' is missing or not a number"),
                     ('{"rows": []}', "KeyError")):
        path.write_text(bad)
        with caplog.at_level(logging.WARNING, logger="fgx"):
            caplog.clear()
            got = ceiling(AML, path)
        assert got["value"] is None and why in got["reason"], (bad, got)
        assert "malformed" in caplog.text and str(path) in caplog.text


def test_a_malformed_ceiling_file_leaves_a_finished_run_completed(run_fgx, tmp_path, monkeypatch):
    monkeypatch.setenv("FGX_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "data"))
    write_ceiling(tmp_path / "results", "{broken")
    run = run_fgx("dataset=aml_tiny", "dataset.scale=0.25", "rounds=1", "output.progress=off")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and s["reference"]["ceiling"]["value"] is None
    assert "ceiling records malformed" in s["reference"]["ceiling"]["reason"]
    assert "malformed" in (run / "fgx.log").read_text()


def paper(algorithm: str, model: str, preset: str = "hi_small", conf_file: str | None = None) -> dict:
    summary = {"data": {**AML, "preset": preset}, "components": {"algorithm": algorithm, "model": model},
               "presets": {"algorithm": conf_file} if conf_file else {}}
    return paper_figure(summary, REPO / "conf" / PAPER_FILE)


def test_paper_figure_is_table_1s_row_of_the_algorithm_and_model_on_the_preset():
    got = paper("ce_fedgnn", "gine")
    assert got["value"] == 0.4916 and got["row"] == "CE-FedGNN-GIN" and got["column"] == "HI-Small"
    assert "real AMLworld CSV" in got["data"] and "not fgx's generated data" in got["data"]
    assert paper("ce_fedgnn", "gine", conf_file="ce_fedgnn_no_sharing")["value"] == 0.4103     # FedAvg-GIN
    assert paper("single_client", "gine")["value"] == 0.1526
    assert paper("ce_fedgnn", "gine", conf_file="fedgnn_st", preset="li_large")["row"] == "FedGNN-GIN-ST"
    assert paper("ce_fedgnn", "pna", preset="hi_medium")["value"] == 0.6517
    assert paper("ce_fedgnn", "mlp_edge")["value"] is None
    assert paper("ce_fedgnn", "gine", preset="tiny")["value"] is None
    real = paper_figure({"data": {**AML, "source": "real"}, "components": {"algorithm": "ce_fedgnn", "model": "gine"}},
                        REPO / "conf" / PAPER_FILE)
    assert real["value"] == 0.4916 and real["data"].endswith("(HI-Small), the data this run read")
    line = describe({"final": {"f1_minority": 0.31}, "data": AML, "reference": {
        "trivial": {"f1_minority": {"flag_all": 0.002}, "pr_auc": 0.001},
        "paper": paper("ce_fedgnn", "gine"), "ceiling": {"value": None, "reason": "not recorded (...)"},
        "positives": {"predicted": 812, "true_positives": 402, "actual": 1779, "items": 180000}}})
    assert line == ("test f1_minority 0.3100 (flag nothing 0, flag all 0.002; centralised ceiling not recorded; paper "
                    "CE-FedGNN-GIN 0.4916 on real HI-Small) — flagged 812 of 180,000, 402 of 1,779 laundering found")


@pytest.mark.skipif(not SPEC.exists(), reason="the paper spec is not here")
def test_paper_figures_are_the_specs_table_1():
    import yaml

    table = yaml.safe_load((REPO / "conf" / PAPER_FILE).read_text())
    text = SPEC.read_text().split("### Table 1", 1)[1].split("### Table 2", 1)[0]
    spec = {}
    for line in text.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.match(r"\d\.\d{4}±", cells[1]):
            spec[cells[0]] = [float(c.split("±")[0]) for c in cells[1:]]
    order = ["hi_small", "hi_medium", "hi_large", "li_small", "li_medium", "li_large"]
    assert list(table["columns"]) == order and len(spec) == 12
    assert {r["row"]: [r[c] for c in order] for r in table["rows"]} == spec


def test_pr_auc_as_main_metric_is_computed_and_judged_against_the_minority_rate():
    from fgx.learns import baseline, judge
    from fgx.metrics import metric_names

    assert metric_names(["accuracy"], 2, main_metric="pr_auc") == ("accuracy", "pr_auc")
    summary = {"main_metric": "pr_auc", "status": "completed", "data": {"test_majority_rate": 0.97}}
    metric, b, threshold, higher = baseline(summary)
    assert (metric, higher) == ("pr_auc", True) and b == pytest.approx(0.03) and threshold == pytest.approx(0.08)
    assert judge({**summary, "final": {"pr_auc": 0.09}})["status"] == "learns"
    assert judge({**summary, "final": {"pr_auc": 0.07}})["status"] == "does not learn"


def test_a_ceiling_curve_that_had_not_levelled_off_reads_as_a_lower_bound(tmp_path):
    """scripts/aml_ceiling.py marks a centralised curve whose validation F1 was still rising (plateau false):
    the reading then names the number as what the centralised model reached so far, not as a ceiling."""
    path = tmp_path / "ceiling.json"
    rec = {**RECORD, "preset": "hi_small", "scale": 1.0, "steps": 5660, "plateau": False}
    path.write_text(json.dumps({"records": [rec]}))
    ref = {"trivial": {"f1_minority": {"flag_all": 0.002}, "pr_auc": 0.001}, "paper": {"value": None},
           "ceiling": ceiling(AML, path), "positives": {"predicted": 3, "true_positives": 1, "actual": 9, "items": 90}}
    line = describe({"reference": ref, "final": {"f1_minority": 0.1}, "data": AML})
    assert "centralised GINe 0.3000 at 5,660 steps, not levelled off" in line and "ceiling 0.3" not in line
    path.write_text(json.dumps({"records": [{**rec, "plateau": True}]}))
    ref["ceiling"] = ceiling(AML, path)
    assert "centralised ceiling 0.3000 at 5,660 steps" in describe({"reference": ref, "final": {}, "data": AML})


def test_the_ceiling_is_the_record_best_on_validation_not_on_test(tmp_path):
    path = tmp_path / "ceiling.json"
    by_val = {**RECORD, "preset": "hi_small", "scale": 1.0, "val": {"f1_minority": 0.4}, "test": {"f1_minority": 0.2}}
    by_test = {**by_val, "model": "pna", "val": {"f1_minority": 0.1}, "test": {"f1_minority": 0.5}}
    path.write_text(json.dumps({"records": [by_test, by_val]}))
    got = ceiling(AML, path)
    assert got["value"] == 0.2 and got["model"] == "gine"
