"""fgx repro: the accounting preset (CE-FedGNN Table 6) and a training preset with targets."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fgx.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_repro_table6_reproduces_every_entry(tmp_path, capsys):
    assert main(["repro", "ce_fedgnn_table6", "--out", str(tmp_path / "t6")]) == 0
    res = json.loads((tmp_path / "t6" / "repro.json").read_text())
    assert len(res["checks"]) == 35 and all(c["ok"] for c in res["checks"])
    assert res["verdict"] == "all checks hold"
    assert "| 90th (0.1466) | 51.794 (51.794) |" in (tmp_path / "t6" / "repro.md").read_text()


def test_repro_table_with_wrong_paper_values_fails(tmp_path, monkeypatch, capsys):
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    t = (conf / "targets" / "ce_fedgnn_table6.yaml").read_text().replace("51.794", "52.794")
    (conf / "targets" / "ce_fedgnn_table6.yaml").write_text(t)
    monkeypatch.setenv("FGX_CONF_DIR", str(conf))
    assert main(["repro", "ce_fedgnn_table6", "--out", str(tmp_path / "t6")]) == 1
    assert "34/35 checks hold" in capsys.readouterr().out


TINY_PRESET = """# @package _global_
defaults:
  - override /dataset: csbm
  - override /partitioner: random
dataset: {num_nodes: 300, num_features: 16}
partitioner: {num_clients: 3}
model: {hidden: 16}
rounds: 3
eval_every: 1
hydra:
  sweeper:
    params:
      algorithm: fedavg,local
      seed: 0,1
"""

TINY_TARGETS = """paper: Test
item: Table 0
data: generated
metric: accuracy
by: [algorithm]
rows:
  - {where: {algorithm: fedavg}, paper: 5.0, tolerance: 0.1}
  - {where: {algorithm: local}, paper: 0.9, tolerance: null}
ordering:
  - {key: algorithm, order: [fedavg, local]}
plot: {kind: curve}
"""


def test_repro_runs_a_training_preset_and_checks_targets(tmp_path, monkeypatch, capsys):
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "experiment" / "tiny_repro.yaml").write_text(TINY_PRESET)
    (conf / "targets" / "tiny_repro.yaml").write_text(TINY_TARGETS)
    monkeypatch.setenv("FGX_CONF_DIR", str(conf))
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "repro"
    rc = main(["repro", "tiny_repro", "--out", str(out)])
    text = capsys.readouterr().out
    res = json.loads((out / "repro.json").read_text())
    assert [c["ok"] for c in res["checks"]][:2] == [False, None]  # an accuracy of 5 +- 0.1 cannot hold; shown-only
    assert len(res["table"]) == 2 and {r["n"] for r in res["table"]} == {2}
    ordering = res["checks"][2]
    assert ordering["paper"] == "fedavg ≥ local"
    assert rc == 1                                               # a failed check fails the command
    assert (out / "tiny_repro_curve.png").exists()
    assert "Against the paper:" in text
    # comparing existing runs again gives the same verdict without training
    assert main(["repro", "tiny_repro", "--from", str(out), "--out", str(out)]) == rc


def test_repro_overrides_may_follow_options():
    from fgx.cli import build_parser, parse_command

    parser = build_parser()
    args = parse_command(parser, ["repro", "some_preset", "--out", "o", "data_dir=d", "seed=1"])
    assert (args.name, args.out, args.overrides) == ("some_preset", "o", ["data_dir=d", "seed=1"])
    with pytest.raises(SystemExit):
        parse_command(parser, ["repro", "some_preset", "--out", "o", "--bogus"])


@pytest.fixture(scope="module")
def written_docs(tmp_path_factory) -> str:
    """What `fgx repro --docs PATH` writes from the committed records, once for this module (it composes
    every table and every recorded cell: ~10 s)."""
    out = tmp_path_factory.mktemp("docs") / "R.md"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("FGX_RESULTS_DIR", raising=False)
        assert main(["repro", "--docs", str(out)]) == 0
    return out.read_text()


def test_repro_docs_lists_every_table(written_docs):
    from fgx.tables.spec import table_names

    text = written_docs
    names = table_names(REPO / "conf")
    assert "fedgsp_minesweeper_disj_10" in names and "fedgsp_tolokers_disj_10" in names
    for name in names:
        assert f"`fgx repro {name}`" in text or f"`fgx repro {name}  # [full scale: " in text
    # a training table says its size (9 methods x 5 seeds) and measured time; an accounting table runs as is
    assert "`fgx repro baselines_cora  # [full scale: 45 runs, ~" in text
    assert "`fgx repro ce_fedgnn_table6`" in text


def test_reproduction_doc_is_up_to_date(written_docs):
    assert (REPO / "docs" / "REPRODUCTION.md").read_text() == written_docs, \
        "regenerate with: fgx repro --docs docs/REPRODUCTION.md"


def test_every_target_names_an_existing_preset():
    for tf in (REPO / "conf" / "targets").glob("*.yaml"):
        if "family: true" not in tf.read_text():
            assert (REPO / "conf" / "experiment" / tf.name).exists(), tf.name


def _report(rows: list[dict], by: list[str], metrics: list[str], seeds: int = 4):
    """A report over runs made up per seed: each row's metrics, plus a seed-dependent offset shared by
    every row of a seed (what paired seeds share) and a small per-row jitter; the test items add no noise
    (a standard error of 0: the ordering test is the paired t over seeds)."""
    from fgx.report.runs import Run
    from fgx.report.table import build_report

    runs = []
    for i, row in enumerate(rows):
        for s in range(seeds):
            final = {m: row[m] + 0.05 * s + 0.001 * ((i + s) % 3) for m in metrics}
            runs.append(Run(Path(f"r{i}_{s}"), "completed", {**{b: str(row[b]) for b in by}, "seed": str(s)},
                            {"final": final, "seed": s, "main_metric": metrics[0],
                             "sampling_se": {m: 0.0 for m in metrics}}))
    return build_report(runs, by=by, metrics=metrics)


def test_ordering_within_a_group_and_lower_is_better():
    """An ordering may be scoped by `where` (e.g. one privacy level) and may be lower-is-better (MSE)."""
    from fgx.tables.checks import compare

    rep = _report([{"algorithm": "dp_dsgd", "algorithm.mu": "0.5", "mse": 1.20},
                   {"algorithm": "mafalda_sgd", "algorithm.mu": "0.5", "mse": 0.92},
                   {"algorithm": "dp_dsgd", "algorithm.mu": "2.0", "mse": 0.70},
                   {"algorithm": "mafalda_sgd", "algorithm.mu": "2.0", "mse": 0.80}], ["algorithm", "algorithm.mu"],
                  ["mse"])
    t = {"ordering": [
        {"key": "algorithm", "order": ["mafalda_sgd", "dp_dsgd"], "where": {"algorithm.mu": 0.5}, "lower_is_better": True},
        {"key": "algorithm", "order": ["mafalda_sgd", "dp_dsgd"], "where": {"algorithm.mu": 2.0}, "lower_is_better": True},
        {"key": "algorithm", "order": ["dp_dsgd", "mafalda_sgd"], "where": {"algorithm.mu": 0.5}},
        {"key": "algorithm", "order": ["mafalda_sgd", "dp_dsgd"], "where": {"algorithm.mu": 9.0}, "lower_is_better": True},
    ]}
    c = compare(rep, t, "mse")
    assert [x.outcome for x in c] == ["holds", "fails", "holds", "not run"]
    assert c[0].paper == "mafalda_sgd ≤ dp_dsgd" and "where algorithm.mu=0.5" in c[0].what
    assert c[0].fgx.startswith("Δ = +0.27") and "95% CI" in c[0].fgx and "n = 4" in c[0].fgx
    assert "not run" in c[3].fgx


def test_numeric_keys_match_by_value():
    """A target written `1e-5` (or `2`) names the runs whose config printed `1e-05` (or `2.0`)."""
    from fgx.tables.checks import compare

    rep = _report([{"r_max": "1e-05", "mu": "2.0", "retrains": 100.0}, {"r_max": "1e-07", "mu": "2.0", "retrains": 90.0},
                   {"r_max": "1e-15", "mu": "2.0", "retrains": 0.0}], ["r_max", "mu"], ["retrains"])
    c = compare(rep, {"ordering": [{"key": "r_max", "order": ["1e-5", "1e-7", "1e-15"], "where": {"mu": 2}},
                                   {"key": "r_max", "order": ["1e-15", "1e-5"]}]}, "retrains")
    # one check per adjacent pair
    assert [x.outcome for x in c] == ["holds", "holds", "fails"]
    assert c[0].paper == "1e-5 ≥ 1e-7" and c[1].paper == "1e-7 ≥ 1e-15"


def test_an_ordering_may_check_another_column():
    from fgx.tables.checks import compare

    rep = _report([{"algorithm": "a", "ndcg": 0.3, "recall": 0.1}, {"algorithm": "b", "ndcg": 0.2, "recall": 0.4}],
                  ["algorithm"], ["ndcg", "recall"])
    t = {"ordering": [{"key": "algorithm", "order": ["a", "b"]},
                      {"key": "algorithm", "order": ["a", "b"], "metric": "recall"}]}
    c = compare(rep, t, "ndcg")
    assert [x.ok for x in c] == [True, False] and c[1].what.startswith("recall:")


def test_repro_pndp_accounting_holds_the_papers_claims(tmp_path):
    assert main(["repro", "mafalda_fig2_pndp", "--out", str(tmp_path / "f2")]) == 0
    res = json.loads((tmp_path / "f2" / "repro.json").read_text())
    assert res["verdict"] == "all checks hold" and len(res["checks"]) == 10
    assert [r["distance"] for r in res["by_distance"]] == [1, 2, 3, 4]


def test_a_dry_run_tally_writes_nothing(tmp_path, capsys, monkeypatch):
    """`fgx repro --tally PATH --dry-run` (the docs test resolves documented commands so) computes the tally
    and writes no file; without --dry-run it writes the file."""
    monkeypatch.chdir(tmp_path)
    assert main(["repro", "--tally", "decisions.json", "--dry-run"]) == 0
    assert "would write decisions.json" in capsys.readouterr().out and not (tmp_path / "decisions.json").exists()
    assert main(["repro", "--tally", "decisions.json"]) == 0
    assert json.loads((tmp_path / "decisions.json").read_text())["tables"]
