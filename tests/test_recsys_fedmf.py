"""LightGCN / MF ranking models and the item-sharing recommenders FedMF and pFedRec: one round on a
tiny synthetic_bipartite graph each, and what must stay on a client (user embeddings; pFedRec's
personal score function)."""
import json

import numpy as np
import pytest
import torch

from fgx.algorithms.fedmf import FedMF
from fgx.algorithms.pfedrec import PFedRec
from fgx.models.lightgcn import LightGCN, LightGCNParams, normalized_bipartite_adjacency
from fgx.models.mf import MF, MFParams
from fgx.federation.channel import payload_tensors

TINY = ["dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120", "dataset.mean_degree=12",
        "partitioner=random_users", "partitioner.num_clients=3", "rounds=2", "eval_every=1",
        "output.checkpoint=false", "algorithm.local_epochs=2", "model.dim=16"]


def test_lightgcn_adjacency_is_symmetric_normalised():
    train = torch.tensor([[0, 0, 1, 2], [0, 1, 1, 2]])        # 3 users, 3 items
    a = np.zeros((6, 6))
    for u, i in train.t().tolist():
        a[u, 3 + i] = a[3 + i, u] = 1
    d = a.sum(1)
    expected = a / np.sqrt(np.outer(d, d))
    got = normalized_bipartite_adjacency(train, 3, 3).to_dense().numpy()
    assert np.allclose(got, expected)


def test_lightgcn_without_layers_is_mf_and_layers_mean():
    train = torch.tensor([[0, 1, 1], [0, 0, 1]])
    torch.manual_seed(0)
    lg0 = LightGCN(LightGCNParams(dim=4, layers=0), 2, 2, train)
    torch.manual_seed(0)
    mf = MF(MFParams(dim=4), 2, 2)
    assert torch.allclose(lg0.scores(), mf.scores())
    lg1 = LightGCN(LightGCNParams(dim=4, layers=1), 2, 2, train)
    z = torch.cat([lg1.user_emb.weight, lg1.item_emb.weight])
    h = (z + normalized_bipartite_adjacency(train, 2, 2) @ z) / 2
    u, v = lg1.embed()
    assert torch.allclose(u, h[:2]) and torch.allclose(v, h[2:])


def test_ranking_models_refuse_the_generic_builder():
    from fgx.config import ConfigError
    from fgx.models.lightgcn import build_lightgcn
    from fgx.models.mf import build_mf
    for build, p in ((build_mf, MFParams()), (build_lightgcn, LightGCNParams())):
        with pytest.raises(ConfigError, match="fedmf"):
            build(p, 0, 0, None)


def test_fedmf_refuses_lgcn(run_fgx):
    with pytest.raises(SystemExit, match="model"):
        run_fgx(*TINY, "model=lgcn", "algorithm=fedmf")


@pytest.fixture
def watched(monkeypatch):
    """Every payload with the algorithm's client state at the moment it is sent."""
    import fgx.trainer as trainer
    from fgx.federation.channel import Channel

    seen = {"algo": None, "sent": []}
    for cls in (FedMF, PFedRec):
        real_setup = cls.setup

        def setup(self, real_setup=real_setup):
            seen["algo"] = self
            real_setup(self)
        monkeypatch.setattr(cls, "setup", setup)

    def auditor(kind, payload, src, dst, r):
        algo = seen["algo"]
        users = [c.model.user_emb.weight.detach().clone() for c in algo.clients]
        heads = [[q.detach().clone() for q in c.head.parameters()] for c in algo.clients if hasattr(c, "head")]
        seen["sent"].append((kind, payload, src, users, heads))

    class Watched(Channel):
        def __init__(self, messages, **kw):
            super().__init__(messages, auditor=auditor, **{k: v for k, v in kw.items() if k != "auditor"})
    monkeypatch.setattr(trainer, "Channel", Watched)
    return seen



def rows_shared(t: torch.Tensor, secret: torch.Tensor) -> bool:
    if not t.is_floating_point() or t.dim() == 0 or t.shape[-1] != secret.shape[-1]:
        return False
    t = t.reshape(-1, t.shape[-1])
    return bool((t[:, None, :] == secret[None, :, :]).all(-1).any())


@pytest.mark.parametrize("model", ["mf", "lightgcn"])
def test_fedmf_one_round_user_embeddings_stay_local(run_fgx, watched, model):
    run = run_fgx(*TINY, f"model={model}", "algorithm=fedmf")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and 0 < s["final"]["ndcg@20"] <= 1
    algo = watched["algo"]
    kinds = {k for k, *_ in watched["sent"]}
    assert kinds == {"item_updates", "item_embeddings"}
    for kind, payload, src, users, _ in watched["sent"]:
        for t in payload_tensors(payload):
            assert not any(rows_shared(t, u) for u in users), f"{kind} carries user embedding rows"
        if kind == "item_updates":
            cl = algo.clients[src]
            assert payload["delta"].shape == (cl.inter.num_items, 16)
            assert torch.equal(payload["items"], cl.inter.items_global)
    # the server's table is what every client now holds for its items
    for cl in algo.clients:
        assert torch.allclose(cl.model.item_emb.weight, algo.items[cl.inter.items_global])


def test_pfedrec_one_round_score_function_stays_local(run_fgx, watched, monkeypatch):
    import fgx.algorithms.pfedrec as pf
    trained = {}

    def train(state, p, seed):
        loss = pf.pfedrec_train(state, p, seed)
        trained[state.cid] = [q.detach().clone() for q in state.head.parameters()]
        return loss
    monkeypatch.setattr(PFedRec, "train_fn", staticmethod(train))
    run = run_fgx(*TINY, "model=lightgcn", "algorithm=pfedrec")
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and 0 < s["final"]["ndcg@20"] <= 1
    algo = watched["algo"]
    assert {k for k, *_ in watched["sent"]} == {"item_updates", "item_embeddings"}
    for kind, payload, _, _, heads in watched["sent"]:
        for t in payload_tensors(payload):
            for head in heads:
                assert not any(t.shape == q.shape and torch.equal(t, q) for q in head), f"{kind} carries a score head"
                assert not any(q.dim() == 2 and rows_shared(t, q) for q in head)
    for cl in algo.clients:
        # the server step after training leaves the personal score function as the client trained it
        assert all(torch.equal(a, b) for a, b in zip(trained[cl.cid], cl.head.parameters()))
        # dual personalisation: the client ranks with its fine-tuned items, the global rows wait
        assert cl.pending is not None and not torch.allclose(cl.model.item_emb.weight, cl.pending)


@pytest.mark.parametrize("name,cls", [("sgd", torch.optim.SGD), ("adam", torch.optim.Adam)])
def test_pfedrec_score_head_uses_the_configured_optimizer(run_fgx, monkeypatch, name, cls):
    """algorithm.optimizer picks the optimiser of pFedRec's personal score head as it does the item
    embeddings' (seed-5 mutation sample: the head's built with the default whatever was chosen survived)."""
    from mechanisms import capture_setup

    seen = capture_setup(monkeypatch, PFedRec)
    run_fgx(*TINY, "model=lightgcn", "algorithm=pfedrec", f"algorithm.optimizer={name}", "algorithm.lr=0.07")
    for cl in seen["algo"].clients:
        assert type(cl.head_optimizer) is cls and cl.head_optimizer.defaults["lr"] == 0.07
        assert type(cl.optimizer) is cls
