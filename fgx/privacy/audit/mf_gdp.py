"""Audit of privacy=mf_gdp with canary records of gossip nodes.

Canary i is a record of victim node u_i in batch j_i: in every step t ≡ j_i (mod b) where it is in
the included half, it adds its clipped gradient (norm clip, along its own direction c_i, so Δ·c_i
to the node's batch mean) to the half-step u sends, before the mechanism's noise. The attacker
knows every other record (the DP adversary), hence the victim's model and batch gradient, and
recovers noise + canaries from u's messages; it whitens them over time with the run's
correlation C (the noise of u is C^{-1}z, z white) and scores a canary by the matched filter
⟨C·r, C·p_i⟩ of its projection r on c_i against its participation pattern p_i; a second score
uses C·p_i less its mean over time, blind to noise that stays constant over the steps (one draw
reused), and the confidence is split over both.

Under LDP every message is public and every node is a victim. Under PNDP / SecLDP the attacker is a
node of privacy.attackers; it knows the victim's model only when the victim's one neighbour is that
attacker (it then receives all the victim sends and knows all it receives), so the victims are the
nodes of degree 1 next to an attacker (e.g. the leaves of partitioner.graph=star with
privacy.attackers=[0]), and the claim is the largest ε of those (victim, attacker) pairs."""
from __future__ import annotations

import numpy as np
import torch
from scipy.linalg import solve_triangular

from fgx.config import ConfigError
from fgx.privacy.audit.canaries import Canaries, directions


NO_VICTIMS = ("0 with this trust model and graph: the audit's victims are nodes whose only neighbour is an "
              "attacker, and privacy.attackers have none (e.g. partitioner.graph=star privacy.attackers=[0])")


def audit_victims(graph, trust: str, attackers) -> tuple[list[int], list[tuple[int, int]] | None]:
    """The victim nodes (every node under LDP; under PNDP/SecLDP the nodes whose only neighbour is an
    attacker) and, for PNDP/SecLDP, the audited (victim, attacker) pairs."""
    nodes = sorted(graph.nodes)
    if trust == "ldp":
        return nodes, None
    att = set(nodes if attackers is None else attackers)
    pairs = [(u, next(iter(graph.neighbors(u)))) for u in nodes
             if u not in att and graph.degree(u) == 1 and next(iter(graph.neighbors(u))) in att]
    return [u for u, _ in pairs], pairs


def check(params, validated) -> None:
    """Before any work: a PNDP/SecLDP audit needs a victim next to an attacker."""
    if params.trust_model == "ldp" or validated.names["partitioner"] != "topology":
        return
    from fgx.decentral.topology import build_graph

    if not audit_victims(build_graph(validated.params["partitioner"]), params.trust_model, params.attackers)[0]:
        raise ConfigError("privacy.audit.canaries", params.audit.canaries, NO_VICTIMS)


class Audit(Canaries):
    attack = ("canary records of gossip nodes: a clipped gradient along each canary's direction in the steps of "
              "its batch; score = the time-whitened (correlation C) matched filter of the victim's message noise")

    def __init__(self, mech, algo, ctx, p):
        super().__init__(p, ctx.seed)
        if mech.noise is None:
            raise ConfigError("privacy.audit.canaries", p.canaries, "0: this run released no gossip messages")
        self.mech = mech
        acc = mech.account
        self.trust = acc["trust_model"]
        self.b = algo.params.b
        victims, self.pairs = audit_victims(algo.graph, self.trust, acc.get("attackers"))
        if not victims:
            raise ConfigError("privacy.audit.canaries", p.canaries, NO_VICTIMS)
        self.victims = victims
        self.dim = algo.theta.size(1)
        self.steps = len(mech.noise.mixer)
        self.delta_rec = acc["noise"]["record_sensitivity"] / (2.0 if acc["neighbouring"] == "replace_one" else 1.0)
        self.owner = np.array([victims[i % len(victims)] for i in range(self.m)])
        self.batch = self.rng.integers(0, self.b, self.m)
        self.dirs = torch.zeros(self.m, self.dim)
        for u in victims:
            mine = np.nonzero(self.owner == u)[0]
            self.dirs[mine] = directions(len(mine), self.dim, self.gen)
        self.proj = np.zeros((self.steps, self.m))        # step t: noise + canaries of the owner on c_i
        self._release = self.intercept(mech, "release")

    def release(self, kind, payload, src, round):
        if kind != "model" or int(src) not in self.victims:
            return self._release(kind, payload, src, round)
        u, t = int(src), round - 1
        mine = np.nonzero(self.owner == u)[0]
        on = mine[self.included[mine] & (self.batch[mine] == t % self.b)]
        step = self.mech.lr * self.delta_rec
        contrib = self.dirs[on].sum(0).to(device=payload.device, dtype=payload.dtype)
        sent = self._release(kind, payload - step * contrib, src, round)
        resid = (payload - sent).detach().double().cpu() / step
        self.proj[t, mine] = (self.dirs[mine].double() @ resid).numpy()
        return sent

    def report(self) -> dict:
        mixer = self.mech.noise.mixer.double().numpy()             # C^{-1}: the noise of a node is C^{-1} z
        pattern = (np.arange(self.steps)[:, None] % self.b == self.batch[None, :]).astype(float)
        white = solve_triangular(mixer, self.proj, lower=True)     # C r: white noise + C p_i per included canary
        template = solve_triangular(mixer, pattern, lower=True)
        # a second attack, for noise that repeats over steps (one draw reused): the template with its mean
        # over time removed ignores any step-constant part of the whitened residual
        steady = template - template.mean(0, keepdims=True)
        self.scores = {"matched filter": (white * template).sum(0), "step-constant noise removed": (white * steady).sum(0)}
        return super().report()

    def claim(self) -> dict:
        acc = self.mech.account
        out = {"delta": acc["delta"], "trust_model": self.trust, "correlation": acc["correlation"],
               "victims": len(self.victims)}
        if self.pairs is None:
            return {"epsilon": acc["ldp"]["epsilon"], **out, "what": "LDP (ε, δ) of the whole run (μ-GDP)"}
        eps = {(r["victim"], r["attacker"]): r["epsilon"] for r in acc["pairs"]}
        return {"epsilon": max(eps[pr] for pr in self.pairs), **out, "pairs": [list(pr) for pr in self.pairs],
                "what": f"{self.trust} (ε, δ): the largest of the audited (victim, attacker) pairs'"}
