"""Audit of privacy=dp_fedavg with canary clients.

Each canary is a client whose update is a fixed vector of norm ``scale``·clip along its own
direction; in every round it joins like a real client (Poisson, rate q) if it is in the included
half. Its update goes through the mechanism's release (the client-side clip), is summed with the
real clients' clipped updates, and the mechanism noises the aggregate. The attacker sees each
round's noised aggregate (the global model's step) and scores a canary by the sum over rounds of
the aggregate's projection on the canary's direction."""
from __future__ import annotations

import torch

from fgx.privacy.audit.canaries import Canaries, directions


class Audit(Canaries):
    attack = ("canary clients: a fixed update of norm scale*clip along each canary's direction, sent in every "
              "round the canary is sampled; score = sum over rounds of the noised aggregate projected on it")

    def __init__(self, mech, algo, ctx, p):
        super().__init__(p, ctx.seed)
        self.mech, self.kind = mech, mech.params.update_kind
        self.q = mech.q
        self._aggregate = self.intercept(mech, "aggregate")      # the canaries join every aggregate of the updates
        self.dirs = None
        self.rounds = 0

    def aggregate(self, kind, payload, num_contributors, round):
        if kind != self.kind:
            return self._aggregate(kind, payload, num_contributors, round)
        keys = [k for k, v in payload.items() if v.is_floating_point()]
        shapes = [payload[k].shape for k in keys]
        flat = torch.cat([payload[k].detach().float().cpu().reshape(-1) for k in keys])
        if self.dirs is None:
            self.dirs = directions(self.m, flat.numel(), self.gen)
        joins = self.included & (self.rng.random(self.m) < self.q)
        total = flat * num_contributors
        size = self.p.scale * self.mech.params.clip
        for i in joins.nonzero()[0]:
            upd = dict(zip(keys, (size * self.dirs[i]).split([s.numel() for s in shapes])))
            upd = {k: v.view(s).to(payload[k].dtype) for (k, v), s in zip(upd.items(), shapes)}
            sent = self.mech.release(kind, upd, src=f"canary{i}", round=round)
            total += torch.cat([sent[k].float().reshape(-1) for k in keys])
        n = num_contributors + int(joins.sum())
        parts = (total / max(n, 1)).split([s.numel() for s in shapes])
        mixed = dict(payload)
        for k, v, s in zip(keys, parts, shapes):
            mixed[k] = v.view(s).to(device=payload[k].device, dtype=payload[k].dtype)
        out = self._aggregate(kind, mixed, n, round)
        seen = torch.cat([out[k].detach().float().cpu().reshape(-1) for k in keys])
        self.scores += (self.dirs @ seen).double().numpy()
        self.rounds += 1
        return out

    def claim(self) -> dict:
        return {"epsilon": self.mech.epsilon(self.rounds), "delta": self.mech.params.delta, "rounds": self.rounds,
                "what": "client-level (ε, δ) of the RDP accountant, one Poisson-subsampled Gaussian per round"}
