"""dataset=fedgb: FedGB schema-1.0 natural-client folders (written here by tests/fedgb_folder.py) run
as fgx clients through partitioner=given; other schema versions, levels and damaged files are refused
(the fuzzing of damaged folders is in tests/test_hostile_files.py)."""
from __future__ import annotations

import json
import os

import pytest
import torch

from fedgb_folder import make_fedgb, make_fedgb_export, release_archive, write_sums
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


def test_a_folder_written_by_fedgbs_exporter_runs_with_its_dict_global_map(run_fgx, tmp_path):
    """FedGB's exporter writes global_map as a dict {local: global} (and no feature_dim/num_classes in
    the manifest); FedGB's own loader reads it, and so must fgx."""
    import logging

    from fgx.data.base import DataEnv
    from fgx.data.fedgb import FedGBParams, load_fedgb, load_pt

    folder = make_fedgb_export(tmp_path / "fedgb")
    client = load_pt(folder / "distrib" / "subgraph_fl_louvain_1_ACM_client_3" / "data_1.pt")
    assert isinstance(client.global_map, dict) and client.num_global_classes == 3
    ds = load_fedgb(FedGBParams(variant="EICU-Hom", root=str(tmp_path / "fedgb")),
                    DataEnv(tmp_path, 0, logging.getLogger("t")))
    assert ds.info.num_classes == 3 and ds.info.extra["nodes_in_several_clients"] == 0
    assert ds.data.num_nodes == 90 and ds.data.client.tolist() == [0] * 30 + [1] * 30 + [2] * 30
    assert torch.equal(ds.data.x[30:60], client.x) and torch.equal(ds.data.y[30:60], client.y)
    run = run_fgx("dataset=fedgb", "dataset.variant=EICU-Hom", f"dataset.root={tmp_path / 'fedgb'}",
                  "algorithm=fedavg", "rounds=2", "model.hidden=8")
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_global_map_is_read_as_fedgbs_loader_reads_it(tmp_path):
    from fgx.data.fedgb import global_map_tensor

    p = tmp_path / "data_0.pt"
    assert global_map_tensor(p, {0: 17, 1: 5, 2: 40}, 3).tolist() == [17, 5, 40]          # {local: global}
    assert global_map_tensor(p, {17: 2, 5: 0, 40: 1}, 3).tolist() == [5, 40, 17]          # {global: local}
    assert global_map_tensor(p, [4, 9, 1], 3).tolist() == [4, 9, 1]
    assert global_map_tensor(p, torch.tensor([4, 9, 1]), 3).tolist() == [4, 9, 1]
    for bad, message in (({0: 1, 1: 7}, "one entry per local node"), ({0: "a", 1: 2, 2: 3}, "integers to integers"),
                         ("x", "a tensor, a list or a dict")):
        with pytest.raises(DataError, match=message):
            global_map_tensor(p, bad, 3)


def test_two_clients_holding_one_global_node_are_counted(tmp_path):
    import logging

    from fgx.data.base import DataEnv
    from fgx.data.fedgb import FedGBParams, load_fedgb, load_pt

    folder = make_fedgb_export(tmp_path)
    path = folder / "distrib" / "subgraph_fl_louvain_1_ACM_client_3" / "data_2.pt"
    d = load_pt(path)
    other = load_pt(path.with_name("data_0.pt")).global_map
    d.global_map = {**d.global_map, 0: other[0], 1: other[1]}     # two stays also in client 0
    torch.save(d, path)
    ds = load_fedgb(FedGBParams(variant="EICU-Hom", root=str(tmp_path)), DataEnv(tmp_path, 0, logging.getLogger("t")))
    assert ds.info.extra["nodes_in_several_clients"] == 2


def test_the_release_archive_is_verified_then_extracted(tmp_path):
    """FedGB's SHA256SUMS covers the archive: with dataset.archive fgx checks it, and extracts the
    release into root (the `datasets/` folder inside the archive unwrapped) only when it matches."""
    import logging

    from fgx.data.base import DataEnv
    from fgx.data.fedgb import FedGBParams, load_fedgb

    pytest.importorskip("zstandard", reason="zstandard is not installed (pip install -e '.[fedgb]')")
    make_fedgb_export(tmp_path / "src")
    archive = release_archive(tmp_path / "src", tmp_path / "download")
    env = DataEnv(tmp_path, 0, logging.getLogger("t"))
    good = archive.read_bytes()
    archive.write_bytes(good[:-7] + bytes(b ^ 1 for b in good[-7:]))
    root = tmp_path / "fedgb"
    with pytest.raises(DataError, match="FedGB-datasets-v1.0.0.tar.zst: SHA-256 does not match"):
        load_fedgb(FedGBParams(variant="EICU-Hom", root=str(root), archive=str(archive)), env)
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.endswith(".lock")]
    archive.write_bytes(good)
    ds = load_fedgb(FedGBParams(variant="EICU-Hom", root=str(root), archive=str(archive)), env)
    assert ds.data.num_nodes == 90 and (root / "EICU-Hom" / "fedgb_manifest.json").is_file()
    assert not list(root.glob(".fedgb.tmp-*"))
    (archive.parent / "SHA256SUMS").unlink()
    with pytest.raises(DataError, match="SHA256SUMS: missing"):
        load_fedgb(FedGBParams(variant="EICU-Hom", root=str(root), archive=str(archive)), env)
