"""AML at scale: layer trimming on hop-ordered samples is exact, and evaluation scores only what it is asked."""
from __future__ import annotations

import pytest
import torch

from fgx.models.gine import EdgeGNNParams, build_gine
from fgx.models.pna import PNAParams, build_pna
from fgx.sampler import NeighborSampler, sample_view
from tests.test_aml_models import graph

BUILDERS = [("gine", lambda info: build_gine(EdgeGNNParams(hidden=16), 1, 2, info)),
            ("gine_rev", lambda info: build_gine(EdgeGNNParams(hidden=16, reverse_mp=True), 1, 2, info)),
            ("pna", lambda info: build_pna(PNAParams(hidden=20), 1, 2, info))]


def _sample(n=200, e=2000, seeds=8):
    d, info = graph(n, e, seed=1)
    d.edge_y = torch.randint(0, 2, (e,))
    s = NeighborSampler(d.edge_index, n, [4, 3])
    smp = s.sample_edges(torch.arange(seeds), torch.Generator().manual_seed(0))
    return d, info, smp


@pytest.mark.parametrize("name,build", BUILDERS)
def test_trimmed_evaluation_gives_the_seeds_exactly_the_untrimmed_outputs(name, build):
    d, info, smp = _sample()
    ends = smp.edge_hop_end
    assert ends[0] == smp.num_seed_edges and ends[-1] == smp.edge_ids.numel() and ends[1] < ends[-1]
    torch.manual_seed(0)
    m = build(info).eval()
    sub = sample_view(d, smp)
    k = smp.num_seed_edges
    trimmed = m(sub)
    assert trimmed.size(0) == (ends[1] if m.trim_exact else smp.edge_ids.numel())
    del sub.edge_hop_end
    full = m(sub)
    assert torch.allclose(trimmed[:k], full[:k], atol=1e-5)
    assert m.trim_exact == (name != "gine_rev")


@pytest.mark.parametrize("name,build", BUILDERS[::2])
def test_last_layer_edge_update_on_the_seeds_only_gives_the_same_loss_and_gradients(name, build):
    d, info, smp = _sample()
    torch.manual_seed(0)
    m = build(info).train()
    sub = sample_view(d, smp)
    k = smp.num_seed_edges

    def loss(edge_out):
        torch.manual_seed(1)
        s = m.encode(sub)
        h, e = s["h"], s["e"]
        for i in range(m.num_layers):
            kw = {"edge_out": k} if edge_out and i == m.num_layers - 1 else {}
            pre, e = m.layer(i, h, e, sub.edge_index, **kw)
            h = m.activate(i, pre)
        out = m.head(h, e[:k], sub.edge_index[:, :k], sub)
        val = torch.nn.functional.cross_entropy(out, sub.edge_y[:k])
        m.zero_grad()
        val.backward()
        return val.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]
    a, ga = loss(True)
    b, gb = loss(False)
    assert torch.allclose(a, b, atol=1e-6) and all(torch.allclose(x, y, atol=1e-6) for x, y in zip(ga, gb))


def test_ce_fedgnn_sampled_training_updates_only_the_seed_edges_in_the_last_layer(run_fgx, monkeypatch):
    """CE-FedGNN's sampled edge-task step asks the model's last layer for the seed edges' features only
    (``edge_out``; the readout reads no other): the last layer's edge update sees at most a batch of edges,
    every earlier layer the whole sample (seed-5 mutation sample: dropping ``edge_out`` survived, the
    same numbers at several times the work)."""
    from fgx.models.gine import EdgeGNN

    seen: dict[int, list[int]] = {}
    real = EdgeGNN.layer_edges

    def layer_edges(self, i, h, e, edge_index):
        if self.training:
            seen.setdefault(i, []).append(edge_index.size(1))
        return real(self, i, h, e, edge_index)
    monkeypatch.setattr(EdgeGNN, "layer_edges", layer_edges)
    run_fgx("algorithm=ce_fedgnn", "dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2",
            "model.hidden=8", "algorithm.local_steps=3", "algorithm.batch_size=16", "algorithm.fanouts=[3,3]",
            "rounds=1", "output.checkpoint=false")
    assert sorted(seen) == [0, 1] and len(seen[1]) == len(seen[0]) > 0
    assert max(seen[1]) <= 16 and all(last < first for first, last in zip(seen[0], seen[1]))


@pytest.mark.parametrize("name,build", BUILDERS)
def test_scoring_only_the_seed_edges_gives_them_the_whole_forward_pass_logits(name, build):
    """``forward(scored_edges=k)`` in training mode: the seeds' logits equal the untrimmed pass's (the node
    updates and their batch statistics still see every edge); a model that is not trim_exact ignores it."""
    d, info, smp = _sample()
    torch.manual_seed(0)
    m = build(info).train()
    for mod in m.modules():                      # dropout off: both passes must draw nothing
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    m.p.dropout = m.p.final_dropout = 0.0
    sub = sample_view(d, smp)
    k = smp.num_seed_edges
    trimmed, full = m(sub, scored_edges=k), m(sub)
    assert trimmed.size(0) == (k if m.trim_exact else smp.edge_ids.numel())
    assert torch.allclose(trimmed[:k], full[:k], atol=1e-5)


def test_fedavg_sampled_training_scores_only_the_seed_edges(run_fgx, monkeypatch):
    """FedAvg's (every local-training method's) sampled edge-task step: the last layer's edge update and
    the readout see the batch's seed edges only, earlier layers the whole sample."""
    from fgx.models.gine import EdgeGNN

    seen: dict[int, list[int]] = {}
    heads: list[int] = []
    real, real_head = EdgeGNN.layer_edges, EdgeGNN.head

    def layer_edges(self, i, h, e, edge_index):
        if self.training:
            seen.setdefault(i, []).append(edge_index.size(1))
        return real(self, i, h, e, edge_index)

    def head(self, h, e, edge_index, view):
        if self.training:
            heads.append(edge_index.size(1))
        return real_head(self, h, e, edge_index, view)
    monkeypatch.setattr(EdgeGNN, "layer_edges", layer_edges)
    monkeypatch.setattr(EdgeGNN, "head", head)
    run_fgx("algorithm=fedavg", "dataset=aml_tiny", "dataset.scale=0.25", "partitioner.num_clients=2",
            "model.hidden=8", "algorithm.local_steps=3", "algorithm.batch_size=16", "algorithm.fanouts=[3,3]",
            "rounds=1", "output.checkpoint=false")
    assert sorted(seen) == [0, 1] and len(seen[1]) == len(seen[0]) == len(heads) > 0
    assert max(seen[1]) <= 16 and max(heads) <= 16 and all(last < first for first, last in zip(seen[0], seen[1]))
