"""Audit of privacy=metric_dp with canary embedding rows inside a real client's release.

Canary i has two candidate embeddings u_i^± = scale·(cos θ a_i ± sin θ b_i) (a_i ⊥ b_i unit vectors,
2 sin θ = ρ), so after the mechanism's normalisation they lie on the unit sphere at distance ρ. In every
round the canary rows ride inside the first embedding message a real client sends: they are appended to
its payload (ids that are no node's) before it goes up the channel, so the channel, the mechanism's
release (normalisation and noise) and everything else on that path treat them as that client's rows;
the receiver gets the real rows only. In round r the included half releases u_i^{s_ir} and the other
half u_i^{−s_ir}, s_ir = ±1 drawn per round (noise reused across rounds then shows). The canaries are
dropped from the mechanism's bookkeeping (release counts, ρ). The attacker sees the noised rows and
scores a canary by their projections on b_i: the matched filter Σ_r s_ir ⟨row_ir, b_i⟩ for the one-run
bound, the per-round vector for the GDP audit. The claim is the accountant's ε at distance ρ for the
canaries' number of releases, at the run's σ0 and δ."""
from __future__ import annotations

import math

import numpy as np
import torch

from fgx.privacy.audit.canaries import Canaries, directions


class Audit(Canaries):
    attack = ("canary embedding rows inside a real client's embedding message: two candidate unit embeddings at "
              "distance rho (scaled by scale before the mechanism's normalisation), the candidate's sign drawn per "
              "round; score = the noised rows' projections on the difference (matched filter over rounds)")

    def __init__(self, mech, algo, ctx, p):
        super().__init__(p, ctx.seed)
        self.mech, self.kind = mech, mech.params.embedding_kind
        self.channel = ctx.channel
        self._send = ctx.channel.send
        ctx.channel.send = self.send
        self.last_round = None
        self.a = self.b = None
        self.proj: list[np.ndarray] = []
        self.signs: list[np.ndarray] = []

    def _directions(self, dim: int) -> None:
        self.a = directions(self.m, dim, self.gen)
        b = torch.randn(self.m, dim, generator=self.gen)
        b = b - (b * self.a).sum(1, keepdim=True) * self.a
        self.b = b / b.norm(dim=1, keepdim=True)

    def send(self, kind, payload, src, dst, round):
        if kind != self.kind or round == self.last_round:
            return self._send(kind, payload, src, dst, round)
        self.last_round = round
        vals, ids = payload["values"], payload["ids"]
        if self.a is None:
            self._directions(vals.size(-1))
        sign = self.rng.choice([-1.0, 1.0], self.m) * np.where(self.included, 1.0, -1.0)
        theta = math.asin(self.p.rho / 2)
        rows = self.p.scale * (math.cos(theta) * self.a + torch.tensor(sign, dtype=torch.float32)[:, None]
                               * math.sin(theta) * self.b)
        canary_ids = torch.arange(-self.m, 0)                    # never a node id
        n = ids.numel()
        merged = {**payload, "ids": torch.cat([ids, canary_ids.to(ids.device, ids.dtype)]),
                  "values": torch.cat([vals, rows.to(device=vals.device, dtype=vals.dtype)])}
        got = self._send(kind, merged, src, dst, round)
        seen = got["values"][n:].detach().float().cpu()
        for gid in canary_ids.tolist():                          # canaries are not nodes of the run
            self.mech.releases.pop(gid, None)
            self.mech.last_released.pop(gid, None)
        self.proj.append((seen * self.b).sum(1).double().numpy())
        self.signs.append(sign * np.where(self.included, 1.0, -1.0))   # the included candidate's sign
        return {**got, "ids": got["ids"][:n], "values": got["values"][:n]}

    def report(self) -> dict:
        y, template = np.stack(self.proj, axis=1), np.stack(self.signs, axis=1)
        self.scores = (y * template).sum(1)
        self.gdp_inputs = (y, template)
        return super().report()

    @property
    def releases(self) -> int:
        return len(self.proj)

    def claim(self) -> dict:
        from fgx.privacy.metric_dp_accounting import epsilon_table, orders_for

        p = self.mech.params
        row = epsilon_table([self.p.rho], [p.sigma0], self.releases, p.delta, orders=orders_for(p.orders))[0]
        return {"epsilon": row["eps"][float(p.sigma0)], "delta": p.delta, "rho": self.p.rho, "sigma0": p.sigma0,
                "releases": self.releases,
                "what": "metric-DP (ε, δ) at distance rho from the RDP accountant, for the canaries' releases"}
