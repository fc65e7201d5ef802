"""The link task's data (docs/link_prediction.md): the temporal split and its generated graph, ogbl-collab
through OGB's loader (a miniature in OGB's own layout), and the offline errors that name the files."""
from __future__ import annotations

import gzip
import json
import logging
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch

from fgx.data.base import DataEnv, DataError
from fgx.link.params import TaskParams


def env(root: Path) -> DataEnv:
    return DataEnv(data_dir=Path(root), seed=0, log=logging.getLogger("test"))


def pair_split(ds) -> dict[tuple[int, int], int]:
    ei, n = ds.data.edge_index, ds.data.num_nodes
    return dict(zip(zip(ei.min(0).values.tolist(), ei.max(0).values.tolist()), ds.data.link_split.tolist()))


def first_times(data) -> dict[tuple[int, int], float]:
    out = {}
    for (u, v), t in zip(data.edge_index.t().tolist(), data.edge_time.view(-1).tolist()):
        key = (min(u, v), max(u, v))
        out[key] = min(t, out.get(key, float("inf")))
    return out


def test_temporal_split_tests_the_last_time_validates_the_one_before_and_trains_on_the_window():
    from torch_geometric.data import Data

    from fgx.data.base import DatasetInfo, GraphDataset
    from fgx.link.split import as_link_dataset

    # pairs (0,1) at t=0 and again at t=4 (a repeat keeps its first time), (1,2) t=1, (2,3) t=2, (3,4) t=3, (0,4) t=4
    ei = torch.tensor([[0, 1, 2, 3, 0, 0], [1, 2, 3, 4, 4, 1]])
    data = Data(x=torch.randn(5, 2), edge_index=ei, num_nodes=5)
    data.edge_time = torch.tensor([0, 1, 2, 3, 4, 4])
    ds = GraphDataset(data, DatasetInfo("toy", "node", 2, "accuracy", "generated"))
    split = pair_split(as_link_dataset(ds, TaskParams(name="link", split="temporal"), 0))
    assert split == {(0, 1): 0, (1, 2): 0, (2, 3): 0, (3, 4): 1, (0, 4): 2}
    window = pair_split(as_link_dataset(ds, TaskParams(name="link", split="temporal", window=1), 0))
    assert window == {(0, 1): -1, (1, 2): -1, (2, 3): 0, (3, 4): 1, (0, 4): 2}
    data.edge_time = torch.tensor([0, 0, 0, 1, 1, 1])
    with pytest.raises(DataError, match="at least 3 distinct edge times"):
        as_link_dataset(ds, TaskParams(name="link", split="temporal"), 0)


def test_temporal_synth_pairs_arrive_over_steps_and_the_split_follows_them():
    from fgx.data.temporal_synth import TemporalSynthParams, load_temporal_synth
    from fgx.link.split import as_link_dataset

    ds = load_temporal_synth(TemporalSynthParams(num_nodes=200, edges_per_step=100, steps=5), env(Path(".")))
    d = ds.data
    assert d.edge_index.size(1) == 2 * 500 and sorted(set(d.edge_time.tolist())) == [0, 1, 2, 3, 4]
    assert len(first_times(d)) == 500                         # distinct pairs, no self-loop
    link = as_link_dataset(ds, TaskParams(name="link", split="temporal"), 0)
    times = first_times(d)
    for pair, code in pair_split(link).items():
        assert code == {4: 2, 3: 1}.get(times[pair], 0)


def test_temporal_link_prediction_runs_and_learns_on_the_generated_graph(run_fgx):
    run = run_fgx("task=link_temporal", "dataset=temporal_synth", "algorithm=fedavg", "partitioner.num_clients=5",
                  "rounds=10", "eval_every=10", "output.progress=off")
    s = json.loads((run / "summary.json").read_text())
    assert s["data"]["link_split"] == "temporal" and s["data"]["link_test_pairs"] == 500
    assert s["final"]["roc_auc"] > 0.6, s["final"]


def test_temporal_split_needs_a_dataset_with_edge_times(run_fgx, data_root):
    with pytest.raises(SystemExit, match=r"task.split='temporal' is not allowed; allowed: random, or a dataset with "
                                         r"edge times: one of \['ogbl_collab', 'temporal_synth'\]"):
        run_fgx("task=link_temporal", "dataset=cora", "algorithm=fedavg", f"data_dir={data_root}")


# -- ogbl-collab in OGB's own layout ------------------------------------------------------------------------

def write_csv_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        for r in np.atleast_2d(rows):
            f.write(",".join(str(x) for x in r) + "\n")


def mini_collab(root: Path) -> dict:
    """A 30-author ogbl-collab: the raw files OGB processes and its time split (train to 2017, valid 2018,
    test 2019, one pair repeated in 2019)."""
    rng = np.random.default_rng(0)
    folder = root / "ogbl_collab"
    pairs = {(int(u), int(v)) for u, v in rng.integers(30, size=(120, 2)) if u < v}
    pairs = sorted(pairs)[:80]
    years = rng.integers(2010, 2020, size=len(pairs))
    edges = np.array(pairs)
    write_csv_gz(folder / "raw" / "edge.csv.gz", edges)
    write_csv_gz(folder / "raw" / "edge_weight.csv.gz", np.ones((len(pairs), 1), dtype=int))
    write_csv_gz(folder / "raw" / "edge_year.csv.gz", years[:, None])
    write_csv_gz(folder / "raw" / "node-feat.csv.gz", rng.normal(size=(30, 4)).round(4))
    write_csv_gz(folder / "raw" / "num-node-list.csv.gz", [[30]])
    write_csv_gz(folder / "raw" / "num-edge-list.csv.gz", [[len(pairs)]])
    (folder / "split" / "time").mkdir(parents=True)
    repeat = int(np.flatnonzero(years <= 2017)[0])
    for name, sel in (("train", years <= 2017), ("valid", years == 2018), ("test", years == 2019)):
        e, y = edges[sel], years[sel]
        if name == "test":
            e, y = np.vstack([e, edges[repeat:repeat + 1]]), np.append(y, 2019)
        torch.save({"edge": torch.from_numpy(e), "weight": torch.ones(len(e)), "year": torch.from_numpy(y)},
                   folder / "split" / "time" / f"{name}.pt")
    (folder / "RELEASE_v1.txt").write_text("")
    return {"pairs": pairs, "years": years, "repeat": pairs[repeat]}


def test_ogbl_collab_reads_ogbs_files_with_years_and_splits_by_first_year(tmp_path):
    pytest.importorskip("ogb")
    from fgx.data.ogbl_collab import OgblCollabParams, load_ogbl_collab
    from fgx.link.split import as_link_dataset

    mini = mini_collab(tmp_path)
    ds = load_ogbl_collab(OgblCollabParams(), env(tmp_path))
    assert ds.info.task == "link" and ds.data.x.shape == (30, 4)
    times = first_times(ds.data)
    assert set(times) == set(mini["pairs"])
    assert all(times[p] == y for p, y in zip(mini["pairs"], mini["years"]))   # the repeat keeps its first year
    split = pair_split(as_link_dataset(ds, TaskParams(name="link", split="temporal"), 0))
    assert split == {p: {2019: 2, 2018: 1}.get(int(y), 0) for p, y in zip(mini["pairs"], mini["years"])}
    assert split[mini["repeat"]] == 0


def test_ogbl_collab_offline_names_the_missing_files(tmp_path, monkeypatch):
    pytest.importorskip("ogb")
    from ogb.linkproppred import PygLinkPropPredDataset

    from fgx.data.ogbl_collab import OgblCollabParams, load_ogbl_collab

    def no_network(self):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(PygLinkPropPredDataset, "download", no_network)
    with pytest.raises(DataError, match=r"ogbl_collab/: missing RELEASE_v1.txt, raw/edge.csv.gz, raw/edge_weight.csv.gz, "
                                        r"raw/edge_year.csv.gz, raw/node-feat.csv.gz, raw/num-node-list.csv.gz, "
                                        r"raw/num-edge-list.csv.gz, split/time/train.pt, split/time/valid.pt, "
                                        r"split/time/test.pt"):
        load_ogbl_collab(OgblCollabParams(), env(tmp_path))


def test_ogbl_collab_needs_task_link(run_fgx, tmp_path):
    pytest.importorskip("ogb")
    with pytest.raises(SystemExit, match=r"task=None is not allowed; allowed: link \(dataset 'ogbl_collab' is a "
                                         r"link-prediction dataset"):
        run_fgx("dataset=ogbl_collab", "algorithm=fedavg", f"data_dir={tmp_path}")


def test_citeseer_offline_names_the_missing_planetoid_files(tmp_path, monkeypatch):
    from torch_geometric.datasets import Planetoid

    from fgx.data.planetoid import PlanetoidParams, load_planetoid

    def no_network(self):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(Planetoid, "download", no_network)
    with pytest.raises(DataError, match=r"Planetoid CiteSeer reads .*CiteSeer/raw/: missing ind.citeseer.x, "
                                        r"ind.citeseer.y, ind.citeseer.tx, ind.citeseer.ty, ind.citeseer.allx, "
                                        r"ind.citeseer.ally, ind.citeseer.graph, ind.citeseer.test.index"):
        load_planetoid(PlanetoidParams(dataset="CiteSeer"), env(tmp_path))
