"""gine / pna / mlp_edge: shapes, edge order, layer-wise equality, halo nodes, graph dependence."""
from __future__ import annotations

import pytest
import torch

from fgx.data.base import DatasetInfo
from fgx.models.gine import EdgeGNNParams, build_gine, class_weights
from fgx.models.mlp_edge import MLPEdgeParams, build_mlp_edge
from fgx.models.pna import PNAParams, build_pna

NAMES = ["log_amount_received", "receiving_currency", "payment_format", "in_port", "out_port"]


def graph(n=30, e=120, seed=0):
    from torch_geometric.data import Data
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    d = Data(x=torch.ones(n, 1), edge_index=ei, edge_attr=torch.randn(e, len(NAMES), generator=g), num_nodes=n)
    deg = torch.bincount(ei[1], minlength=n)
    info = DatasetInfo("t", "edge", 2, "f1_minority", "generated",
                       extra={"edge_features": NAMES, "in_degree_histogram": torch.bincount(deg).tolist()})
    return d, info


BUILDERS = [("gine", lambda info: build_gine(EdgeGNNParams(hidden=16), 1, 2, info)),
            ("gine_rev", lambda info: build_gine(EdgeGNNParams(hidden=16, reverse_mp=True), 1, 2, info)),
            ("pna", lambda info: build_pna(PNAParams(hidden=20), 1, 2, info)),
            ("mlp_edge", lambda info: build_mlp_edge(MLPEdgeParams(hidden=16), 1, 2, info))]


@pytest.mark.parametrize("name,build", BUILDERS)
def test_logits_per_edge_in_order_and_layerwise_equals_forward(name, build):
    d, info = graph()
    torch.manual_seed(0)
    m = build(info).eval()
    out = m(d)
    assert out.shape == (d.edge_index.size(1), 2) and torch.isfinite(out).all()
    perm = torch.randperm(d.edge_index.size(1))
    d2 = d.clone()
    d2.edge_index, d2.edge_attr = d.edge_index[:, perm], d.edge_attr[perm]
    assert torch.allclose(m(d2), out[perm], atol=1e-5)
    s = m.encode(d)
    h, e = s["h"], s["e"]
    for i in range(m.num_layers):
        pre, e = m.layer(i, h, e, d.edge_index)
        h = m.activate(i, pre)
    assert torch.allclose(m.head(h, e, d.edge_index, d), out, atol=1e-6)
    loss = torch.nn.functional.cross_entropy(m.train()(d), torch.randint(0, 2, (d.edge_index.size(1),)),
                                             weight=class_weights("gine"))
    loss.backward()


@pytest.mark.parametrize("name,build", BUILDERS[:3])
def test_gnn_uses_the_graph_and_works_with_zero_feature_halo_nodes(name, build):
    d, info = graph()
    torch.manual_seed(0)
    m = build(info).eval()
    out = m(d)
    d2 = d.clone()
    d2.x[20:] = 0.0       # halo rows
    assert torch.isfinite(m(d2)).all()
    # an extra edge into node u changes the logits of u's other edges
    u = int(d.edge_index[1, 0])
    d3 = d.clone()
    d3.edge_index = torch.cat([d.edge_index, torch.tensor([[5, 6, 7], [u, u, u]])], 1)
    d3.edge_attr = torch.cat([d.edge_attr, torch.randn(3, len(NAMES))])
    assert not torch.allclose(m(d3)[0], out[0])


def test_mlp_ignores_graph_and_ports_by_default():
    d, info = graph()
    m = build_mlp_edge(MLPEdgeParams(hidden=8), 1, 2, info).eval()
    out = m(d)
    d2 = d.clone()
    d2.edge_index = d.edge_index.flip(0)
    d2.edge_attr[:, 3:] = 100.0        # port columns
    assert torch.allclose(m(d2), out)
    assert m.edge_cols == [0, 1, 2]


def test_pna_hidden_rounded_to_towers_and_multignn_weights():
    d, info = graph()
    m = build_pna(PNAParams(hidden=23), 1, 2, info)
    assert m.node_emb.out_features == 20
    assert class_weights("pna")[1] > 7 and class_weights("gine")[1] > 6
