"""FedGSP (Yu et al. 2025, arXiv 2502.13732): personalised aggregation over federated
collaboration graphs learnt from the clients' spectral properties (spec fedgsp.md §2.3-2.5).

Clients run UniFilter (``model=unifilter``): fixed homophily bases P^k X and heterophily bases U^k.
While the graphs are optimised (rounds <= ``graph_opt_rounds``) every client uploads the PCA
directions of each order's bases (``spectral_descriptors``): homophily side p_i (shared with
*similar* clients), heterophily side q_i (complemented from *dissimilar* clients). The server
alternates the closed forms of R (Eq. 9) and S (Eq. 17) with the row-wise W update (Eqs. 20-34),
one graph per polynomial order plus an overall graph, and each client receives its own weighted
average: MLP and order-0 coefficients with the overall graph, order-k coefficients with graph k."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import Algorithm, flat_params, mean_loss, weight_spread
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState, LocalTrainParams, Objective, make_optimizer
from fgx.registry import ALGORITHMS

COMB = "comb_weight"


@dataclass
class FedGSPParams(LocalTrainParams):
    # the authors' lr1 = 0.15, wd1 = 5e-4 and n_eps = 1 full-batch epoch per round are
    # conf/algorithm/fedgsp.yaml's lr, weight_decay and local_steps
    # comparing the clients' spectral descriptors
    k_principal: int = field(default=3, metadata=spec(min=1, help="PCA directions per descriptor"))
    similarity: str = field(default="principal_angle_cos", metadata=spec(
        choices=["principal_angle_cos", "sq_distance"],
        help="code: cosines of greedy principal angles; appendix: squared descriptor distances"))
    angle_mean: str = field(default="one_third", metadata=spec(
        choices=["one_third", "mean"], help="factor on the summed angles: the code's 1/3, or 1/k_principal"))
    # learning the collaboration graphs W
    gamma: float = field(default=1.0, metadata=spec(gt=0.0, help="γ: regulariser of the W rows"))
    alpha: float = field(default=0.25, metadata=spec(min=0.0, help="matrix_alpha: complementing weight"))
    beta: float = field(default=1.2, metadata=spec(min=0.0, help="matrix_beta: sharing weight"))
    w_solver: str = field(default="newton_one_step_warm", metadata=spec(
        choices=["newton_one_step_warm", "converge", "projection"],
        help="one warm-started Newton step per round (code), Newton to convergence, sort-based projection"))
    rs_scale: float = field(default=10000.0, metadata=spec(gt=0.0, help="the code's scaling of r and s"))
    s_update: str = field(default="eq17", metadata=spec(
        choices=["eq17", "vertex"], help="Eq. 17 as printed, or the true minimiser (a simplex vertex)"))
    graph_opt_rounds: int = field(default=15, metadata=spec(
        min=-1, help="optimise the graphs in rounds 1..N (the code's rounds < 15); -1: every round"))
    edge_threshold: float = field(default=0.0, metadata=spec(
        min=0.0, help="w_ij above this is an edge of G_c for the complementarity ratio r_c"))
    graph: str = field(default="learned", metadata=spec(
        choices=["learned", "uniform"],
        help="learned: the collaboration graphs of §2.3; uniform (ablation): every W = 1/M, no descriptors sent"))


# -- server: closed forms and the W update ---------------------------------------------------
def laplacian(w: torch.Tensor) -> torch.Tensor:
    ws = (w + w.T) / 2
    return torch.diag(ws.sum(1)) - ws


def inverse_weighting(desc: torch.Tensor, lap: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Eqs. 9 / 17: x_l = 1 / (e_l Σ_l 1/e_l) with e_l = (Dᵀ L D)_ll; on the simplex when scale = 1."""
    e = ((lap @ desc) * desc).sum(0)
    inv = 1.0 / (e + 1e-10)
    return inv / inv.sum() * scale


def vertex_weighting(desc: torch.Tensor, lap: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """The true minimiser of -Σ s_l² n_l on the simplex: all mass on argmax n_l."""
    e = ((lap @ desc) * desc).sum(0)
    s = torch.zeros_like(e)
    s[torch.argmax(e)] = scale
    return s


def principal_angle_similarity(a: torch.Tensor, b: torch.Tensor, factor: float) -> float:
    """cos(factor · Σ φ) with φ the arccos of greedily matched row cosines of a and b (the code's
    approximation of principal angles between the two k × F direction sets)."""
    cosm = (a @ b.T) / (a.norm(dim=1, keepdim=True) * b.norm(dim=1) + 1e-10)
    cosm = cosm.clone()
    total = 0.0
    for _ in range(a.size(0)):
        idx = int(torch.argmax(cosm))
        i, j = divmod(idx, cosm.size(1))
        total += math.acos(max(-1.0, min(1.0, float(cosm[i, j]))))
        cosm[i, :] = -float("inf")
        cosm[:, j] = -float("inf")
    return math.cos(factor * total)


PAIR_BLOCK = 8192                  # client pairs scored at once by similarity_matrix


def greedy_angle_sums(cosm: torch.Tensor) -> torch.Tensor:
    """:func:`principal_angle_similarity`'s greedy matching for a batch of [P, k, k] cosine matrices at
    once: k times, take each matrix's largest entry (the first on ties, as torch.argmax), add its
    arccos and strike its row and column. Returns Σ φ per matrix (float64, as the scalar version)."""
    p, k, cols = cosm.shape
    cosm = cosm.clone()
    rows = torch.arange(p)
    total = torch.zeros(p, dtype=torch.float64)
    for _ in range(k):
        idx = cosm.view(p, -1).argmax(1)
        i, j = idx // cols, idx % cols
        total += torch.acos(cosm[rows, i, j].double().clamp(-1.0, 1.0))
        cosm[rows, i, :] = -float("inf")
        cosm[rows, :, j] = -float("inf")
    return total


def similarity_matrix(desc: torch.Tensor, weight: torch.Tensor, k: int, factor: float) -> torch.Tensor:
    """desc [M, k·F] flattened descriptors, weight [k·F] (diag of R or S): M × M similarities, every pair
    i < j as :func:`principal_angle_similarity` computes it, in blocks of pairs (a Python loop over
    the M² pairs took minutes a round with 1,000 clients; #41)."""
    m = desc.size(0)
    mats = (desc * weight).view(m, k, -1)
    norms = mats.norm(dim=2)                                         # [M, k]
    out = torch.ones(m, m, dtype=desc.dtype)
    iu, ju = torch.triu_indices(m, m, 1)
    for s in range(0, iu.numel(), PAIR_BLOCK):
        i, j = iu[s:s + PAIR_BLOCK], ju[s:s + PAIR_BLOCK]
        cosm = torch.bmm(mats[i], mats[j].transpose(1, 2)) / (norms[i][:, :, None] * norms[j][:, None, :] + 1e-10)
        sim = torch.cos(factor * greedy_angle_sums(cosm)).to(out.dtype)
        out[i, j] = sim
        out[j, i] = sim
    return out


def simplex_projection(v: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of each row of v onto the probability simplex (sort-based, exact)."""
    u, _ = torch.sort(v, dim=-1, descending=True)
    css = u.cumsum(-1) - 1
    idx = torch.arange(1, v.size(-1) + 1, dtype=v.dtype)
    cond = u - css / idx > 0
    rho = cond.to(v.dtype).cumsum(-1).argmax(-1, keepdim=True)   # last index where cond holds
    theta = css.gather(-1, rho) / (rho + 1).to(v.dtype)
    return (v - theta).clamp(min=0)


def newton_rows(h: torch.Tensor, b: torch.Tensor, steps: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 30-34 for every row: Newton on ℒ(b̂) = mean_j (b̂ - h_ij)_+ - b̂ from b; ``steps=None``
    iterates to convergence. Returns (w = (h - b̂)_+, b̂)."""
    m = h.size(1)
    b = b.clone()
    it = 0
    while True:
        val = (b.unsqueeze(1) - h).clamp(min=0).sum(1) / m - b
        if steps is None and float(val.abs().max()) < 1e-12:
            break
        if steps is not None and it >= steps:
            break
        grad = (h < b.unsqueeze(1)).to(h.dtype).sum(1) / m - 1.0
        grad = torch.where(grad.abs() < 1e-12, torch.full_like(grad, -1e-12), grad)
        b = b - val / grad
        it += 1
        if it > 10_000:
            break
    return (h - b.unsqueeze(1)).clamp(min=0), b


def w_update(t: torch.Tensor, gamma: float, b: torch.Tensor, solver: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise minimiser of Σ_j t_ij w_ij + γ w_ij² on the simplex (Eq. 20)."""
    m = t.size(1)
    h = 1.0 / m - t / (2 * gamma) + t.sum(1, keepdim=True) / (2 * m * gamma)   # Eqs. 26-29
    if solver == "projection":
        return simplex_projection(-t / (2 * gamma)), b
    return newton_rows(h, b, 1 if solver == "newton_one_step_warm" else None)


def optimise_graph(w: torch.Tensor, b: torch.Tensor, p_desc: torch.Tensor, q_desc: torch.Tensor, k: int,
                   params: FedGSPParams) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One alternation R -> S -> W for one collaboration graph. p_desc/q_desc: [M, d] homophily /
    heterophily descriptors. Returns (W, b̂, homophily-side similarity S(i,j))."""
    lap = laplacian(w)
    r = inverse_weighting(p_desc, lap, params.rs_scale)
    s_fn = inverse_weighting if params.s_update == "eq17" else vertex_weighting
    s = s_fn(q_desc, lap, params.rs_scale)
    factor = 1.0 / 3 if params.angle_mean == "one_third" else 1.0 / k
    sim_p = similarity_matrix(p_desc, r, k, factor)
    if params.similarity == "principal_angle_cos":
        sim_q = similarity_matrix(q_desc, s, k, factor)
        t = params.alpha * sim_q - params.beta * sim_p
    else:
        rp, sq = p_desc * r, q_desc * s
        t = params.beta * torch.cdist(rp, rp) ** 2 - params.alpha * torch.cdist(sq, sq) ** 2
    w_new, b_new = w_update(t, params.gamma, b, params.w_solver)
    return w_new, b_new, sim_p


# -- client side -------------------------------------------------------------------------
def pca_directions(m: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k principal directions (rows) of the centred matrix m [n, F]; zero rows if rank < k."""
    m = m - m.mean(0, keepdim=True)
    _, _, vh = torch.linalg.svd(m, full_matrices=False)
    out = torch.zeros(k, m.size(1), dtype=torch.float32)
    r = min(k, vh.size(0))
    out[:r] = vh[:r].float()
    return out


def client_descriptors(state: ClientState, k: int) -> dict[str, torch.Tensor]:
    """PCA directions of each order's homophily (p) and heterophily (q) bases and of their
    concatenations over orders, flattened: p_K/q_K [K, k·F], p/q [k·K·F]."""
    from fgx.models.unifilter import client_bases

    bases = client_bases(state.view, state.model.p, with_bases=True)   # not kept after this call
    hom, het = bases["hom"], bases["het"]
    return {"p_K": torch.stack([pca_directions(x, k).flatten() for x in hom]),
            "q_K": torch.stack([pca_directions(x, k).flatten() for x in het]),
            "p": pca_directions(torch.cat(hom, 1), k).flatten(),
            "q": pca_directions(torch.cat(het, 1), k).flatten(),
            "hhat": torch.tensor(bases["hhat"])}


@dataclass
class FedGSPClient(ClientState):
    personalised: dict | None = None      # the personalised model the server sent this round (none in round 1)


@dataclass
class Personalised(Objective):
    """FedGSP's client starts from the personalised model the server sent (``state.personalised``; none in
    round 1) and, after training, sends its weights."""
    unbatched = "each client starts from its own personalised model"

    def start(self, state, weights):
        personalised, state.personalised = state.personalised, None
        if personalised is not None:
            state.model.load_state_dict(personalised)
        return self

    def finish(self, state, delta):
        return flat_params(state.model)


def personalised_average(weights: list[dict], w: torch.Tensor, w_k: torch.Tensor) -> list[dict]:
    """Client i gets Σ_j W[i,j] θ_j for the MLP and order-0 coefficients and Σ_j W_K[k-1][i,j] θ_j
    for the order-k coefficients."""
    out = [dict() for _ in weights]
    for key in weights[0]:
        stack = torch.stack([x[key] for x in weights]).to(w.dtype)          # [M, ...]
        w, w_k = w.to(stack.device), w_k.to(stack.device)   # the server's graphs stay on the CPU
        if key == COMB:
            comb = torch.einsum("ij,j...->i...", w, stack)
            for k in range(1, stack.size(2)):
                comb[:, :, k] = torch.einsum("ij,j...->i...", w_k[k - 1], stack[:, :, k])
            agg = comb
        else:
            agg = torch.einsum("ij,j...->i...", w, stack)
        for i in range(len(weights)):
            out[i][key] = agg[i].to(weights[i][key].dtype)
    return out


@ALGORITHMS.register("fedgsp", params=FedGSPParams, tasks=("node",))
class FedGSP(Algorithm):
    """The base round's phases: personalised models down (``client_objective``), models and descriptors
    up and the collaboration graphs optimised (``aggregate``), the personalised averages (``server_update``)."""
    needs_individual_updates = "FedGSP's server averages each client's own model with personalised weights"
    objective = Personalised
    requires_model = ("unifilter", "FedGSP aggregates UniFilter's per-order combination coefficients")
    messages = {
        "model": Message("up", release=True),
        "spectral_descriptors": Message("up", release=True),
        "personalised_model": Message("down"),
    }

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        if params.batch_size is not None or params.fanouts:
            raise ConfigError("algorithm.batch_size", params.batch_size, "null (FedGSP trains full batch)")

    def setup(self) -> None:
        ctx = self.ctx
        self.views = self.make_views(include_cross=False)
        self.states = []
        for c in ctx.clients:
            model = ctx.build_model()
            self.states.append(FedGSPClient(c.cid, self.views[c.cid], model, make_optimizer(model, self.params),
                                            ctx.info.task))
        m, order = len(self.states), self.states[0].model.p.K
        if self.params.graph == "uniform":     # the ablation: no descriptors, every client gets the plain mean
            self.descriptors = None
            init = torch.full((m, m), 1.0 / m, dtype=torch.float64)
        else:
            self.descriptors = ctx.executor.map(client_descriptors, self.states, self.params.k_principal)
            init = torch.full((m, m), 1.0 / max(m - 1, 1), dtype=torch.float64)
            init.fill_diagonal_(0.0 if m > 1 else 1.0)
        self.w = init.clone()
        self.w_k = init.unsqueeze(0).repeat(order, 1, 1)
        self.b = torch.zeros(m, dtype=torch.float64)
        self.b_k = torch.zeros(order, m, dtype=torch.float64)
        self.sim = None
        self.pending: list | None = None
        if self.descriptors is not None:
            ctx.record("fedgsp_clients", {"hhat": [float(d["hhat"]) for d in self.descriptors]})

    def optimising(self, r: int) -> bool:
        if self.params.graph == "uniform":
            return False
        return self.params.graph_opt_rounds < 0 or r <= self.params.graph_opt_rounds

    def client_objective(self, chosen, weights, r):
        """Each client's personalised model (from the previous round) down to it."""
        for s, x in zip(self.states, self.pending or [None] * len(self.states)):
            s.personalised = None if x is None else \
                self.ctx.channel.send("personalised_model", x, src="server", dst=s.cid, round=r)
        return Personalised()

    def aggregate(self, chosen, updates, r):
        """The clients' models up; while the graphs are optimised, their spectral descriptors too."""
        ch = self.ctx.channel
        uploads = [ch.send("model", u.sent, src=s.cid, dst="server", round=r) for s, u in zip(chosen, updates)]
        opt = self.optimising(r)
        if opt:
            desc = [ch.send("spectral_descriptors", {k: d[k] for k in ("p_K", "q_K", "p", "q")},
                            src=s.cid, dst="server", round=r) for s, d in zip(self.states, self.descriptors)]
            self.update_graphs(desc)
        return (uploads, opt), {"loss": mean_loss(u.loss.loss for u in updates)}

    def server_update(self, combined, r):
        """Each client's personalised average over the collaboration graphs, applied at the start of the
        next round (``pending``)."""
        uploads, opt = combined
        self.pending = personalised_average(uploads, self.w, self.w_k)
        self.record(r, uploads, opt)
        return weight_spread(self.w)

    def update_graphs(self, desc: list[dict]) -> None:
        k = self.params.k_principal
        p_all = torch.stack([d["p"] for d in desc]).double()
        q_all = torch.stack([d["q"] for d in desc]).double()
        self.w, self.b, self.sim = optimise_graph(self.w, self.b, p_all, q_all, k, self.params)
        for o in range(self.w_k.size(0)):
            p_o = torch.stack([d["p_K"][o] for d in desc]).double()
            q_o = torch.stack([d["q_K"][o] for d in desc]).double()
            self.w_k[o], self.b_k[o], _ = optimise_graph(self.w_k[o], self.b_k[o], p_o, q_o, k, self.params)

    def record(self, r: int, uploads: list[dict], optimised: bool) -> None:
        """Heatmap-ready collaboration graphs and the Theorem 1/2 diagnostics."""
        theta = torch.stack([torch.cat([v.flatten().double().cpu() for v in u.values()]) for u in uploads])
        dist2 = torch.cdist(theta, theta) ** 2
        off = ~torch.eye(len(uploads), dtype=torch.bool)
        row = {"optimised": optimised, "W": self.w.tolist(), "W_K": self.w_k.tolist(),
               "heterogeneity": float((self.w * dist2)[off].sum()),
               "row_sum_min": float(self.w.sum(1).min()), "row_sum_max": float(self.w.sum(1).max())}
        if self.sim is not None:
            edges = (self.w > self.params.edge_threshold) & off
            n_edges = int(edges.sum())
            row["complementarity_ratio"] = float((self.sim[edges] < 0.5).sum()) / n_edges if n_edges else float("nan")
            row["similarity"] = self.sim.tolist()
        self.ctx.record("fedgsp_graphs", row)

    def model_for(self, client):
        return self.states[client.cid].model

    # the personalised weights are applied at the start of the next round (``pending``): between rounds
    # each client's model is the one its local step left, the model FedGSP's protocol scores
    has_local_models = True
    local_model_for = model_for

    def state_dict(self) -> dict:
        return {"models": [s.model.state_dict() for s in self.states],
                "optimizers": [s.optimizer.state_dict() for s in self.states],
                "w": self.w, "w_k": self.w_k, "b": self.b, "b_k": self.b_k,
                "sim": self.sim, "pending": self.pending}

    def load_state_dict(self, state: dict) -> None:
        for s, m, o in zip(self.states, state["models"], state["optimizers"]):
            s.model.load_state_dict(m)
            s.optimizer.load_state_dict(o)
        self.w, self.w_k, self.b, self.b_k = state["w"], state["w_k"], state["b"], state["b_k"]
        self.sim, self.pending = state["sim"], state["pending"]

