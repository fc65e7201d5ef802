"""FedSage+ (algorithm=fedsage_plus): a short run, what crosses the channel, the impaired and mended
graphs, and NeighGen learning."""
from __future__ import annotations

import json

import pytest
import torch
from fgx.federation.channel import payload_tensors

# small NeighGen so that the runs take seconds
SMALL = ["model=sage", "algorithm=fedsage_plus", "algorithm.fgen_hidden=[16,32]", "algorithm.latent_dim=16",
         "algorithm.local_gen_epochs=3", "algorithm.fed_gen_epochs=2"]
KINDS = {"neighgen_weights", "peer_neighgen", "fgen_gradient", "fgen_gradient_sum", "global_weights", "update"}



def test_two_rounds_on_a_tiny_graph(run_fgx, tiny_cfg):
    run = run_fgx(*tiny_cfg, *SMALL, "rounds=2")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and 0.0 <= s["final"]["accuracy"] <= 1.0
    comm = json.loads((run / "comm.json").read_text())
    assert set(comm["totals"]) == KINDS
    n, epochs = 3, 2     # per federated NeighGen epoch: M up, M(M-1) relayed, M(M-1) gradients, M sums
    assert comm["messages"]["neighgen_weights"] == n * epochs
    assert comm["messages"]["peer_neighgen"] == n * (n - 1) * epochs
    assert comm["messages"]["fgen_gradient"] == n * (n - 1) * epochs
    assert comm["messages"]["fgen_gradient_sum"] == n * epochs
    assert set(comm["per_round"]["0"]) == KINDS - {"global_weights", "update"}   # NeighGen: setup, round 0
    rows = [json.loads(l) for l in (run / "fedsage_neighgen.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows] == ["local"] * 3 + ["federated"] * 2
    assert [r["epoch"] for r in rows] == [0, 1, 2, 0, 1]
    assert all(r["loss_total"] > 0 for r in rows)


def test_without_the_cross_term_or_the_classifier_term(run_fgx, tiny_cfg):
    """cross_weight=0: NeighGen's federated epochs run on each client without any exchange; cls_weight=0:
    no auxiliary classifier loss (recorded as 0)."""
    run = run_fgx(*tiny_cfg, *SMALL, "rounds=1", "algorithm.cross_weight=0", "algorithm.cls_weight=0")
    comm = json.loads((run / "comm.json").read_text())
    assert set(comm["totals"]) == {"global_weights", "update"}
    rows = [json.loads(l) for l in (run / "fedsage_neighgen.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows] == ["local"] * 3 + ["federated"] * 2
    assert all(r["loss_cls"] == 0.0 and r["loss_total"] > 0 for r in rows)


def test_no_payload_carries_a_raw_feature_row(run_fgx, tiny_cfg, recorded):
    seen = recorded
    run_fgx(*tiny_cfg, *SMALL, "rounds=1")
    x = seen["data"].x.float()
    raw = {r.numpy().tobytes() for r in x}
    labels = seen["data"].y
    assert {k for k, *_ in seen["sent"]} == KINDS
    for kind, payload, *_ in seen["sent"]:
        for t in payload_tensors(payload):
            rows = t.detach().float().reshape(-1, t.shape[-1]) if t.dim() else t.view(1, 1)
            if rows.size(1) == x.size(1):
                assert not any(r.numpy().tobytes() in raw for r in rows), kind
            assert not (t.numel() == labels.numel() and torch.equal(t.flatten().long(), labels)), kind
    # the gradients are only w.r.t. fGen's parameters; the relayed NeighGen is the sender's, unchanged
    for kind, payload, *_ in seen["sent"]:
        if kind in ("fgen_gradient", "fgen_gradient_sum"):
            assert payload and all(k.startswith("fgen.") for k in payload)
    ups = [(src, p) for k, p, src, dst, _ in seen["sent"] if k == "neighgen_weights"]
    relays = [p for k, p, *_ in seen["sent"] if k == "peer_neighgen"]
    assert all(any(p is u for _, u in ups) for p in relays)


def _tiny_view(n=40, f=6, seed=0):
    """A dense random undirected graph with 20/40/40 masks, as a client's local view."""
    from torch_geometric.data import Data
    from torch_geometric.utils import to_undirected

    g = torch.Generator().manual_seed(seed)
    e = torch.randint(0, n, (2, 6 * n), generator=g)
    e = to_undirected(e[:, e[0] != e[1]], num_nodes=n)
    perm = torch.randperm(n, generator=g)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[: n // 5]], masks[1][perm[n // 5: 3 * n // 5]], masks[2][perm[3 * n // 5:]] = True, True, True
    view = Data(x=torch.randn(n, f, generator=g).tanh(), edge_index=e, y=torch.randint(0, 3, (n,), generator=g),
                train_mask=masks[0], val_mask=masks[1], test_mask=masks[2], num_nodes=n)
    view.num_owned = n
    return view


def test_impaired_graph_targets_and_hiding():
    from fgx.algorithms.fedsage_plus import choose_hidden, impaired_graph

    view, P = _tiny_view(), 3
    hidden = choose_hidden(view, 0.25, seed=1)
    assert hidden.numel() == 10 and not (view.train_mask[hidden] | view.test_mask[hidden]).any()
    g = impaired_graph(view, hidden, P)
    is_hidden = torch.zeros(view.num_nodes, dtype=torch.bool)
    is_hidden[hidden] = True
    assert torch.equal(g.keep, (~is_hidden).nonzero().view(-1)) and torch.equal(g.x, view.x[g.keep])
    adj = {(int(a), int(b)) for a, b in view.edge_index.t()}
    for i, v in enumerate(g.keep.tolist()):
        lost = sorted(u for u in hidden.tolist() if (u, v) in adj)
        assert int(g.num_missing[i]) == len(lost)
        for slot in range(P):
            want = view.x[lost[slot]] if slot < len(lost) else torch.zeros(view.x.size(1))
            assert torch.equal(g.x_missing[i, slot], want)
    kept_edges = {(int(g.keep[a]), int(g.keep[b])) for a, b in g.edge_index.t()}
    assert kept_edges == {(a, b) for a, b in adj if not is_hidden[a] and not is_hidden[b]}


def test_mended_graph_adds_the_predicted_number_of_neighbours_to_each_kept_node():
    from fgx.federation.client import ClientState
    from fgx.algorithms.fedsage_plus import (FedSagePlusParams, NeighGen, choose_hidden, counts, impaired_graph,
                                             mended_view)

    num = torch.tensor([0.0, 0.4, 0.6, 1.5, 4.9, 7.2])
    assert counts(num, 5).tolist() == [0, 0, 0, 1, 4, 5]                    # authors' code: truncation
    assert counts(num, 5, "round").tolist() == [0, 0, 1, 2, 5, 5]           # FederatedScope: rounding

    p = FedSagePlusParams(num_pred=3, fgen_hidden=[8], latent_dim=8, encoder_hidden=8)
    view = _tiny_view()
    g = impaired_graph(view, choose_hidden(view, 0.25, seed=1), p.num_pred)
    torch.manual_seed(0)
    gen = NeighGen(view.x.size(1), p)
    with torch.no_grad():
        gen.dgen.bias.fill_(1.5)            # predictions spread over 0 .. beyond num_pred
        gen.dgen.weight.normal_(0, 5.0)
    state = ClientState(0, g, gen, None, "node")
    mended = mended_view(state, view, p, seed=7)
    gen.eval()
    with torch.no_grad():
        num, feats = gen(g.x, g.edge_index, torch.Generator().manual_seed(7 + 0))
    k = num.floor().clamp(0, p.num_pred).long()
    assert k.min() == 0 and k.max() == p.num_pred and num.max() > p.num_pred   # the cases are all there
    n = view.num_nodes
    assert mended.num_nodes == n + int(k.sum()) and mended.num_owned == n
    assert torch.equal(mended.x[:n], view.x) and torch.equal(mended.y[:n], view.y)
    for m in ("train_mask", "val_mask", "test_mask"):       # generated nodes are never trained on or evaluated
        assert torch.equal(getattr(mended, m)[:n], getattr(view, m)) and not getattr(mended, m)[n:].any()
    src, dst = mended.edge_index
    real = (src < n) & (dst < n)
    assert torch.equal(src[real], view.edge_index[0]) and torch.equal(dst[real], view.edge_index[1])
    added = torch.bincount(dst[(src >= n)], minlength=n)      # generated neighbours of each real node
    expected = torch.zeros(n, dtype=torch.long).index_add_(0, g.keep, k)
    assert torch.equal(added, expected)                        # kept nodes: min(num_pred, ⌊ñ_v⌋); hidden: 0
    assert torch.equal(torch.bincount(src[dst >= n], minlength=n), expected)   # edges both ways
    ones = torch.ones(int(k.sum()), dtype=torch.long)
    assert torch.equal(torch.bincount(dst[dst >= n] - n), ones) and torch.equal(torch.bincount(src[src >= n] - n), ones)
    # the generated rows are the owner's first k generated vectors, in order
    edges, row = set(map(tuple, mended.edge_index.t().tolist())), n
    for i, v in enumerate(g.keep.tolist()):
        for slot in range(int(k[i])):
            assert torch.allclose(mended.x[row], feats[i, slot]) and (v, row) in edges and (row, v) in edges
            row += 1


def test_neighgen_losses_decrease_on_a_tiny_graph():
    from fgx.algorithms.fedsage_plus import (FedSagePlusParams, NeighGen, NeighGenClient, choose_hidden,
                                             greedy_feature_loss, impaired_graph, local_gen_step)
    from fgx.models.sage import build_sage
    from fgx.models.base import GNNParams

    p = FedSagePlusParams(num_pred=3, fgen_hidden=[32], latent_dim=16, encoder_hidden=16, gen_lr=0.01,
                          gen_dropout=0.0, hide_ratio=0.35)
    view = _tiny_view(n=60)
    g = impaired_graph(view, choose_hidden(view, p.hide_ratio, seed=1), p.num_pred)
    assert (g.num_missing[g.train_mask] > 0).float().mean() > 0.5
    torch.manual_seed(0)
    gen = NeighGen(view.x.size(1), p)
    clf = build_sage(GNNParams(hidden=8), view.x.size(1), 3, None)
    opt = torch.optim.Adam(list(gen.parameters()) + list(clf.parameters()), lr=p.gen_lr)
    state = NeighGenClient(0, g, gen, opt, "node", classifier=clf)

    def losses():
        """dGen's smooth-L1 and fGen's greedy loss (at the true counts) on the kept training nodes."""
        gen.eval()
        t = g.train_mask
        with torch.no_grad():
            z = gen.embed(g.x, g.edge_index)[t]
            d = torch.nn.functional.smooth_l1_loss(torch.relu(gen.dgen(z)).view(-1), g.num_missing[t].float())
            feats = gen.generate(z, torch.Generator().manual_seed(3))
            k = g.num_missing[t].clamp(max=p.num_pred)        # at the true counts
            f = greedy_feature_loss(feats, k, g.x_missing[t], g.num_missing[t], p.num_pred)
        return float(d), float(f)

    d0, f0 = losses()
    steps = [local_gen_step(state, p, seed=s) for s in range(60)]
    d1, f1 = losses()
    assert d1 < 0.5 * d0 and f1 < 0.8 * f0, (d0, d1, f0, f1)
    assert steps[-1]["num"] < steps[0]["num"] and steps[-1]["feat"] > 0     # fGen is trained once counts >= 1


def _cross_pair(dgen_bias: float, dgen_weight_zero: bool = False):
    """Client i's NeighGen (with dGen's bias set) and client j's state on its impaired tiny graph."""
    from fgx.federation.client import ClientState
    from fgx.algorithms.fedsage_plus import FedSagePlusParams, NeighGen, choose_hidden, impaired_graph

    p = FedSagePlusParams(num_pred=2, fgen_hidden=[8], latent_dim=8, encoder_hidden=8, gen_dropout=0.0)
    view_j = _tiny_view(seed=2)
    torch.manual_seed(0)
    gen_i, gen_j = NeighGen(6, p), NeighGen(6, p)
    with torch.no_grad():
        if dgen_weight_zero:
            gen_i.dgen.weight.zero_()
        gen_i.dgen.bias.fill_(dgen_bias)
    gj = impaired_graph(view_j, choose_hidden(view_j, 0.2, seed=3), p.num_pred)
    return p, view_j, gen_i, gen_j, gj, ClientState(1, gj, gen_j, None, "node")


def test_cross_gradient_is_the_gradient_of_the_nearest_feature_term():
    from fgx.algorithms.fedsage_plus import counts, cross_gradient, nearest_feature_loss

    p, view_j, gen_i, gen_j, gj, state_j = _cross_pair(dgen_bias=2.0)
    weights = {k: v.clone() for k, v in gen_i.state_dict().items()}
    got = cross_gradient(state_j, weights, p, seed=5, num_clients=4)
    assert set(got) == {k for k, _ in gen_i.named_parameters() if k.startswith("fgen.")}
    # the same number computed directly on client i's module: client j's features are the targets
    gen_i.train()
    gen_i.zero_grad()
    t = gj.train_mask.nonzero().view(-1)                      # j's kept training nodes are the queries
    num, feats = gen_i(gj.x, gj.edge_index, torch.Generator().manual_seed(5 + 1), t)
    (nearest_feature_loss(feats, counts(num, p.num_pred), view_j.x, p.num_pred) / 4).backward()
    for k, w in gen_i.named_parameters():
        if k in got:
            assert torch.allclose(got[k], w.grad, atol=1e-6), k
    assert any(float(v.abs().sum()) > 0 for v in got.values())
    # client j's own NeighGen is untouched
    assert all(w.grad is None for w in gen_j.parameters())


def test_cross_gradient_where_nothing_is_generated_is_autograds_zero_without_a_buffer():
    from fgx.algorithms.fedsage_plus import counts, cross_gradient, nearest_feature_loss

    # dGen predicts < 1 missing neighbour everywhere: counts 0
    p, view_j, gen_i, gen_j, gj, state_j = _cross_pair(dgen_bias=0.5, dgen_weight_zero=True)
    got = cross_gradient(state_j, {k: v.clone() for k, v in gen_i.state_dict().items()}, p, seed=5, num_clients=4)
    gen_i.train()
    t = gj.train_mask.nonzero().view(-1)
    num, feats = gen_i(gj.x, gj.edge_index, torch.Generator().manual_seed(5 + 1), t)
    assert int(counts(num, p.num_pred).sum()) == 0
    loss = nearest_feature_loss(feats, counts(num, p.num_pred), view_j.x, p.num_pred) / 4
    names = [k for k, _ in gen_i.named_parameters() if k.startswith("fgen.")]
    want = torch.autograd.grad(loss, [dict(gen_i.named_parameters())[k] for k in names], allow_unused=True)
    for k, w in zip(names, want):
        assert got[k].shape == dict(gen_i.named_parameters())[k].shape
        assert torch.equal(got[k], torch.zeros_like(got[k])) and (w is None or torch.equal(w, torch.zeros_like(w)))
        assert got[k].untyped_storage().nbytes() == got[k].element_size()      # one shared zero, no buffer


def test_refuses_clients_too_large(run_fgx, tiny_cfg, capsys):
    run = run_fgx(*tiny_cfg, *SMALL, "algorithm.max_client_nodes=10", "rounds=1", expect_rc=2)
    err = capsys.readouterr().err
    assert "algorithm.max_client_nodes" in err and "does not scale" in err
    assert not run.exists()


def test_refuses_models_other_than_sage(run_fgx, tiny_cfg):
    with pytest.raises(SystemExit, match="sage"):
        run_fgx(*tiny_cfg, "algorithm=fedsage_plus", "model=gcn")


def test_each_federated_fgen_step_adds_the_other_clients_cross_gradients_to_its_own(run_fgx, tiny_cfg, recorded,
                                                                                    monkeypatch):
    """The "+" of FedSage+ inside a run (issue 67 (c)): the gradient every federated fGen step applies is
    the gradient of the client's own NeighGen loss / M (recomputed here with the step's seed) plus the sum
    of the fGen gradients the other clients returned for it (summed here from their messages)."""
    import fgx.algorithms.fedsage_plus as fs

    steps = []
    real = fs.fed_gen_step

    def step(state, p, seed, m):
        fgen = dict(state.model.fgen.named_parameters())
        own = torch.autograd.grad(fs.local_losses(state, p, seed + state.cid)["total"] / m, list(fgen.values()))
        out = real(state, p, seed, m)
        steps.append((state.cid, {f"fgen.{k}": g for k, g in zip(fgen, own)},
                      {f"fgen.{k}": w.grad.detach().clone() for k, w in fgen.items()}))
        return out

    monkeypatch.setattr(fs, "fed_gen_step", step)
    # hidden neighbours enough, and rounding, for dGen to generate some (otherwise every cross term is 0)
    run_fgx(*tiny_cfg, *SMALL, "rounds=1", "algorithm.hide_ratio=0.5", "algorithm.count_rounding=round",
            "algorithm.gen_lr=0.01")
    sums, pending = [], []
    for kind, p, src, dst, _ in recorded["sent"]:
        if kind == "fgen_gradient":
            pending.append(p)
        elif kind == "fgen_gradient_sum":
            assert len(pending) == 2                            # M - 1 others
            sums.append((dst, {k: sum(g[k].double() for g in pending) for k in p}))
            pending = []
    assert [c for c, _ in sums] == [c for c, _, _ in steps] and len(steps) == 3 * 2
    assert any(float(v.abs().sum()) > 0 for _, s in sums for v in s.values())
    for (cid, own, applied), (_, cross) in zip(steps, sums):
        assert set(cross) <= set(applied)
        for k, g in applied.items():
            want = own[k].double() + cross.get(k, 0)
            assert torch.allclose(g.double(), want, rtol=1e-5, atol=1e-7), f"client {cid}, {k}"
