"""FedSSP at graph level (Tan et al., NeurIPS 2024, "FedSSP: Federated graph learning with spectral
knowledge and personalized preference"), on its spectral model (``model=ssp``). fgx's ``fedssp`` is the
LPSFed paper's adaptation to recommendation; this is the graph-classification method of the paper.

- Generic spectral knowledge sharing: clients share only the eigenvalue encoder and the filter encoder
  (the authors' code aggregates the parameters named ``*encoder*`` except the atom encoder), averaged
  uniformly (``add_parameters_SSP``: weight 1 / clients). The transformer over eigenvalues, the filter
  decoder, the convolutions, the input layer and the head stay with each client.
- Personalised graph preference: each client keeps a preference vector added to its representations
  before the head and a running mean of its training representations (momentum ``momentum``); the server
  averages the clients' means into a global consensus and sends it back, and a client adds
  ``tau_weight`` · mean(½ (mean − consensus)²) to its loss from then on.

Differences from the code (fgx decisions): the preference vector is trained with the model's optimiser
(the code: its own SGD); the running mean runs across steps (the code's mean_mode decides when it
restarts); the preference is also applied when scoring (the code's test loop scores head(rep))."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fgx.algorithms.fedavg import FedAvg, FedAvgParams
from fgx.config import spec
from fgx.federation.channel import Message
from fgx.federation.client import ClientState, Objective
from fgx.registry import ALGORITHMS


@dataclass
class FedSSPGraphParams(FedAvgParams):
    tau_weight: float = field(default=100.0, metadata=spec(min=0.0, help="weight of the consensus term (code: 100)"))
    momentum: float = field(default=0.5, metadata=spec(min=0.0, max=1.0, help="running-mean momentum (code: 0.5)"))


@dataclass
class FedSSPGraphClient(ClientState):
    current_mean: torch.Tensor | None = None     # [h] running mean of the client's training representations


@dataclass
class Preference(Objective):
    """tau · mean(½ (m − m̄)²), m the running mean of the client's training representations (updated
    here at every step), m̄ the global consensus; zero before the first consensus arrives. ``finish``:
    the running mean, which goes up."""
    tau: float
    momentum: float
    consensus: torch.Tensor | None = None
    unbatched = "its term reads the spectral model's representations, which the batched forward does not compute"

    def term(self, state, step):
        from fgx.tasks import split_mask

        rep = state.model.last_rep[split_mask(state.view, "graph", "train")]
        mom = self.momentum
        mean = (1 - mom) * state.current_mean + mom * rep.mean(0)
        state.current_mean = mean.detach()
        if self.consensus is None:
            return mean.sum() * 0.0
        return self.tau * torch.mean(0.5 * (mean - self.consensus) ** 2)

    def finish(self, state, delta):
        return state.current_mean


@ALGORITHMS.register("fedssp_graph", params=FedSSPGraphParams, tasks=("graph",))
class FedSSPGraph(FedAvg):
    requires_model = ("ssp", "FedSSP's spectral model")
    messages = {"global_weights": Message("down"), "update": Message("up", release=True),
                "consensus": Message("up", release=True), "global_consensus": Message("down")}
    client_state = FedSSPGraphClient
    objective = Preference

    def setup(self) -> None:
        from fgx.models.ssp import spectral_cache

        super().setup()
        for v in self.views.values():        # each client decomposes its own graphs
            v.spectral = {k: (t.to(v.x.device) if isinstance(t, torch.Tensor) else t)
                          for k, t in spectral_cache(v.cpu()).items()}
        names = {n for n, _ in self.global_model.named_parameters()}   # parameters only: BN statistics stay local
        prefixes = tuple(self.global_model.spectral_prefixes())
        self.shared = [k for k in self.global_model.state_dict() if k in names and k.startswith(prefixes)]
        h = self.global_model.fc.out_features
        for s in self.states:
            s.current_mean = torch.zeros(h, device=self.ctx.device)
        self.consensus = None

    def shared_weights(self) -> dict[str, torch.Tensor]:
        sd = self.global_model.state_dict()
        return {k: sd[k].detach().clone() for k in self.shared}

    def client_objective(self, chosen, weights, r):
        gc = None if self.consensus is None else \
            self.ctx.channel.broadcast("global_consensus", self.consensus, [s.cid for s in chosen], r)
        return Preference(self.params.tau_weight, self.params.momentum, gc)

    threat_hooks = True     # its aggregate is FedAvg's (super) plus its own bookkeeping

    def aggregate(self, chosen, updates, r):
        """FedAvg's average of the updates; the clients' running means up, their mean the next consensus."""
        mean, stats = super().aggregate(chosen, updates, r)
        ch = self.ctx.channel
        means = [ch.send("consensus", u.sent, src=s.cid, dst="server", round=r) for s, u in zip(chosen, updates)]
        if means:
            self.consensus = ch.aggregate("consensus", torch.stack(means).mean(0), len(means), r)
            stats["consensus_spread"] = float(torch.stack([(m - self.consensus).norm() for m in means]).mean())
        else:
            stats["consensus_spread"] = float("nan")
        return mean, stats

    def model_for(self, client):
        own = self.states[client.cid].model
        own.load_state_dict(self.shared_weights(), strict=False)   # what the next round's download sets
        return own

    def state_dict(self) -> dict:
        return {**super().state_dict(), "consensus": self.consensus,
                "current_means": [s.current_mean for s in self.states],
                "client_models": [s.model.state_dict() for s in self.states]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict({k: v for k, v in state.items() if k != "client_models"})
        for s, m, cm in zip(self.states, state["client_models"], state["current_means"]):
            s.model.load_state_dict(m)
            s.current_mean = cm
        self.consensus = state["consensus"]
