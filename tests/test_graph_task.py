"""Task ``graph``: graph collections (TU through PyG, the generator), partitions of whole graphs, the
graph classifiers and FedAvg / FedProx / Local on them."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from fgx.data.base import DataEnv, DataError

SYNTH = ["dataset=graph_synth", "dataset.num_graphs=80", "partitioner.num_clients=4", "model.hidden=16",
         "model.layers=2", "rounds=3", "eval_every=1"]


def env(root: Path, seed: int = 0) -> DataEnv:
    return DataEnv(data_dir=Path(root), seed=seed, log=logging.getLogger("test"))


def synth(**kw):
    from fgx.data.graph_synth import GraphSynthParams, load_graph_synth

    return load_graph_synth(GraphSynthParams(**kw), env(Path(".")))


def test_mutag_loads_offline_through_tudataset(data_root):
    from fgx.data.tu import TUParams, load_tu

    ds = load_tu(TUParams(tu_name="MUTAG"), env(data_root))
    d = ds.data
    assert ds.info.task == "graph" and ds.info.num_classes == 2 and ds.info.source == "real"
    assert d.graph_y.numel() == 188 and d.x.size(1) == 7            # MUTAG: 188 graphs, 7 node labels
    assert int(d.graph.max()) == 187 and d.num_nodes == d.graph.numel()
    masks = torch.stack([d.graph_train_mask, d.graph_val_mask, d.graph_test_mask])
    assert bool((masks.sum(0) == 1).all())                          # each graph in exactly one split
    assert int(d.graph_train_mask.sum()) == round(0.8 * 188)


def test_a_tu_name_not_in_the_root_downloads_through_pyg(tmp_path, monkeypatch, data_root):
    """PyG's download path runs (monkeypatched: it 'downloads' MUTAG's files under another name)."""
    from torch_geometric.datasets import TUDataset

    from fgx.data.tu import TUParams, load_tu

    calls = []

    def fake_download(self):
        calls.append(self.name)
        Path(self.raw_dir).mkdir(parents=True, exist_ok=True)
        for f in (data_root / "MUTAG" / "raw").glob("MUTAG_*.txt"):
            shutil.copy(f, Path(self.raw_dir) / f.name.replace("MUTAG", self.name))

    monkeypatch.setattr(TUDataset, "download", fake_download)
    ds = load_tu(TUParams(tu_name="PTC_FAKE"), env(tmp_path))
    assert calls == ["PTC_FAKE"] and ds.data.graph_y.numel() == 188
    assert (tmp_path / "PTC_FAKE" / "raw" / "PTC_FAKE_A.txt").is_file()      # kept for the next run
    calls.clear()
    load_tu(TUParams(tu_name="PTC_FAKE"), env(tmp_path))
    assert calls == []


def test_offline_a_missing_tu_name_fails_with_a_clear_message(tmp_path, monkeypatch):
    from torch_geometric.datasets import TUDataset

    from fgx.data.tu import TUParams, load_tu

    def no_network(self):
        raise OSError("Cannot connect to host")

    monkeypatch.setattr(TUDataset, "download", no_network)
    with pytest.raises(DataError, match=r"TU dataset 'NCI1': its files are not in the data root .*NCI1_A.txt.*"
                                        r"could not download"):
        load_tu(TUParams(tu_name="NCI1"), env(tmp_path))
    assert not (tmp_path / "NCI1" / "processed").exists()


def test_tu_group_keeps_each_members_labels_and_feature_block(data_root):
    from fgx.data.tu_group import TUGroupParams, load_tu_group

    ds = load_tu_group(TUGroupParams(members=["MUTAG", "ENZYMES"]), env(data_root))
    d = ds.data
    assert ds.info.num_classes == 2 + 6 and d.x.size(1) == 7 + 3
    mutag = d.graph_source == 0
    assert set(d.graph_y[mutag].tolist()) == {0, 1} and set(d.graph_y[~mutag].tolist()) == set(range(2, 8))
    node_src = d.graph_source[d.graph]
    assert d.x[node_src == 0, 7:].abs().sum() == 0 and d.x[node_src == 1, :7].abs().sum() == 0


def partition(name: str, ds, **kw):
    from fgx.registry import PARTITIONERS

    entry = PARTITIONERS.get(name)
    return entry.obj(entry.params(**kw), ds.data, ds.info, 0)


def clients_of(ds, parts):
    from fgx.partition.base import build_clients

    return build_clients(ds.data, ds.info, parts)


def test_graph_partitions_hand_out_whole_graphs():
    ds = synth(num_graphs=60, groups=3)
    for name, kw in [("random", {"num_clients": 5}), ("label_dirichlet", {"num_clients": 4, "alpha": 0.3}),
                     ("size_skew", {"num_clients": 4}), ("cross_dataset", {"clients_per_dataset": 2})]:
        clients = clients_of(ds, partition(name, ds, **kw))
        seen = torch.cat([c.data.graph_ids for c in clients])
        assert sorted(seen.tolist()) == list(range(60)), name          # every graph once
        for c in clients:
            sizes = torch.bincount(c.data.graph)
            full = torch.bincount(ds.data.graph)[c.data.graph_ids]
            assert torch.equal(sizes, full), name                        # whole graphs
            assert torch.equal(c.data.graph_y, ds.data.graph_y[c.data.graph_ids])
            assert c.data.cross_edge_index.numel() == 0


def test_a_partition_that_cuts_a_graph_is_refused():
    ds = synth(num_graphs=10)
    with pytest.raises(DataError, match="split between clients"):
        clients_of(ds, [torch.arange(5), torch.arange(5, ds.data.num_nodes)])


def test_size_skew_sorts_and_cross_dataset_keeps_one_member_per_client():
    ds = synth(num_graphs=80, groups=2)
    clients = clients_of(ds, partition("size_skew", ds, num_clients=4))
    means = [c.stats["graph_nodes_mean"] for c in clients]
    assert means == sorted(means) and means[-1] > means[0] + 5
    assert clients[0].stats["graph_nodes_max"] <= clients[-1].stats["graph_nodes_min"]
    clients = clients_of(ds, partition("cross_dataset", ds, clients_per_dataset=2))
    assert [c.stats["sources"] for c in clients] == [[0], [0], [1], [1]]


def test_size_skew_by_degree_sorts_clients_by_their_graphs_mean_degree():
    """partitioner.key=degree: graphs sorted by mean degree (edges over nodes), not by size."""
    ds = synth(num_graphs=80, groups=2)
    clients = clients_of(ds, partition("size_skew", ds, num_clients=4, key="degree"))

    def degrees(c):
        d = c.data
        return (torch.bincount(d.graph[d.edge_index[0]], minlength=int(d.graph.max()) + 1)
                / torch.bincount(d.graph).clamp(min=1)).tolist()

    per = [degrees(c) for c in clients]
    for lo, hi in zip(per, per[1:]):
        assert max(lo) <= min(hi) + 1e-6
    assert max(per[-1]) > min(per[0])
    by_size = clients_of(ds, partition("size_skew", ds, num_clients=4))
    assert [c.data.graph_ids.tolist() for c in clients] != [c.data.graph_ids.tolist() for c in by_size]


def test_label_dirichlet_skews_graph_labels():
    ds = synth(num_graphs=200, num_classes=3, density=0.1)
    skew = [c.stats["label_counts"] for c in clients_of(ds, partition("label_dirichlet", ds, num_clients=4, alpha=0.1))]
    even = [c.stats["label_counts"] for c in clients_of(ds, partition("random", ds, num_clients=4))]

    def top_share(counts):
        return sum(max(c) / sum(c) for c in counts) / len(counts)

    assert top_share(skew) > top_share(even) + 0.2


@pytest.mark.parametrize("model", ["gin_graph", "gcn_graph"])
def test_graph_models_pool_per_graph(model):
    """One logit row per graph; a graph's logits depend on its own nodes only (pooling by graph)."""
    from fgx.data.graphs import attach_graphs
    from fgx.registry import MODELS
    from fgx.tasks import local_view
    from fgx.partition.base import build_clients

    ds = synth(num_graphs=6)
    c = build_clients(ds.data, ds.info, [torch.arange(ds.data.num_nodes)])[0]
    entry = MODELS.get(model)
    m = entry.obj(entry.params(hidden=8), ds.data.x.size(1), 2, ds.info).eval()
    view = local_view(c, "graph", False)
    out = m(view)
    assert out.shape == (6, 2)
    x2 = view.x.clone()
    x2[view.graph == 0] += 1.0                    # change graph 0's nodes only
    view.x = x2
    out2 = m(view)
    assert not torch.allclose(out[0], out2[0]) and torch.allclose(out[1:], out2[1:])
    del attach_graphs


@pytest.mark.parametrize("algo", ["fedavg", pytest.param("fedprox", marks=pytest.mark.slow),
                                  pytest.param("local", marks=pytest.mark.slow)])   # fedavg in the default suite
def test_graph_runs_learn_the_generated_structure(algo, run_fgx):
    """The label is in the graphs' density only: the trained classifier beats the majority class."""
    rd = run_fgx(f"algorithm={algo}", *SYNTH, "dataset.num_graphs=160", "rounds=8", "model.layers=2",
                 "model.dropout=0.0", "dataset.num_features=1")
    s = json.loads((rd / "summary.json").read_text())
    assert s["status"] == "completed" and s["data"]["task"] == "graph"
    assert s["final_pooled"]["accuracy"] > s["data"]["test_majority_rate"] + 0.15
    part = json.loads((rd / "partition.json").read_text())
    assert sum(c["graphs"] for c in part["clients"]) == 160 and all("label_counts" in c for c in part["clients"])


def test_node_models_are_refused_on_the_graph_task(run_fgx):
    from fgx.cli import main

    with pytest.raises(SystemExit, match=r"a model that supports the 'graph' task of dataset 'graph_synth': one of "
                                         r"\['gcn_graph', 'gin_dc', 'gin_graph', 'ssp'\] \(model 'gcn' supports \['node', 'link'\]\)"):
        main(["run", "algorithm=fedavg", *SYNTH, "model=gcn"])
