"""What issue 69 cut from a run's memory stays cut, and changes no value: a client's halo feature rows take
resident memory only once written, a one-client batch of executor=batched holds its view's own tensors (one
adjacency for training and evaluation), and UniFilter's float64 bases live only as long as FedGSP's
descriptors read them."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from test_client_batching import build, step


def resident_bytes(t: torch.Tensor) -> int:
    """Bytes of ``t``'s pages that are in memory (the present bit of /proc/self/pagemap, one entry a page)."""
    import os

    import numpy as np

    page = os.sysconf("SC_PAGE_SIZE")
    first, end = t.data_ptr() // page, (t.data_ptr() + t.numel() * t.element_size() - 1) // page + 1
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        entries = np.frombuffer(f.read((end - first) * 8), dtype=np.uint64)
    return int((entries >> np.uint64(63)).sum()) * page


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/pagemap")
def test_halo_rows_take_no_memory_until_written():
    from fgx.data.base import DatasetInfo
    from fgx.data.csbm import csbm_graph
    from fgx.partition.base import build_clients
    from fgx.partition.metis import metis_parts

    # a random graph in two METIS parts: each client's halo is about as large as its own nodes
    data = csbm_graph(20_000, 5, 256, 8.0, 0.8, 1.0, seed=0)
    parts = torch.from_numpy(metis_parts(data.edge_index, data.num_nodes, 2, seed=0))
    info = DatasetInfo(name="csbm", task="node", num_classes=5, main_metric="accuracy", source="generated")
    clients = build_clients(data, info, [(parts == k).nonzero().view(-1) for k in range(2)])
    for c in clients:
        x = c.data.x
        row = x[0].numel() * x.element_size()
        assert c.num_halo * row > 2 << 20
        # the owned rows and at most a page or a huge page either side; torch.zeros: every halo row too
        assert c.num_owned * row <= resident_bytes(x) <= c.num_owned * row + (2 << 20)
        assert torch.equal(x[:c.num_owned], data.x[c.nodes])
        assert float(x[c.num_owned:].abs().sum()) == 0.0          # read, they are zeros
    x = clients[0].data.x
    x[clients[0].num_owned:] = 1.0                                # written, its pages are taken as any tensor's
    assert resident_bytes(x) >= x.numel() * x.element_size() - 4096


def test_one_client_batch_holds_its_views_tensors(tmp_path):
    from fgx.models import sparse

    # every client larger than group_nodes: a batch of one client each
    job = build(tmp_path, "algorithm=fedavg", "model=gcn", "executor=batched", "executor.group_nodes=1")
    step(job, 1)
    job.evaluator(job.algo)
    blocks = [blk for _, blk in job.executor.blocks.values()]
    views = {id(s.view): s.view for s in job.algo.states}
    assert len(blocks) == len(views) == 5
    for views_of_block, blk in job.executor.blocks.values():
        (view,) = views_of_block
        assert blk.features() is view.x and blk.edge_index is view.edge_index and blk.y is view.y
    # training and evaluation built one adjacency per client: the one of its view's edge_index
    ids = {k[1] for k in sparse._CACHE if k[0] == "gcn_adjacency"}
    assert {id(v.edge_index) for v in views.values()} <= ids
    for v in views.values():     # an undirected graph's Â is its own transpose: one CSR for both
        a, a_t = sparse.gcn_adjacency(v.edge_index, v.num_nodes)
        assert a is a_t
    assert not ids & {id(blk.edge_index) for blk in blocks} - {id(v.edge_index) for v in views.values()}


def test_a_kept_batch_of_several_clients_holds_no_feature_table(tmp_path):
    job = build(tmp_path, "algorithm=fedavg", "model=gcn", "executor=batched")      # 5 clients, one batch
    step(job, 1)
    F = job.clients[0].data.x.size(1)
    kept = [blk for _, blk in job.executor.blocks.values()]
    assert max(blk.C for blk in kept) > 1
    for blk in kept:
        assert not any(isinstance(t, torch.Tensor) and t.dim() == 2 and t.size(1) == F for t in vars(blk).values())
        x = blk.features()              # built when a round trains the batch: the views' rows, zeros between
        assert x.shape == (blk.C * blk.n, F)
        for i, v in enumerate(blk.views):
            assert torch.equal(x[i * blk.n:i * blk.n + blk.sizes[i]], v.x)
            assert not x[i * blk.n + blk.sizes[i]:(i + 1) * blk.n].any()


def test_a_directed_graphs_adjacency_keeps_its_transpose():
    from fgx.models import sparse

    ei = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 3]])
    a, a_t = sparse.gcn_adjacency(ei, 4)
    assert a is not a_t and torch.equal(a_t.to_dense(), a.to_dense().t())
    und = torch.cat([ei, ei.flip(0)], 1)
    a, a_t = sparse.gcn_adjacency(und, 4)
    assert a is a_t and torch.equal(a.to_dense(), a.to_dense().t())


def test_fedgsp_keeps_no_float64_bases_and_reads_the_same_ones(tmp_path):
    from fgx.algorithms.fedgsp import pca_directions
    from fgx.models import unifilter

    job = build(tmp_path, "algorithm=fedgsp", "model=unifilter", "partitioner.num_clients=3")
    step(job, 1)
    k = job.algo.params.k_principal
    for s, desc in zip(job.algo.states, job.algo.descriptors):
        kept = unifilter._CACHE[id(s.view)]
        assert all(set(entry) == {"features", "hhat", "tau"} for entry in kept.values())
        # the values the descriptors and the model read are the ones the bases give, bit for bit
        p = s.model.p
        hhat = unifilter.estimate_homophily(s.view, p.homophily_estimate)
        tau = unifilter.auto_tau(hhat) if p.tau is None else p.tau
        hom, het, mixed = unifilter.unifilter_bases(s.view.x, unifilter.propagation_matrix(s.view.edge_index, s.view.num_nodes),
                                                    p.K, hhat, tau, p.variant)
        assert torch.equal(unifilter.client_bases(s.view, p)["features"], torch.stack(mixed, 1).float())
        assert torch.equal(desc["p"], pca_directions(torch.cat(hom, 1), k).flatten())
        assert torch.equal(desc["q_K"], torch.stack([pca_directions(x, k).flatten() for x in het[1:]]))


def before_the_cuts(monkeypatch) -> None:
    """Issue 69's memory cuts undone: halo rows written out, every batch a copy, the transpose kept apart."""
    from fgx.federation.batched import Block
    from fgx.models import sparse
    from fgx.partition import base

    monkeypatch.setattr(base, "zeros_on_demand", lambda shape, dtype: torch.zeros(shape, dtype=dtype))
    monkeypatch.setattr(Block, "holds_view", staticmethod(lambda views, device: False))
    monkeypatch.setattr(sparse, "same_csr", lambda a, b: False)


@pytest.mark.parametrize("extra", [["executor.group_nodes=1"], ["partitioner.num_clients=40"],
                                   ["model=sage", "executor=local"]])
def test_the_cuts_change_no_value(tmp_path, monkeypatch, extra):
    from fgx.models import sparse
    from fgx.partition import base

    cfg = ["algorithm=fedavg", "model=gcn", "executor=batched", "dataset.num_nodes=3000", "dataset.num_features=64",
           "algorithm.local_steps=3", *extra]

    def run():
        sparse._CACHE.clear()
        job = build(tmp_path, *cfg)
        losses = [step(job, r)["loss"] for r in (1, 2, 3)]
        return job, losses, job.evaluator(job.algo)

    monkeypatch.setattr(base, "ON_DEMAND_MIN_BYTES", 0)          # every client's x on pages taken when written
    after, losses, metrics = run()
    with monkeypatch.context() as m:
        before_the_cuts(m)
        job, losses_before, metrics_before = run()
    # bit for bit (as JSON: a client's undefined metric is a NaN, which equals nothing)
    assert losses == losses_before and json.dumps(metrics, sort_keys=True) == json.dumps(metrics_before, sort_keys=True)
    for a, b in zip(after.algo.states, job.algo.states):
        assert all(torch.equal(a.model.state_dict()[k], b.model.state_dict()[k]) for k in a.model.state_dict())
    assert all(torch.equal(a.data.x, b.data.x) for a, b in zip(after.clients, job.clients))
