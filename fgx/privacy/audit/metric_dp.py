"""Audit of privacy=metric_dp with canary embedding rows.

Canary i has two candidate embeddings u_i^± = scale·(cos θ a_i ± sin θ b_i) (a_i ⊥ b_i unit vectors,
2 sin θ = ρ), so after the mechanism's normalisation they lie on the unit sphere at distance ρ; the
included half releases u_i^+, the rest u_i^-. In every round, with the round's first embedding
release, the canary rows are released through the mechanism's own release (normalisation and
noise), then dropped from its bookkeeping (release counts, ρ). The attacker sees the noised rows
and scores a canary by the sum over releases of the row's projection on b_i. The claim is the
accountant's ε at distance ρ for the canaries' number of releases, at the run's σ0 and δ."""
from __future__ import annotations

import math

import torch

from fgx.privacy.audit.canaries import Canaries, directions


class Audit(Canaries):
    attack = ("canary embedding rows: two candidate unit embeddings at distance rho (scaled by scale before the "
              "mechanism's normalisation), released once per round; score = sum of the noised rows' projections "
              "on the difference")

    def __init__(self, mech, algo, ctx, p):
        super().__init__(p, ctx.seed)
        self.mech, self.kind = mech, mech.params.embedding_kind
        self._release = self.intercept(mech, "release")
        self.releases, self.last_round = 0, None
        self.rows = None

    def _canary_rows(self, dim: int) -> torch.Tensor:
        # each canary its own pair of orthonormal directions (a_i, b_i)
        a = directions(self.m, dim, self.gen)
        b = torch.randn(self.m, dim, generator=self.gen)
        b = b - (b * a).sum(1, keepdim=True) * a
        b = b / b.norm(dim=1, keepdim=True)
        theta = math.asin(self.p.rho / 2)
        self.b = b
        sign = torch.tensor(self.included, dtype=torch.float32).mul(2).sub(1).unsqueeze(1)
        return self.p.scale * (math.cos(theta) * a + sign * math.sin(theta) * b)

    def release(self, kind, payload, src, round):
        if kind == self.kind and round != self.last_round:
            self.last_round = round
            vals = payload["values"]
            if self.rows is None:
                self.rows = self._canary_rows(vals.size(-1))
            ids = torch.arange(-self.m, 0)                         # never a node id
            canary = {**payload, "ids": ids.to(payload["ids"].device),
                      "values": self.rows.to(device=vals.device, dtype=vals.dtype)}
            seen = self._release(kind, canary, src, round)["values"].detach().float().cpu()
            for gid in ids.tolist():                               # canaries are not nodes of the run
                self.mech.releases.pop(gid, None)
                self.mech.last_released.pop(gid, None)
            self.scores += (seen * self.b).sum(1).double().numpy()
            self.releases += 1
        return self._release(kind, payload, src, round)

    def claim(self) -> dict:
        from fgx.privacy.metric_dp_accounting import epsilon_table, orders_for

        p = self.mech.params
        row = epsilon_table([self.p.rho], [p.sigma0], self.releases, p.delta, orders=orders_for(p.orders))[0]
        return {"epsilon": row["eps"][float(p.sigma0)], "delta": p.delta, "rho": self.p.rho, "sigma0": p.sigma0,
                "releases": self.releases,
                "what": "metric-DP (ε, δ) at distance rho from the RDP accountant, for the canaries' releases"}
