"""What every audit shares: the canaries with their random half included and their scores, and the
canary directions (fgx/privacy/audit/__init__.py says how an audit runs)."""
from __future__ import annotations

import numpy as np
import torch


class Canaries:
    """m canaries, a random half included (``included``); ``scores`` grow during the run (higher:
    more likely included). Subclasses insert the canaries and say what they claim."""
    attack = ""
    score_name = "projection sum"      # what ``scores`` is, when it is one array

    def __init__(self, p, run_seed: int):    # p: the run's privacy.audit params (AuditParams)
        self.p = p
        self.m = p.canaries
        self.rng = np.random.default_rng([p.seed, run_seed, 44])
        self.included = self.rng.random(self.m) < 0.5
        self.gen = torch.Generator().manual_seed(int(self.rng.integers(2 ** 62)))
        self.scores = np.zeros(self.m)

    def intercept(self, mech, hook: str):
        """Route the mechanism's ``hook`` ("release" or "aggregate") through this audit's method of the
        same name, which inserts the canaries; returns the mechanism's own."""
        own = getattr(mech, hook)
        setattr(mech, hook, getattr(self, hook))
        return own

    def claim(self) -> dict:
        """{"epsilon": ε the mechanism claims for each canary, "delta": δ, ...}."""
        raise NotImplementedError

    gdp_inputs = None    # Gaussian mechanisms: (per-release projections, templates), m x T each, for the GDP audit

    def report(self) -> dict:
        from fgx.privacy.audit.bound import audit

        claim = self.claim()
        scores = self.scores if isinstance(self.scores, dict) else {self.score_name: self.scores}
        # with the GDP audit as well, the confidence is split over the two (Bonferroni)
        conf = self.p.confidence if self.gdp_inputs is None else 1 - (1 - self.p.confidence) / 2
        res = audit(scores, self.included, claim["delta"], conf)
        eps = claim["epsilon"]
        holds = None if eps is None else bool(res["epsilon_lb"] <= eps)
        out = {"claimed": claim, **res, "confidence": self.p.confidence, "below_claim": holds, "attack": self.attack,
               "bound": "Steinke, Nasr, Jagielski 2023, Theorem 3 (one run; best of the guess counts tried, "
                        "confidence split over them)",
               "meaning": "the run is not (epsilon_lb, delta)-DP for these canaries, with this confidence; "
                          "a lower bound below the claim does not prove the claim"}
        if self.gdp_inputs is not None:
            from fgx.privacy.audit.gdp import gdp_audit

            g = gdp_audit(*self.gdp_inputs, self.included, claim["delta"], conf, eps, seed=self.p.seed)
            g.pop("scores")
            g["below_claim"] = None if eps is None else bool(g["epsilon_lb"] <= eps)
            g["test"] = ("Gaussian audit: the canaries' whitened matched-filter separation mu (cross-fitted), its "
                         "lower confidence bound, and the exact (epsilon, delta) of mu_lb-GDP (fgx/privacy/audit/gdp.py)")
            out["gdp"] = g
            if holds is not None:
                out["below_claim"] = bool(holds and g["below_claim"])
        return out


def directions(count: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` unit vectors in R^dim: orthonormal when count <= dim (so canaries do not blur each
    other's scores), independent Gaussian directions otherwise."""
    g = torch.randn(dim, count, generator=gen, dtype=torch.float64)
    if count <= dim:
        q, _ = torch.linalg.qr(g)
        return q.T.contiguous().float()
    return (g / g.norm(dim=0, keepdim=True)).T.contiguous().float()
