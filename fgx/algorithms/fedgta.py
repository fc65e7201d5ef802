"""FedGTA (Li et al., VLDB 2024, "FedGTA: Topology-aware Averaging for Federated Graph Learning").

Every round each client trains its personalised model (full batch, ``local_steps`` epochs; GAMLP by
default, ``conf/algorithm/fedgta.yaml``), then computes from its own subgraph:
- soft labels: the model's softmax on every node, with the true one-hot labels on training nodes,
  smoothed by ``lp_steps`` steps of label propagation Y <- α Â Y + (1 - α) Y0, training rows getting
  Y0 added back after each step (Â = D^-1/2 (A+I) D^-1/2);
- the mixed moments of the propagated soft labels: moments 1..``num_moments`` over the nodes of each
  class column (``moment_type``: raw, central or hybrid = both), flattened: the topology-aware
  descriptor sent to the server;
- the local smoothing confidence: Σ_v deg(v) (C/e + Σ_c p_vc log p_vc) over the propagated labels
  softened with temperature ``temperature`` (large when the neighbourhood-smoothed predictions are
  confident), sent as the client's aggregation weight.
The server gives client i the personalised model Σ_{j∈A_i} (w_j / Σ_{A_i} w) θ_j over the clients
whose moment descriptor has cosine similarity above ``accept_alpha`` with i's (i is always in A_i).
Only parameters, the moment vector and one scalar leave a client; labels and soft labels stay home.

Checked against the authors' code (github.com/xkLi-Allen/FedGTA: ``federated/fedgta``, ``gnn_model/
{gm,label_propagation}.py``, ``config.py``): the label-propagation step with training labels added
back, the entropy-based weight, the acceptance threshold and the moments; defaults are the values that
code's comments give for Cora (hybrid moments, 6 of them, threshold 0.5; 5 LP steps, α = 0.5,
temperature 20; 3 local epochs, Adam lr 1e-2, weight decay 5e-4). fgx decisions: nodes outside
train/val/test start from the model's soft labels too (the code starts them from their true labels);
label propagation is written out rather than PyG's ``LabelPropagation`` because that one starts
unlabelled nodes from zero instead of from the model's soft labels and does not re-add training labels."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from fgx.algorithms.base import (Algorithm, UploadedLocalModels, client_models_state, copy_model, flat_params,
                                  load_client_models, mean_loss, personalised_average, weight_spread)
from fgx.config import ConfigError, spec
from fgx.federation.channel import Message
from fgx.federation.client import LocalTrainParams, SeededDropout, make_client_state, round_seed
from fgx.models.gamlp import cached_on_view, normalized_adjacency
from fgx.registry import ALGORITHMS


@dataclass
class FedGTAParams(LocalTrainParams):
    lp_steps: int = field(default=5, metadata=spec(min=1, help="label-propagation steps"))
    lp_alpha: float = field(default=0.5, metadata=spec(min=0.0, max=1.0, help="Y <- α Â Y + (1-α) Y0"))
    temperature: float = field(default=20.0, metadata=spec(gt=0.0, help="softening of the confidence labels"))
    num_moments: int = field(default=6, metadata=spec(min=1, help="moments 1..m per class column"))
    moment_type: str = field(default="hybrid", metadata=spec(choices=["raw", "central", "hybrid"]))
    accept_alpha: float = field(default=0.5, metadata=spec(
        min=-1.0, max=1.0, help="aggregate with the clients whose moment cosine similarity exceeds this"))


def label_propagation(adj: torch.Tensor, y0: torch.Tensor, train: torch.Tensor, steps: int,
                      alpha: float) -> torch.Tensor:
    """The authors' propagation: Y <- α Â Y + (1-α) Y0, then Y[train] += Y0[train], ``steps`` times."""
    y = y0
    for _ in range(steps):
        y = alpha * torch.sparse.mm(adj, y) + (1 - alpha) * y0
        y = y + torch.where(train[:, None], y0, torch.zeros_like(y0))
    return y


def moments(x: torch.Tensor, num: int, kind: str) -> torch.Tensor:
    """[num (x2 for hybrid), C]: raw moments mean_v x^p and/or central moments mean_v (x - mean)^p."""
    if kind == "hybrid":
        return torch.cat([moments(x, num, "raw"), moments(x, num, "central")])
    base = x - x.mean(0, keepdim=True) if kind == "central" else x
    return torch.stack([base.pow(p).mean(0) for p in range(1, num + 1)])


def smoothing_confidence(probs: torch.Tensor, degree: torch.Tensor) -> torch.Tensor:
    """Σ_v deg(v) (C/e + Σ_c p_vc log p_vc): >= 0 (each p log p >= -1/e), larger when confident."""
    c = probs.size(1)
    return degree.sum() * c * math.exp(-1) + (degree * (probs * torch.log(probs + 1e-8)).sum(1)).sum()


def topology_descriptor(state, p: FedGTAParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(moment vector, smoothing confidence) of a client after its local training."""
    view = state.view
    adj, degree = cached_on_view(view, ("fedgta_adj",), lambda: (
        normalized_adjacency(view.edge_index.cpu(), view.num_nodes, 0.5).to(view.x.device),
        torch.zeros(view.num_nodes, device=view.x.device).index_add_(
            0, view.edge_index[0], torch.ones(view.edge_index.size(1), device=view.x.device))))
    state.model.eval()
    with torch.no_grad():
        soft = torch.softmax(state.model(view), 1)
    train = view.train_mask
    onehot = torch.nn.functional.one_hot(view.y.clamp(min=0), soft.size(1)).float()
    y0 = torch.where(train[:, None], onehot, soft)
    out = label_propagation(adj, y0, train, p.lp_steps, p.lp_alpha)
    raw = torch.where(train[:, None], onehot, torch.softmax(out, 1))
    soft_t = torch.where(train[:, None], onehot, torch.softmax(out / p.temperature, 1))
    return moments(raw, p.num_moments, p.moment_type).flatten(), smoothing_confidence(soft_t, degree)


@dataclass
class Described(SeededDropout):
    """FedGTA's client, from the personalised weights it holds: its dropout seeded by round and client, and
    after training what goes up: (weights, moments [d], smoothing confidence [1])."""
    p: FedGTAParams = None

    def finish(self, state, delta):
        m, w = topology_descriptor(state, self.p)
        return flat_params(state.model), m.cpu(), w.reshape(1).cpu()


def aggregation_weights(moment_vectors: torch.Tensor, confidence: torch.Tensor, accept_alpha: float) -> torch.Tensor:
    """W[i, j] = w_j / Σ_{k∈A_i} w_k for j in A_i = {j : cos(m_i, m_j) > accept_alpha} ∪ {i}, else 0."""
    m = torch.nn.functional.normalize(moment_vectors.double(), dim=1)
    accept = (m @ m.t()) > accept_alpha
    accept |= torch.eye(len(m), dtype=torch.bool)
    w = accept.double() * confidence.double().clamp(min=0)[None, :]
    total = w.sum(1, keepdim=True)
    uniform = accept.double() / accept.sum(1, keepdim=True)
    return torch.where(total > 0, w / total.clamp(min=1e-300), uniform).float()


@ALGORITHMS.register("fedgta", params=FedGTAParams, tasks=("node",))
class FedGTA(UploadedLocalModels, Algorithm):
    """The base round's phases: every client trains from the personalised weights it holds
    (``client_objective``), uploads its weights and topology descriptors (``aggregate``), and the server
    sends each client its personalised average (``server_update``)."""
    needs_individual_updates = "FedGTA's server averages each client's own model with personalised weights"
    messages = {"personalised_weights": Message("down"), "weights": Message("up", release=True),
                "lp_moments": Message("up"), "smoothing_confidence": Message("up")}
    objective = Described

    @classmethod
    def check_config(cls, params, validated) -> None:
        super().check_config(params, validated)
        if params.batch_size is not None:
            raise ConfigError("algorithm.batch_size", params.batch_size,
                              "null: FedGTA trains and propagates labels full batch")

    def setup(self) -> None:
        self.views = self.make_views(include_cross=False)
        init = self.ctx.build_model()
        self.states = [make_client_state(self.ctx, c, self.views[c.cid], copy_model(init)) for c in self.ctx.clients]

    def client_objective(self, chosen, weights, r):
        return Described(round_seed(self.ctx.seed, r), self.params)

    def aggregate(self, chosen, updates, r):
        """The clients' weights and descriptors up the channel; W from the descriptors."""
        ch = self.ctx.channel
        thetas = [ch.send("weights", u.sent[0], src=s.cid, dst="server", round=r) for s, u in zip(chosen, updates)]
        self.keep_uploads([u.sent[0] for u in updates])     # the clients' own weights, as their local step left them
        m = torch.stack([ch.send("lp_moments", u.sent[1], src=s.cid, dst="server", round=r)
                         for s, u in zip(chosen, updates)])
        conf = torch.cat([ch.send("smoothing_confidence", u.sent[2], src=s.cid, dst="server", round=r)
                          for s, u in zip(chosen, updates)])
        W = aggregation_weights(m, conf, self.params.accept_alpha)
        return (thetas, W, conf), {"loss": mean_loss(u.loss.loss for u in updates)}

    def server_update(self, combined, r):
        """Each client's personalised average down to it, loaded into its model."""
        thetas, W, conf = combined
        for i, s in enumerate(self.states):
            personal = self.ctx.channel.send("personalised_weights", personalised_average(thetas, W[i], i),
                                             src="server", dst=s.cid, round=r)
            s.model.load_state_dict(personal)
        self.ctx.record("fedgta_weights", {"W": W.tolist(), "confidence": conf.tolist()})
        accepted = (W > 0).sum(1).double()          # |A_i|: the clients i aggregates with, itself included
        return {**weight_spread(W), "accepted_set_mean": float(accepted.mean()),
                "accepted_set_min": float(accepted.min())}

    def model_for(self, client):
        return self.states[client.cid].model

    def state_dict(self) -> dict:
        return client_models_state(self.states)

    def load_state_dict(self, state: dict) -> None:
        load_client_models(self.states, state)
