"""dataset=fedgb: FedGB schema-1.0 natural-client folders (written here by tests/fedgb_folder.py) run
as fgx clients through partitioner=given; other schema versions, levels and damaged files are refused
(the fuzzing of damaged folders is in tests/test_hostile_files.py)."""
from __future__ import annotations

import json
import os

import pytest
import torch

from fedgb_folder import make_fedgb, write_sums
from fgx.data.base import DataError


def test_fedavg_runs_on_a_schema_1_0_folder_with_the_data_s_own_clients(run_fgx, tmp_path):
    folder = make_fedgb(tmp_path / "fedgb", variant="TOY", num_clients=3, nodes=40, classes=3)
    run = run_fgx("dataset=fedgb", "dataset.variant=TOY", f"dataset.root={tmp_path / 'fedgb'}", "algorithm=fedavg",
                  "rounds=2", "eval_every=1", "model.hidden=8")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and s["components"]["partitioner"] == "given"
    assert s["data"]["name"] == "fedgb_TOY" and s["data"]["checksums_verified"] > 0
    part = json.loads((run / "partition.json").read_text())
    assert part["num_clients"] == 3 and part["cross_client_edges"] == 0
    for i, c in enumerate(part["clients"]):             # client i is exactly data_i.pt
        from fgx.data.fedgb import load_pt
        d = load_pt(folder / "distrib" / "natural" / f"data_{i}.pt")
        assert c["nodes"] == d.num_nodes and 2 * c["edges"] == d.edge_index.size(1)   # undirected pairs
        assert c["label_counts"] == torch.bincount(d.y, minlength=3).tolist()


def test_the_fixed_splits_are_the_released_ones(tmp_path):
    import logging

    from fgx.data.base import DataEnv
    from fgx.data.fedgb import FedGBParams, load_fedgb, load_pt

    folder = make_fedgb(tmp_path, num_clients=2, nodes=12)
    ds = load_fedgb(FedGBParams(variant="TOY", root=str(tmp_path)), DataEnv(tmp_path, 0, logging.getLogger("t")))
    split = folder / "distrib" / "natural" / "node_cls" / "default_split"
    for s, mask in (("train", ds.data.train_mask), ("val", ds.data.val_mask), ("test", ds.data.test_mask)):
        assert torch.equal(mask, torch.cat([load_pt(split / f"{s}_{i}.pt") for i in range(2)]))
    assert ds.data.client.tolist() == [0] * 12 + [1] * 12


@pytest.mark.parametrize("change, message", [
    ({"schema_version": "2.0"}, "schema_version '2.0'; fgx reads FedGB schema '1.0' only"),
    ({"schema_version": None}, "schema_version None"),
    ({"level": "hetero_subgraph"}, "homogeneous-subgraph node-classification variants"),
    ({"level": "graph", "task": "graph_cls"}, "homogeneous-subgraph node-classification variants"),
    ({"num_clients": 5}, "data_3.pt: missing"),
])
def test_other_schemas_and_levels_are_refused_clearly(run_fgx, tmp_path, capsys, change, message):
    folder = make_fedgb(tmp_path / "fedgb", sums=False)
    manifest = json.loads((folder / "fedgb_manifest.json").read_text())
    manifest.update(change)
    (folder / "fedgb_manifest.json").write_text(json.dumps(manifest))
    # a data error found when loading: exit 2, the message names the problem, no run directory is kept
    run = run_fgx("dataset=fedgb", "dataset.variant=TOY", f"dataset.root={tmp_path / 'fedgb'}", "algorithm=fedavg",
                  "rounds=1", expect_rc=2)
    err = capsys.readouterr().err
    assert "data error" in err and message in err, err
    assert not run.exists()


def test_a_file_that_does_not_match_sha256sums_is_refused(tmp_path):
    import logging

    from fgx.data.base import DataEnv
    from fgx.data.fedgb import FedGBParams, load_fedgb

    folder = make_fedgb(tmp_path)
    target = folder / "distrib" / "natural" / "data_1.pt"
    target.write_bytes(target.read_bytes() + b"\0")
    env = DataEnv(tmp_path, 0, logging.getLogger("t"))
    with pytest.raises(DataError, match=r"data_1\.pt: SHA-256 does not match"):
        load_fedgb(FedGBParams(variant="TOY", root=str(tmp_path)), env)
    load_fedgb(FedGBParams(variant="TOY", root=str(tmp_path), verify_checksums=False), env)   # the user's choice
    write_sums(folder)
    (folder / "distrib" / "natural" / "data_2.pt").unlink()
    with pytest.raises(DataError, match=r"data_2\.pt is listed but missing"):
        load_fedgb(FedGBParams(variant="TOY", root=str(tmp_path)), env)


def test_a_client_file_carrying_code_is_refused_unread(tmp_path):
    import logging

    from fgx.data.base import DataEnv
    from fgx.data.fedgb import FedGBParams, load_fedgb

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    folder = make_fedgb(tmp_path, sums=False)
    torch.save(Payload(), folder / "distrib" / "natural" / "data_0.pt")
    with pytest.raises(DataError, match=r"data_0\.pt: not a readable FedGB tensor file"):
        load_fedgb(FedGBParams(variant="TOY", root=str(tmp_path)), DataEnv(tmp_path, 0, logging.getLogger("t")))
    assert not marker.exists()


def test_given_partitioner_needs_a_dataset_with_clients(tmp_path, monkeypatch):
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="partitioner.name='given'.*brings no clients of its own"):
        main(["run", "dataset=csbm", "partitioner=given"])
    with pytest.raises(SystemExit, match="dataset.variant=''"):
        main(["run", "dataset=fedgb", "algorithm=fedavg"])
