"""The defining steps of SCAFFOLD, MOON, FedProto, FedTGP and FedDC that tests/test_fl_methods.py left to
the behaviour snapshot (issue 67): each is checked inside a tiny run against an independent computation,
at settings where the step matters (partial participation and η_g ≠ 1 for SCAFFOLD, several server epochs
at a real step size for FedTGP, a drift penalty no clip hides for FedDC)."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from mechanisms import capture_setup, floats
from test_fl_methods import K, LR, NODE, _close, _model, _plus, _rep_logits, _replay, _rounds, _view


def _dist(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in b)


# -- SCAFFOLD (Karimireddy et al. 2020, Alg. 1) ---------------------------------------------------------

def test_scaffold_server_steps_by_eta_g_and_moves_c_by_the_sampled_share_under_partial_participation(
        recorded, run_fgx):
    """Alg. 1 with |S| = 2 of N = 4 clients and η_g = 0.5: x ← x + η_g·(1/|S|)Σ_S Δy_i and
    c ← c + (|S|/N)·(1/|S|)Σ_S Δc_i, recomputed here from the uploads of rounds 1 and 2; each Δc_i is
    option II's −c − Δy_i/(K·lr) against the c the client received."""
    eta_g, n = 0.5, 4
    run_fgx(*NODE, "partitioner.num_clients=4", "algorithm=scaffold", "algorithm.client_fraction=0.5",
            f"algorithm.global_lr={eta_g}", "rounds=3")
    gw, gc = _rounds(recorded, "global_weights"), _rounds(recorded, "global_control")
    up, dc = _rounds(recorded, "update"), _rounds(recorded, "control_update")
    assert len(recorded["clients"]) == n and all(len(u) == 2 for u in up)
    sizes = [int(c.data.train_mask[: c.num_owned].sum()) for c in recorded["clients"]]
    x = floats(next(iter(gw[0].values())))
    c = {k: torch.zeros_like(v) for k, v in floats(next(iter(dc[0].values()))).items()}
    for r in range(2):
        assert _close(floats(next(iter(gc[r].values()))), c), f"round {r + 1}: c sent"
        ids = sorted(up[r])
        d = {i: floats(up[r][i]) for i in ids}
        for i in ids:        # option II: Δc_i = c_i+ − c_i = −c − Δy_i/(K lr)
            assert _close(floats(dc[r][i]), {k: -c[k] - d[i][k] / (K * LR) for k in c}), f"round {r + 1} client {i}"
        mean = {k: sum(d[i][k] for i in ids) / len(ids) for k in x}
        x_next = _plus(x, mean, eta_g)
        c_next = _plus(c, {k: sum(floats(dc[r][i])[k] for i in ids) / len(ids) for k in c}, len(ids) / n)
        got_x, got_c = floats(next(iter(gw[r + 1].values()))), floats(next(iter(gc[r + 1].values())))
        assert _close(got_x, x_next), f"round {r + 1}: x + η_g·mean Δy"
        assert _close(got_c, c_next), f"round {r + 1}: c + (|S|/N)·mean Δc"
        # the settings separate the paper's update from its mutants by far more than the tolerance
        assert _dist(got_x, _plus(x, mean)) > 1e-3                                  # η_g ignored
        assert _dist(got_c, _plus(c, {k: (c_next[k] - c[k]) * n / len(ids) for k in c})) > 1e-3   # 1/|S|
        weighted = {k: sum(sizes[i] * d[i][k] for i in ids) / sum(sizes[i] for i in ids) for k in x}
        assert _dist(got_x, _plus(x, weighted, eta_g)) > 1e-4                    # weighted by training items
        x, c = x_next, c_next


def test_scaffold_refuses_a_local_solver_other_than_sgd_before_work(tmp_path, monkeypatch):
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["run", *NODE, "algorithm=scaffold", "algorithm.optimizer=adam", f"hydra.run.dir={tmp_path / 'run'}"])
    assert "sgd with algorithm=scaffold (option II's control variate" in str(e.value.code)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


# -- MOON: the round-1 term acts on nothing ------------------------------------------------------------

def test_moon_reports_no_contrastive_share_in_the_round_where_the_term_has_no_gradient(recorded, run_fgx):
    """Round 1: every client's previous model is the global one it starts from, so z_prev = z_glob and
    μ·ℓ_con = μ·ln 2 whatever z; its gradient is zero: the update is K steps of plain cross-entropy, and the
    diagnostic says 0. Round 2 the term acts (tests/test_fl_methods.py replays it) and the share is positive."""
    mu = 2.0
    run = run_fgx(*NODE, "algorithm=moon", f"algorithm.mu={mu}", "rounds=2", "eval_every=1")
    gw, up = _rounds(recorded, "global_weights"), _rounds(recorded, "update")
    for cid in up[0]:
        got = _replay(_model(gw[0][cid], recorded), _view(recorded, cid))
        assert _close(_plus(floats(gw[0][cid]), floats(up[0][cid])), got), f"client {cid}"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    share = {row["round"]: row["regulariser_share"] for row in rows if "regulariser_share" in row}
    con = {row["round"]: row["contrastive_loss"] for row in rows if "contrastive_loss" in row}
    assert share[1] == 0.0 and con[1] == 0.0
    assert share[2] > 0.01 and con[2] > 0.01


# -- FedProto: inference by the nearest prototype ------------------------------------------------------

def test_fedproto_scores_each_item_by_its_nearest_global_prototype(run_fgx, monkeypatch):
    """What the trainer scores (``predict``) picks, for every test node, the class whose global prototype is
    nearest to the node's representation under its client's model (computed here through a hook on the
    classifier's input); on this run the farthest prototype picks another class for most nodes."""
    from fgx.algorithms.fedproto import FedProto

    seen = capture_setup(monkeypatch, FedProto)
    run_fgx(*NODE, "algorithm=fedproto", "rounds=2", "eval_every=2")
    algo = seen["algo"]
    P, present = algo.global_protos
    assert bool((present > 0).all())
    picked, nearest, farthest = [], [], []
    for client in algo.ctx.clients:
        scores, y = algo.predict(client, splits=("test",))["test"]
        model, view = algo.states[client.cid].model.eval(), algo.view_for(client)
        with torch.no_grad():
            rep = _rep_logits(model, view)[0][view.test_mask]
        d = ((rep[:, None, :] - P[None, :, :]) ** 2).sum(-1)
        assert torch.equal(y, view.y[view.test_mask])
        picked.append(scores.argmax(1))
        nearest.append(d.argmin(1))
        farthest.append(d.argmax(1))
    picked, nearest, farthest = torch.cat(picked), torch.cat(nearest), torch.cat(farthest)
    assert torch.equal(picked, nearest)
    assert float((farthest != nearest).float().mean()) > 0.5


# -- FedTGP: the server trains its prototype generator for server_epochs -------------------------------

def test_fedtgp_server_takes_server_epochs_sgd_steps_on_the_margin_loss(recorded, run_fgx, monkeypatch):
    """Full-batch server training (one batch per epoch), 3 epochs at step 0.5: the global prototypes sent in
    round 2 are the generator's output after 3 SGD steps, from its initial weights, on the adaptive-margin
    loss of round 1's uploads, all recomputed here; 0 or 1 steps give prototypes far from what was sent."""
    from fgx.algorithms.fedtgp import FedTGP

    epochs, server_lr = 3, 0.5
    init = {}
    real_setup = FedTGP.setup

    def setup(self):
        real_setup(self)
        init["tgp"] = {k: v.detach().clone() for k, v in self.tgp.state_dict().items()}
    monkeypatch.setattr(FedTGP, "setup", setup)
    run_fgx(*NODE, "algorithm=fedtgp", "rounds=2", f"algorithm.server_epochs={epochs}",
            "algorithm.server_batch_size=1000", f"algorithm.server_lr={server_lr}")
    up, sent = _rounds(recorded, "prototypes"), _rounds(recorded, "global_prototypes")
    ids = sorted(up[0])
    protos = torch.stack([up[0][i]["protos"] for i in ids]).double()          # [M, C, d]
    have = torch.stack([up[0][i]["present"] for i in ids]) > 0               # [M, C]
    num_classes, dim = protos.shape[1], protos.shape[2]
    # the adaptive margin: the largest distance from a class's mean upload to its nearest other class, capped
    held = [c for c in range(num_classes) if have[:, c].any()]
    avg = torch.stack([protos[have[:, c], c].mean(0) for c in held])
    margin = min(max(min(float((avg[a] - avg[b]).norm()) for b in range(len(held)) if b != a)
                     for a in range(len(held))), 100.0)
    idx = have.nonzero()
    x, y = protos[idx[:, 0], idx[:, 1]], idx[:, 1]

    # class embedding -> Linear -> ReLU -> Linear (the authors' Trainable_Global_Prototypes), from the run's init
    w = {k: v.double().clone().requires_grad_(True) for k, v in init["tgp"].items()}

    def generator() -> torch.Tensor:
        h = torch.relu(w["embedding.weight"] @ w["middle.0.weight"].t() + w["middle.0.bias"])
        return h @ w["fc.weight"].t() + w["fc.bias"]

    outputs = [generator().detach()]
    for _ in range(epochs):
        P = generator()
        dist = ((x[:, None, :] - P[None, :, :]) ** 2).sum(-1).sqrt()
        dist = dist + margin * nn.functional.one_hot(y, num_classes)
        loss = nn.functional.cross_entropy(-dist, y)
        grads = torch.autograd.grad(loss, list(w.values()))
        with torch.no_grad():
            for v, g in zip(w.values(), grads):
                v -= server_lr * g
        outputs.append(generator().detach())
    got, present = sent[0][ids[0]]
    assert got.shape == (num_classes, dim) and bool((present > 0).all())
    got = got.double()
    assert torch.allclose(got, outputs[-1], atol=1e-5), float((got - outputs[-1]).abs().max())
    for steps in (0, 1):
        assert float((got - outputs[steps]).abs().max()) > 1e-3, f"{steps} server steps"


# -- FedDC: the drift penalty's weight is α / w_i --------------------------------------------------------

def test_feddc_drift_penalty_weight_is_alpha_over_the_clients_relative_size(recorded, run_fgx):
    """Round 2 of each client replayed with its drift h_i (its round-1 update) and penalty weight α/w_i,
    w_i = n_i / mean_j n_j, no gradient clip, α large enough that the penalty moves the update: the upload
    matches; with α alone (not divided by w_i) the replay lands far from it for a client with w_i ≠ 1."""
    alpha = 2.0
    run_fgx(*NODE, "algorithm=feddc", f"algorithm.alpha={alpha}", "algorithm.max_grad_norm=null", "rounds=2")
    gw, up, gs = _rounds(recorded, "global_weights"), _rounds(recorded, "update"), _rounds(recorded, "gradient_state")
    ids = sorted(up[0])
    sizes = {c.cid: int(c.data.train_mask[: c.num_owned].sum()) for c in recorded["clients"]}
    rel = {i: sizes[i] * len(sizes) / sum(sizes.values()) for i in ids}
    assert max(abs(rel[i] - 1) for i in ids) > 0.3
    g0, g1 = floats(gs[0][ids[0]]["g"]), floats(gs[1][ids[0]]["g"])
    names = list(g0)
    separated = 0.0
    for cid in ids:
        assert gs[1][cid]["relative_size"] == pytest.approx(rel[cid])
        d0 = floats(up[0][cid])
        h = {k: d0[k].float() for k in names}
        g_i = {k: -g0[k] / rel[cid] - d0[k] / (K * LR) for k in names}       # after round 1
        diff = {k: (g1[k] / rel[cid] - g_i[k]).float() for k in names}
        w0 = {k: v.float() for k, v in floats(gw[1][cid]).items()}

        def replay(weight):
            def terms(model, z, y):
                pen = sum((p - (w0[k] - h[k])).pow(2).sum() for k, p in model.named_parameters())
                return 0.5 * weight * pen + sum((p * diff[k]).sum() for k, p in model.named_parameters())
            return _replay(_model(gw[1][cid], recorded), _view(recorded, cid), term=terms)
        want = _plus(floats(gw[1][cid]), floats(up[1][cid]))
        assert _close(want, replay(alpha / rel[cid]), tol=5e-5), f"client {cid}"
        separated = max(separated, _dist(want, replay(alpha)))
    assert separated > 1e-3
