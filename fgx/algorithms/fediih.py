"""FedIIH (Yu et al., AAAI 2025, "Modeling Inter-Intra Heterogeneity for Graph Federated Learning"),
**fgx's reconstruction from the paper** — the authors published no code; FedGB (SuperYeYu/FedGB,
``fediih/``) has a port, which was read; fgx follows it for the similarity and its normalisation only. What the paper states and fgx
follows: clients run DisenGCN (``model=disengcn``), whose parameters split into one part per latent
factor (intra-subgraph heterogeneity); a hierarchical variational graph model infers each subgraph's
latent distribution; the server measures inter-subgraph similarity per factor by the Jensen–Shannon
divergence of those distributions and aggregates each factor's parameters with its own weights.

The choices below are fgx's (name them when citing results: "FedIIH (fgx reconstruction)"):
- **Hierarchy.** Global prior α_k (from the server) -> subgraph latent c_k ~ N(α_k, I) -> node latents
  z_{v,k} ~ N(c_k, I) -> edges ~ Bernoulli(sigmoid(<z_u, z_v>)). Node posteriors q(z_{v,k}) =
  N(μ_{v,k}, σ²_{v,k}) with μ the DisenGCN factor embedding and log σ² from a per-factor linear head;
  q(c_k) is its coordinate-ascent optimum given them, N((Σ_v μ_{v,k} + α_k)/(n+1), I/(n+1)).
- **Local loss.** Cross-entropy + ``vgae_weight`` · (edge reconstruction BCE on the subgraph's edges and
  as many random non-edges + E_q(c) KL(q(z_v) || N(c, I)) averaged over nodes and latent dimensions +
  KL(q(c) || N(α, I)) averaged over dimensions and divided by n), ``local_steps`` full-batch epochs.
- **Descriptor.** Per factor, the Gaussian matching the first two moments of the client's node
  posteriors (their mixture): mean_v μ and mean_v (σ² + μ²) - mean², per dimension ([K, d] means and
  log-variances: node averages, no node's row).
- **Similarity.** S^k_ij = 1 - JS(N_i^k, N_j^k) / ln 2, the JS of the two diagonal Gaussians through the
  midpoint Gaussian (mean and variance averaged), summed over dimensions; W^k_ij = softmax_j(``norm_scale`` ·
  S^k_ij) — both as FedGB's port (``fediih/utils.py``: ``gaussian_js``, ``js_similarity_matrix`` with
  ``similarity_norm: exp``, ``norm_scale: 10`` in ``fediih_config.py``). An earlier fgx version averaged
  the JS over dimensions: S ∈ [0.98, 1] on Cora and weights within ±7 % of uniform (FedAvg in effect).
- **Aggregation.** Client i gets θ_i^k = Σ_j W^k_ij θ_j^k for the factor-k block of every parameter that
  splits by factor (projection rows, classifier columns, the factor's variance head) and the mean over
  k of W^k for the rest (classifier bias). The server's global prior is α_k = Σ_j mean_j^k / (M + 1)
  (posterior mean under a standard-normal hyperprior).
What crosses the channel: the model weights (up, released), the descriptors (up), the personalised
weights and the global prior (down)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from fgx.algorithms.base import Algorithm, UploadedLocalModels, copy_model, flat_params, mean_loss, weight_spread
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState, LocalTrainParams, make_client_state, round_seed, steps_per_round
from fgx.registry import ALGORITHMS


@dataclass
class FedIIHParams(LocalTrainParams):
    vgae_weight: float = field(default=1.0, metadata=spec(min=0.0, help="weight of the negative ELBO"))
    norm_scale: float = field(default=10.0, metadata=spec(min=0.0, help="τ in softmax_j(τ · S^k_ij)"))


class VarianceHeads(nn.Module):
    """log σ² of the node posteriors: one d x d linear map per factor (a [K, d, d] weight)."""

    def __init__(self, factors: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(factors, dim, dim))
        self.bias = nn.Parameter(torch.full((factors, dim), -2.0))

    def forward(self, mu: torch.Tensor) -> torch.Tensor:
        return (torch.einsum("nkd,kde->nke", mu, self.weight) + self.bias).clamp(-10.0, 10.0)


def gaussian_kl(mu_q, logvar_q, mu_p, var_p_extra=0.0):
    """KL(N(mu_q, σ_q²) || N(mu_p, 1)) + the expected extra term 0.5·var_p_extra when mu_p itself is
    Gaussian with variance var_p_extra (E over it), elementwise."""
    return 0.5 * (logvar_q.exp() + (mu_q - mu_p) ** 2 + var_p_extra - 1.0 - logvar_q)


def negative_elbo(mu: torch.Tensor, logvar: torch.Tensor, edge_index: torch.Tensor, prior: torch.Tensor,
                  g: torch.Generator) -> torch.Tensor:
    """The hierarchical VGAE's loss on one subgraph: mu, logvar [n, K, d]; prior α [K, d]."""
    n = mu.size(0)
    z = mu + torch.randn(mu.shape, generator=g).to(mu.device) * (0.5 * logvar).exp()
    zf = z.flatten(1)
    pos = edge_index[:, edge_index[0] != edge_index[1]]
    neg = torch.randint(0, n, pos.shape, generator=g).to(mu.device)
    logits = torch.cat([(zf[pos[0]] * zf[pos[1]]).sum(1), (zf[neg[0]] * zf[neg[1]]).sum(1)])
    labels = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))]).to(mu.device)
    recon = nn.functional.binary_cross_entropy_with_logits(logits, labels) if logits.numel() else mu.sum() * 0
    with torch.no_grad():            # q(c): the conjugate optimum given the node posteriors
        c_mean = (mu.sum(0) + prior) / (n + 1)
        c_var = 1.0 / (n + 1)
    kl_nodes = gaussian_kl(mu, logvar, c_mean, c_var).mean()
    kl_client = gaussian_kl(c_mean, torch.full_like(c_mean, math.log(c_var)), prior).mean() / n
    return recon + kl_nodes + kl_client


def latent_descriptor(mu: torch.Tensor, logvar: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Moment-matched Gaussian of the node posteriors' mixture, per factor: ([K, d] mean, [K, d] log-var)."""
    mean = mu.mean(0)
    var = (logvar.exp() + mu ** 2).mean(0) - mean ** 2
    return mean, var.clamp(min=1e-8).log()


def js_similarity(mean: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """[M, K, d] descriptors -> [K, M, M]: 1 - JS / ln 2, the JS divergence of the two diagonal Gaussians
    through the midpoint Gaussian N((μ_i+μ_j)/2, (σ²_i+σ²_j)/2), summed over the d dimensions (the KL of
    diagonal Gaussians is a sum over dimensions), as FedGB's port has it (``fediih/utils.py``
    ``gaussian_js`` / ``js_similarity_matrix``). A mean over dimensions instead makes S ≈ 1 for every pair
    and the weights uniform."""
    m = mean.double().permute(1, 0, 2)              # [K, M, d]
    v = logvar.double().exp().permute(1, 0, 2)
    mi, mj, vi, vj = m[:, :, None], m[:, None], v[:, :, None], v[:, None]
    mm, vm = (mi + mj) / 2, (vi + vj) / 2

    def kl(mu_a, var_a):
        return 0.5 * (torch.log(vm / var_a) + (var_a + (mu_a - mm) ** 2) / vm - 1.0)

    js = 0.5 * (kl(mi, vi) + kl(mj, vj))
    return (1.0 - js.sum(-1) / math.log(2.0)).float()


def factor_weights(similarity: torch.Tensor, scale: float) -> torch.Tensor:
    """[K, M, M]: W^k_ij = softmax_j(scale · S^k_ij)."""
    return torch.softmax(scale * similarity, dim=-1)


def personalised_state(i: int, thetas: list[dict], W: torch.Tensor, slices: dict[str, int]) -> dict:
    """Client i's weights: each factor block of a factor-split parameter averaged with W^k[i]; the
    other floating-point parameters with the mean over k of W^k[i]."""
    K = W.size(0)
    shared = W[:, i].mean(0)
    out = {}
    for key, v0 in thetas[0].items():
        if not v0.is_floating_point():
            out[key] = thetas[i][key]
            continue
        dim = slices.get(key)
        if dim is None:
            out[key] = sum(shared[j] * t[key] for j, t in enumerate(thetas))
            continue
        blocks = [sum(W[k, i, j] * t[key].chunk(K, dim)[k] for j, t in enumerate(thetas)) for k in range(K)]
        out[key] = torch.cat(blocks, dim)
    return out


@dataclass
class FedIIHClient(ClientState):
    heads: nn.Module | None = None              # the VGAE's variance heads
    prior: torch.Tensor | None = None           # [factors, factor_dim] the global prior the server sent
    opt: torch.optim.Optimizer | None = None    # Adam over the model and the heads


def fediih_client_update(state: FedIIHClient, p: FedIIHParams, round_seed: int):
    """Local epochs on CE + the VGAE loss; returns (weights, descriptor mean, descriptor log-var, loss)."""
    heads, prior, opt = state.heads, state.prior, state.opt
    view, model = state.view, state.model
    mask, y = view.train_mask, view.y[view.train_mask]
    labelled = y.numel() > 0                        # without labels only the VGAE term trains
    g = torch.Generator().manual_seed(round_seed + state.cid)
    torch.manual_seed(round_seed + state.cid)      # dropout
    model.train()
    total, steps = 0.0, steps_per_round(state, p)
    for _ in range(steps):
        opt.zero_grad()
        mu = model.factor_embeddings(view)
        loss = nn.functional.cross_entropy(model.classify(mu)[mask], y, weight=state.loss_weight) if labelled \
            else mu.sum() * 0.0
        if p.vgae_weight > 0:
            loss = loss + p.vgae_weight * negative_elbo(mu, heads(mu), view.edge_index, prior, g)
        loss.backward()
        opt.step()
        total += float(loss.detach())
    model.eval()
    with torch.no_grad():
        mu = model.factor_embeddings(view)
        mean, logvar = latent_descriptor(mu, heads(mu))
    weights = {**flat_params(model), **{f"heads.{k}": v.detach().clone() for k, v in heads.state_dict().items()}}
    return weights, mean.cpu(), logvar.cpu(), total / steps


@ALGORITHMS.register("fediih", params=FedIIHParams, tasks=("node",))
class FedIIH(UploadedLocalModels, Algorithm):
    requires_model = ("disengcn", "FedIIH aggregates DisenGCN's parameters factor by factor")
    messages = {"weights": Message("up", release=True), "latent_descriptor": Message("up"),
                "personalised_weights": Message("down"), "global_prior": Message("down")}

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        if params.batch_size is not None:
            raise ConfigError("algorithm.batch_size", params.batch_size, "null: FedIIH trains full batch")

    def setup(self) -> None:
        ctx = self.ctx
        self.views = self.make_views(include_cross=False)
        init = ctx.build_model()
        mp = init.p
        self.slices = {**init.factor_slices(), "heads.weight": 0, "heads.bias": 0}
        self.states = [make_client_state(ctx, c, self.views[c.cid], copy_model(init), FedIIHClient)
                       for c in ctx.clients]
        torch.manual_seed(ctx.seed)
        heads = VarianceHeads(mp.factors, mp.factor_dim).to(ctx.device)
        for s in self.states:
            s.heads = copy_model(heads)
            s.prior = torch.zeros(mp.factors, mp.factor_dim, device=ctx.device)
            s.opt = torch.optim.Adam(list(s.model.parameters()) + list(s.heads.parameters()),
                                     lr=self.params.lr, weight_decay=self.params.weight_decay)

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        results = self.ctx.executor.map(fediih_client_update, self.states, p, round_seed(self.ctx.seed, r))
        thetas = [ch.send("weights", w, src=s.cid, dst="server", round=r) for s, (w, *_) in zip(self.states, results)]
        self.keep_uploads([w for w, *_ in results])     # the clients' own weights, as their local step left them
        desc = [ch.send("latent_descriptor", {"mean": m, "logvar": lv}, src=s.cid, dst="server", round=r)
                for s, (_, m, lv, _) in zip(self.states, results)]
        means = torch.stack([d["mean"] for d in desc])
        S = js_similarity(means, torch.stack([d["logvar"] for d in desc]))
        W = factor_weights(S, p.norm_scale)
        prior = ch.broadcast("global_prior", means.sum(0) / (len(desc) + 1), [s.cid for s in self.states], r)
        for i, s in enumerate(self.states):
            got = ch.send("personalised_weights", personalised_state(i, thetas, W, self.slices),
                          src="server", dst=s.cid, round=r)
            s.model.load_state_dict({k: v for k, v in got.items() if not k.startswith("heads.")})
            s.heads.load_state_dict({k[6:]: v for k, v in got.items() if k.startswith("heads.")})
            s.prior = prior.to(self.ctx.device)
        self.ctx.record("fediih_weights", {"W": W.tolist(), "similarity": S.tolist()})
        return {"loss": mean_loss(l for *_, l in results), **weight_spread(W)}

    def model_for(self, client):
        return self.states[client.cid].model

    def state_dict(self) -> dict:
        return {"models": [s.model.state_dict() for s in self.states],
                "heads": [s.heads.state_dict() for s in self.states],
                "priors": [s.prior for s in self.states],
                "optimizers": [s.opt.state_dict() for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        for s, m, h, pr, o in zip(self.states, state["models"], state["heads"], state["priors"], state["optimizers"]):
            s.model.load_state_dict(m)
            s.heads.load_state_dict(h)
            s.prior = pr
            s.opt.load_state_dict(o)
