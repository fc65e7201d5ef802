"""The fast paths of issue #26 compute what the library code they replace computes: fgx's GCN and
GraphSAGE layers against PyG's GCNConv and SAGEConv (outputs and gradients), the per-tensor cache of sparse matrices, the CSR
product of sparse input features, the uniform-drawn dropout and the lean client RNG scope."""
from __future__ import annotations

import gc
import random

import numpy as np
import pytest
import torch

from fgx.federation.executor import client_rng
from fgx.models import sparse
from fgx.models.base import GNNParams, dropout
from fgx.models.gcn import build_gcn
from fgx.models.sage import build_sage


def graph(n: int = 40, e: int = 150, f: int = 30, seed: int = 0, density: float = 0.02):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei = torch.cat([ei, ei[:, :5], torch.tensor([[3, 4], [3, 4]])], 1)   # duplicate edges and self-loops
    x = (torch.rand(n, f, generator=g) < density).float() * torch.rand(n, f, generator=g)
    return Data(x=x, edge_index=ei, num_nodes=n)


def pyg_reference(model, data):
    """The same layers through PyG's own GCNConv / SAGEConv forward (aggregating over edge_index itself)."""
    h = data.x
    for i, conv in enumerate(model.convs):
        h = conv(h, data.edge_index)
        if i < len(model.convs) - 1 or model.classifier is not None:
            h = torch.relu(h)
    return model.classifier(h) if model.classifier is not None else h


@pytest.mark.parametrize("build", [build_gcn, build_sage])
@pytest.mark.parametrize("classifier", ["none", "linear"])
def test_layers_equal_pygs_convolutions_in_outputs_and_gradients(build, classifier):
    torch.manual_seed(0)
    data = graph()
    data.edge_index = data.edge_index[:, data.edge_index[1] != 7]   # node 7 has no in-neighbours
    assert sparse.sparse_input(data.x) is not None          # this input takes the CSR path
    model = build(GNNParams(classifier=classifier, dropout=0.0), 30, 4, None)
    out, ref = model(data), pyg_reference(model, data)
    assert torch.allclose(out, ref, atol=1e-5)
    g_out = torch.autograd.grad(out.pow(2).sum(), list(model.parameters()))
    g_ref = torch.autograd.grad(pyg_reference(model, data).pow(2).sum(), list(model.parameters()))
    for a, b in zip(g_out, g_ref):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("build", [build_gcn, build_sage])
def test_gradient_wrt_features_and_second_order(build):
    data = graph(n=12, e=30, f=5, density=1.0)
    model = build(GNNParams(classifier="none", dropout=0.0, hidden=6), 5, 3, None).double()
    x = data.x.double().requires_grad_(True)          # requires grad: the dense input path
    ei = data.edge_index

    def f(v):
        from torch_geometric.data import Data
        return model(Data(x=v, edge_index=ei, num_nodes=12))
    assert torch.autograd.gradcheck(f, (x,))
    assert torch.autograd.gradgradcheck(lambda v: f(v).pow(2), (x,))


def test_adjacency_is_built_once_per_graph_rebuilt_after_an_in_place_change_and_freed_with_it():
    data = graph()
    a1 = sparse.gcn_adjacency(data.edge_index, data.num_nodes)
    assert sparse.gcn_adjacency(data.edge_index, data.num_nodes) is a1
    data.edge_index[1, 0] = (data.edge_index[1, 0] + 1) % data.num_nodes      # in place: a new version
    a2 = sparse.gcn_adjacency(data.edge_index, data.num_nodes)
    assert a2 is not a1 and not torch.equal(a2[0].to_dense(), a1[0].to_dense())
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    ei, w = gcn_norm(data.edge_index, None, data.num_nodes, add_self_loops=True)
    dense = torch.zeros(data.num_nodes, data.num_nodes).index_put_((ei[1], ei[0]), w, accumulate=True)
    assert torch.allclose(a2[0].to_dense(), dense) and torch.allclose(a2[1].to_dense(), dense.t())
    before = len(sparse._CACHE)
    del data, a1, a2
    gc.collect()
    assert len(sparse._CACHE) < before


def test_sparse_input_only_below_the_density_threshold_and_linear_matches():
    torch.manual_seed(1)
    w = torch.randn(8, 30, requires_grad=True)
    b = torch.randn(8, requires_grad=True)
    sparse_x = graph(density=0.03).x
    dense_x = torch.rand(40, 30)
    assert sparse.sparse_input(sparse_x) is not None and sparse.sparse_input(dense_x) is None
    assert sparse.sparse_input(sparse_x.clone().requires_grad_(True)) is None
    for x in (sparse_x, dense_x):
        out = sparse.linear(x, w, b)
        ref = torch.nn.functional.linear(x, w, b)
        assert torch.allclose(out, ref, atol=1e-6)
        gw, gb = torch.autograd.grad(out.pow(2).sum(), [w, b])
        rw, rb = torch.autograd.grad(ref.pow(2).sum(), [w, b])
        assert torch.allclose(gw, rw, atol=1e-5) and torch.allclose(gb, rb, atol=1e-5)


def test_dropout_keeps_1_minus_p_of_the_entries_scaled_and_is_identity_in_eval():
    torch.manual_seed(0)
    h = torch.ones(400, 500)
    for p in (0.2, 0.5, 0.8):
        out = dropout(h, p, True)
        kept = (out != 0).float().mean().item()
        # 200,000 Bernoulli(1 - p) draws: the standard deviation of the kept fraction is < 0.0012
        assert abs(kept - (1 - p)) < 0.006
        assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / (1 - p)))
        assert abs(out.mean().item() - 1.0) < 0.03
    assert dropout(h, 0.5, False) is h and dropout(h, 0.0, True) is h
    assert torch.equal(dropout(h, 1.0, True), torch.zeros_like(h))


def test_client_rng_seeds_every_global_generator_and_restores_the_callers():
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    np.random.randn()                            # leaves a cached Gaussian in numpy's legacy state
    with client_rng(7):
        inside = (torch.rand(3), np.random.rand(2), random.random(), np.random.randn(3))
    after = (torch.rand(2), np.random.randn(3), random.random())
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    expect = (torch.rand(3), np.random.rand(2), random.random(), np.random.randn(3))
    assert torch.equal(inside[0], expect[0]) and np.array_equal(inside[1], expect[1])
    assert inside[2] == expect[2] and np.array_equal(inside[3], expect[3])
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    np.random.randn()
    assert torch.equal(after[0], torch.rand(2)) and np.array_equal(after[1], np.random.randn(3))
    assert after[2] == random.random()


def test_a_registry_imports_the_components_a_run_uses_and_falls_back_to_all():
    """Start-up: ``get("fedavg")`` imports fgx/algorithms/fedavg.py, not the other 25 algorithms (and
    their libraries); a name registered in a module of another name is still found."""
    import subprocess
    import sys

    code = """
import sys
from fgx.registry import ALGORITHMS, EXECUTORS, PRIVACY, UNLEARNING
ALGORITHMS.get("fedavg"); PRIVACY.get("none"); UNLEARNING.get("none")
loaded = sorted(m for m in sys.modules if m.startswith(("fgx.algorithms.", "fgx.privacy.", "fgx.unlearning.")))
print(loaded)
assert "fgx.algorithms.fedsage_plus" not in loaded and "fgx.privacy.mf.solver" not in loaded, loaded
assert "fgx.unlearning.certified" not in loaded, loaded
assert EXECUTORS.get("local").module == "fgx.federation.executor"       # registered in executor.py
assert "fedsage_plus" in ALGORITHMS.names()
try:
    ALGORITHMS.get("nope")
except Exception as e:
    assert "fedavg" in str(e) and "fedsage_plus" in str(e), e
else:
    raise AssertionError("unknown algorithm accepted")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
