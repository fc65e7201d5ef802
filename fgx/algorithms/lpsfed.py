"""LPSFed (Sim & Park, ICLR 2026): federated recommendation on client user-item subgraphs.

Each client trains an LGCN on its own subgraph (embeddings, spectral kernels and popularity
encoders stay local), scored by f_Pred's preference angle (Eq. 5, ``model.score=mlp_angle``, default)
or the cosine (``model.score=cosine``). Every round the server builds a neutral anchor graph G_R from
averaged client statistics and broadcasts its normalised low-pass spectrum K^R; each client sends its
pooling network and f_Pred, its mean margin M^c (Eq. 10) and ρ_c = KL(K^R ‖ K^c) (Eq. 11). The server
averages (Eq. 13) and returns to each client ρ̄_c·mean + (1-ρ̄_c)·own (Eq. 12, 14). ``model=ngcf`` is the
paper's "w/o LGCN" ablation (NGCF propagation, same shared networks).

Switches give the paper's baselines on the same model: ``loss=bpr`` is LPSFed (BPR);
``personalize=false`` mixes with ρ̄ = 1, i.e. plain averaging = FedAvg (LGCN) (with ``loss=bpr``);
``federate=false`` never communicates = Local (LGCN). ``signal``, ``anchor_regen``, ``rho_tie`` and
``code_compat`` select the authors' code's behaviour where it differs from the paper (spec 2.2, 2.3)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.algorithms.base import Algorithm
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.federation.client import round_seed
from fgx.recsys import losses
from fgx.recsys.graph_clients import (GraphClient, GraphTrainParams, build_graph_clients, client_structure, graph_client_metrics,
                                      pos_neg_cos, require_graph_model)
from fgx.recsys.spectral import (anchor_graph, bipartite_laplacian, code_kl, kl_divergence, lowest_eigenpairs,
                                 lowpass_distribution, max_similarity, minmax_similarity, reference_anchor_sizes,
                                 single_bin_density)
from fgx.recsys.training import sample_negatives
from fgx.registry import ALGORITHMS


@dataclass
class LPSFedParams(GraphTrainParams):
    loss: str = field(default="bc", metadata=spec(choices=["bc", "bpr"]))
    tau: float = field(default=0.2, metadata=spec(gt=0.0, help="temperature of the BC / bias losses"))
    gamma: float = field(default=0.1, metadata=spec(min=0.0, help="margin strength γ (Eq. 8)"))
    omega: float = field(default=0.5, metadata=spec(min=0.0, max=1.0, help="weight of the server margin (Eq. 15)"))
    lambda_bias: float = field(default=0.5, metadata=spec(min=0.0, max=1.0, help="weight of L_bias (Eq. 7)"))
    margin_grad: bool = field(default=True, metadata=spec(
        help="gradient through the margin (Eq. 8, paper and code); false: margin detached (fgx before issue #7's fix)"))
    personalize: bool = field(default=True, metadata=spec(help="false: ρ̄ = 1, plain averaging (FedAvg)"))
    federate: bool = field(default=True, metadata=spec(help="false: no communication (Local)"))
    anchor: str = field(default="gnmk", metadata=spec(choices=["gnmk", "er"]))
    anchor_stats: bool = field(default=True, metadata=spec(
        help="false: anchor from global assumptions (users = items = 500, density 5%) instead of client statistics"))
    signal: str = field(default="eigvals", metadata=spec(
        choices=["eigvals", "learned_kernel_x_eigvals"],
        help="K^c: the client's Φ eigenvalues (Eq. 6/16), or |last layer's learned kernel ⊙ eigenvalues| "
             "after each local training (authors' code)"))
    anchor_regen: str = field(default="per_round", metadata=spec(
        choices=["per_round", "once"], help="G_R regenerated every round (paper) or generated once (authors' code)"))
    rho_tie: float = field(default=0.5, metadata=spec(
        min=0.0, max=1.0, help="ρ̄ of every client when all ρ are equal (Eq. 12 is 0/0 there; authors' code: 0.5)"))
    code_compat: bool = field(default=False, metadata=spec(
        help="the authors' code's similarity: G_R once, sizes total/C and GNMK edges total/C², single-bin "
             "histogram of the spectra, |scalar KL|, ρ̄ = 1 - ρ/max ρ (0.5 if max ρ = 0); rho_tie unused"))
    kl_eps: float = field(default=1e-10, metadata=spec(gt=0.0))
    warmup_rounds: int = field(default=2, metadata=spec(min=0, help="rounds without server mixing"))


class LPSFedClient(GraphClient):
    """A graph client plus its margin state."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.margin_context = 0.0         # M^c_updated from the server (0 before the first mixing)
        self.margin = 0.0                 # M^c (Eq. 10), after the last local training


RankingClient = LPSFedClient             # the name older checkpoints and scripts use


def client_train(state: LPSFedClient, p: LPSFedParams, seed: int) -> float:
    """Local epochs of BC or BPR training; returns the mean loss and updates M^c."""
    model, tr = state.model, state.inter.train
    g = torch.Generator().manual_seed(seed + state.cid)
    model.train()
    total, steps, margins = 0.0, 0, []
    for _ in range(p.local_epochs):
        perm = torch.randperm(tr.size(1), generator=g)
        neg_all = sample_negatives(state.known, tr[0], p.num_negatives, g)
        for b in torch.split(perm, p.batch_size):
            u, i, j = tr[0, b], tr[1, b], neg_all[b]
            uh, vh = model.embed()
            cos_pos, cos_neg = pos_neg_cos(model, uh, vh, u, i, j)   # cos R̂: tanh(f_Pred) or the cosine
            if p.loss == "bpr":
                loss = losses.bpr_loss(cos_pos[:, None] / p.bpr_tau, cos_neg / p.bpr_tau)
            else:
                bias_pos = model.pop_cos(u, i)
                bias_neg = model.pop_cos(u[:, None].expand_as(j), j)
                m_ui = losses.bc_margin(bias_pos, losses.angle(cos_pos), p.gamma, p.margin_grad)
                margin = losses.refined_margin(m_ui, state.margin_context, p.omega)
                loss = (1 - p.lambda_bias) * losses.bc_loss(cos_pos, cos_neg, margin, p.tau) \
                    + p.lambda_bias * losses.bias_loss(bias_pos, bias_neg, p.tau)
                margins.append(m_ui.detach())
            state.optimizer.zero_grad()
            loss.backward()
            state.optimizer.step()
            total += float(loss.detach())
            steps += 1
    if margins:
        state.margin = float(torch.cat(margins[-max(1, len(margins) // p.local_epochs):]).mean())
    return total / max(steps, 1)


def client_similarity(state: LPSFedClient, kr: np.ndarray, p: LPSFedParams) -> float:
    """ρ_c on the client (K^c never leaves it): Eq. 11 KL(K^R ‖ K^c) on the normalised signal, or
    with ``code_compat`` the code's scalar KL between single-bin histogram densities."""
    k = state.eigvals
    if p.signal == "learned_kernel_x_eigvals":   # last layer's kernel wins, as in the code
        k = state.model.layer_kernels()[-1].detach().double().cpu().numpy() * k
    if p.code_compat:
        return code_kl(float(kr[0]), single_bin_density(k))
    return kl_divergence(kr, lowpass_distribution(np.abs(k), p.kl_eps))


def personalized_mix(own: dict, mean: dict, rho_bar: float) -> dict:
    """Eq. 14: ρ̄·mean + (1-ρ̄)·own per shared tensor (ρ̄ = 1: FedAvg; ρ̄ = 0: unchanged)."""
    return {k: rho_bar * mean[k] + (1 - rho_bar) * own[k] for k in own}


def shared_state(model) -> dict[str, torch.Tensor]:
    sd = model.state_dict()
    return {k: sd[k].detach().clone() for k in model.shared_keys()}


@ALGORITHMS.register("lpsfed", params=LPSFedParams, tasks=("ranking",))
class LPSFed(Algorithm):
    messages = {
        "client_stats": Message("up"),
        "anchor_spectrum": Message("down"),
        "mlp_params": Message("up"),
        "scalar_margin": Message("up"),
        "scalar_similarity": Message("up"),
        "personalized_params": Message("down"),
    }

    @classmethod
    def check_config(cls, params, validated) -> None:
        from fgx.config import ConfigError
        require_graph_model(validated, "the LPSFed family (lgcn; ngcf for the w/o LGCN ablation)")
        if params.signal == "learned_kernel_x_eigvals" and (validated.names["model"] != "lgcn"
                                                           or validated.params["model"].layers < 1):
            raise ConfigError("algorithm.signal", params.signal,
                              "eigvals unless model=lgcn with model.layers >= 1 (no learned kernel otherwise)")

    def setup(self) -> None:
        ctx, p = self.ctx, self.params
        self.phi = ctx.model_params.frequency
        data = ctx.global_data
        self.clients: list[LPSFedClient] = build_graph_clients(ctx, p.lr, p.weight_decay, p.optimizer,
                                                               client_cls=LPSFedClient)
        stats = []
        for c, cl in zip(ctx.clients, self.clients):
            s = client_structure(cl)
            c.stats.update(s)
            stats.append(s)
            if p.federate:
                ctx.channel.send("client_stats", torch.tensor([s["users"], s["items"], s["interactions"]],
                                                              dtype=torch.float64), src=c.cid, dst="server", round=0)
        # per-client structure (the partition file is written before clients are re-indexed here);
        # LD/MB/SS = tertiles of the client node count (spec 4.3)
        nodes = np.array([s["users"] + s["items"] for s in stats])
        lo, hi = np.quantile(nodes, [1 / 3, 2 / 3])
        for s, n in zip(stats, nodes):
            s["group"] = "LD" if n > hi else "SS" if n <= lo else "MB"
            ctx.record("lpsfed_clients", dict(s))
        self.mean_stats = {k: float(np.mean([s[k] for s in stats])) for k in ("users", "items", "interactions")}
        # code_compat sizes the anchor from the whole training set, as the authors' make_subgraph.py
        self.totals = (data.num_users, data.num_items, sum(s["interactions"] for s in stats))
        self.fixed_anchor = None
        # Algorithm 1: every client starts from the same shared networks
        init = shared_state(self.clients[0].model)
        for cl in self.clients[1:]:
            cl.model.load_state_dict(init, strict=False)
        self.rho_bar = [1.0] * len(self.clients)

    def anchor_spectrum(self, r: int) -> np.ndarray:
        """K^R of round r: normalised first-Φ eigenvalues of a fresh G_R (paper), or of one G_R
        generated with round 0's seed (``anchor_regen=once``, ``code_compat``); with ``code_compat``
        the single-bin histogram density [1 / (max λ - min λ)]."""
        p = self.params
        once = p.anchor_regen == "once" or p.code_compat
        if once and self.fixed_anchor is not None:
            return self.fixed_anchor
        r = 0 if once else r
        if not p.anchor_stats:
            m, n = 500, 500
            e = int(0.05 * m * n)
        elif p.code_compat:
            m, n, e = reference_anchor_sizes(p.anchor, *self.totals, len(self.clients))
        else:
            m, n, e = (int(round(self.mean_stats[k])) for k in ("users", "items", "interactions"))
        e = min(e, m * n)
        u, i = anchor_graph(p.anchor, m, n, e, seed=self.ctx.seed * 1000 + r)
        w, _ = lowest_eigenpairs(bipartite_laplacian(u, i, m, n), self.phi, seed=r)
        k = np.array([single_bin_density(w)]) if p.code_compat else lowpass_distribution(w, p.kl_eps)
        if once:
            self.fixed_anchor = k
        return k

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        results = self.ctx.executor.map(client_train, self.clients, p, round_seed(self.ctx.seed, r))
        loss = float(np.mean(results))
        if not p.federate:
            return {"loss": loss}
        ids = [c.cid for c in self.clients]
        kr = ch.broadcast("anchor_spectrum", torch.from_numpy(self.anchor_spectrum(r)), ids, r).numpy()
        rho, shared, margins = [], [], []
        for cl in self.clients:
            rho.append(float(ch.send("scalar_similarity", torch.tensor(client_similarity(cl, kr, p)),
                                     src=cl.cid, dst="server", round=r)))
            shared.append(ch.send("mlp_params", shared_state(cl.model), src=cl.cid, dst="server", round=r))
            margins.append(float(ch.send("scalar_margin", torch.tensor(cl.margin), src=cl.cid, dst="server", round=r)))
        out = {"loss": loss, "rho_mean": float(np.mean(rho))}
        if r <= p.warmup_rounds:
            return out
        if not p.personalize:
            rho_bar = np.ones(len(rho))
        elif p.code_compat:
            rho_bar = max_similarity(np.array(rho))
        else:
            rho_bar = minmax_similarity(np.array(rho), p.rho_tie)
        mean = {k: torch.stack([s[k] for s in shared]).mean(0) for k in shared[0]}   # Eq. 13
        m_bar = float(np.mean(margins))
        for cl, own, rb, mc in zip(self.clients, shared, rho_bar, margins):
            new = personalized_mix(own, mean, float(rb))
            new = ch.send("personalized_params", {"params": new, "margin": torch.tensor(rb * m_bar + (1 - rb) * mc)},
                          src="server", dst=cl.cid, round=r)
            cl.model.load_state_dict(new["params"], strict=False)
            cl.margin_context = float(new["margin"])
        self.rho_bar = [float(x) for x in rho_bar]
        self.ctx.record("lpsfed_similarity", {"rho": rho, "rho_bar": self.rho_bar, "margins": margins})
        return out

    def client_metrics(self, client) -> dict[str, dict[str, float]]:
        return graph_client_metrics(self.clients[client.cid], self.params.top_k)

    def state_dict(self) -> dict:
        return {"models": [c.model.state_dict() for c in self.clients],
                "optimizers": [c.optimizer.state_dict() for c in self.clients],
                "margins": [[c.margin, c.margin_context] for c in self.clients], "rho_bar": self.rho_bar}

    def load_state_dict(self, state: dict) -> None:
        for c, m, o, mg in zip(self.clients, state["models"], state["optimizers"], state["margins"]):
            c.model.load_state_dict(m)
            c.optimizer.load_state_dict(o)
            c.margin, c.margin_context = mg
        self.rho_bar = state["rho_bar"]

