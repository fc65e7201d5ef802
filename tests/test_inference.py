"""Layer-wise inference (fgx.inference): the same scores as the full-neighbourhood sampled path, in chunks
of destination nodes, and the path a complete evaluation takes."""
from __future__ import annotations

import json

import pytest
import torch

from fgx import inference
from fgx.algorithms.base import score_items
from fgx.metrics import grouped_classification_metrics
from fgx.models.base import GNNParams
from fgx.models.gcn import build_gcn
from fgx.models.gin import build_gin
from fgx.models.gine import EdgeGNNParams, build_gine
from fgx.models.pna import PNAParams, build_pna
from fgx.models.sage import build_sage
from fgx.sampler import NeighborSampler, sample_view
from tests.test_aml_models import graph

EDGE = [("gine", lambda info: build_gine(EdgeGNNParams(hidden=16), 1, 2, info)),
        ("gine_rev", lambda info: build_gine(EdgeGNNParams(hidden=16, reverse_mp=True), 1, 2, info)),
        ("pna", lambda info: build_pna(PNAParams(hidden=20), 1, 2, info))]
NODE = [("gcn", build_gcn), ("sage", build_sage), ("gin", build_gin)]


def _metrics(scores, y):
    return grouped_classification_metrics(scores, y, torch.zeros_like(y), 1, 2, 1,
                                           ("accuracy", "f1_minority", "roc_auc"))[0]


def _full_neighbourhood(view, task, ids, model, batch):
    """The sampled path with every neighbour (fanouts -1) in batches of ``batch`` items."""
    s = NeighborSampler(view.edge_index, view.num_nodes, [-1] * model.num_layers)
    out = score_items(view, task, {"x": (ids, torch.zeros_like(ids))}, s, batch,
                      lambda smp: model(sample_view(view, smp)), 2, 0)
    return out["x"][0]


@pytest.mark.parametrize("name,build", EDGE)
def test_edge_models_layerwise_equal_the_full_neighbourhood_batch_of_all_scored_edges(name, build):
    d, info = graph(300, 3000, seed=2)
    d.edge_y = torch.randint(0, 2, (3000,), generator=torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    m = build(info).eval()
    ids = torch.randperm(3000, generator=torch.Generator().manual_seed(4))[:1200].sort().values
    with torch.no_grad():
        ref = _full_neighbourhood(d, "edge", ids, m, batch=10_000)
        got = inference.forward(m, d, "edge", ids, chunk_edges=500)
    chunks = inference.Chunks(d.edge_index, d.num_nodes, 500)
    assert len(chunks.bounds) > 1 or not inference.chunkable(m)
    assert inference.chunkable(m) == (name != "gine_rev")
    assert torch.allclose(got, ref, atol=1e-5)
    assert _metrics(got, d.edge_y[ids]) == pytest.approx(_metrics(ref, d.edge_y[ids]), abs=1e-12)


@pytest.mark.parametrize("name,build", NODE)
def test_node_models_layerwise_equal_the_full_neighbourhood_path_in_any_batches(name, build):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(5)
    n = 400
    ei = torch.randint(0, n, (2, 3000), generator=g)
    x = (torch.rand(n, 20, generator=g) < 0.3).float()
    d = Data(x=x, edge_index=ei, num_nodes=n, y=torch.randint(0, 2, (n,), generator=g))
    torch.manual_seed(0)
    m = build(GNNParams(hidden=16), 20, 2, None).eval()
    ids = torch.arange(0, n, 3)
    with torch.no_grad():
        ref = _full_neighbourhood(d, "node", ids, m, batch=37)
        got = inference.forward(m, d, "node", ids, chunk_edges=400)
        whole = m(d)[ids]
    assert inference.chunkable(m) == (name != "gcn")
    assert torch.allclose(got, whole, atol=1e-5)
    if name == "gcn":
        # GCN's normalisation reads each source's degree, which a sampled subgraph truncates: there the
        # sampled path is not the whole-graph function, and the layer-wise one is
        assert not torch.allclose(ref, whole, atol=1e-3)
        return
    assert torch.allclose(got, ref, atol=1e-5)
    assert _metrics(got, d.y[ids]) == pytest.approx(_metrics(ref, d.y[ids]), abs=1e-12)


def test_chunks_hold_every_in_edge_of_their_nodes_once():
    d, _ = graph(300, 3000, seed=6)
    c = inference.Chunks(d.edge_index, 300, 250)
    seen = torch.cat([c.order[a:b] for _, _, a, b in c.bounds])
    assert torch.equal(seen.sort().values, torch.arange(3000))
    for lo, hi, a, b in c.bounds:
        dst = d.edge_index[1, c.order[a:b]]
        assert bool(((dst >= lo) & (dst < hi)).all())
    assert c.bounds[0][0] == 0 and c.bounds[-1][1] == 300 and len(c.bounds) >= 8


CE = ["dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2", "model.hidden=8", "rounds=2",
      "eval_every=1", "algorithm.local_steps=2", "algorithm.batch_size=16"]


@pytest.fixture(scope="module")
def aml_data(tmp_path_factory):
    return f"data_dir={tmp_path_factory.mktemp('aml')}"


def test_ce_fedgnn_complete_evaluation_is_layerwise_and_subset_evaluation_is_sampled(run_fgx, monkeypatch, aml_data):
    import fgx.algorithms.base as base
    calls = []
    orig_layer, orig_score = inference.run_layer, base.score_items

    def run_layer(*a, **k):
        calls.append("layerwise")
        return orig_layer(*a, **k)

    def score(*a, **k):
        calls.append("sampled")
        return orig_score(*a, **k)
    monkeypatch.setattr(inference, "run_layer", run_layer)
    monkeypatch.setattr(base, "score_items", score)
    # round 1: an intermediate evaluation on a subset (sampled); round 2: the final, complete one
    d = run_fgx(*CE, aml_data, "algorithm.fanouts=[3,3]", "eval.subset=50")
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["evaluation"]["inference"] == "auto"
    first_layerwise = calls.index("layerwise")
    assert "sampled" in calls[:first_layerwise]            # round 1 (subset): sampled batches
    assert "sampled" not in calls[first_layerwise:]        # the complete evaluations: layer-wise only


def test_ce_fedgnn_layerwise_scores_equal_its_full_neighbourhood_sampled_scores(run_fgx, monkeypatch, aml_data):
    import fgx.algorithms.ce_fedgnn as ce
    holder = {}
    orig = ce.CEFedGNN.setup

    def setup(self):
        orig(self)
        holder["algo"] = self
    monkeypatch.setattr(ce.CEFedGNN, "setup", setup)
    run_fgx(*CE, aml_data, "algorithm.fanouts=[-1,-1]", "eval.chunk_edges=300")
    algo = holder["algo"]
    for client in algo.ctx.clients:
        algo.ctx.config.top.eval.inference = "sampled"
        ref = algo.predict(client, batch_size=10 ** 9)
        algo.ctx.config.top.eval.inference = "layerwise"
        got = algo.predict(client)
        for split in ref:
            assert torch.equal(got[split][1], ref[split][1])
            assert torch.allclose(got[split][0], ref[split][0], atol=1e-5)
        assert len(inference.Chunks(algo.clients[client.cid].view.edge_index,
                                    algo.clients[client.cid].view.num_nodes, 300).bounds) > 1


def test_each_layer_aggregates_at_most_its_hop_fanout_of_in_edges_per_node():
    """Layer i of L aggregates fanouts[L-1-i] in-edges per node (the neighbourhood sizes training saw), and
    the layer-wise scores are the model's layers run on exactly those edge sets."""
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(7)
    n = 300
    ei = torch.randint(0, n, (2, 4000), generator=g)
    d = Data(x=torch.rand(n, 8, generator=g), edge_index=ei, num_nodes=n)
    torch.manual_seed(0)
    m = build_sage(GNNParams(hidden=16), 8, 2, None).eval()
    s = NeighborSampler(ei, n, [2, 3])
    keeps = inference.layer_edges(s, [2, 3], 2, seed=0)
    full_deg = torch.bincount(ei[1], minlength=n)
    for keep, k in zip(keeps, [3, 2]):
        deg = torch.bincount(ei[1, keep], minlength=n)
        assert bool((deg == torch.clamp(full_deg, max=k)).all())
    ids = torch.arange(n)
    with torch.no_grad():
        got = inference.forward(m, d, "node", ids, chunk_edges=300, keeps=keeps)
        h = d.x
        for i, keep in enumerate(keeps):
            h = m.activate(i, m.layer(i, h, None, ei[:, keep])[0])
        ref = m.head(h, None, ei, d)
        every = inference.forward(m, d, "node", ids, chunk_edges=300)
    assert torch.allclose(got, ref, atol=1e-5)
    assert not torch.allclose(got, every, atol=1e-3)
    assert inference.layer_edges(s, [-1, -1], 2, seed=0) == [None, None]


def test_received_halo_rows_replace_the_layerwise_rows_as_in_the_wrappers_forward():
    from fgx.algorithms.halo import HaloEmbeddings

    d, info = graph(200, 2000, seed=8)
    torch.manual_seed(0)
    w = HaloEmbeddings(build_gine(EdgeGNNParams(hidden=16), 1, 2, info), n_own=150).eval()
    w.set_rows(1, torch.tensor([0, 3, 7]), torch.randn(3, 16), 50)
    w.set_rows(2, torch.tensor([1, 3]), torch.randn(2, 16), 50)
    ids = torch.arange(2000)
    with torch.no_grad():
        got = inference.forward(w, d, "edge", ids, chunk_edges=300)
        ref = w(d)
        plain = inference.forward(w.inner, d, "edge", ids, chunk_edges=300)
    assert torch.allclose(got, ref, atol=1e-5) and not torch.allclose(got, plain, atol=1e-4)
    # the wrapper's own layer-wise interface (encode, layer, activate, head) composes to its forward too
    with torch.no_grad():
        s = w.encode(d)
        h, e = s["h"], s["e"]
        for i in range(w.num_layers):
            pre, e = w.layer(i, h, e, d.edge_index)
            h = w.activate(i, pre)
        assert torch.allclose(w.head(h, e, d.edge_index, d), ref, atol=1e-5)
