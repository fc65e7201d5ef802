"""What decides a table's status, end to end: the test split's own sampling error, each run's own
provenance, staleness by code, and rows that cannot differ refused. The paired-seed test of an
ordering and the checks built on it are unit-tested in test_table_stats.py."""
from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from fgx.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_the_bootstrap_sampling_error_shrinks_with_the_split():
    import torch

    from fgx.metrics import bootstrap_standard_error

    g = torch.Generator().manual_seed(0)

    def se(n):
        y = torch.randint(0, 2, (n,), generator=g)
        scores = torch.nn.functional.one_hot(torch.where(torch.rand(n, generator=g) < 0.8, y, 1 - y), 2).float()
        client = torch.arange(n) % 2
        return bootstrap_standard_error(scores, y, client, 2, 2, 1, ("accuracy",))["accuracy"]

    small, large = se(100), se(10_000)
    # accuracy 0.8 on two clients of n/2 items: about sqrt(0.16 / n)
    assert small == pytest.approx((0.16 / 100) ** 0.5, rel=0.35)
    assert large == pytest.approx((0.16 / 10_000) ** 0.5, rel=0.35) and large < small / 5



def test_the_bootstrap_scores_its_replicates_in_bounded_passes_with_the_same_result():
    """chunk_items bounds the items scored in one pass (the memory of a million-item split's final
    evaluation, #41); the draws and the standard errors are those of a single pass, to the last bit."""
    import torch

    from fgx.metrics import bootstrap_standard_error

    g = torch.Generator().manual_seed(1)
    n = 30_011
    scores = torch.randn(n, 5, generator=g).softmax(1)
    y, client = torch.randint(0, 5, (n,), generator=g), torch.randint(0, 7, (n,), generator=g)
    whole = bootstrap_standard_error(scores, y, client, 7, 5, 1, chunk_items=1 << 30)
    assert all(v > 0 for v in whole.values())
    for chunk in (1, 2 * n, 5 * n + 3):
        assert bootstrap_standard_error(scores, y, client, 7, 5, 1, chunk_items=chunk) == whole
    # a different seed draws other resamples: the comparison above can fail
    assert bootstrap_standard_error(scores, y, client, 7, 5, 1, seed=1, chunk_items=2 * n) != whole

TINY_TABLE = """# @package _global_
defaults:
  - _self_
  - /method: local_gcn
  - optional /tuned@_global_: ${experiment}/${method}
  - override /dataset: csbm
  - override /partitioner: random
dataset: {num_nodes: 200, num_features: 8}
partitioner: {num_clients: 2}
rounds: 3
eval_every: 1
output: {checkpoint: false, progress: "off"}
table:
  gnn: {hidden: 8, lr: 0.01, weight_decay: 5.0e-4}
hydra:
  sweep:
    subdir: ${method}_s${seed}
  sweeper:
    params:
      method: local_gcn,fedavg_gcn
      seed: 0,1
"""
TINY_TARGETS = """paper: Test
item: Tiny
data: generated
metric: accuracy
by: [method]
effort: authors
sources: {local_gcn: tiny, fedavg_gcn: tiny, gcfl_gcn: tiny, fedprox_gcn: tiny}
ordering:
  - {key: method, order: [fedavg_gcn, local_gcn]}
"""


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "experiment" / "tiny.yaml").write_text(TINY_TABLE)
    (conf / "targets" / "tiny.yaml").write_text(TINY_TARGETS)
    monkeypatch.setenv("FGX_CONF_DIR", str(conf))
    monkeypatch.setenv("FGX_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_resuming_a_table_keeps_each_earlier_runs_own_provenance(tiny):
    out = tiny / "out"
    assert main(["repro", "tiny", "method=local_gcn", "--record", "--out", str(out)]) in (0, 1)
    first = {e["overrides"]["seed"]: e for e in json.loads((tiny / "results" / "tiny.json").read_text())["runs"]}
    assert main(["repro", "tiny", "--record", "--out", str(out)]) in (0, 1)     # the whole table, same folder
    runs = json.loads((tiny / "results" / "tiny.json").read_text())["runs"]
    kept = [e for e in runs if e["overrides"]["method"] == "local_gcn"]
    new = [e for e in runs if e["overrides"]["method"] == "fedavg_gcn"]
    assert len(kept) == 2 and len(new) == 2
    for e in kept:                                      # not restamped by the second invocation
        assert e["date"] == first[e["overrides"]["seed"]]["date"]
        assert e["launched_by"] == "fgx repro tiny method=local_gcn --record"
    assert all(e["launched_by"] == "fgx repro tiny --record" for e in new)


def test_a_row_removed_from_the_table_leaves_its_record(tiny):
    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) in (0, 1)
    f = tiny / "conf" / "experiment" / "tiny.yaml"
    f.write_text(TINY_TABLE.replace("method: local_gcn,fedavg_gcn", "method: fedavg_gcn"))
    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) in (0, 1)     # resumes: nothing reruns
    runs = json.loads((tiny / "results" / "tiny.json").read_text())["runs"]
    assert sorted(e["overrides"]["method"] for e in runs) == ["fedavg_gcn", "fedavg_gcn"]


def test_editing_a_source_file_a_records_runs_imported_makes_it_stale(tiny, monkeypatch):
    import fgx.provenance as provenance
    from fgx.tables.run import record_result

    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) in (0, 1)
    assert record_result(tiny / "conf", "tiny").stale == []
    # a copy of the source tree stands in for the checkout, so that a file can be edited safely
    copy = tiny / "src"
    shutil.copytree(REPO / "fgx", copy / "fgx")
    monkeypatch.setattr(provenance, "REPO", copy)
    assert record_result(tiny / "conf", "tiny").stale == []
    gcn = copy / "fgx" / "models" / "gcn.py"
    # a comment or a docstring computes nothing: the record stays current
    gcn.write_text(gcn.read_text().replace('"""', '"""Edited. ', 1) + "\n# an edit\n")
    assert record_result(tiny / "conf", "tiny").stale == []
    gcn.write_text(gcn.read_text() + "\n_AN_EDIT = 1\n")
    res = record_result(tiny / "conf", "tiny")
    assert res.status == "stale" and res.stale == ["code: fgx/models/gcn.py changed"]
    # the file's fingerprint is memoised within a process: an edit of the same size, at once, still shows
    sha = provenance.file_sha(gcn)
    gcn.write_text(gcn.read_text().replace("_AN_EDIT = 1", "_AN_EDIT = 2"))
    assert provenance.file_sha(gcn) != sha == provenance._semantic_sha(
        gcn.read_text().replace("_AN_EDIT = 2", "_AN_EDIT = 1").encode())
    (copy / "fgx" / "models" / "gcn.py").unlink()
    assert record_result(tiny / "conf", "tiny").stale == ["code: fgx/models/gcn.py removed"]
    # the code that launches and judges runs is not what they computed: editing it changes no result
    run_py = copy / "fgx" / "tables" / "run.py"
    run_py.write_text(run_py.read_text() + "\n_AN_EDIT = 1\n")
    assert record_result(tiny / "conf", "tiny").stale == ["code: fgx/models/gcn.py removed"]
    # a library version the runs used
    monkeypatch.setattr(provenance, "REPO", REPO)
    monkeypatch.setattr(provenance, "dependency_versions", lambda: {"torch": "0.0"})
    assert any(s.startswith("code: torch ") and s.endswith("→ 0.0") for s in record_result(tiny / "conf", "tiny").stale)


def test_the_docs_judge_library_versions_against_the_repository_pins_not_this_machine(monkeypatch):
    """CI's fresh install got pandas 3.1.2 the day it came out, and every record (made with 3.1.1) read
    'stale' in a regenerated docs/REPRODUCTION.md. The docs judge against constraints.txt's pins, which
    the README's install uses; a run's own check still names this machine's drift."""
    import fgx.provenance as provenance
    import fgx.tables.docs as docs

    pins = provenance.pinned_versions()
    assert None not in pins.values(), "constraints.txt must pin every library in provenance.DEPENDENCIES"
    code = {"files": {}, "deps": dict(pins, torch=pins["torch"] + "+cpu")}
    monkeypatch.setattr(provenance, "dependency_versions", lambda: dict(code["deps"], pandas="99.0"))
    assert provenance.code_changes(code) == [f"pandas {pins['pandas']} → 99.0"]
    monkeypatch.setattr(docs, "_reproduction_markdown", lambda conf: "\n".join(provenance.code_changes(code)))
    assert docs.reproduction_markdown(REPO / "conf") == ""
    assert provenance.code_changes(code) == [f"pandas {pins['pandas']} → 99.0"]     # only inside the docs
    # a record made with another version than the pin is stale in the docs as well
    code["deps"]["numpy"] = "1.0"
    assert docs.reproduction_markdown(REPO / "conf") == f"numpy 1.0 → {pins['numpy']}"


def test_a_row_that_cannot_differ_from_another_is_refused(tiny, capsys):
    f = tiny / "conf" / "experiment" / "tiny.yaml"
    # GCFL whose warm-up outlasts the run is FedAvg: refused before any job
    f.write_text(TINY_TABLE.replace("method: local_gcn,fedavg_gcn", "method: fedavg_gcn,gcfl_gcn")
                 .replace("rounds: 3\n", "rounds: 3\nalgorithm: {warmup_rounds: 5}\n"))
    assert main(["repro", "tiny", "--out", str(tiny / "o1")]) == 2
    err = capsys.readouterr().err
    assert "method=gcfl_gcn: config error: algorithm.warmup_rounds=5" in err and not (tiny / "o1").exists()
    # with its default warm-up (a tenth of the rounds) it is a row of its own
    f.write_text(TINY_TABLE.replace("method: local_gcn,fedavg_gcn", "method: fedavg_gcn,gcfl_gcn"))
    assert main(["repro", "tiny", "--dry-run"]) == 0
    # FedProx with one local step is FedAvg
    f.write_text(TINY_TABLE.replace("method: local_gcn,fedavg_gcn", "method: fedavg_gcn,fedprox_gcn")
                 .replace("rounds: 3\n", "rounds: 3\nalgorithm: {local_steps: 1}\n"))
    assert main(["repro", "tiny", "--dry-run"]) == 2
    assert "method=fedprox_gcn is fedavg: with one local step" in capsys.readouterr().err
    # two rows that resolve to one config
    (tiny / "conf" / "method" / "fedavg_gcn_copy.yaml").write_text(
        (tiny / "conf" / "method" / "fedavg_gcn.yaml").read_text().replace("method: fedavg_gcn", "method: fedavg_gcn_copy"))
    f.write_text(TINY_TABLE.replace("method: local_gcn,fedavg_gcn", "method: fedavg_gcn,fedavg_gcn_copy"))
    assert main(["repro", "tiny", "--dry-run"]) == 2
    assert "method=fedavg_gcn_copy resolves to the same config as method=fedavg_gcn" in capsys.readouterr().err


def test_no_committed_preset_has_a_row_that_cannot_differ():
    from fgx.tables.run import identical_rows
    from fgx.tables.spec import load_targets, table_names

    conf = REPO / "conf"
    for name in table_names(conf):
        if load_targets(conf, name)["accounting"] is None and not name.startswith("fedgsp_") or \
                name in ("fedgsp_cora_disj_10", "fedgsp_computers_disj_10"):
            assert identical_rows(name) == [], name


def test_repro_outside_the_checkout_leaves_the_projects_records_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("FGX_RESULTS_DIR")
    monkeypatch.chdir(tmp_path)
    before = (REPO / "results" / "ce_fedgnn_table6.json").read_bytes()
    assert main(["repro", "ce_fedgnn_table6", "--out", str(tmp_path / "t6")]) == 0
    assert (REPO / "results" / "ce_fedgnn_table6.json").read_bytes() == before
    assert json.loads((tmp_path / "t6" / "ce_fedgnn_table6.json").read_text())["table"] == "ce_fedgnn_table6"


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in modules and t != name}
    return out


def import_graph():
    import networkx as nx

    files = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (REPO / "fgx").rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, p in files.items():      # every import, also those inside functions (a lazy import is a dependency)
        g.add_edges_from((name, t) for t in _imports(p, name, set(files)))
    return g


def test_the_tables_and_the_report_have_no_import_circle_and_report_only_reads_runs():
    import networkx as nx

    g = import_graph()
    cycles = [c for c in nx.simple_cycles(g) if any(m.startswith(("fgx.tables", "fgx.report", "fgx.launch",
                                                                    "fgx.cli", "fgx.commands")) for m in c)]
    assert cycles == []
    forbidden = ("fgx.cli", "fgx.launch", "fgx.commands", "fgx.privacy", "fgx.decentral", "fgx.tables")
    for m in (n for n in g if n.startswith("fgx.report")):
        assert not [t for t in nx.descendants(g, m) if t.startswith(forbidden)], m


def test_a_spot_check_carries_a_stale_record_over_only_when_every_number_is_the_same(tiny, capsys):
    from fgx.tables.run import record_result

    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) in (0, 1)
    path = tiny / "results" / "tiny.json"
    rec = json.loads(path.read_text())
    for e in rec["runs"]:                       # as if fgx/models/gcn.py had changed since the runs
        e["code"]["files"]["fgx/models/gcn.py"] = "000000000000"
    path.write_text(json.dumps(rec))
    assert record_result(tiny / "conf", "tiny").stale == ["code: fgx/models/gcn.py changed"]

    # a recorded number the code does not give (seed 1's: the spot check reruns seed 0, then seed 1)
    tampered = json.loads(path.read_text())
    run = next(e for e in tampered["runs"] if e["overrides"] == {"method": "local_gcn", "seed": "1"})
    run["summary"]["final"]["accuracy"] += 0.01
    path.write_text(json.dumps(tampered))
    assert main(["repro", "tiny", "--spot-check", "--out", str(tiny / "spot0")]) == 0    # seed 0 is untouched
    assert record_result(tiny / "conf", "tiny").stale == []
    path.write_text(json.dumps(tampered))
    assert main(["repro", "tiny", "seed=1", "--spot-check", "--out", str(tiny / "spot1")]) == 1
    said = capsys.readouterr().out
    assert "differs: method=local_gcn seed=1: final.accuracy" in said
    assert "other CPU kernels" not in said                            # recorded on this machine's kernels
    assert json.loads(path.read_text()) == tampered                   # nothing written
    # the same difference in a run recorded under other kernels: the check names them and what to do
    elsewhere = json.loads(json.dumps(tampered))
    run = next(e for e in elsewhere["runs"] if e["overrides"] == {"method": "local_gcn", "seed": "1"})
    run["machine"]["kernels"] = {"torch": "AVX2", "blas": ["openblas Haswell"]}
    run.get("code", {}).pop("kernels", None)
    path.write_text(json.dumps(elsewhere))
    assert main(["repro", "tiny", "seed=1", "--spot-check", "--out", str(tiny / "spot1")]) == 1
    said = capsys.readouterr().out
    assert "method=local_gcn seed=1: recorded under AVX2 / openblas Haswell, rerun under " in said
    assert "rows: method=local_gcn seed=1" in said and "not carried over" in said
    path.write_text(json.dumps(tampered))
    assert record_result(tiny / "conf", "tiny").stale == ["code: fgx/models/gcn.py changed"]

    path.write_text(json.dumps(rec))
    assert main(["repro", "tiny", "seed=1", "--spot-check", "--out", str(tiny / "spot1b")]) == 0
    carried = json.loads(path.read_text())
    assert [e["summary"] for e in carried["runs"]] == [e["summary"] for e in rec["runs"]]   # numbers kept
    assert [e["date"] for e in carried["runs"]] == [e["date"] for e in rec["runs"]]         # own dates kept
    assert all(e["verified"]["seed"] == "1" and e["verified"]["rows"] == 2 for e in carried["runs"])
    assert record_result(tiny / "conf", "tiny").stale == []
    # a seed the record does not hold is refused before anything runs
    assert main(["repro", "tiny", "seed=7", "--spot-check", "--out", str(tiny / "spot7")]) == 2
    assert not (tiny / "spot7").exists()


def test_a_spot_check_compares_every_recorded_number_and_ignores_metrics_the_record_predates():
    """A rerun's metric the record lacks (one added to fgx since, like pr_auc) is no recorded number; a
    recorded number the rerun lacks or gives otherwise is a difference."""
    from fgx.tables.spotcheck import compare, retired

    recorded = {"final": {"accuracy": 0.5, "f1_minority": 0.25}, "best": {"round": 3}}
    assert compare(recorded, {"final": {"accuracy": 0.5, "f1_minority": 0.25, "pr_auc": 0.1},
                              "best": {"round": 3}}) == (3, 0.0, [])
    # on a binary task (today's rerun reports pr_auc there) a recorded f1_minority the rerun lacks differs
    assert compare(recorded, {"final": {"accuracy": 0.5, "pr_auc": 0.3}, "best": {"round": 3}})[2] == \
        ["final.f1_minority only recorded"]
    # a rerun with no binary-only metric at that state ran a multi-class task: the recorded f1_minority is
    # retired (fgx computes it on binary tasks only), not a difference; any other missing number still is
    assert compare(recorded, {"final": {"accuracy": 0.5}, "best": {"round": 3}}) == (2, 0.0, [])
    assert retired(recorded, {"final": {"accuracy": 0.5}, "best": {"round": 3}}) == {"f1_minority"}
    assert compare(recorded, {"final": {"f1_macro": 0.5}, "best": {"round": 3}})[2] == ["final.accuracy only recorded"]
    # retired per model state: a binary state (pr_auc there) that lacks f1_minority still differs
    two = {"final": {"f1_minority": 0.25}, "best": {"test": {"f1_minority": 0.25}}}
    assert compare(two, {"final": {}, "best": {"test": {"pr_auc": 0.3}}})[2] == ["best.test.f1_minority only recorded"]
    assert compare({**recorded, "status": "completed"}, {**recorded, "status": "diverged"})[2] == \
        ["status completed → diverged"]
    assert compare(recorded, {"final": {"accuracy": 0.5, "f1_minority": 0.5}, "best": {"round": 3}})[2] == \
        ["final.f1_minority 0.25 → 0.5"]


def test_a_spot_checks_command_names_no_folder_of_the_machine_that_ran_it(tmp_path, monkeypatch):
    """The command a carried-over record keeps (``verified.by``) writes an absolute data root as <data root>,
    as the runs' own commands do; a relative one stays as typed."""
    from fgx.tables.spotcheck import stored_command

    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "default"))
    root = tmp_path / "data"
    cmd = f"fgx repro t seed=0 data_dir={root} --spot-check"
    assert stored_command(cmd, [f"data_dir={root}"]) == "fgx repro t seed=0 data_dir=<data root> --spot-check"
    assert stored_command("fgx repro t seed=0 --spot-check", None) == "fgx repro t seed=0 --spot-check"
    rel = "fgx repro t seed=0 data_dir=../shared/data --spot-check"
    assert stored_command(rel, ["data_dir=../shared/data"]) == rel


def test_a_spot_check_never_verifies_with_runs_of_other_code(tiny, monkeypatch, capsys):
    """A spot-check folder that already holds reruns (an earlier check) made with other code: they are
    made again (the trainer's resume checks the code), and were one kept, the check refuses it."""
    import fgx.trainer

    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) in (0, 1)
    spot = tiny / "spot"
    assert main(["repro", "tiny", "--spot-check", "--out", str(spot)]) == 0
    for s in spot.glob("*/summary.json"):             # as if those reruns were made before a code change
        d = json.loads(s.read_text())
        d["provenance"]["code"]["files"]["fgx/models/gcn.py"] = "000000000000"
        s.write_text(json.dumps(d))
    assert main(["repro", "tiny", "--spot-check", "--out", str(spot)]) == 0          # made again
    assert all(json.loads(s.read_text())["provenance"]["code"]["files"]["fgx/models/gcn.py"] != "000000000000"
               for s in spot.glob("*/summary.json"))
    for s in spot.glob("*/summary.json"):
        d = json.loads(s.read_text())
        d["provenance"]["code"]["files"]["fgx/models/gcn.py"] = "000000000000"
        s.write_text(json.dumps(d))
    monkeypatch.setattr(fgx.trainer, "_code_changed_since", lambda summary: [])      # a resume that kept them
    capsys.readouterr()
    assert main(["repro", "tiny", "--spot-check", "--out", str(spot)]) == 2
    assert "made with other code (fgx/models/gcn.py changed)" in capsys.readouterr().err


def test_two_jobs_recording_into_one_table_at_once_both_land(tiny, monkeypatch):
    """Two `fgx repro T --record` (or `fgx tune T --methods`) jobs that finish together: each reads the
    record, adds its runs and writes it back. Each read waits here, so without the record's lock both
    read the empty record and the later write drops the other job's runs."""
    import threading
    import time

    import fgx.tables.records as records
    from fgx.tables.records import merge, update_record

    read = records.load_record

    def slow_read(conf, name):
        got = read(conf, name)
        time.sleep(0.3)
        return got

    monkeypatch.setattr(records, "load_record", slow_read)
    entry = lambda method: {"overrides": {"method": method, "seed": "0"}, "summary": {}, "config_sha": method}
    jobs = [threading.Thread(target=update_record, args=(tiny / "conf", "tiny",
                                                         lambda base, m=m: merge(base, "tiny", [entry(m)], {m: {}})))
            for m in ("local_gcn", "fedavg_gcn")]
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()
    rec = json.loads((tiny / "results" / "tiny.json").read_text())
    assert sorted(e["overrides"]["method"] for e in rec["runs"]) == ["fedavg_gcn", "local_gcn"]
    assert sorted(rec["configs"]) == ["fedavg_gcn", "local_gcn"]
    assert not list((tiny / "results").glob(".*lock"))          # no lock file left in results/


def test_a_spot_check_refuses_a_record_another_job_wrote_while_it_ran(tiny, monkeypatch, capsys):
    """The spot check reads the record, reruns a seed for minutes, then writes the record carried over:
    runs another job recorded meanwhile would be lost, so it refuses and leaves the record as it is."""
    import fgx.launch

    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) in (0, 1)
    path = tiny / "results" / "tiny.json"
    launch = fgx.launch.run

    def launch_while_another_job_records(args):
        launch(args)
        rec = json.loads(path.read_text())
        rec["runs"][0]["date"] = "written by another job"
        path.write_text(json.dumps(rec))

    monkeypatch.setattr(fgx.launch, "run", launch_while_another_job_records)
    capsys.readouterr()
    assert main(["repro", "tiny", "--spot-check", "--out", str(tiny / "spot")]) == 2
    assert "changed while the spot check ran" in capsys.readouterr().err
    assert json.loads(path.read_text())["runs"][0]["date"] == "written by another job"


def test_a_record_that_cannot_be_locked_is_a_clear_error_not_a_traceback(tmp_path, monkeypatch):
    from fgx.report.runs import ReportError
    from fgx.tables.records import update_record

    (tmp_path / "results").write_text("a file where the results folder should be")
    monkeypatch.setenv("FGX_RESULTS_DIR", str(tmp_path / "results"))
    with pytest.raises(ReportError, match="cannot lock the record results/t.json"):
        update_record(tmp_path / "conf", "t", lambda r: {"table": "t", "runs": []})


def test_a_table_recorded_in_parts_reads_partial_not_failing_until_every_run_is_in(tiny):
    from fgx.tables.docs import _checks_cell
    from fgx.tables.run import record_result

    assert main(["repro", "tiny", "method=local_gcn", "--record", "--out", str(tiny / "out")]) in (0, 1)
    part = record_result(tiny / "conf", "tiny")
    assert part.status == "stale" and "not run" in part.verdict    # fedavg_gcn's ordering check lacks its rows
    assert _checks_cell(part, 4) == "partial record: 2 of 4 runs; checks wait for the rest"
    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) in (0, 1)
    whole = record_result(tiny / "conf", "tiny")
    assert _checks_cell(whole, 4) == whole.verdict and "partial" not in whole.verdict


@pytest.mark.parametrize("name", ["lpsfed_table1_ml100k", "mafalda_karate", "mafalda_florentine", "mafalda_fig3_ego",
                                  "mafalda_fig5_ego", "mafalda_fig5_peertube", "scalegun_table1_arxiv",
                                  "scalegun_table3_arxiv", "graph_mutag"])
def test_no_committed_ordering_is_decided_without_an_evaluation_data_term(name, monkeypatch):
    """A ranking, regression or unlearning table's ordering is decided only with its test items' term (the
    runs' replicates, or the bound from their standard errors); records without either stay undecided. An
    ordering against a row that diverged on every seed is decided by who diverged (the sign test), with no
    test items to weigh."""
    import math

    from fgx.tables.run import record_result
    from fgx.tables.stats import NO_DATA, SIGN_TEST

    monkeypatch.delenv("FGX_RESULTS_DIR", raising=False)         # the committed records
    res = record_result(REPO / "conf", name, check_stale=False)
    orderings = [c for c in res.checks if c.kind == "ordering" and c.test is not None]
    assert orderings, name
    for c in orderings:
        if c.test.data.endswith(SIGN_TEST):
            assert not math.isfinite(c.test.mean) and c.test.p is not None, c.what
        elif c.outcome in ("holds", "fails"):
            assert c.test.data != NO_DATA and math.isfinite(c.test.se_items), c.what
        if c.test.data == NO_DATA:
            assert c.outcome == "inconclusive" and c.test.p is None, c.what


def test_a_cell_whose_rerun_diverges_replaces_its_record_and_the_table_reads_diverged(tiny, capsys):
    """A diverged run is a cell of the record: `--record` replaces the cell's earlier completed run with it
    (else a table whose rerun diverges would keep its old runs and stay stale forever), the checks that
    need its row say "diverged" (not "not run", never "holds"), and a spot check compares its status and
    where it diverged."""
    from fgx.tables.run import record_result

    path = tiny / "results" / "tiny.json"
    assert main(["repro", "tiny", "--record", "--out", str(tiny / "ok")]) in (0, 1)
    assert {e["summary"]["status"] for e in json.loads(path.read_text())["runs"]} == {"completed"}
    exp = tiny / "conf" / "experiment" / "tiny.yaml"
    exp.write_text(TINY_TABLE.replace("lr: 0.01", "lr: 100"))      # today's preset: every run blows up
    capsys.readouterr()
    before = path.read_text()
    assert main(["repro", "tiny", "--spot-check", "--out", str(tiny / "spot")]) == 1
    assert "status completed → diverged" in capsys.readouterr().out
    assert path.read_text() == before                                # nothing carried over

    assert main(["repro", "tiny", "--record", "--out", str(tiny / "div")]) == 1
    runs = json.loads(path.read_text())["runs"]
    assert len(runs) == 4 and {e["summary"]["status"] for e in runs} == {"diverged"}
    assert all(e["summary"]["diverged"]["round"] >= 1 for e in runs)
    res = record_result(tiny / "conf", "tiny")
    assert res.stale == [] and res.status == "diverged"
    (order,) = [c for c in res.checks if c.kind == "ordering"]
    assert order.outcome == "diverged" and "fedavg_gcn (2 seed(s), every one)" in order.fgx
    assert "4 run(s) diverged" in res.problems

    rec = json.loads(path.read_text())        # the diverged record, spot-checked at "other" code
    for e in rec["runs"]:
        e["code"]["files"]["fgx/models/gcn.py"] = "000000000000"
    tampered = json.loads(json.dumps(rec))
    tampered["runs"][0]["summary"]["diverged"]["loss"] *= 2
    path.write_text(json.dumps(tampered))
    capsys.readouterr()
    assert main(["repro", "tiny", "--spot-check", "--out", str(tiny / "spot2")]) == 1
    assert "diverged.loss" in capsys.readouterr().out
    path.write_text(json.dumps(rec))
    assert main(["repro", "tiny", "--spot-check", "--out", str(tiny / "spot3")]) == 0
    assert record_result(tiny / "conf", "tiny").stale == []


def test_a_row_where_some_seeds_diverged_is_compared_on_the_rest_and_says_so():
    from fgx.report.runs import Run
    from fgx.tables.checks import table_from_runs

    def run(method, seed, acc=None):
        s = {"status": "completed" if acc is not None else "diverged", "main_metric": "accuracy", "seed": seed,
             "final": {"accuracy": 0.1 if acc is None else acc}}
        if acc is None:
            s["diverged"] = {"round": 2, "loss": 1e9, "reference": 1.0}
        return Run(Path(f"r/{method}{seed}"), s["status"], {"method": method, "seed": str(seed)}, s)

    t = {"paper": "P", "item": "I", "data": "d", "metric": "accuracy", "by": ["method"],
         "rows": [{"where": {"method": "b"}, "paper": 0.5, "tolerance": 0.1},
                  {"where": {"method": "z"}, "paper": 0.5, "tolerance": 0.1}],
         "ordering": [{"key": "method", "order": ["a", "c"]}]}
    runs = [run("a", s, 0.8 + s / 100) for s in range(3)] + [run("b", s) for s in range(3)] + \
        [run("c", 0), run("c", 1, 0.5), run("c", 2, 0.52)]
    res = table_from_runs("x", t, runs)
    by_what = {c.what: c for c in res.checks}
    assert by_what["accuracy of method=b"].outcome == "diverged"
    assert by_what["accuracy of method=z"].outcome == "not run"       # never ran: not the same thing
    (order,) = [c for c in res.checks if c.kind == "ordering"]
    assert order.test.n == 2                                           # c's diverged seed is not paired
    assert any("method=c: 1 of 3" in n for n in res.notes)
    assert "| c | 2 |" in res.table_markdown


def test_a_spot_check_retires_a_binary_only_metric_an_older_record_held_on_a_multi_class_task(tiny, capsys):
    """csbm is multi-class: today's runs report no f1_minority. A record made when fgx still did carries
    over once every other number is equal, with that metric dropped from every run of the row."""
    assert main(["repro", "tiny", "--record", "--out", str(tiny / "out")]) in (0, 1)
    path = tiny / "results" / "tiny.json"
    rec = json.loads(path.read_text())
    for e in rec["runs"]:
        e["code"]["files"]["fgx/models/gcn.py"] = "000000000000"
        e["summary"]["final"]["f1_minority"] = 0.3
        e["summary"]["best"]["test"]["f1_minority"] = 0.3
        e["summary"]["sampling_se"]["f1_minority"] = 0.01
    path.write_text(json.dumps(rec))
    capsys.readouterr()
    assert main(["repro", "tiny", "--spot-check", "--out", str(tiny / "spot")]) == 0
    assert "retired" in capsys.readouterr().out
    carried = json.loads(path.read_text())
    assert "f1_minority" not in json.dumps([e["summary"] for e in carried["runs"]])
    assert all(e["verified"]["retired"] == ["f1_minority"] for e in carried["runs"])
    assert [e["summary"]["final"]["accuracy"] for e in carried["runs"]] == \
        [e["summary"]["final"]["accuracy"] for e in rec["runs"]]
    # a later spot check (nothing left to retire) keeps saying what an earlier one dropped
    assert main(["repro", "tiny", "--spot-check", "--out", str(tiny / "spot")]) == 0
    assert all(e["verified"]["retired"] == ["f1_minority"] for e in json.loads(path.read_text())["runs"])


def test_a_row_that_diverged_on_every_seed_does_not_clear_the_floor_by_being_left_out():
    """link_cora's SCAFFOLD diverges on every seed today: its floor check must say so, not vanish with
    its row (a check that passes because its row is missing is a defect)."""
    from fgx.report.runs import Run
    from fgx.tables.checks import table_from_runs

    def run(method, seed, auc=None):
        s = {"status": "diverged" if auc is None else "completed", "main_metric": "roc_auc", "seed": seed,
             "final": {"roc_auc": 0.5 if auc is None else auc}}
        if auc is None:
            s["diverged"] = {"round": 11, "loss": None, "reference": 0.69}
        return Run(Path(f"r/{method}{seed}"), s["status"], {"method": method, "seed": str(seed)}, s)

    t = {"paper": "P", "item": "I", "data": "d", "metric": "roc_auc", "by": ["method"], "floor": 0.1}
    res = table_from_runs("x", t, [run("fedavg", s, 0.8) for s in range(2)] + [run("scaffold", s) for s in range(2)])
    floors = {c.what.split(":")[0]: c.outcome for c in res.checks if c.kind == "floor"}
    assert floors == {"method=fedavg": "holds", "method=scaffold": "diverged"}
    assert res.count("diverged") == 1
    # no completed run at all: the floor checks are still there, each diverged
    res = table_from_runs("x", t, [run("scaffold", s) for s in range(2)])
    assert [c.outcome for c in res.checks if c.kind == "floor"] == ["diverged"]
