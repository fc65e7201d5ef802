"""Audit of privacy=dp_fedavg with canary clients that take the path real clients take.

The included half of the canaries join the run as clients of its FedAvg rounds: they are sampled by the
algorithm's own client sampler, receive the global weights, return an update, and that update goes up
the channel like every real client's (the mechanism's release clips it), into the server's average and
the mechanism's noised aggregate, which moves the global model. Only the client side is the canary's
own: instead of training, canary i returns s_ir · scale · clip · d_i in round r (d_i its own direction,
orthonormal where the model allows, s_ir = ±1 drawn per round, so noise reused across rounds cannot hide
behind a constant canary). The excluded half never exists in the run.

The attacker sees what every client receives: the global weights of each round (and the final model),
so the released step of round r, and scores canary i by its projections y_ir = ⟨step_r, d_i⟩: the
matched filter Σ_r s_ir y_ir for the one-run (Steinke) bound, and the per-round vector for the GDP audit
(fgx/privacy/audit/gdp.py)."""
from __future__ import annotations

import numpy as np
import torch

from fgx.config import ConfigError
from fgx.federation.client import ClientUpdate, LocalLoss, local_update
from fgx.privacy.audit.canaries import Canaries, directions


class CanaryClient:
    """A canary's place among the algorithm's client states: an id after the real clients', and an empty
    model and optimiser so that checkpoints of the states still work. It never trains."""

    def __init__(self, cid: int, index: int):
        self.cid, self.index = cid, index
        self.model = torch.nn.Module()
        self.optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
        self.extra: dict = {}


class Audit(Canaries):
    attack = ("canary clients sampled, clipped, averaged and noised like real clients: an update of norm "
              "scale*clip along each canary's direction with a random sign per round; score = the released "
              "global steps projected on it (matched filter over rounds)")

    def __init__(self, mech, algo, ctx, p):
        super().__init__(p, ctx.seed)
        from fgx.algorithms.fedavg import FedAvg

        if not isinstance(algo, FedAvg) or type(algo).round is not FedAvg.round or \
                type(algo).aggregate is not FedAvg.aggregate:
            raise ConfigError("privacy.audit.canaries", p.canaries,
                              f"0 with algorithm={ctx.config.names['algorithm']}: the dp_fedavg audit's canary "
                              "clients join FedAvg's own rounds (fedavg, fedprox and others that keep them)")
        self.mech, self.algo, self.ctx = mech, algo, ctx
        self.kind = mech.params.update_kind
        self.q = mech.q
        first = len(algo.states)
        self.members = [CanaryClient(first + j, int(i)) for j, i in enumerate(np.flatnonzero(self.included))]
        algo.states.extend(self.members)             # sampled by the algorithm like every client
        self._map = ctx.executor.map
        ctx.executor.map = self.map
        self.signs: list[np.ndarray] = []            # per round, each canary's sign
        self.seen: list[dict] = []                   # the global weights each round's clients received
        self.dirs = None
        self.keys = None

    # -- the canary clients' side ----------------------------------------------------------------------
    def map(self, fn, items, *args):
        if fn is not local_update or not any(isinstance(s, CanaryClient) for s in items):
            return self._map(fn, items, *args)
        gw = args[0]
        self._start_round(gw)
        real = [s for s in items if not isinstance(s, CanaryClient)]
        done = iter(self._map(fn, real, *args) if real else [])
        size = self.p.scale * self.mech.params.clip
        out = []
        for s in items:
            if isinstance(s, CanaryClient):
                upd = size * self.signs[-1][s.index] * self.dirs[s.index]
                parts = upd.split([gw[k].numel() for k in self.keys])
                delta = {k: torch.zeros_like(v) for k, v in gw.items()}
                for k, part in zip(self.keys, parts):
                    delta[k] = part.view(gw[k].shape).to(dtype=gw[k].dtype, device=gw[k].device)
                out.append(ClientUpdate(delta, LocalLoss(float("nan"), float("nan"), 0.0)))
            else:
                out.append(next(done))
        return out

    def _start_round(self, gw: dict) -> None:
        if self.keys is None:
            self.keys = [k for k, v in gw.items() if v.is_floating_point()]
            self.dirs = directions(self.m, sum(gw[k].numel() for k in self.keys), self.gen)
        self.seen.append({k: gw[k].detach().double().cpu().clone() for k in self.keys})
        self.signs.append(self.rng.choice([-1.0, 1.0], self.m))

    # -- the attacker's side ---------------------------------------------------------------------------
    def _projections(self) -> np.ndarray:
        """m x rounds: each released global step projected on each canary's direction."""
        final = {k: v.detach().double().cpu() for k, v in self.algo.shared_weights().items() if k in self.keys}
        models = self.seen + [final]
        steps = [torch.cat([(b[k] - a[k]).reshape(-1) for k in self.keys]) for a, b in zip(models, models[1:])]
        return np.stack([(self.dirs.double() @ st).numpy() for st in steps], axis=1)

    def report(self) -> dict:
        y = self._projections()
        template = np.stack(self.signs, axis=1)[:, :y.shape[1]]
        self.scores = (y * template).sum(1)
        self.gdp_inputs = (y, template)
        return super().report()

    @property
    def rounds(self) -> int:
        return len(self.signs)

    def claim(self) -> dict:
        return {"epsilon": self.mech.epsilon(self.rounds), "delta": self.mech.params.delta, "rounds": self.rounds,
                "what": "client-level (ε, δ) of the RDP accountant, one Poisson-subsampled Gaussian per round"}
