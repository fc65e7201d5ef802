"""LPSFed's client models: LGCN's Eq. 5 score (f_Pred's preference angle, shared θ_Pred) as the default,
the cosine option, and NGCF for the "w/o LGCN" ablation; checked on the models and inside LPSFed runs."""
import json

import pytest
import torch

from fgx.cli import compose
from fgx.models.lgcn import LGCN, LGCNParams
from fgx.models.ngcf import NGCF, NGCFParams
from fgx.models.lightgcn import normalized_bipartite_adjacency

TINY = ["dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120", "dataset.mean_degree=12",
        "partitioner=random_users", "partitioner.num_clients=3", "rounds=2", "eval_every=2",
        "output.checkpoint=false", "algorithm=lpsfed", "algorithm.local_epochs=1", "algorithm.warmup_rounds=0",
        "model.dim=16", "model.bias_dim=8", "model.frequency=16"]


def tiny_lgcn(score: str, pred_layers: int = 2) -> LGCN:
    torch.manual_seed(0)
    ev = torch.linalg.qr(torch.randn(9, 5))[0]
    p = LGCNParams(dim=6, layers=2, frequency=5, score=score, pred_layers=pred_layers, bias_dim=4)
    return LGCN(p, 4, 5, ev, torch.tensor([3, 1, 2, 5]), torch.tensor([1, 2, 3, 4, 5]))


@pytest.mark.parametrize("pred_layers", [1, 2])
def test_mlp_angle_scores_are_tanh_of_f_pred_on_u_v_product(pred_layers):
    m = tiny_lgcn("mlp_angle", pred_layers)
    u, v = m.embed()
    naive = torch.stack([torch.stack([torch.tanh(m.pred(torch.cat([u[a], v[b], u[a] * v[b]]))).squeeze()
                                      for b in range(5)]) for a in range(4)])
    assert torch.allclose(m.scores(), naive, atol=1e-6)
    # pair scores (training) agree with the full matrix (ranking); ranking = ascending Eq. 5 angle
    users, items = torch.tensor([[0, 0], [3, 1]]), torch.tensor([[4, 2], [0, 1]])
    assert torch.allclose(m.pair_cos(u, v, users, items), naive[users, items], atol=1e-6)
    angle = torch.arccos(naive.clamp(-1, 1))
    assert torch.equal(torch.argsort(m.scores(), dim=1, descending=True, stable=True),
                       torch.argsort(angle, dim=1, stable=True))
    assert any(k.startswith("pred.") for k in m.shared_keys()) and any(k.startswith("pool.") for k in m.shared_keys())


@pytest.mark.parametrize("pred_layers", [1, 2])
def test_batched_f_pred_ranks_every_pair_as_the_per_pair_mlp(pred_layers, monkeypatch):
    """Evaluation scores every (user, item) pair in blocks of users with one matrix product per block
    (graph_ranker.pred_all_pairs): the per-pair f_Pred's scores and the same NDCG/Recall to 1e-6."""
    import fgx.models.graph_ranker as gr
    from fgx.recsys.metrics import ranking_metrics

    monkeypatch.setattr(gr, "PRED_BLOCK", 16 * 40 * 3)          # several user blocks
    torch.manual_seed(1)
    nu, ni = 30, 40
    ev = torch.linalg.qr(torch.randn(nu + ni, 12))[0]
    p = LGCNParams(dim=16, layers=2, frequency=12, score="mlp_angle", pred_layers=pred_layers, bias_dim=4)
    m = LGCN(p, nu, ni, ev, torch.randint(1, 9, (nu,)), torch.randint(1, 9, (ni,))).eval()
    g = torch.Generator().manual_seed(2)
    train = torch.stack([torch.randint(0, nu, (200,), generator=g), torch.randint(0, ni, (200,), generator=g)])
    truth = torch.stack([torch.randint(0, nu, (90,), generator=g), torch.randint(0, ni, (90,), generator=g)])
    with torch.no_grad():
        u, v = m.embed()
        got = m.scores()
        users = torch.arange(nu)[:, None].expand(nu, ni)
        items = torch.arange(ni)[None, :].expand(nu, ni)
        ref = m.pair_cos(u, v, users, items)                      # f_Pred on each pair's [u, v, u*v]
    assert torch.allclose(got, ref, atol=1e-6)
    a, b = ranking_metrics(got, train, truth, 5), ranking_metrics(ref, train, truth, 5)
    assert a == pytest.approx(b, abs=1e-6) and a["ndcg@5"] > 0


def per_pair_scores(model) -> torch.Tensor:
    """The straightforward computation: f_Pred on each (user, item) pair's [u, v, u*v], one user at a time."""
    with torch.no_grad():
        u, v = model.embed()
        return torch.stack([torch.tanh(model.pred(torch.cat([x.expand_as(v), v, x * v], 1)).squeeze(1)) for x in u])


@pytest.mark.parametrize("pred_layers", [1, 2])
def test_all_pairs_scorer_equals_f_pred_on_each_pair_in_evaluation_and_under_autograd(pred_layers, monkeypatch):
    """graph_ranker.pred_all_pairs (f_Pred's user and item parts inside one matrix product per block of
    users, ReLU in place) against f_Pred applied to each pair's [u, v, u*v], on a random f_Pred and pooled
    vectors (tanh range, as LGCN's): float32 scores to 1e-6 and the same top-20 lists, in several blocks
    and in one; in float64 (no rounding to hide in) to 1e-12 with weights and inputs of larger scale; the
    autograd path (in-place ReLU off) the same values and f_Pred's gradients."""
    import fgx.models.graph_ranker as gr

    torch.manual_seed(3)
    d, nu, ni = 16, 37, 53
    pred = gr.mlp(3 * d, 24, 1, pred_layers)
    u, v = torch.tanh(torch.randn(nu, d)), torch.tanh(torch.randn(ni, d) + 0.2)

    def per_pair(pred, u, v):
        return torch.stack([torch.tanh(pred(torch.cat([x.expand_as(v), v, x * v], 1)).squeeze(1)) for x in u])

    with torch.no_grad():
        ref = per_pair(pred, u, v)
        for block in (24 * ni * 5, gr.PRED_BLOCK):                 # 8 blocks of 5 users (the last of 2); one block
            monkeypatch.setattr(gr, "PRED_BLOCK", block)
            got = gr.pred_all_pairs(pred, u, v)
            assert got.dtype == torch.float32 and got.is_contiguous()
            assert (got - ref).abs().max() < 1e-6
            assert torch.equal(got.topk(20, 1).indices, ref.topk(20, 1).indices)
            big = gr.mlp(3 * d, 24, 1, pred_layers).double()
            for prm in big.parameters():
                prm.mul_(3.0)
            u64, v64 = torch.randn(nu, d, dtype=torch.float64) * 2, torch.randn(ni, d, dtype=torch.float64) * 2
            got64 = gr.pred_all_pairs(big, u64, v64)
            assert got64.dtype == torch.float64 and (got64 - per_pair(big, u64, v64)).abs().max() < 1e-12
        assert gr.pred_all_pairs(pred, u[:0], v).shape == (0, ni)
    monkeypatch.setattr(gr, "PRED_BLOCK", 24 * ni * 5)
    got = gr.pred_all_pairs(pred, u, v)
    assert got.requires_grad and (got.detach() - ref).abs().max() < 1e-6
    weights = torch.randn(nu, ni)
    grads = torch.autograd.grad((got * weights).sum(), list(pred.parameters()))
    for g, r in zip(grads, torch.autograd.grad((per_pair(pred, u, v) * weights).sum(), list(pred.parameters()))):
        assert torch.allclose(g, r, atol=1e-5, rtol=1e-5)


def test_lpsfed_ml100k_run_reports_the_metrics_of_f_pred_on_each_pair(run_fgx, lpsfed_watch, data_root, monkeypatch,
                                                                        tmp_path):
    """A short LPSFed run on MovieLens-100K (4 spectral clients, the paper's 2-layer f_Pred): the final
    metrics it reports, computed with the all-pairs scorer, are those of f_Pred applied to each pair of
    every client (float32, to 1e-6), and every client's val/test metrics agree to 1e-6."""
    from fgx.metrics import mean_over_clients
    from fgx.recsys.graph_clients import graph_client_metrics, ranking_split_metrics

    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    run = run_fgx("algorithm=lpsfed", "dataset=movielens100k", f"data_dir={data_root}", "rounds=1", "eval_every=1",
                  "algorithm.local_epochs=1", "output.checkpoint=false")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed"
    clients = lpsfed_watch["algo"].clients
    assert len(clients) == 4 and all(c.model.pred is not None and len(c.model.pred) == 3 for c in clients)
    tests = []
    for c in clients:
        c.model.eval()
        ref = ranking_split_metrics(per_pair_scores(c.model), c.inter, c.item_group, 20)
        got = graph_client_metrics(c, 20)
        for split in ("val", "test"):
            g, r = dict(got[split]), dict(ref[split])
            assert set(g) == set(r)
            if "_items" in r:                                   # every user's own values, not only the means
                (gi, gv), (ri, rv) = g.pop("_items"), r.pop("_items")
                assert torch.equal(gi, ri) and set(gv) == set(rv)
                assert all(torch.allclose(gv[k], rv[k], rtol=0, atol=1e-6) for k in rv)
            assert all(g[k] == pytest.approx(r[k], abs=1e-6) for k in r), split
        tests.append({k: x for k, x in ref["test"].items() if k != "_items"})
    ref_final = mean_over_clients(tests)
    assert s["final"]["ndcg@20"] > 0.05
    assert all(s["final"][k] == pytest.approx(ref_final[k], abs=1e-6) for k in s["final"])


def test_cosine_score_has_no_f_pred_and_is_the_cosine():
    m = tiny_lgcn("cosine")
    u, v = m.embed()
    assert m.pred is None and not any(k.startswith("pred.") for k in m.shared_keys())
    assert torch.allclose(u.norm(dim=1), torch.ones(4), atol=1e-6)
    assert torch.allclose(m.scores(), u @ v.T)


def test_mlp_angle_is_the_lpsfed_default():
    assert compose(["algorithm=lpsfed"]).model.name == "lgcn"
    assert compose(["+experiment=lpsfed_table1_ml100k"]).model.score == "mlp_angle"
    assert compose(["+experiment=lpsfed_table1_ml100k", "model.score=cosine"]).model.score == "cosine"


def test_ngcf_layer_is_the_papers_formula():
    torch.manual_seed(0)
    train = torch.tensor([[0, 0, 1, 2], [0, 1, 1, 2]])
    m = NGCF(NGCFParams(dim=4, layers=1, message_dropout=0.0), 3, 3, train, torch.ones(3), torch.ones(3))
    m.eval()
    a = normalized_bipartite_adjacency(train, 3, 3).to_dense()
    e = m.emb.detach()
    w1, w2 = m.w1[0], m.w2[0]
    expected = torch.nn.functional.leaky_relu(w1((a + torch.eye(6)) @ e) + w2((a @ e) * e), 0.2)
    (got,) = m.propagate(m.emb)
    assert torch.allclose(got, torch.nn.functional.normalize(expected, dim=1), atol=1e-6)


@pytest.fixture
def lpsfed_watch(monkeypatch):
    """The LPSFed object of the run and every (kind, payload) it sent."""
    import fgx.trainer as trainer
    from fgx.algorithms.lpsfed import LPSFed
    from fgx.federation.channel import Channel

    seen = {"sent": []}
    real = LPSFed.setup

    def setup(self):
        seen["algo"] = self
        real(self)
    monkeypatch.setattr(LPSFed, "setup", setup)

    class Watched(Channel):
        def __init__(self, messages, **kw):
            kw.pop("auditor", None)
            super().__init__(messages, auditor=lambda k, p, s, d, r: seen["sent"].append((k, p)), **kw)
    monkeypatch.setattr(trainer, "Channel", Watched)
    return seen


def test_lpsfed_shares_f_pred_and_mixes_it(run_fgx, lpsfed_watch, monkeypatch, tmp_path):
    """θ_Pred is uploaded with the pooling MLP and, with ρ̄ = 1 (personalize=false), every client ends the
    round with the same f_Pred; embeddings and kernels stay per client."""
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    run = run_fgx(*TINY, "algorithm.personalize=false")
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    ups = [p for k, p in lpsfed_watch["sent"] if k == "mlp_params"]
    assert ups and all(any(k.startswith("pred.") for k in p) for p in ups)
    assert not any(k.startswith(("emb", "kernels", "user_pop", "item_pop")) for p in ups for k in p)
    models = [c.model for c in lpsfed_watch["algo"].clients]
    for k in ("pred.0.weight", "pred.2.weight", "pool.0.weight"):
        assert all(torch.equal(m.state_dict()[k], models[0].state_dict()[k]) for m in models)
    assert not torch.equal(models[0].kernels, models[1].kernels)


def test_lpsfed_runs_the_ngcf_ablation(run_fgx, lpsfed_watch, monkeypatch, tmp_path):
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    run = run_fgx(*TINY, "model=ngcf")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and 0 < s["final"]["ndcg@20"] <= 1
    assert all(isinstance(c.model, NGCF) for c in lpsfed_watch["algo"].clients)
    ups = [p for k, p in lpsfed_watch["sent"] if k == "mlp_params"]
    assert ups and all(set(k.split(".")[0] for k in p) == {"pool", "pred"} for p in ups)   # w1/w2 stay local


def test_learned_kernel_signal_needs_lgcn(run_fgx):
    with pytest.raises(SystemExit, match="algorithm.signal"):
        run_fgx(*TINY, "model=ngcf", "algorithm.signal=learned_kernel_x_eigvals")
