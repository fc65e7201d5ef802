"""LPSFed's FedRec baselines (FedRAP, F2MF, FedSSP, FED-PUB on ranking, FedPerGNN, FedHGNN): each runs
two rounds on a tiny synthetic_bipartite graph and the test checks the mechanism that defines it
inside the run (what is sent, what stays local, how the server combines it)."""
import json

import numpy as np
import pytest
import torch

from fgx.federation.channel import payload_tensors

TINY = ["dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120", "dataset.mean_degree=12",
        "partitioner=random_users", "partitioner.num_clients=3", "rounds=2", "eval_every=2",
        "output.checkpoint=false", "model.dim=16"]


@pytest.fixture
def watch(monkeypatch):
    """``watch(cls)``: the run's algorithm object (``["algo"]``) and every message as
    (kind, payload, src, dst, round) in ``["sent"]``."""
    import fgx.trainer as trainer
    from fgx.federation.channel import Channel

    seen = {"sent": []}

    class Watched(Channel):
        def __init__(self, messages, **kw):
            kw.pop("auditor", None)
            super().__init__(messages, auditor=lambda *a: seen["sent"].append(a), **kw)
    monkeypatch.setattr(trainer, "Channel", Watched)

    def install(cls):
        real = cls.setup

        def setup(self):
            seen["algo"] = self
            real(self)
        monkeypatch.setattr(cls, "setup", setup)
        return seen
    return install


def completed(run) -> dict:
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed", s.get("error")
    assert 0 < s["final"]["ndcg@20"] <= 1
    return s


def rows_in(t: torch.Tensor, secret: torch.Tensor) -> bool:
    if not t.is_floating_point() or t.dim() == 0 or t.shape[-1] != secret.shape[-1]:
        return False
    t = t.reshape(-1, t.shape[-1])
    return bool((t[:, None, :] == secret[None, :, :]).all(-1).any())


# ------------------------------------------------------------------------------------------ FedRAP
def test_fedrap_loss_pushes_personality_away_from_commonality():
    """-λ·MSE(D, C): a gradient step on the loss increases ‖D - C‖ (with BCE's part held out), and
    +μ·mean|C| shrinks C."""
    from fgx.algorithms.fedrap import FedRAPModel, fedrap_loss
    torch.manual_seed(0)
    m = FedRAPModel(4, 0.1, 3, 6)
    u, i, j = torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]), torch.tensor([[3], [4], [5]])
    base = fedrap_loss(m, u, i, j, 0.0, 0.0)
    reg = fedrap_loss(m, u, i, j, 1.0, 1.0) - base
    reg.backward()
    with torch.no_grad():
        before = (m.item_personal.weight - m.item_emb.weight).norm()
        c_before = m.item_emb.weight.abs().sum()
        m.item_personal.weight -= 0.01 * m.item_personal.weight.grad
        m.item_emb.weight -= 0.01 * m.item_emb.weight.grad
        assert (m.item_personal.weight - m.item_emb.weight).norm() > before
        assert m.item_emb.weight.abs().sum() < c_before + 0.01 * 2 * before   # L1 pulls C in


def test_fedrap_shares_commonality_keeps_personality(run_fgx, watch):
    from fgx.algorithms.fedrap import FedRAP
    seen = watch(FedRAP)
    from fgx.algorithms.fedrap import weights_at
    run = run_fgx(*TINY, "algorithm=fedrap", "algorithm.local_epochs=1", "algorithm.schedule=fixed")
    completed(run)
    algo = seen["algo"]
    rows = [json.loads(line) for line in (run / "fedrap_sparsity.jsonl").read_text().splitlines()]
    assert [(row["lambda"], row["mu"]) for row in rows] == [weights_at(algo.params, r) for r in (1, 2)]
    assert all(0.0 <= row["sparsity"] <= 1.0 for row in rows)
    assert {k for k, *_ in seen["sent"]} == {"item_updates", "item_embeddings"}
    personal = [c.model.item_personal.weight.detach() for c in algo.clients]
    users = [c.model.user_emb.weight.detach() for c in algo.clients]
    for kind, payload, *_ in seen["sent"]:
        for t in payload_tensors(payload):
            assert not any(rows_in(t, d) for d in personal + users), f"{kind} carries D or user rows"
    for cl in algo.clients:
        m = cl.model
        # the client holds the server's C and ranks with D + C: dropping D changes its scores
        assert torch.allclose(m.item_emb.weight, algo.items[cl.inter.items_global])
        with torch.no_grad():
            s = m.scores()
            assert torch.allclose(s, m.user_emb.weight @ (m.item_personal.weight + m.item_emb.weight).T
                                  + m.user_bias[:, None])
            assert not torch.allclose(s, m.user_emb.weight @ m.item_emb.weight.T + m.user_bias[:, None])
            # training scores with D + C too: the loss's logits are the ranking scores of the same pairs
            u, i = cl.inter.train
            torch.testing.assert_close(m.logits(u, i), s[u, i])
    # D is trained on each client: the clients' personality rows of a shared item differ
    shared = set(algo.clients[0].inter.items_global.tolist()) & set(algo.clients[1].inter.items_global.tolist())
    it = next(iter(shared))
    rows = [int((c.inter.items_global == it).nonzero()) for c in algo.clients[:2]]
    assert not torch.allclose(personal[0][rows[0]], personal[1][rows[1]])


def test_fedrap_schedule_is_tanh():
    from fgx.algorithms.fedrap import FedRAPParams, weights_at
    p = FedRAPParams(lambda_=0.2, mu=0.3)
    assert weights_at(p, 1) == (0.0, 0.0)
    lam, mu = weights_at(p, 11)
    assert np.isclose(lam, 0.2 * np.tanh(1.0)) and np.isclose(mu, 0.3 * np.tanh(1.0))


# -------------------------------------------------------------------------------------------- F2MF
def test_f2mf_fairness_gradient_narrows_the_gap():
    """The client's share of λ(μ_A - μ_D)²: one gradient step lowers the advantaged users' utility
    relative to the disadvantaged ones' when the advantaged are ahead."""
    from fgx.algorithms.f2mf import F2MFParams, FairClient, fairness_term, pair_utility
    from fgx.models.mf import MF, MFParams
    from fgx.recsys.bipartite import ClientInteractions
    torch.manual_seed(0)
    train = torch.tensor([[0, 0, 1, 1, 2, 3], [0, 1, 1, 2, 3, 4]])
    inter = ClientInteractions(torch.arange(4), torch.arange(6), train, train[:, :0], train[:, :0])
    model = MF(MFParams(dim=4), 4, 6)
    cl = FairClient(0, inter, model, None, advantaged=torch.tensor([True, True, False, False]))
    cl.global_sums = torch.tensor([-0.2, 2.0, -1.4, 2.0])     # μ_A = -0.1 > μ_D = -0.7
    cl.sent = torch.tensor([-0.1, 1.0, -0.7, 1.0])
    p = F2MFParams(fair_lambda=1.0)
    term = fairness_term(cl, p)
    users, items, negs = torch.tensor([0, 1, 2, 3]), torch.tensor([0, 1, 3, 4]), torch.tensor([5, 5, 5, 5])

    def gap():
        uh, vh = model.embed()
        t = pair_utility(uh, vh, users, items, negs, 1.0, 5.0)
        return t[:2].mean() - t[2:].mean()
    g0 = gap()
    uh, vh = model.embed()
    term(users, uh, vh, items, negs).backward()
    with torch.no_grad():
        for q in model.parameters():
            q -= 0.5 * q.grad
    assert gap() < g0


def test_f2mf_sends_group_statistics_and_trains_with_them(run_fgx, watch, monkeypatch):
    import fgx.algorithms.f2mf as f2
    seen = watch(f2.F2MF)
    exact = {}
    real = f2.noisy_group_sums

    def spy(state, p, seed):
        g = torch.Generator().manual_seed(seed + 7 * state.cid + 1)    # the negatives the real call draws
        u = f2.user_utilities(state, p, g)
        a = state.advantaged
        exact[state.cid] = torch.tensor([u[a].sum(), a.sum(), u[~a].sum(), (~a).sum()], dtype=torch.float64)
        return real(state, p, seed)
    monkeypatch.setattr(f2, "noisy_group_sums", spy)
    args = [*TINY, "algorithm=f2mf", "algorithm.local_epochs=1", "algorithm.dp_epsilon=null", "algorithm.lr=0.05"]
    completed(run_fgx(*args, "algorithm.fair_lambda=50"))
    stats = [(src, p) for k, p, src, *_ in seen["sent"] if k == "group_stats"]
    assert len(stats) == 6
    for src, p in stats[-3:]:      # without noise the message is the exact group sums of the client's users
        assert torch.allclose(p.double(), exact[src], atol=1e-4)
    fair = [c.model.item_emb.weight.detach().clone() for c in seen["algo"].clients]
    # the same run without the fairness term trains a different model (the term enters from round 2) ...
    completed(run_fgx(*args, "algorithm.fair_lambda=0"))
    plain = [c.model.item_emb.weight.detach() for c in seen["algo"].clients]
    assert any(not torch.allclose(a, b) for a, b in zip(fair, plain))
    # ... and in round 1, before any global statistics exist, both are the same run
    one = [completed(run_fgx(*args, f"algorithm.fair_lambda={lam}", "rounds=1", "eval_every=1"))["final"]
           for lam in (50, 0)]
    assert one[0] == one[1]
    assert {"ndcg@20_advantaged", "ndcg@20_disadvantaged"} <= set(one[0])     # the two groups' NDCG


def test_f2mf_noise_is_laplace_with_the_declared_scale():
    from fgx.algorithms.f2mf import F2MFParams
    import fgx.algorithms.f2mf as f2
    p = F2MFParams(dp_epsilon=0.5, utility_clip=2.0)
    state = type("S", (), {"cid": 0, "advantaged": torch.tensor([True, False])})()
    real = f2.user_utilities
    f2.user_utilities = lambda s, p, g: torch.tensor([-1.0, -2.0])
    try:
        draws = torch.stack([f2.noisy_group_sums(state, p, seed) for seed in range(4000)])
    finally:
        f2.user_utilities = real
    noise = (draws - torch.tensor([-1.0, 1.0, -2.0, 1.0], dtype=torch.float64)).numpy()
    from scipy import stats
    for col, scale in ((0, 4.0), (1, 2.0)):      # clip/ε on sums, 1/ε on counts
        assert stats.kstest(noise[:, col], "laplace", args=(0, scale)).pvalue > 1e-3


# ------------------------------------------------------------------------------------------ FedSSP
def test_fedssp_shares_only_the_eigenvalue_encoder(run_fgx, watch, monkeypatch, tmp_path):
    from fgx.algorithms.fedssp import FedSSP
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    seen = watch(FedSSP)
    completed(run_fgx(*TINY, "algorithm=fedssp", "algorithm.local_epochs=1", "algorithm.hidden=8",
                      "model.frequency=16", "model.bias_dim=8"))
    clients = seen["algo"].clients
    ups = [p for k, p, *_ in seen["sent"] if k == "spectral_encoder"]
    assert ups and all(set(p) == {"eig_encoder.lin.weight", "eig_encoder.lin.bias"} for p in ups)
    sd = [c.model.state_dict() for c in clients]
    assert all(torch.equal(s["eig_encoder.lin.weight"], sd[0]["eig_encoder.lin.weight"]) for s in sd)
    assert not torch.equal(sd[0]["kernel_decoder.weight"], sd[1]["kernel_decoder.weight"])
    assert not torch.equal(sd[0]["preference"], sd[1]["preference"])
    # each client's kernels are the shared encoder read at its own eigenvalues
    for c in clients:
        m = c.model
        assert torch.allclose(m.layer_kernels(), m.kernel_decoder(m.eig_encoder(m.eigvals)).T)
    assert not torch.allclose(clients[0].model.layer_kernels(), clients[1].model.layer_kernels())
    # the consensus sent down is the mean of the clients' mean representations of that round
    r2 = [(k, p) for k, p, s, d, r in seen["sent"] if r == 2 and k in ("mean_representation", "global_consensus")]
    means = torch.stack([p for k, p in r2 if k == "mean_representation"])
    assert torch.allclose([p for k, p in r2 if k == "global_consensus"][0], means.mean(0))
    assert all(torch.equal(c.consensus, means.mean(0)) for c in clients)


def test_fedssp_consensus_term_pulls_to_the_global_mean():
    from fgx.algorithms.fedssp import FedSSPParams, fedssp_train
    import fgx.algorithms.fedssp as fs
    captured = {}

    def fake_epochs(state, epochs, batch, negs, tau, seed, regulariser=None):
        state.model.rep_mean = torch.tensor([1.0, 3.0], requires_grad=True)
        captured["loss"] = regulariser(state, None, None)
        return 0.0
    real = fs.bpr_graph_epochs
    fs.bpr_graph_epochs = fake_epochs
    try:
        st = type("S", (), {})()
        st.model, st.consensus, st.running = type("M", (), {})(), torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.0])
        fedssp_train(st, FedSSPParams(tau_weight=10.0, momentum=0.5), 0)
    finally:
        fs.bpr_graph_epochs = real
    run = torch.tensor([0.5, 1.5])               # (1-m)·0 + m·[1, 3]
    assert torch.allclose(st.running, run)
    assert torch.isclose(captured["loss"], 10.0 * (0.5 * (run - torch.tensor([0.0, 1.0])) ** 2).mean())


# ----------------------------------------------------------------------------------- FED-PUB (ranking)
def test_fedpub_ranking_personalised_aggregation(run_fgx, watch, monkeypatch, tmp_path):
    from fgx.algorithms.fedpub import similarity_weights
    from fgx.algorithms.fedpub_ranking import FedPubRanking
    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    seen = watch(FedPubRanking)
    run = run_fgx(*TINY, "algorithm=fedpub", "model=lgcn", "algorithm.local_steps=2", "model.frequency=16",
                  "model.bias_dim=8", "algorithm.proxy_users=40", "algorithm.proxy_items=40")
    completed(run)
    sent = seen["sent"]
    thetas = {s: p for k, p, s, d, r in sent if k == "weights" and r == 1}
    embs = {s: p for k, p, s, d, r in sent if k == "functional_embedding" and r == 1}
    personal = {d: p for k, p, s, d, r in sent if k == "personalised_weights" and r == 2}
    clients = seen["algo"].clients
    assert all(set(t) == set(clients[0].model.shared_keys()) for t in thetas.values())   # no embeddings, kernels, masks
    ids = sorted(thetas)
    sizes = torch.tensor([c.inter.train.size(1) for c in clients])
    W = similarity_weights(torch.stack([embs[i] for i in ids]), sizes, 3.0)
    assert torch.allclose(W.sum(1), torch.ones(len(ids)))
    for a in ids:
        for key in thetas[a]:
            expected = sum(W[a, b] * thetas[b][key] for b in ids)
            assert torch.allclose(personal[a][key], expected, atol=1e-6)
    assert not torch.allclose(personal[ids[0]]["pool.0.weight"], personal[ids[1]]["pool.0.weight"])
    rec = [json.loads(l) for l in (run / "fedpub_weights.jsonl").read_text().splitlines()]
    assert np.allclose(rec[0]["W"], W.numpy(), atol=1e-6)
    # the masks are trained and never sent
    for c in clients:
        assert any(not torch.equal(m, torch.ones_like(m)) for m in c.masks.values())


def test_fedpub_ranking_local_epochs_step_over_mini_batches(run_fgx, monkeypatch, tmp_path):
    """With local_epochs, each epoch walks the client's training pairs in batches of batch_size."""
    from fgx.recsys import losses

    monkeypatch.setenv("FGX_DATA_DIR", str(tmp_path / "cache"))
    sizes, real = [], losses.bpr_loss
    monkeypatch.setattr(losses, "bpr_loss", lambda pos, neg: sizes.append(pos.size(0)) or real(pos, neg))
    completed(run_fgx(*TINY, "algorithm=fedpub", "model=lgcn", "algorithm.local_epochs=1", "algorithm.batch_size=16",
                      "model.frequency=16", "model.bias_dim=8", "algorithm.proxy_users=40",
                      "algorithm.proxy_items=40", "rounds=1", "eval_every=1"))
    assert max(sizes) == 16 and len(sizes) > 3 * 2      # 3 clients, several batches each


def test_fedpub_ranking_needs_lgcn(run_fgx):
    with pytest.raises(SystemExit, match="lgcn"):
        run_fgx(*TINY, "algorithm=fedpub", "model=ngcf")


# --------------------------------------------------------------------------------------- FedPerGNN
def test_fedpergnn_expansion_ldp_and_pseudo_items(run_fgx, watch):
    from fgx.algorithms.fedpergnn import FedPerGNN
    seen = watch(FedPerGNN)
    run = run_fgx(*TINY, "algorithm=fedpergnn", "algorithm.local_epochs=1", "algorithm.neighbors=5",
                  "algorithm.pseudo_items=7")
    completed(run)
    algo, sent = seen["algo"], seen["sent"]
    reqs = {s: p for k, p, s, d, r in sent if k == "expansion_request" and r == 1}
    reps = {d: p for k, p, s, d, r in sent if k == "expansion_reply" and r == 1}
    for cid, req in reqs.items():
        cl = algo.clients[cid]
        # tokens are keyed hashes, not item ids; equal items of different clients get equal tokens
        assert not set(req["tokens"].tolist()) & set(cl.inter.items_global.tolist())
        rep = reps[cid]
        assert rep["neighbor_embeddings"].size(0) > 0
        own = req["user_embeddings"]
        others = torch.cat([r["user_embeddings"] for c, r in reqs.items() if c != cid])
        for row in rep["neighbor_embeddings"]:          # every neighbour is another client's user
            assert (others == row).all(1).any() and not (own == row).all(1).any()
        # each neighbour answers a token this client sent, and is a user of another client with that item
        sent_tokens = set(req["tokens"].tolist())
        assert set(rep["tokens"].tolist()) <= sent_tokens
    rows = [json.loads(l)["foreign_users"] for l in (run / "fedpergnn_expansion.jsonl").read_text().splitlines()]
    assert all(n > 0 for n in rows[0])
    # item uploads: the client's items plus pseudo items it does not hold
    for k, p, s, d, r in sent:
        if k == "item_updates":
            held = set(algo.clients[s].inter.items_global.tolist())
            ids = p["items"].tolist()
            assert held <= set(ids) and len(set(ids) - held) == 7


def test_fedpergnn_ldp_noises_every_batch_gradient_at_the_authors_scale(run_fgx, watch, monkeypatch):
    """wuch15/FedPerGNN model.py line 59 and run.py line 46: every batch, an SGD step on the gradients of all
    weights clipped together to CLIP (Keras 2.2.4 clipnorm), then Laplace(LR·2·CLIP/√BATCH/EPS) on every weight.
    Inside the run, each batch's weight change must equal −lr·clip(g) + the Laplace draws, computed here from
    the gradient before clipping (an Adam step, a per-tensor clip or noise fed through the optimizer breaks it),
    the draws at scale lr·2·clip/(√B·ε). Every batch of every client is a release; privacy.json composes them."""
    from fgx.algorithms import fedpergnn

    steps, lr, clip, eps = [], 0.5, 0.05, 2.0
    real_call, real_after = fedpergnn.BatchLDP.__call__, fedpergnn.BatchLDP.after_step

    def spy_call(self, batch_len):
        params = [q for grp in self.groups for q in grp]
        steps.append({"B": batch_len, "w0": [q.detach().clone() for q in params],
                      "g": [q.grad.clone() if q.grad is not None else torch.zeros_like(q) for q in params]})
        real_call(self, batch_len)

    def spy_after(self, optimizer, *rest):
        draws, rng = [], self.rng

        class Recording:                     # the client's stream, its Laplace draws kept
            def laplace(self, loc, scale, size):
                x = rng.laplace(loc, scale, size)
                draws.append((scale, x))
                return x

            def __getattr__(self, name):
                return getattr(rng, name)
        self.rng = Recording()
        try:
            real_after(self, optimizer, *rest)
        finally:
            self.rng = rng
        steps[-1].update(draws=draws, w1=[q.detach().clone() for grp in self.groups for q in grp])
    monkeypatch.setattr(fedpergnn.BatchLDP, "__call__", spy_call)
    monkeypatch.setattr(fedpergnn.BatchLDP, "after_step", spy_after)
    seen = watch(fedpergnn.FedPerGNN)
    run = run_fgx(*TINY, "algorithm=fedpergnn", "algorithm.local_epochs=2", "algorithm.batch_size=64",
                  "algorithm.neighbors=0", f"algorithm.ldp_epsilon={eps}", f"algorithm.clip={clip}", f"algorithm.lr={lr}")
    completed(run)
    priv = json.loads((run / "privacy.json").read_text())["algorithm_ldp"]
    # 2 rounds x 2 epochs x ceil(pairs / 64) batches per client, each one release of sqrt(B)*eps
    assert priv["releases_per_client"] == [2 * 2 * -(-c.inter.train.size(1) // 64) for c in seen["algo"].clients]
    assert len(steps) == sum(priv["releases_per_client"])
    assert priv["epsilon"] == pytest.approx(max(priv["epsilon_per_client"]))
    # what each epsilon means, for a reader of privacy.json: fgx's composes every release, the paper's does not
    assert {k: priv[k] for k in ("mechanism", "noise_scale", "params", "unit", "paper_epsilon_per_release",
                                 "paper_unit", "covers", "not_covered")} == {
        "mechanism": "per-batch Laplace on clipped gradients (wuch15/FedPerGNN run.py)",
        "noise_scale": "2*clip/(sqrt(batch)*ldp_epsilon) per coordinate of every batch gradient",
        "params": {"clip": clip, "ldp_epsilon": eps, "batch_size": 64},
        "unit": "per coordinate, client level (a client's whole batch gradient may change: sensitivity 2*clip per "
                "coordinate, so one release costs sqrt(batch)*ldp_epsilon), pure epsilon-DP, basic composition "
                "over every release of the run",
        "paper_epsilon_per_release": eps,
        "paper_unit": "per coordinate and release, per user, with the noise of B users averaged in a batch (the "
                      "code's 1/sqrt(BATCH_SIZE)); not composed over releases",
        "covers": ["model_update", "item_updates", "expansion_request.user_embeddings"],
        "not_covered": ["expansion_request.tokens/owner: the client's interactions under item pseudonyms, seen by "
                        "the third party (the paper's design)"]}
    assert sum(priv["epsilon_per_client"]) == pytest.approx(sum(np.sqrt(s["B"]) * eps for s in steps))
    ratios, clipped_any = [], False
    for s in steps:
        g = [x.double() for x in s["g"]]
        norm = float(torch.sqrt(sum(x.pow(2).sum() for x in g)))           # one norm over every tensor
        coef = min(1.0, clip / (norm + 1e-6))
        clipped_any |= coef < 1.0
        scale = lr * 2 * clip / (np.sqrt(s["B"]) * eps)
        assert len(s["draws"]) == len(g) and all(sc == pytest.approx(scale) for sc, _ in s["draws"])
        for w0, w1, gi, (_, n) in zip(s["w0"], s["w1"], g, s["draws"]):
            expected = w0.double() - lr * coef * gi + torch.from_numpy(n).double()
            torch.testing.assert_close(w1.double(), expected, atol=2e-6, rtol=1e-5)
            ratios.append((float(np.abs(n).mean()) / scale, n.size))
    assert clipped_any
    # Laplace(scale): E|x| = scale; averaged over every coordinate of every release
    w = np.array([k for _, k in ratios], dtype=float)
    assert float(np.sum([r * k for r, k in ratios]) / w.sum()) == pytest.approx(1.0, rel=0.03)
    rows = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["noise_to_signal"] > 0 for r in rows)
    s = json.loads((run / "summary.json").read_text())
    assert s["privacy"]["epsilon_algorithm_ldp"] == pytest.approx(priv["epsilon"])
    assert s["diagnostics"]["noise_to_signal"]["last"] == pytest.approx(rows[-1]["noise_to_signal"])


def test_fedpergnn_batch_step_is_clipped_sgd_then_laplace_on_the_weights():
    """A toy model, one batch: the authors' step computed independently in numpy (Keras 2.2.4 clipnorm over
    all gradients, plain SGD, Laplace(lr·2·clip/(√B·ε)) drawn in parameter order from the same stream)."""
    from fgx.algorithms.fedpergnn import BatchLDP, FedPerGNNParams, local_optimizer

    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    p = FedPerGNNParams(lr=0.3, clip=0.1, ldp_epsilon=0.5)
    x = torch.randn(16, 5)
    model(x).pow(2).sum().backward()
    w0 = [q.detach().double().numpy().copy() for q in model.parameters()]
    g = [q.grad.double().numpy().copy() for q in model.parameters()]
    opt = local_optimizer(model.parameters(), p)
    ldp = BatchLDP([list(model.parameters())], p, np.random.default_rng(7))
    hook = opt.register_step_post_hook(ldp.after_step)
    ldp(16)
    opt.step()
    hook.remove()

    norm = np.sqrt(sum((x ** 2).sum() for x in g))
    assert norm > p.clip                                  # the clip acts
    rng = np.random.default_rng(7)
    scale = p.lr * 2 * p.clip / (np.sqrt(16) * p.ldp_epsilon)
    for q, w, gi in zip(model.parameters(), w0, g):
        expected = w - p.lr * gi * (p.clip / (norm + 1e-6)) + rng.laplace(0.0, scale, w.shape)
        np.testing.assert_allclose(q.detach().double().numpy(), expected, atol=1e-6)
    assert ldp.releases == 1 and ldp.epsilon == pytest.approx(np.sqrt(16) * p.ldp_epsilon)


def test_fedpergnn_noise_needs_a_clip(run_fgx):
    with pytest.raises(SystemExit, match="clip"):
        run_fgx(*TINY, "algorithm=fedpergnn", "algorithm.clip=null")


def test_fedpergnn_without_ldp_uploads_only_the_clients_items(run_fgx, watch):
    from fgx.algorithms.fedpergnn import FedPerGNN
    seen = watch(FedPerGNN)
    completed(run_fgx(*TINY, "algorithm=fedpergnn", "algorithm.local_epochs=1", "algorithm.ldp_epsilon=null",
                      "algorithm.pseudo_items=0", "algorithm.neighbors=0", "rounds=1", "eval_every=1"))
    algo = seen["algo"]
    assert not any(k.startswith("expansion") for k, *_ in seen["sent"])
    for k, p, s, d, r in seen["sent"]:
        if k == "item_updates":
            assert torch.equal(p["items"], algo.clients[s].inter.items_global)


# ----------------------------------------------------------------------------------------- FedHGNN
def test_fedhgnn_perturbation_keeps_degree_and_hides_items():
    from fgx.algorithms.fedhgnn import item_groups, perturb_items
    groups = item_groups(300, 10, 0)
    rng = np.random.default_rng(1)
    items = rng.choice(300, 25, replace=False)
    outs = [perturb_items(items, groups, 1.0, 2.0, rng) for _ in range(400)]
    sizes = np.array([len(o) for o in outs])
    assert abs(sizes.mean() - 25) < 1.0                               # degree kept in expectation
    kept = np.mean([len(set(o) & set(items)) / 25 for o in outs])
    assert 0.05 < kept < 0.9                                          # neither the true set nor nothing
    strong = np.mean([len(set(perturb_items(items, groups, 8.0, 8.0, rng)) & set(items)) / 25 for _ in range(100)])
    assert strong > kept                                              # more budget, closer to the truth


def test_fedhgnn_server_sees_only_published_perturbed_graph(run_fgx, watch):
    from fgx.algorithms.fedhgnn import FedHGNN, metapath_edges
    import scipy.sparse as sp
    seen = watch(FedHGNN)
    completed(run_fgx(*TINY, "algorithm=fedhgnn", "algorithm.local_epochs=1", "algorithm.metapath_neighbors=5"))
    algo, sent = seen["algo"], seen["sent"]
    pubs = {s: p for k, p, s, *_ in sent if k == "perturbed_interactions"}
    n_items = algo.items.size(0)
    rows, users, items = {}, [], []
    for cid in sorted(pubs):
        pub, cl = pubs[cid], algo.clients[cid]
        assert not set(pub["pseudonyms"].tolist()) & set(cl.inter.users_global.tolist())
        true = {(int(u), int(cl.inter.items_global[i])) for u, i in cl.inter.train.t().tolist()}
        pseud = {int(s): k for k, s in enumerate(pub["pseudonyms"].tolist())}
        published = {(pseud[int(s)], int(i)) for s, i in zip(pub["user"].tolist(), pub["item"].tolist())}
        assert published != true and len(published & true) < len(true)
        for s in pub["pseudonyms"].tolist():
            rows[s] = len(rows)
        users += [rows[s] for s in pub["user"].tolist()]
        items += pub["item"].tolist()
    r = sp.csr_matrix((np.ones(len(users)), (users, items)), shape=(len(rows), n_items))
    r.data[:] = 1.0
    graphs = [p for k, p, *_ in sent if k == "metapath_graphs"]
    assert torch.equal(graphs[0]["uu"], metapath_edges(r, 5))        # built from the published graph only
    assert torch.equal(graphs[0]["ii"], metapath_edges(r.T.tocsr(), 5))
    for cl, g in zip(algo.clients, graphs):
        assert torch.equal(cl.model.rows, g["rows"])
        assert torch.equal(cl.model.uu, g["uu"])
    # the server's state is the average of what the clients uploaded, and every client holds it
    for cl in algo.clients:
        assert torch.equal(cl.model.user_table, algo.users) and torch.equal(cl.model.item_table, algo.items)


def test_fedrap_learning_rate_decays_per_round_and_per_step(monkeypatch):
    """The code's decays: round t starts at lr·0.97^(t-1) and each step multiplies it by step_decay."""
    import fgx.algorithms.fedrap as fr
    from fgx.recsys.bipartite import ClientInteractions
    torch.manual_seed(0)
    train = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 3]])
    inter = ClientInteractions(torch.arange(3), torch.arange(5), train, train[:, :0], train[:, :0])
    model = fr.FedRAPModel(4, 0.1, 3, 5)
    state = fr.ItemClient(0, inter, model, torch.optim.SGD(model.parameters(), lr=1.0))
    seen = []
    real = torch.optim.SGD.step

    def step(self, *a, **k):
        seen.append(self.param_groups[0]["lr"])
        return real(self, *a, **k)
    monkeypatch.setattr(torch.optim.SGD, "step", step)
    p = fr.FedRAPParams(lr=0.5, round_decay=0.9, step_decay=0.8, local_epochs=1, batch_size=2, optimizer="sgd")
    fr.fedrap_train(state, p, seed=0, r=3)
    assert np.allclose(seen, [0.5 * 0.9 ** 2 * 0.8 ** k for k in range(3)])


def test_fedpergnn_pseudo_items_of_a_client_with_two_items_spread_like_its_real_rows(monkeypatch):
    """The pseudo items' gradient rows are drawn from N(mean, std) of the client's real rows: with two
    real items the std exists and the fake rows differ from each other (seed-4 mutation sample: a
    client needed more than two items before the spread was used, so its fakes were all the mean)."""
    import types

    import fgx.algorithms.fedpergnn as fp

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.item_emb = torch.nn.Embedding(2, 4)

        def shared_state(self):
            return {}

    def fake_training(model, *args, **kwargs):      # a local step that moves both item rows differently
        with torch.no_grad():
            model.item_emb.weight.add_(torch.tensor([[1.0, -2.0, 0.5, 3.0], [-1.0, 2.0, 1.5, 0.0]]))
        return 0.0
    monkeypatch.setattr(fp, "bpr_epochs", fake_training)
    p = fp.FedPerGNNParams(ldp_epsilon=None, pseudo_items=4)
    model = Model()
    cl = types.SimpleNamespace(model=model, cid=0, audit=None, known=None,
                               optimizer=fp.local_optimizer(model.parameters(), p),
                               inter=types.SimpleNamespace(train=None, items_global=torch.tensor([3, 7])))
    fp.pergnn_train(cl, p, seed=0, num_items_global=20)
    ids, delta = cl.update["items"], cl.update["delta"]
    fake = delta[~torch.isin(ids, torch.tensor([3, 7]))]
    assert len(fake) == 4
    assert (fake.std(0) > 0.1).all()
