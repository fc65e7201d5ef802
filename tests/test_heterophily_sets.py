"""Chameleon, Squirrel and Actor: Platonov et al.'s filtered .npz files (`dataset=chameleon_filtered`,
`squirrel_filtered`, `actor`) and Geom-GCN's files through PyG's WikipediaNetwork / Actor
(`dataset=chameleon`, `squirrel`, `actor_pyg`). Files generated here in the authors' formats."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from fgx.data.base import DataEnv, DataError


def write_platonov_npz(root: Path, name: str, n: int = 120, seed: int = 0) -> dict:
    """A file with the arrays and shapes of the authors' `data/<name>.npz` (5 classes, 10 splits,
    edges [E, 2], one direction each)."""
    g = np.random.default_rng(seed)
    y = g.integers(0, 5, n)
    src = g.integers(0, n, 4 * n)
    dst = g.integers(0, n, 4 * n)
    keep = src != dst
    order = g.permutation(n)
    train = np.zeros((10, n), bool)
    val = np.zeros((10, n), bool)
    test = np.zeros((10, n), bool)
    for s in range(10):
        perm = np.roll(order, 7 * s)
        train[s, perm[: n // 2]], val[s, perm[n // 2: 3 * n // 4]], test[s, perm[3 * n // 4:]] = True, True, True
    arrays = {"node_features": (g.normal(size=(n, 6)) + y[:, None]).astype(np.float32), "node_labels": y,
              "edges": np.stack([src[keep], dst[keep]], 1), "train_masks": train, "val_masks": val,
              "test_masks": test}
    raw = root / name / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    np.savez(raw / f"{name}.npz", **arrays)
    return arrays


def write_geom_gcn(raw: Path, name: str, n: int = 60, f: int = 7, seed: int = 0) -> dict:
    """Geom-GCN's files as PyG downloads them: a header line, then `id<TAB>features<TAB>label` (dense
    comma-separated values; for Actor the indices of the non-zero features), `src<TAB>dst` edges, and
    ten split .npz files with train_mask/val_mask/test_mask."""
    g = np.random.default_rng(seed)
    raw.mkdir(parents=True, exist_ok=True)
    y = g.integers(0, 5, n)
    lines = ["node_id\tfeature\tlabel"]
    for i in range(n):
        if name == "actor":
            feats = ",".join(str(c) for c in sorted(g.choice(f, 3, replace=False)))
        else:
            feats = ",".join(str(int(v)) for v in (g.random(f) < 0.4))
        lines.append(f"{i}\t{feats}\t{y[i]}")
    (raw / "out1_node_feature_label.txt").write_text("\n".join(lines) + "\n")
    edges = {(int(a), int(b)) for a, b in g.integers(0, n, (3 * n, 2)) if a != b}
    (raw / "out1_graph_edges.txt").write_text("node_id\tnode_id\n" + "".join(f"{a}\t{b}\n" for a, b in sorted(edges)))
    prefix = "film" if name == "actor" else name
    masks = []
    for s in range(10):
        perm = g.permutation(n)
        m = {k: np.zeros(n, np.uint8) for k in ("train_mask", "val_mask", "test_mask")}
        m["train_mask"][perm[: int(0.6 * n)]] = 1
        m["val_mask"][perm[int(0.6 * n): int(0.8 * n)]] = 1
        m["test_mask"][perm[int(0.8 * n):]] = 1
        np.savez(raw / f"{prefix}_split_0.6_0.2_{s}.npz", **m)
        masks.append(m)
    return {"y": y, "edges": edges, "masks": masks}


def env(root: Path) -> DataEnv:
    return DataEnv(Path(root), 0, logging.getLogger("test"))


@pytest.mark.parametrize("name", ["chameleon_filtered", "squirrel_filtered", "actor"])
def test_fgx_runs_on_each_platonov_file_from_a_user_data_root(name, tmp_path, run_fgx):
    arrays = write_platonov_npz(tmp_path / "data", name)
    run = run_fgx(f"dataset={name}", f"data_dir={tmp_path / 'data'}", "algorithm=fedavg", "partitioner=metis",
                  "partitioner.num_clients=3", "rounds=2", "model.hidden=8", "dataset.split=fixed",
                  "dataset.fixed_split_index=3")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["data"]["name"] == name
    # the file's 4th split, made undirected as PyG does for the other heterophilous sets
    from fgx.data.heterophilous import HeterophilousParams, load_heterophilous

    ds = load_heterophilous(HeterophilousParams(dataset=name, split="fixed", fixed_split_index=3),
                            env(tmp_path / "data"))
    assert torch.equal(ds.data.train_mask, torch.from_numpy(arrays["train_masks"][3]))
    assert not torch.equal(ds.data.train_mask, torch.from_numpy(arrays["train_masks"][2]))
    pairs = {tuple(e) for e in ds.data.edge_index.t().tolist()}
    assert all((b, a) in pairs and (a, b) in pairs for a, b in arrays["edges"].tolist())
    assert ds.info.num_classes == 5 and ds.info.main_metric == "accuracy"


def test_a_label_beyond_five_classes_in_a_filtered_file_is_refused_naming_it(tmp_path):
    from fgx.data.heterophilous import HeterophilousParams, load_heterophilous

    arrays = write_platonov_npz(tmp_path, "squirrel_filtered")
    arrays["node_labels"][4] = 5
    np.savez(tmp_path / "squirrel_filtered" / "raw" / "squirrel_filtered.npz", **arrays)
    with pytest.raises(DataError, match="squirrel_filtered.npz"):
        load_heterophilous(HeterophilousParams(dataset="squirrel_filtered"), env(tmp_path))
    assert not (tmp_path / "squirrel_filtered" / "processed").exists()


@pytest.mark.parametrize("name,folder", [("chameleon", "chameleon/geom_gcn"), ("squirrel", "squirrel/geom_gcn"),
                                         ("actor", "actor_pyg")])
def test_geom_gcn_files_load_through_pygs_classes(name, folder, tmp_path):
    from fgx.data.geom_gcn import GeomGcnParams, load_geom_gcn

    made = write_geom_gcn(tmp_path / folder / "raw", name)
    ds = load_geom_gcn(GeomGcnParams(dataset=name, split="fixed", fixed_split_index=2), env(tmp_path))
    d = ds.data
    assert d.num_nodes == 60 and torch.equal(d.y, torch.from_numpy(made["y"]).long())
    assert torch.equal(d.train_mask, torch.from_numpy(made["masks"][2]["train_mask"]).bool())
    pairs = {tuple(e) for e in d.edge_index.t().tolist()}
    assert all((b, a) in pairs for a, b in made["edges"])      # made undirected
    assert (tmp_path / folder / "processed" / ".fgx-complete").is_file()
    directed = load_geom_gcn(GeomGcnParams(dataset=name, undirected=False), env(tmp_path)).data
    assert {tuple(e) for e in directed.edge_index.t().tolist()} == made["edges"]
    if name == "actor":     # sparse feature indices become a 0/1 matrix
        assert set(d.x.unique().tolist()) <= {0.0, 1.0} and int(d.x.sum()) == 3 * 60


def test_fgx_runs_on_pyg_chameleon(tmp_path, run_fgx):
    write_geom_gcn(tmp_path / "data" / "chameleon" / "geom_gcn" / "raw", "chameleon", n=90)
    run = run_fgx("dataset=chameleon", f"data_dir={tmp_path / 'data'}", "algorithm=fedavg", "partitioner=metis",
                  "partitioner.num_clients=3", "rounds=2", "model.hidden=8")
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_a_missing_dataset_offline_names_data_dir(tmp_path):
    """No files and no network: the error says to point data_dir at the files, not that a file is damaged."""
    import socket
    from unittest import mock

    from fgx.data.heterophilous import HeterophilousParams, load_heterophilous

    with mock.patch("urllib.request.urlopen", side_effect=__import__("urllib.error").error.URLError(
            socket.gaierror(-3, "Temporary failure in name resolution"))):
        with pytest.raises(DataError) as e:
            load_heterophilous(HeterophilousParams(dataset="chameleon_filtered"), env(tmp_path))
    msg = str(e.value)
    assert "downloading them failed" in msg and "data_dir=<data root>" in msg and "damaged" not in msg, msg
    # the folder the loader reads, not its parent (issue #66: the message named <root>/chameleon_filtered)
    assert f"not in {tmp_path / 'chameleon_filtered' / 'raw'} " in msg and msg.endswith("chameleon_filtered/raw"), msg
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".lock") or ".tmp-" in p.name]
