"""FedSSP (Tan et al., NeurIPS 2024): shares generic spectral knowledge, personalises preferences. Built
for graph classification on spectral GNNs; the LPSFed paper runs it "based on LGCN" for recommendation
(Table 9's note). fgx's version on LGCN clients:

- Generic spectral knowledge (CSKS): each layer's low-pass kernel is not a free vector k̄^(l) but a
  function of the client's own eigenvalues, k̄^(l)_i = dec_l(enc(λ_i)), with ``enc`` the eigenvalue
  encoder (sine/cosine encoding of 100·λ, as FedSSP's ``SineEncoding``, then a linear layer and GELU).
  Only ``enc`` is shared and averaged (uniform weights, as the code's ``add_parameters_SSP``): the map
  from frequency to filter response transfers between clients whose spectra differ, where a vector
  indexed by eigenvalue rank would not. The decoder ``dec`` stays local.
- Personalised preference (PGPA): a local vector ℓ is added to every pooled representation before
  scoring (the code's ``head(rep + local_consensus)``), and the client's running mean representation
  m_c (momentum ``momentum``) is pulled to the global consensus m̄ = mean_c m_c sent by the server:
  loss + ``tau_weight``/2 · mean((m_c − m̄)²).
- Everything else (ID embeddings, pooling MLP, f_Pred, ℓ) stays local. Loss: BPR on cos R̂ with
  temperature ``bpr_tau``.

Checked against the authors' code (OakleyTan/FedSSP: ``models.py``, ``client.py``, ``server.py``,
``training.py``): only parameters whose name contains ``encoder`` (the eigenvalue and filter encoders)
are aggregated and sent back; PGPA adds ``local_consensus`` before the head and adds
``tau·mean(0.5·(current_mean − global_consensus)²)`` with τ = 100 and momentum 0.5, the consensus being
the uniform mean of the clients' current means. Differences (fgx decisions): FedSSP's transformer over
eigenvalue tokens and its edge-wise filter bases are graph-classification machinery with no LGCN
counterpart and are not built; the code zeroes the running mean before every batch (so it is half the
batch mean), fgx keeps it running across steps; ℓ is trained with the model's optimiser, not a
separate SGD."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from fgx.algorithms.base import Algorithm
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import round_seed
from fgx.models.lgcn import LGCN, client_degrees
from fgx.recsys.graph_clients import (GraphClient, GraphTrainParams, bpr_graph_epochs, build_graph_clients,
                                      graph_client_metrics, require_graph_model)
from fgx.registry import ALGORITHMS


@dataclass
class FedSSPParams(GraphTrainParams):
    hidden: int = field(default=64, metadata=spec(min=2, help="width of the shared eigenvalue encoder (even)"))
    tau_weight: float = field(default=100.0, metadata=spec(min=0.0, help="weight of the consensus term (code: 100)"))
    momentum: float = field(default=0.5, metadata=spec(min=0.0, max=1.0, help="running-mean momentum (code: 0.5)"))

    def validate(self, prefix: str) -> None:
        if self.hidden % 2:
            raise ConfigError(f"{prefix}.hidden", self.hidden, "an even width (sine and cosine halves)")


class EigenEncoder(nn.Module):
    """FedSSP's SineEncoding: [λ, sin(100λ·f), cos(100λ·f)] -> linear -> GELU."""

    def __init__(self, hidden: int):
        super().__init__()
        self.hidden = hidden
        self.lin = nn.Linear(hidden + 1, hidden)

    def forward(self, lam: torch.Tensor) -> torch.Tensor:
        freq = torch.exp(torch.arange(0, self.hidden, 2, dtype=lam.dtype) * (-math.log(10000.0) / self.hidden))
        pe = (100.0 * lam)[:, None] * freq[None, :]
        return nn.functional.gelu(self.lin(torch.cat([lam[:, None], torch.sin(pe), torch.cos(pe)], 1)))


class SpectralLGCN(LGCN):
    """LGCN whose kernels are decoded from the shared eigenvalue encoder, with PGPA's local vector."""

    shared_prefixes = ("eig_encoder.",)

    def __init__(self, p, num_users, num_items, eigvals, eigvecs, user_deg, item_deg, hidden: int):
        super().__init__(p, num_users, num_items, eigvecs, user_deg, item_deg)
        del self.kernels
        self.register_buffer("eigvals", torch.as_tensor(np.asarray(eigvals), dtype=torch.float32))
        self.eig_encoder = EigenEncoder(hidden)
        self.kernel_decoder = nn.Linear(hidden, p.layers)
        nn.init.normal_(self.kernel_decoder.weight, std=0.02)    # starts near LGCN's kernel init (0.01 ± 0.02)
        nn.init.constant_(self.kernel_decoder.bias, 0.01)
        self.preference = nn.Parameter(torch.zeros(p.dim))        # PGPA's local consensus ℓ
        self.rep_mean = None                                      # mean pooled representation of the last embed()

    def layer_kernels(self) -> torch.Tensor:
        return self.kernel_decoder(self.eig_encoder(self.eigvals[: self.eigvecs.shape[1]])).T

    def embed(self) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.pooled(self.emb, self.propagate(self.emb))
        self.rep_mean = h.mean(0)
        h = h + self.preference
        return h[: self.num_users], h[self.num_users:]


def build_spectral(hidden: int):
    def build(p, inter, spectrum):
        return SpectralLGCN(p, inter.num_users, inter.num_items, spectrum[0], torch.as_tensor(spectrum[1]),
                            *client_degrees(inter), hidden=hidden)
    return build


class SSPClient(GraphClient):
    """A FedSSP client: beside GraphClient's, its running mean representation and the consensus it received."""

    def __init__(self, *args):
        super().__init__(*args)
        self.running: torch.Tensor | None = None     # [D] running mean of its pooled representations
        self.consensus: torch.Tensor | None = None   # [D] the last global consensus (None: round 1)


def fedssp_train(state: SSPClient, p: FedSSPParams, seed: int) -> float:
    glob = state.consensus

    def consensus_term(st, uh, vh):
        m = st.model.rep_mean                      # set by the embed() of this step
        prev = st.running
        run = m if prev is None else (1 - p.momentum) * prev + p.momentum * m
        st.running = run.detach()                  # carried to the next step without its graph
        if glob is None:                           # round 1: no consensus yet
            return m.new_zeros(())
        return p.tau_weight * (0.5 * (run - glob) ** 2).mean()

    return bpr_graph_epochs(state, p.local_epochs, p.batch_size, p.num_negatives, p.bpr_tau, seed,
                            regulariser=consensus_term)


def shared_encoder(model: SpectralLGCN) -> dict[str, torch.Tensor]:
    sd = model.state_dict()
    return {k: sd[k].detach().clone() for k in model.shared_keys()}


@ALGORITHMS.register("fedssp", params=FedSSPParams, tasks=("ranking",))
class FedSSP(Algorithm):
    requires_model = ("lgcn", "FedSSP's shared knowledge is spectral")
    messages = {
        "spectral_encoder": Message("up"),        # the eigenvalue encoder's weights (generic spectral knowledge)
        "mean_representation": Message("up"),     # the client's running mean pooled representation (D floats)
        "global_encoder": Message("down"),        # the averaged encoder
        "global_consensus": Message("down"),      # the mean of the clients' mean representations
    }

    @classmethod
    def check_config(cls, params, validated) -> None:
        require_graph_model(validated, "FedSSP")
        super().check_config(params, validated)

    def setup(self) -> None:
        p = self.params
        self.clients = build_graph_clients(self.ctx, p.lr, p.weight_decay, p.optimizer, build=build_spectral(p.hidden),
                                           client_cls=SSPClient)
        init = shared_encoder(self.clients[0].model)
        for cl in self.clients[1:]:
            cl.model.load_state_dict(init, strict=False)

    def round(self, r: int) -> dict[str, float]:
        p, ch = self.params, self.ctx.channel
        losses = self.ctx.executor.map(fedssp_train, self.clients, p, round_seed(self.ctx.seed, r))
        encs, means = [], []
        for cl in self.clients:
            encs.append(ch.send("spectral_encoder", shared_encoder(cl.model), src=cl.cid, dst="server", round=r))
            means.append(ch.send("mean_representation", cl.running.clone(), src=cl.cid, dst="server", round=r))
        avg = {k: torch.stack([e[k] for e in encs]).mean(0) for k in encs[0]}
        consensus = torch.stack(means).mean(0)
        ids = [cl.cid for cl in self.clients]
        avg = ch.broadcast("global_encoder", avg, ids, r)
        consensus = ch.broadcast("global_consensus", consensus, ids, r)
        for cl in self.clients:
            cl.model.load_state_dict(avg, strict=False)
            cl.consensus = consensus.clone()
        self.ctx.record("fedssp_consensus", {"gap": [float((m - consensus).norm()) for m in means]})
        return {"loss": float(np.mean(losses))}

    def client_metrics(self, client) -> dict[str, dict[str, float]]:
        return graph_client_metrics(self.clients[client.cid], self.params.top_k)

    def state_dict(self) -> dict:
        return {"models": [c.model.state_dict() for c in self.clients],
                "optimizers": [c.optimizer.state_dict() for c in self.clients],
                "consensus": [{"running": c.running, "consensus": c.consensus} for c in self.clients]}

    def load_state_dict(self, state: dict) -> None:
        for c, m, o, e in zip(self.clients, state["models"], state["optimizers"], state["consensus"]):
            c.model.load_state_dict(m)
            c.optimizer.load_state_dict(o)
            c.running = e["running"] if e["running"] is not None else c.running
            c.consensus = e["consensus"] if e["consensus"] is not None else c.consensus
