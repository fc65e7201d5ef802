"""Tables people can believe: one multirun per table writing a committed record, statuses computed
from records (never typed), equal tuning budgets (`fgx tune`), and the FedGSP presets with their
same-backbone controls."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fgx.cli import main

REPO = Path(__file__).resolve().parents[1]

TINY_TABLE = """# @package _global_
defaults:
  - _self_
  - /method: local_gcn
  - optional /tuned@_global_: ${experiment}/${method}
  - override /dataset: csbm
  - override /partitioner: random
dataset: {num_nodes: 240, num_features: 12}
partitioner: {num_clients: 3}
rounds: 3
eval_every: 1
output: {checkpoint: false, progress: "off"}
table:
  gnn: {hidden: 16, lr: 0.01, weight_decay: 5.0e-4}
  tune:
    seeds: [0, 1]
    select: best
    max_grow: 0                     # two points and no growth (test_tune_grows_... grows a grid)
    bounds: {algorithm.lr: [0.01, 0.05]}
    grid:
      default:
        algorithm.lr: {times: [1.0, 5.0]}
hydra:
  sweep:
    subdir: ${method}_s${seed}     # as the real tables: fgx tune must still keep its trials apart
  sweeper:
    params:
      method: local_gcn,fedavg_gcn
      seed: 0,1
"""

TINY_TARGETS = """paper: Test
item: Tiny table
data: generated
effort: authors
sources: {local_gcn: the tiny table's values, fedavg_gcn: the tiny table's values}
metric: best_accuracy
by: [method]
floor: 0.0
ordering:
  - {key: method, order: [fedavg_gcn, local_gcn]}
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A copy of conf/ with a tiny two-method table; records go to tmp_path/results."""
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "experiment" / "tiny.yaml").write_text(TINY_TABLE)
    (conf / "targets" / "tiny.yaml").write_text(TINY_TARGETS)
    monkeypatch.setenv("FGX_CONF_DIR", str(conf))
    monkeypatch.setenv("FGX_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _record(root: Path, name: str = "tiny") -> dict:
    return json.loads((root / "results" / f"{name}.json").read_text())


def test_repro_records_the_table_and_its_cells_resolve_to_what_ran(tiny, capsys):
    from fgx.cli import compose
    from fgx.config import validate
    from fgx.tables.run import record_result
    from fgx.tables.spec import cell_config

    main(["repro", "tiny", "--record", "--out", str(tiny / "out")])
    rec = _record(tiny)
    assert sorted((e["overrides"]["method"], e["overrides"]["seed"]) for e in rec["runs"]) == \
        [("fedavg_gcn", "0"), ("fedavg_gcn", "1"), ("local_gcn", "0"), ("local_gcn", "1")]
    for e in rec["runs"]:
        # each run's own command, and the table command that launched it; the code it executed
        assert e["command"].startswith("fgx run ") and "+experiment=tiny" in e["command"]
        assert e["launched_by"] == "fgx repro tiny --record" and e["machine"]["cores"] and "date" in e and "commit" in e
        assert "fgx/trainer.py" in e["code"]["files"] and e["code"]["deps"]["torch"]
        # the kernels the CPU ran (floating-point results differ between AVX2 and AVX-512 ones)
        assert e["machine"]["kernels"]["torch"] == torch.backends.cpu.get_cpu_capability()
        assert e["machine"]["kernels"]["blas"]            # e.g. ["openblas SkylakeX"]
        # `fgx run +experiment=tiny method=M` resolves to exactly the config the table ran
        assert cell_config("tiny", {"method": e["overrides"]["method"]})[1] == e["config_sha"]
        assert rec["configs"][e["config_sha"]]["algorithm"]["name"] == e["overrides"]["method"].split("_")[0]
    v = validate(compose(["+experiment=tiny", "method=fedavg_gcn"]))
    assert (v.names["algorithm"], v.names["model"], v.params["model"].hidden) == ("fedavg", "gcn", 16)
    res = record_result(tiny / "conf", "tiny")
    assert res.status == ("reproduced" if all(c.outcome == "holds" for c in res.checks) else
                          "not reproduced" if any(c.outcome == "fails" for c in res.checks) else "inconclusive")
    assert len([c for c in res.checks if "majority-class" in c.what]) == 2   # the floor, per method


def test_a_status_cannot_read_reproduced_when_a_check_fails(tiny):
    from fgx.tables.docs import reproduction_markdown
    from fgx.tables.run import record_result

    main(["repro", "tiny", "--record", "--out", str(tiny / "out")])
    rec = _record(tiny)

    def set_acc(method: str, value: float) -> None:
        for e in rec["runs"]:
            if e["overrides"]["method"] == method:
                e["summary"]["best"]["test"]["accuracy"] = value
        (tiny / "results" / "tiny.json").write_text(json.dumps(rec))

    set_acc("fedavg_gcn", 0.9)
    set_acc("local_gcn", 0.5)
    assert record_result(tiny / "conf", "tiny").status == "reproduced"
    set_acc("fedavg_gcn", 0.4)          # the ordering fedavg_gcn >= local_gcn no longer holds
    res = record_result(tiny / "conf", "tiny")
    assert res.status == "not reproduced" and [c.ok for c in res.checks].count(False) == 1
    doc = reproduction_markdown(tiny / "conf")
    assert "**not reproduced**" in doc and "Δ = -0.1000" in doc and "✗ fails" in doc


def test_a_record_goes_stale_when_the_preset_changes(tiny):
    from fgx.tables.run import record_result

    main(["repro", "tiny", "--record", "--out", str(tiny / "out")])
    assert record_result(tiny / "conf", "tiny").stale == []
    f = tiny / "conf" / "experiment" / "tiny.yaml"
    f.write_text(f.read_text().replace("gnn: {hidden: 16", "gnn: {hidden: 32"))
    res = record_result(tiny / "conf", "tiny")
    assert res.status == "stale" and sorted(res.stale) == ["config of method=fedavg_gcn", "config of method=local_gcn"]


def test_a_record_lacking_runs_the_preset_sweeps_is_stale_until_they_run(tiny):
    from fgx.tables.run import record_result

    main(["repro", "tiny", "--record", "--out", str(tiny / "out")])
    f = tiny / "conf" / "experiment" / "tiny.yaml"
    f.write_text(f.read_text().replace("seed: 0,1", "seed: 0,1,2"))      # the preset now names 3 seeds
    res = record_result(tiny / "conf", "tiny")
    assert res.status == "stale" and len(res.stale) == 1
    assert "method=local_gcn seed=2" in res.stale[0] and "method=fedavg_gcn seed=2" in res.stale[0]
    before = {json.dumps(e["overrides"], sort_keys=True): e["date"] for e in _record(tiny)["runs"]}
    main(["repro", "tiny", "seed=2", "--record", "--out", str(tiny / "out2")])   # only the missing runs
    rec = _record(tiny)
    assert sorted(e["overrides"]["seed"] for e in rec["runs"]) == ["0", "0", "1", "1", "2", "2"]
    assert all(before[k] == e["date"] for e in rec["runs"] if (k := json.dumps(e["overrides"], sort_keys=True)) in before)
    assert record_result(tiny / "conf", "tiny").stale == []


def test_a_record_merges_only_the_cells_its_command_asked_for(tiny, capsys):
    """`fgx repro T method=M --record --out DIR` where DIR already holds other cells (a spot check's
    reruns): only method M's runs are merged; every other cell keeps the run the record had (its date and
    wall time), and the output says which runs it left out."""
    main(["repro", "tiny", "--record", "--out", str(tiny / "out")])
    before = {json.dumps(e["overrides"], sort_keys=True): e for e in _record(tiny)["runs"]}
    main(["repro", "tiny", "seed=0", "--out", str(tiny / "reruns")])               # seed 0 of both rows again
    main(["repro", "tiny", "method=local_gcn", "--record", "--out", str(tiny / "reruns")])
    out = capsys.readouterr().out
    after = {json.dumps(e["overrides"], sort_keys=True): e for e in _record(tiny)["runs"]}
    assert sorted(after) == sorted(before)
    changed = sorted(k for k in after if after[k]["date"] != before[k]["date"])
    assert changed == [json.dumps({"method": "local_gcn", "seed": s}, sort_keys=True) for s in ("0", "1")]
    assert after[json.dumps({"method": "fedavg_gcn", "seed": "0"}, sort_keys=True)]["summary"]["wall_time_s"] == \
        before[json.dumps({"method": "fedavg_gcn", "seed": "0"}, sort_keys=True)]["summary"]["wall_time_s"]
    assert "1 completed run(s)" in out and "method=fedavg_gcn seed=0" in out and "not merged" in out


def test_runs_changed_by_extra_overrides_are_not_recorded(tiny, capsys):
    assert main(["repro", "tiny", "rounds=2", "seed=0", "--record", "--out", str(tiny / "out")]) == 1
    assert not (tiny / "results" / "tiny.json").exists()
    assert "not recorded" in capsys.readouterr().out


def test_targets_may_not_type_a_status(tiny):
    from fgx.tables.spec import load_targets
    from fgx.report.runs import ReportError

    f = tiny / "conf" / "targets" / "tiny.yaml"
    for typed in ("status: reproduced", 'measured: "0.9 > 0.8"'):
        f.write_text(TINY_TARGETS + typed + "\n")
        with pytest.raises(ReportError, match="computed from the record"):
            load_targets(tiny / "conf", "tiny")


def test_a_malformed_targets_file_is_named_with_its_line(tiny):
    from fgx.tables.spec import load_targets
    from fgx.report.runs import ReportError

    f = tiny / "conf" / "targets" / "tiny.yaml"
    f.write_text(TINY_TARGETS + "scale_note: a note (with: a colon)\n")
    line = len(f.read_text().splitlines())
    with pytest.raises(ReportError, match=rf"targets/tiny.yaml, line {line}: not valid YAML"):
        load_targets(tiny / "conf", "tiny")


def test_no_committed_targets_file_types_a_status_or_a_measurement():
    import re
    for tf in (REPO / "conf" / "targets").glob("*.yaml"):
        assert not re.search(r"^\s*(status|measured)\s*:", tf.read_text(), re.M), tf.name


def test_committed_records_say_what_made_them_stale(monkeypatch):
    """A committed record whose preset, code or libraries changed since its runs is shown stale, with what
    changed named (the cells whose config differs, the files, the library versions), never as current:
    a status computed on a stale record is not a result. (Records made before per-run code fingerprints
    are stale for that reason alone until their table is run again.)"""
    from fgx.tables.run import record_result
    from fgx.tables.spec import table_names

    monkeypatch.delenv("FGX_RESULTS_DIR")
    conf = REPO / "conf"
    for name in table_names(conf):
        res = record_result(conf, name)
        if res.record is None:
            continue
        assert (res.status == "stale") == bool(res.stale), name
        assert all(isinstance(s, str) and s.strip() for s in res.stale), name
        if "accounting" not in res.record and not all("code" in e for e in res.record["runs"]):
            assert any("before code fingerprints" in s for s in res.stale), name


def test_no_table_averages_configurations_it_does_not_group_by():
    """Every key a table's sweep varies, the seed excepted, is one of its group keys (`by`): otherwise a
    row of the table averages different configurations (the CE-FedGNN Fig. 2 presets once inherited
    Table 1's three-method sweep and grouped by sigma0 alone)."""
    from fgx.tables.spec import load_targets, table_names, table_sweeps

    conf = REPO / "conf"
    targets = {n: load_targets(conf, n) for n in table_names(conf)}
    grouped = {n: t["by"] for n, t in targets.items() if t["accounting"] is None and t.get("by")}
    bad = [f"{n}: sweeps {k} ({len(v)} values) but groups by {grouped[n]}"
           for n, sweep in table_sweeps(conf, sorted(grouped)).items() if isinstance(sweep, dict)
           for k, v in sweep.items() if k != "seed" and len(v) > 1 and k not in grouped[n]]
    assert not bad, "\n".join(bad)


def test_equal_effort_is_computed_strictly(tiny):
    """Rows of a comparison given their values differently (some tuned, some not; no declaration; a source
    left at defaults; tuned files without the tuning record) cannot read 'reproduced'."""
    from fgx.tables.run import record_result

    main(["repro", "tiny", "--record", "--out", str(tiny / "out")])
    rec = _record(tiny)
    for e in rec["runs"]:
        e["summary"]["best"]["test"]["accuracy"] = 0.9 if e["overrides"]["method"] == "fedavg_gcn" else 0.5
    (tiny / "results" / "tiny.json").write_text(json.dumps(rec))

    def effort():
        res = record_result(tiny / "conf", "tiny", check_stale=False)
        return res.status, next(c for c in res.checks if c.what == "equal effort")

    status, c = effort()                                 # declared: the authors' values for both rows
    assert status == "reproduced" and c.ok and "the authors' values for every row" in c.fgx
    targets = tiny / "conf" / "targets" / "tiny.yaml"
    targets.write_text(TINY_TARGETS.replace("fedavg_gcn: the tiny table's values", "fedavg_gcn: fgx defaults"))
    status, c = effort()
    assert status == "not reproduced" and c.ok is False and "fedavg_gcn" in c.fgx
    targets.write_text("\n".join(l for l in TINY_TARGETS.splitlines() if not l.startswith(("effort", "sources"))))
    status, c = effort()                                 # nothing declared, nothing tuned: not equal effort
    assert status == "not reproduced" and c.ok is False and "None" in c.fgx
    targets.write_text(TINY_TARGETS)
    tuned = tiny / "conf" / "tuned" / "tiny"
    tuned.mkdir(parents=True)
    (tuned / "fedavg_gcn.yaml").write_text("# @package _global_\nalgorithm:\n  lr: 0.05\n")
    status, c = effort()                                 # one row tuned, the other on the authors' values
    assert status == "not reproduced" and "tuned files exist for fedavg_gcn" in c.fgx
    targets.write_text(TINY_TARGETS.replace("effort: authors", "effort: tuned"))
    status, c = effort()
    assert c.ok is False and "not tuned by `fgx tune tiny`: fedavg_gcn, local_gcn" in c.fgx   # no trials recorded
    (tuned / "local_gcn.yaml").write_text("# @package _global_\nalgorithm:\n  lr: 0.05\n")
    status, c = effort()                                 # files without the trials that chose them
    assert c.ok is False and "not tuned by `fgx tune tiny`" in c.fgx


def test_tune_gives_every_method_the_same_budget_and_writes_its_choice(tiny, capsys):
    from fgx.cli import compose

    f = tiny / "conf" / "experiment" / "tiny.yaml"
    unequal = TINY_TABLE.replace("      default:\n", "      fedavg_gcn:\n        algorithm.lr: [0.001, 0.01, 0.1]\n"
                                                     "      default:\n")
    f.write_text(unequal)
    assert main(["tune", "tiny"]) == 2
    assert "unequal tuning budgets" in capsys.readouterr().err
    f.write_text(TINY_TABLE)
    assert main(["tune", "tiny", "rounds=5"]) == 2            # the table as its preset defines it, nothing else
    assert main(["tune", "tiny", "--out", str(tiny / "tune")]) == 0
    rec = json.loads((tiny / "results" / "tiny.tune.json").read_text())
    for m in ("local_gcn", "fedavg_gcn"):
        trials = rec["methods"][m]["trials"]
        assert [t["values"]["algorithm.lr"] for t in trials] == [0.01, 0.05]      # 0.01 x {1, 5}
        best = max(trials, key=lambda t: t["val"])
        assert rec["methods"][m]["chosen"] == best["values"]
        text = (tiny / "conf" / "tuned" / "tiny" / f"{m}.yaml").read_text()
        assert "fgx tune tiny" in text and "2 points" in text
        assert compose(["+experiment=tiny", f"method={m}"]).algorithm.lr == best["values"]["algorithm.lr"]
    # a second tuning starts from the method's own value, not from the last choice
    plan = json.loads(json.dumps(__import__("fgx.tables.tune", fromlist=["tune"]).tune(
        tiny / "conf", "tiny", dry_run=True)))
    assert plan["methods"]["local_gcn"]["grid"]["algorithm.lr"] == [0.01, 0.05]


def test_a_grid_grows_past_an_open_edge_until_its_choice_is_interior(tiny, monkeypatch, capsys):
    """`fgx tune`: a choice at an open edge grows the grid by the ratio of its two outermost values (the
    validation score here peaks at lr 0.2: 0.01, 0.05 -> 0.25 -> 1.25, where 0.25 is interior); a choice
    still at an open edge after max_grow steps is recorded and fails the equal-effort check; one seed is
    refused."""
    import math

    from fgx.tables import tune as tune_mod
    from fgx.tables.run import record_result

    calls = []

    def fake_grid(name, m, g, points, spec, out, command, overrides, earlier=None):
        calls.append([p["algorithm.lr"] for p in points])
        peak = 0.2 if m == "local_gcn" else 100.0
        trials = [{"values": p, "val": -math.log(p["algorithm.lr"] / peak) ** 2, "seeds": [0, 1]} for p in points]
        return trials, max((earlier or []) + trials, key=lambda t: t["val"]), []

    monkeypatch.setattr(tune_mod, "_run_grid", fake_grid)
    f = tiny / "conf" / "experiment" / "tiny.yaml"
    f.write_text(TINY_TABLE.replace("    max_grow: 0 ", "    max_grow: 2 ").replace(
        "    bounds: {algorithm.lr: [0.01, 0.05]}\n", ""))
    assert main(["tune", "tiny", "--out", str(tiny / "tune")]) == 0
    rec = json.loads((tiny / "results" / "tiny.tune.json").read_text())["methods"]
    local, fedavg = rec["local_gcn"], rec["fedavg_gcn"]
    assert calls[:3] == [[0.01, 0.05], [0.25], [1.25]]
    assert local["chosen"] == {"algorithm.lr": 0.25} and local["open_edges"] == [] and local["base_points"] == 2
    assert [t["values"]["algorithm.lr"] for t in local["trials"]] == [0.01, 0.05, 0.25, 1.25]
    assert [gr["keys"] for gr in local["grown"]] == [["algorithm.lr"], ["algorithm.lr"]]
    # a peak beyond the grid's reach: still at the open edge after two steps, and the check says so
    assert fedavg["chosen"] == {"algorithm.lr": 1.25} and fedavg["open_edges"] == ["algorithm.lr"]
    assert "0.25" in (tiny / "conf" / "tuned" / "tiny" / "local_gcn.yaml").read_text()
    targets = tiny / "conf" / "targets" / "tiny.yaml"
    targets.write_text(TINY_TARGETS.replace("effort: authors", "effort: tuned"))
    main(["repro", "tiny", "--record", "--out", str(tiny / "out")])
    c = next(c for c in record_result(tiny / "conf", "tiny", check_stale=False).checks if c.what == "equal effort")
    assert c.ok is False and c.fgx.endswith("grows the grid): fedavg_gcn algorithm.lr")
    f.write_text(TINY_TABLE.replace("seeds: [0, 1]", "seeds: [0]"))
    assert main(["tune", "tiny", "--dry-run"]) == 2 and "at least 2 seeds" in capsys.readouterr().err


def test_open_edges_and_growth_respect_physical_bounds_and_integer_knobs():
    from fgx.tables.tune import Grid, grow, open_edges

    g = Grid(["algorithm.lr", "algorithm.weight_decay", "model.K", "model.dropout"],
             [[0.01, 0.05], [0.0, 5e-4], [3, 5, 7], [0.5, 1.0]], "default")
    assert open_edges(g, {"algorithm.lr": 0.01, "algorithm.weight_decay": 0.0, "model.K": 5, "model.dropout": 1.0}) \
        == ["algorithm.lr"]                       # 0 and a dropout of 1 are physical bounds; K 5 is interior
    assert open_edges(g, {"algorithm.lr": 0.05, "algorithm.weight_decay": 5e-4, "model.K": 7, "model.dropout": 0.5},
                      {"model.K": [None, 7]}) == ["algorithm.lr", "algorithm.weight_decay", "model.dropout"]
    grown = grow(g, {"algorithm.lr": 0.01, "algorithm.weight_decay": 5e-4, "model.K": 7, "model.dropout": 0.5},
                 ["algorithm.lr", "algorithm.weight_decay", "model.K", "model.dropout"])
    assert grown.values == [[0.002, 0.01, 0.05], [0.0, 5e-4, 0.0025], [3, 5, 7, 10], [0.25, 0.5, 1.0]]
    assert open_edges(Grid(["a"], [[1.0]], ""), {"a": 1.0}) == []     # one value: not a searched knob


def test_tuned_rows_must_run_their_tuned_values_and_may_take_them_from_a_sibling_table(tiny, capsys):
    """`effort: tuned` holds only when every run of a row used the values `fgx tune` chose for it; a
    configuration may take them from another configuration of the same data (`table.tuned_from` and the
    preset's `override /tuned@_global_`), for every row alike, and is then never tuned itself."""
    from fgx.tables.run import record_result

    targets = TINY_TARGETS.replace("effort: authors", "effort: tuned")
    (tiny / "conf" / "targets" / "tiny.yaml").write_text(targets)
    assert main(["tune", "tiny", "--out", str(tiny / "tune")]) == 0
    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) == 0

    def effort(name):
        return next(c for c in record_result(tiny / "conf", name, check_stale=False).checks
                    if c.what == "equal effort")

    assert effort("tiny").ok
    rec = _record(tiny)
    chosen = json.loads((tiny / "results" / "tiny.tune.json").read_text())["methods"]["local_gcn"]["chosen"]
    sha = next(e["config_sha"] for e in rec["runs"] if e["overrides"]["method"] == "local_gcn")
    rec["configs"][sha]["algorithm"]["lr"] = chosen["algorithm.lr"] * 3       # a run made before the tuning
    (tiny / "results" / "tiny.json").write_text(json.dumps(rec))
    c = effort("tiny")
    assert c.ok is False and "runs without their row's tuned values: local_gcn seed" in c.fgx

    sibling = TINY_TABLE.replace("  - override /partitioner: random\n",
                                 "  - override /partitioner: random\n  - override /tuned@_global_: tiny/${method}\n")
    sibling = sibling.replace("table:\n", "table:\n  tuned_from: tiny\n").replace("num_clients: 3", "num_clients: 4")
    (tiny / "conf" / "experiment" / "tiny4.yaml").write_text(sibling)
    (tiny / "conf" / "targets" / "tiny4.yaml").write_text(targets)
    assert main(["tune", "tiny4", "--dry-run"]) == 2
    assert "runs the values tuned for tiny" in capsys.readouterr().err
    assert main(["repro", "tiny4", "--record", "--out", str(tiny / "out4")]) == 0
    c = effort("tiny4")
    assert c.ok and "`fgx tune tiny`" in c.fgx and "on validation of tiny" in c.fgx
    (tiny / "conf" / "experiment" / "tiny4.yaml").write_text(sibling.replace(
        "  - override /tuned@_global_: tiny/${method}\n", ""))
    rerun = main(["repro", "tiny4", "--record", "--out", str(tiny / "out4b")])
    c = effort("tiny4")                    # declares tiny's values but does not load them
    assert rerun == 1 and c.ok is False and "runs without their row's tuned values" in c.fgx
    own = tiny / "conf" / "tuned" / "tiny4"
    own.mkdir(parents=True)
    (own / "local_gcn.yaml").write_text("# @package _global_\nalgorithm:\n  lr: 0.05\n")
    c = effort("tiny4")
    assert c.ok is False and "conf/tuned/tiny4/ also has files for local_gcn" in c.fgx


def test_every_table_that_takes_a_siblings_tuning_loads_that_siblings_files():
    """`table.tuned_from: X` and the preset's defaults must agree: each row loads conf/tuned/X/<method>.yaml."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    conf = REPO / "conf"
    takers = {p.stem: OmegaConf.load(p).get("table", {}).get("tuned_from") for p in (conf / "experiment").glob("*.yaml")}
    takers = {n: src for n, src in takers.items() if src}
    assert {"fedgsp_cora_disj_5", "fedgsp_cora_ovl_50", "fedgsp_minesweeper_disj_20"} <= set(takers)
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        for name, src in sorted(takers.items()):
            assert (conf / "experiment" / f"{src}.yaml").exists() and not (conf / "tuned" / name).exists(), name
            c = hydra_compose(config_name="config", overrides=[f"+experiment={name}", "method=fedavg_gcn"],
                              return_hydra_config=True)
            assert c.hydra.runtime.choices["tuned@_global_"] == f"{src}/fedavg_gcn", name


def test_tune_refuses_a_grid_without_the_knob_the_comparison_hinges_on(tiny, capsys):
    """`table.tune.hinge`: a key a row's config has must be in its grid; `a|b` is one knob under two
    keys (a BPR row's bpr_tau, a BC row's tau) and either satisfies it; a knob no row has asks nothing."""
    f = tiny / "conf" / "experiment" / "tiny.yaml"
    f.write_text(TINY_TABLE.replace("    select: best\n", "    select: best\n    hinge: [algorithm.weight_decay]\n"))
    assert main(["tune", "tiny", "--dry-run"]) == 2
    assert "leaves out a knob the comparison hinges on" in capsys.readouterr().err
    with_wd = TINY_TABLE.replace("        algorithm.lr: {times: [1.0, 5.0]}\n",
                                 "        algorithm.weight_decay: {times: [0.0, 1.0]}\n")
    f.write_text(with_wd.replace("    select: best\n", "    select: best\n    hinge: [algorithm.bpr_tau|algorithm.weight_decay]\n"))
    assert main(["tune", "tiny", "--dry-run"]) == 0
    f.write_text(TINY_TABLE.replace("    select: best\n", "    select: best\n    hinge: [algorithm.bpr_tau|algorithm.weight_decay]\n"))
    assert main(["tune", "tiny", "--dry-run"]) == 2           # the row has weight_decay, its grid leaves it out
    f.write_text(TINY_TABLE.replace("    select: best\n", "    select: best\n    hinge: [algorithm.bpr_tau|algorithm.mu]\n"))
    assert main(["tune", "tiny", "--dry-run"]) == 0           # no row of this table has either key


def test_every_fedgsp_configuration_row_has_a_table_with_same_backbone_controls():
    from fgx.cli import compose
    from fgx.config import validate
    from fgx.tables.spec import load_targets, table_names

    conf = REPO / "conf"
    rows = [n for n in table_names(conf) if n.startswith("fedgsp_")]
    datasets = ["cora", "citeseer", "pubmed", "computers", "photo", "arxiv", "roman_empire", "amazon_ratings",
                "minesweeper", "tolokers", "questions"]
    assert {f"fedgsp_{d}_{mode}_{m}" for d in datasets for mode, ms in (("disj", (5, 10, 20)), ("ovl", (10, 30, 50)))
            for m in ms} <= set(rows)
    for name in rows:
        t = load_targets(conf, name)
        orders = [o["order"] for o in t["ordering"]]
        assert ["fedgsp", "fedgsp_uniform"] in orders and ["fedgsp", "fedavg_unifilter"] in orders
    # one row in full: every method validates, UniFilter methods share the authors' row values
    v = {m: validate(compose(["+experiment=fedgsp_cora_disj_10", f"method={m}"]))
         for m in ("fedgsp", "fedgsp_uniform", "fedavg_unifilter", "local_unifilter", "fedper_unifilter",
                   "fedavg_gcn", "local_gcn", "fedper_gcn")}
    from omegaconf import OmegaConf
    for m in ("fedgsp", "fedavg_unifilter", "fedper_unifilter"):
        p = v[m].params
        assert (p["model"].K, p["model"].hidden, p["model"].lr_comb) == (7, 512, 0.01)
        # the lr: the authors' 0.15, or what `fgx tune` chose on validation for this table and method
        tuned = conf / "tuned" / "fedgsp_cora_disj_10" / f"{m}.yaml"
        want = OmegaConf.load(tuned).algorithm.lr if tuned.exists() else 0.15
        assert p["algorithm"].lr == want
    assert v["fedgsp"].params["algorithm"].gamma == 1.6 and v["fedgsp_uniform"].params["algorithm"].graph == "uniform"
    assert v["fedavg_gcn"].names["model"] == "gcn" and v["fedavg_gcn"].params["model"].hidden == 128
    assert {x.params["algorithm"].local_steps for x in v.values()} == {1}
    # FedProx is a row of its own only where it can differ from FedAvg (more than one local step)
    from omegaconf import OmegaConf
    sweep = lambda f: str(OmegaConf.select(OmegaConf.load(conf / f), "hydra.sweeper.params.method"))
    assert "fedprox" not in sweep("protocol/fedgsp.yaml")
    assert "fedprox_gcn" in sweep("experiment/fedgsp_photo_disj_10.yaml")
    assert compose(["+experiment=fedgsp_photo_disj_10", "method=fedprox_gcn"]).algorithm.local_steps == 2


@pytest.mark.slow   # 15 methods on Minesweeper (~4 min loaded); test_fedgsp_table_runs_on_a_dataset_outside_the_shared_data keeps the multirun in the default suite
def test_fedgsp_table_on_minesweeper_is_one_multirun(data_root, tmp_path, capsys):
    rc = main(["repro", "fedgsp_minesweeper_disj_10", f"data_dir={data_root}", "rounds=2", "seed=0",
               "--out", str(tmp_path / "t")])
    out = capsys.readouterr().out
    methods = _fedgsp_methods()
    assert {"fedgsp", "fedgsp_uniform", "local_unifilter", "fedavg_unifilter", "fedper_unifilter", "local_gcn",
            "fedavg_gcn", "fedper_gcn", "fedgnn", "fedgta", "adafgl", "fedtad", "fediih"} <= set(methods)
    for m in methods:
        assert f"| {m} |" in out
    assert rc in (0, 1)
    assert len(list((tmp_path / "t").glob("*_s0/summary.json"))) == len(methods)


def _fedgsp_methods() -> list[str]:
    from omegaconf import OmegaConf
    node = OmegaConf.load(REPO / "conf" / "protocol" / "fedgsp.yaml")
    return str(OmegaConf.select(node, "hydra.sweeper.params.method")).split(",")


@pytest.mark.slow
@pytest.mark.parametrize("table", ["fedgsp_cora_disj_5", "fedgsp_cora_disj_10", "fedgsp_cora_disj_20",
                                   "fedgsp_cora_ovl_10", "fedgsp_cora_ovl_30", "fedgsp_cora_ovl_50",
                                   "fedgsp_minesweeper_disj_5", "fedgsp_minesweeper_disj_20",
                                   "fedgsp_minesweeper_ovl_10", "fedgsp_minesweeper_ovl_30",
                                   "fedgsp_minesweeper_ovl_50", "fedgsp_hetero_homophily_disj_10"])
def test_every_offline_fedgsp_table_runs_for_two_rounds(table, data_root, tmp_path):
    main(["repro", table, f"data_dir={data_root}", "rounds=2", "seed=0", "--out", str(tmp_path / "t")])
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "t").glob("*/summary.json")]
    assert len(summaries) == len(_fedgsp_methods()) and all(s["status"] == "completed" for s in summaries)


def _fake_tolokers(root: Path, n: int = 300, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, 10)).astype(np.float32) + y[:, None].astype(np.float32)
    src = rng.integers(0, n, 4 * n)
    dst = rng.integers(0, n, 4 * n)
    keep = src != dst
    masks = rng.random((10, n))
    raw = root / "tolokers" / "raw"
    raw.mkdir(parents=True)
    np.savez(raw / "tolokers.npz", node_features=x, node_labels=y,
             edges=np.stack([src[keep], dst[keep]], 1), train_masks=masks < 0.5,
             val_masks=(masks >= 0.5) & (masks < 0.75), test_masks=masks >= 0.75)


def test_fedgsp_table_runs_on_a_dataset_outside_the_shared_data(tmp_path, capsys):
    """fgx repro fedgsp_tolokers_disj_10 data_dir=<root with tolokers/raw/tolokers.npz>: here a small
    file in Tolokers' format stands in for the real one, which users download."""
    _fake_tolokers(tmp_path / "data")
    main(["repro", "fedgsp_tolokers_disj_10", f"data_dir={tmp_path / 'data'}", "rounds=2", "seed=0",
          "method=fedgsp,fedavg_unifilter,fedavg_gcn", "--out", str(tmp_path / "t")])
    out = capsys.readouterr().out
    assert "| fedgsp |" in out and "| fedavg_gcn |" in out and "roc_auc" in out


def test_a_record_drops_the_cells_its_table_no_longer_sweeps():
    """A method taken out of the preset, and runs keyed by a key the table no longer sweeps (algorithm=
    before the table swept method=), leave the record with their configs; the table's cells stay."""
    from fgx.tables.run import drop_retired_cells

    def run(sha, **over):
        return {"overrides": {k: str(v) for k, v in over.items()}, "config_sha": sha, "summary": {}}

    record = {"table": "t", "configs": {"a": {}, "b": {}, "c": {}, "d": {}},
              "runs": [run("a", method="x", seed=0), run("a", method="x", seed=1), run("b", method="gone", seed=0),
                       run("c", algorithm="x", seed=0), run("d", method="y", seed=0, lr=0.1)]}
    out = drop_retired_cells(record, {"method": "x, y", "seed": "0,1,2", "lr": "interval(0.01, 1)"})
    assert [(e["config_sha"], e["overrides"].get("seed")) for e in out["runs"]] == [("a", "0"), ("a", "1"), ("d", "0")]
    assert set(out["configs"]) == {"a", "d"}
    # a number is the same cell however the run's override spelt it (Hydra writes 1e-05 for 1e-5)
    rmax = {"table": "t", "configs": {}, "runs": [run("e", r_max="1e-05", seed=0), run("e", r_max="5e-10", seed=0)]}
    assert len(drop_retired_cells(rmax, {"r_max": "1e-5,5e-10", "seed": "0"})["runs"]) == 2
    assert len(drop_retired_cells(rmax, {"r_max": "1e-7,5e-10", "seed": "0"})["runs"]) == 1
    # nothing swept but seeds: every run stays
    assert len(drop_retired_cells(record, {"seed": "0,1"})["runs"]) == 5


def test_a_family_row_may_declare_its_own_effort(tmp_path):
    """A table of a family targets file (the FedGSP tables) that was tuned on its own says so in its
    preset (table.effort: tuned); the family's per-method sources then no longer apply to it."""
    from fgx.tables.spec import load_targets

    conf = tmp_path / "conf"
    (conf / "targets").mkdir(parents=True)
    (conf / "experiment").mkdir()
    (conf / "targets" / "fam.yaml").write_text(
        "family: true\npaper: P\nmetric: accuracy\neffort: authors\nsources: {a: the authors, b: the authors}\n")
    (conf / "experiment" / "row1.yaml").write_text("table: {targets: fam, item: one, data: real}\n")
    (conf / "experiment" / "row2.yaml").write_text("table: {targets: fam, item: two, data: real, effort: tuned}\n")
    first, second = load_targets(conf, "row1"), load_targets(conf, "row2")
    assert first["effort"] == "authors" and first["sources"] == {"a": "the authors", "b": "the authors"}
    assert second["effort"] == "tuned" and "sources" not in second and second["item"] == "two"


def test_the_reproduction_doc_counts_decisions_before_and_after_from_the_tally_and_the_records(tiny, monkeypatch):
    """docs/REPRODUCTION.md's before/after section is computed: the before counts from the committed tally
    (results/decisions_before_64.json), the now counts from the records, and each table whose decision or
    orderings changed with the reason the two tallies give (a record made again, its runs and seeds, the
    orderings' outcomes); a change to the before tally or to a record changes the section."""
    import copy

    from fgx.tables.docs import BEFORE, before_after
    from fgx.tables.tally import reason_of_change, tally

    monkeypatch.setattr("fgx.tables.spec.table_names", lambda conf: ["tiny"])   # the tally over the tiny table
    main(["repro", "tiny", "--record", "--out", str(tiny / "out")])
    now = tally(tiny / "conf", commit="now")
    assert list(now["tables"]) == ["tiny"] and now["tables"]["tiny"]["seeds"] == 2 and now["tables"]["tiny"]["runs"] == 4
    before = copy.deepcopy(now)
    before.update(commit="then", orderings={"holds": 7, "fails": 3, "inconclusive": 2})
    before["tables"]["tiny"].update(decision="not reproduced", seeds=1, runs=2, record="0123456789ab",
                                    counts={"holds": 0, "fails": 1, "inconclusive": 0})
    path = tiny / "results" / Path(BEFORE).name

    def section(b: dict) -> str:
        path.write_text(json.dumps(b))
        return "\n".join(before_after(tiny / "conf", {}))

    text = section(before)
    fmt = lambda c: f"{c['holds']} holds, {c['fails']} fails, {c['inconclusive']} inconclusive"
    assert f"commit then, `{BEFORE}`) 7 holds, 3 fails, 2 inconclusive; now {fmt(now['orderings'])}." in text
    row = next(line for line in text.splitlines() if line.startswith("| `tiny` |"))
    t = now["tables"]["tiny"]
    assert row.startswith(f"| `tiny` | not reproduced | {t['decision']} | recorded again (runs 2 → 4, seeds 1 → 2)")
    assert ("fails 1 → 0" in row) == (t["counts"]["fails"] == 0)
    before["orderings"]["holds"] = 8                                   # the before tally changes
    assert "8 holds, 3 fails" in section(before)
    same = copy.deepcopy(now)                                          # nothing changed: no row
    assert not any(line.startswith("| `tiny` |") for line in section(same).splitlines())
    rec = _record(tiny)                                                # a record changes: the now side follows
    for e in rec["runs"]:
        e["summary"]["best"]["test"]["accuracy"] = 0.9 if e["overrides"]["method"] == "local_gcn" else 0.3
        e["date"] = "2030-01-01"
    (tiny / "results" / "tiny.json").write_text(json.dumps(rec))
    changed = section(same)
    row = next(line for line in changed.splitlines() if line.startswith("| `tiny` |"))
    new = tally(tiny / "conf", commit="x")["tables"]["tiny"]
    assert new["counts"]["fails"] == 1 and t["counts"]["fails"] == 0 and new["decision"] == "not reproduced"
    assert row == f"| `tiny` | {t['decision']} | not reproduced | {reason_of_change(t, new)} |"
    assert reason_of_change(t, new).startswith("recorded again (runs 4 → 4, 2 seeds); orderings fails 0 → 1")


def test_a_trial_that_diverges_is_a_trial_that_lost_and_never_the_choice(tiny, capsys):
    """lr 0.01 × {1, 10000}: the 100 point diverges on both seeds. It is recorded as a trial (marked
    diverged, no value) and the other point is chosen; before, one diverged trial refused the method."""
    f = tiny / "conf" / "experiment" / "tiny.yaml"
    f.write_text(TINY_TABLE.replace("times: [1.0, 5.0]", "times: [1.0, 10000.0]")
                 .replace("bounds: {algorithm.lr: [0.01, 0.05]}", "bounds: {algorithm.lr: [0.01, 100.0]}"))
    assert main(["tune", "tiny", "--methods", "local_gcn", "--out", str(tiny / "tune")]) == 0
    rec = json.loads((tiny / "results" / "tiny.tune.json").read_text())["methods"]["local_gcn"]
    lost = [t for t in rec["trials"] if t["values"]["algorithm.lr"] == 100.0]
    assert len(lost) == 1 and lost[0]["val"] is None and lost[0]["diverged"] == [0, 1] and lost[0]["seeds"] == [0, 1]
    assert rec["chosen"] == {"algorithm.lr": 0.01} and rec["val"] is not None
    # every point diverging leaves nothing to choose: refused, nothing written
    f.write_text(TINY_TABLE.replace("times: [1.0, 5.0]", "times: [10000.0, 20000.0]")
                 .replace("bounds: {algorithm.lr: [0.01, 0.05]}", "bounds: {algorithm.lr: [100.0, 200.0]}"))
    capsys.readouterr()
    assert main(["tune", "tiny", "--methods", "fedavg_gcn", "--out", str(tiny / "tune2")]) == 2
    assert "every trial diverged" in capsys.readouterr().err
    assert "fedavg_gcn" not in json.loads((tiny / "results" / "tiny.tune.json").read_text())["methods"]
