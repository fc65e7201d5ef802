"""One-run canary audits of fgx's DP mechanisms (Steinke, Nasr, Jagielski, NeurIPS 2023).

``privacy.audit.canaries=m`` (or ``fgx privacy audit``) inserts m canaries of the kind the run's
mechanism protects, each included with probability ½, runs once, scores every canary from what the
run released (what the trust model lets an attacker see), guesses, and turns the guesses into an ε
lower bound at ``privacy.audit.confidence`` (fgx/privacy/audit/bound.py). privacy.json["audit"]
holds the claimed ε of the canaries, the lower bound, m, the guesses and the confidence.

One module per audited mechanism (``AUDITS``): dp_fedavg (canary clients), metric_dp (canary
embedding rows), mf_gdp (canary records of gossip nodes, LDP / PNDP / SecLDP) and FedPerGNN's
local DP (canary item rows of its uploads). Each wraps the mechanism's own release path and never
changes what real messages carry. A lower bound below the claim does not prove the claim."""
from __future__ import annotations

from dataclasses import dataclass, field

from fgx.config import ConfigError, spec

# privacy mechanism (or, for a method with its own local DP, algorithm) -> module of its audit
AUDITS = {"dp_fedavg": "dp_fedavg", "metric_dp": "metric_dp", "mf_gdp": "mf_gdp", "fedpergnn": "fedpergnn"}


@dataclass
class AuditParams:
    canaries: int = field(default=0, metadata=spec(min=0, help="m canaries, each included with probability 1/2; "
                                                               "0: no audit"))
    confidence: float = field(default=0.95, metadata=spec(gt=0.0, max=0.999, help="of the ε lower bound"))
    scale: float = field(default=10.0, metadata=spec(gt=0.0, help="canary size over the mechanism's bound (update "
                                                                  "norm / clip, embedding norm): > 1 exposes a "
                                                                  "missing clip or normalisation"))
    rho: float = field(default=0.5, metadata=spec(gt=0.0, max=2.0, help="metric_dp: distance between a canary's "
                                                                        "two candidate (unit) embeddings"))
    seed: int = field(default=0, metadata=spec(help="draws the canaries and which half is included"))


def audited_name(validated) -> str | None:
    """What a run's audit attacks: its mechanism, or its algorithm's own local DP."""
    mech, algo = validated.names["privacy"], validated.names["algorithm"]
    if mech in AUDITS:
        return mech
    return algo if algo in AUDITS else None


def check(validated) -> None:
    """Before any work: an audit needs a mechanism fgx can audit and an uninterrupted run."""
    p = validated.params["privacy"].audit
    if p.canaries == 0:
        return
    if p.canaries < 2:
        raise ConfigError("privacy.audit.canaries", p.canaries, "0 (no audit) or at least 2")
    name = audited_name(validated)
    if name is None:
        raise ConfigError("privacy.audit.canaries", p.canaries,
                          f"0 with privacy={validated.names['privacy']} and algorithm={validated.names['algorithm']}: "
                          f"audits exist for privacy={[k for k in AUDITS if k != 'fedpergnn']} and "
                          f"algorithm=fedpergnn's local DP")
    if name == "fedpergnn" and validated.params["algorithm"].ldp_epsilon is None:
        raise ConfigError("privacy.audit.canaries", p.canaries, "0 with algorithm.ldp_epsilon=null (no local DP to "
                                                                "audit)")
    if name == "fedpergnn" and validated.names["executor"] != "local":
        raise ConfigError("executor", validated.names["executor"], "local with a FedPerGNN audit (the canaries' "
                                                                    "scores are collected in this process)")
    if validated.names["privacy"] == "mf_gdp":
        from fgx.privacy.audit.mf_gdp import check as check_gossip
        check_gossip(validated.params["privacy"], validated)
    if validated.top.resume:
        raise ConfigError("resume", True, "false with privacy.audit (the canaries' scores live in one "
                                          "uninterrupted run)")


def attach(privacy, algo, ctx, name: str | None):
    """Insert the canaries of ``name``'s audit into this run; None when the run is not audited."""
    p = privacy.params.audit
    if p.canaries == 0 or name is None:
        return None
    import importlib

    mod = importlib.import_module(f"fgx.privacy.audit.{AUDITS[name]}")
    return mod.Audit(privacy, algo, ctx, p)
