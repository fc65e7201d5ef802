"""What a run prints and writes reads as what it is (issue #66): the summary's pooled column is named
"pooled" (every client's items as one set), not "global" (that is `eval_model=global`, the server's
model); f1_minority only on a binary task; means over clients leave out the clients on which a metric
is undefined and say how many; every run says at start how much local training a round is."""
import json

TINY = ["dataset=csbm", "dataset.num_nodes=300", "dataset.num_features=16", "model.hidden=16", "rounds=2",
        "eval_every=1"]


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_pooled_values_are_named_pooled_and_f1_minority_is_binary_only(run_fgx, capsys):
    run = run_fgx("algorithm=fedavg", "partitioner=random", "partitioner.num_clients=3", *TINY)
    s = json.loads((run / "summary.json").read_text())
    assert "final_global" not in s and set(s["final_pooled"]) == set(s["final"])
    assert "f1_minority" not in s["final"]                   # 5 classes: no "minority" class to score
    assert all("pooled" in r and "global" not in r for r in _rows(run))
    header = capsys.readouterr().out.split("accuracy")[0]
    assert "pooled" in header and "global" not in header.split("fedavg on")[-1]
    binary = run_fgx("algorithm=fedavg", "partitioner=random", "partitioner.num_clients=3", *TINY,
                     "dataset.num_classes=2")
    assert "f1_minority" in json.loads((binary / "summary.json").read_text())["final"]


def test_means_over_clients_skip_one_class_clients_and_count_them(run_fgx, capsys):
    run = run_fgx("algorithm=fedavg", "partitioner=label_dirichlet", "partitioner.num_clients=6",
                  "partitioner.alpha=0.3", *TINY, "dataset.num_classes=2")
    s = json.loads((run / "summary.json").read_text())
    per = s["per_client"]
    one_class = [c for c in per if c["f1_macro"] is None]         # undefined: null in JSON
    assert one_class and s["final_clients_skipped"]["f1_macro"] == len(one_class)
    defined = [c["f1_macro"] for c in per if c["f1_macro"] is not None]
    assert defined
    assert abs(s["final"]["f1_macro"] - sum(defined) / len(defined)) < 1e-12
    last = [r for r in _rows(run) if r["split"] == "test"][-1]
    assert last["clients_skipped"] == s["final_clients_skipped"]
    out = capsys.readouterr().out
    assert f"{6 - len(one_class)} of 6" in out and "leaves out clients whose value is undefined" in out


def test_every_run_states_its_local_work_per_round(run_fgx):
    run = run_fgx("algorithm=fedavg", "partitioner=random", "partitioner.num_clients=3", *TINY)
    assert "local work: 10 gradient step(s) per client per round (full batch" in (run / "fgx.log").read_text()
    run = run_fgx("algorithm=fedavg", "partitioner=random", "partitioner.num_clients=3", *TINY,
                  "algorithm.local_epochs=2", "algorithm.batch_size=8")
    log = (run / "fgx.log").read_text()
    partition = json.loads((run / "partition.json").read_text())
    assert "local work: 2 pass(es) over each client's training items per round (batches of 8" in log, log
