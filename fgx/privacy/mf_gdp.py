"""privacy=mf_gdp: matrix-factorisation Gaussian DP for the gossip algorithms (Bellet et al. 2025,
"Unified Privacy Guarantees for Decentralized Learning via Matrix Factorization").

The mechanism sits on the half-step messages θ_{t+½} every node sends its neighbours (channel kind
``model``): at step t it adds -η·(C_local^{-1} z^(u))_t to node u's message, z ~ N(0, (Δ·σ)²) per
step and coordinate, Δ the per-record sensitivity of the node's batch-mean gradient (clip / batch;
×2 under replace-one neighbouring) and σ = sqrt(sens²_LDP)/μ. What the node keeps is what it sent.
Muffliato's later gossip messages (``model_averaged``, W^m θ_{t+½}) carry no new noise: under LDP
they are post-processing, under PNDP/SecLDP the accountant counts them as extra observations.

The whole run is then μ-GDP under LDP (Theorem 7; ``mu`` calibrates the noise). ``trust_model``
adds the guarantee of a weaker attacker: ``pndp`` (a node that sees the messages it receives and
knows its own noise and gradients) or ``secldp`` (the same node also knows the DECOR secrets on its
edges; the run adds such secrets with std ``secret_scale``·Δσ), as a per-pair table (victim,
attacker) in privacy.json; the headline ε is the worst pair's. Everything is computed before round
1 (the noise is data-independent), so a run that cannot be accounted fails before any training."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from fgx.config import ConfigError, spec
from fgx.privacy.base import PrivacyMechanism, PrivacyParams
from fgx.privacy.mf.correlations import CORRELATIONS
from fgx.privacy.mf.sensitivity import BOUNDS
from fgx.privacy.mf.trust import TRUST_MODELS
from fgx.registry import PRIVACY


@dataclass
class MFGDPParams(PrivacyParams):
    correlation: str = field(default="auto", metadata=spec(
        choices=["auto", *CORRELATIONS], help="auto: the algorithm's own (dp_dsgd identity, mafalda_sgd mafalda, ...)"))
    mu: float = field(default=1.0, metadata=spec(gt=0.0, help="μ-GDP of the whole run under LDP; calibrates the noise"))
    delta: float = field(default=1e-6, metadata=spec(gt=0.0, max=0.5))
    trust_model: str = field(default="ldp", metadata=spec(choices=list(TRUST_MODELS)))
    participation: str = field(default="record", metadata=spec(
        choices=["record", "user"], help="record: the algorithm's (k, b) cyclic batches; user: every step (k=T, b=1)"))
    neighbouring: str = field(default="zero_out", metadata=spec(
        choices=["zero_out", "replace_one"], help="zero_out: Δ = clip/batch (the authors'); replace_one: 2·clip/batch"))
    sens_bound: str = field(default="abs_sum_capped", metadata=spec(choices=list(BOUNDS)))
    attackers: list[int] | None = field(default=None, metadata=spec(
        min=0, help="pndp/secldp: nodes that play the attacker, each alone (at least one); null: every node"))
    secret_scale: float = field(default=0.0, metadata=spec(
        min=0.0, help="DECOR pairwise secrets, std relative to the local noise; secldp needs > 0"))
    alpha: float = field(default=2.0, metadata=spec(gt=1.0, help="Rényi order reported beside ε"))
    solver_max_iter: int = field(default=2000, metadata=spec(min=1))
    solver_tol: float = field(default=1e-8, metadata=spec(gt=0.0))
    max_accounting_gb: float = field(default=4.0, metadata=spec(gt=0.0, help="refuse pndp/secldp accounting above this memory"))


@dataclass
class GossipRelease:
    """What a gossip algorithm tells the mechanism about the messages it sends (fgx/algorithms/gossip.py)."""
    graph: object                # networkx graph, nodes 0..n-1
    w: np.ndarray                # gossip matrix: node v averages W[v, u] of u's message
    k: int                       # participations of each record (T = k·b)
    b: int                       # batches per node per epoch
    gossip_steps: int            # K messages per node and step (Muffliato)
    dim: int                     # model size d
    lr: float                    # η: the message is θ_t - η·(gradient + noise)
    gradient_sensitivity: float  # Δ: one record's contribution to a node's batch-mean gradient (clip / batch)


def resolve_correlation(params: MFGDPParams, algorithm: str, own: str | None) -> str:
    """The correlation a run uses: the algorithm's own, or privacy.correlation for mf_dsgd."""
    if own is None:
        raise ConfigError("privacy.name", "mf_gdp", f"none with algorithm={algorithm} (the non-private baseline "
                          f"adds no noise; use privacy=none, or a private variant such as dp_dsgd)")
    if own == "privacy":
        if params.correlation == "auto":
            raise ConfigError("privacy.correlation", "auto", f"one of {list(CORRELATIONS)} with algorithm={algorithm} "
                              f"(MF-D-SGD takes its correlation from privacy.correlation)")
        return params.correlation
    if params.correlation not in ("auto", own):
        raise ConfigError("privacy.correlation", params.correlation,
                          f"auto or {own!r} with algorithm={algorithm} (its correlation); for another one use "
                          f"algorithm=mf_dsgd privacy.correlation={params.correlation}")
    return own


@PRIVACY.register("mf_gdp", params=MFGDPParams)
class MFGDP(PrivacyMechanism):
    name = "mf_gdp"
    @classmethod
    def covers(cls, params) -> set[str]:
        return {"model", "model_averaged"}    # the gossip algorithms' message kinds it accounts

    @classmethod
    def check_config(cls, params: MFGDPParams, validated) -> None:
        algo_name = validated.names["algorithm"]
        algo = validated.entries["algorithm"].obj
        if not algo.gossip:
            raise ConfigError("privacy.name", "mf_gdp", f"a mechanism for the gossip algorithms (dp_dsgd, muffliato, "
                              f"antipgd, dmf, mafalda_sgd, mf_dsgd); algorithm={algo_name} is not one")
        resolve_correlation(params, algo_name, algo.correlation)
        if params.trust_model == "secldp" and params.secret_scale <= 0:
            raise ConfigError("privacy.secret_scale", params.secret_scale,
                              "> 0 with trust_model=secldp (its guarantee comes from the DECOR secrets; without "
                              "them SecLDP is PNDP: use trust_model=pndp)")
        if params.trust_model != "ldp" and params.attackers is not None and not params.attackers:
            raise ConfigError("privacy.attackers", [], "at least one node id, or null for every node (with no "
                              "attacker there is no pair to account, and ε = 0 would claim what was not checked)")
        if validated.names["partitioner"] != "topology":
            return          # the algorithm refuses this config with its own message
        from fgx.decentral.topology import build_graph, gossip_matrix
        from fgx.privacy.mf.trust import accounting_cost

        g = build_graph(validated.params["partitioner"])
        n = g.number_of_nodes()
        bad = [a for a in params.attackers or [] if a >= n]
        if bad:
            raise ConfigError("privacy.attackers", params.attackers, f"node ids in [0, {n - 1}] (the graph has {n} nodes)")
        if params.trust_model != "ldp":
            ap = validated.params["algorithm"]
            w = gossip_matrix(g, ap.gossip)
            steps = ap.k * ap.b
            worst = max((accounting_cost(w, steps, [a], ap.gossip_steps, g.number_of_edges())
                         for a in (params.attackers or range(n))), key=lambda c: c["bytes"])
            if worst["bytes"] > params.max_accounting_gb * 2 ** 30:
                raise ConfigError("privacy.trust_model", params.trust_model,
                                  f"ldp, or fewer steps/attackers: the {params.trust_model} accounting needs "
                                  f"{worst['bytes'] / 2 ** 30:.1f} GB for the best-connected attacker (T = {steps}, "
                                  f"{worst['rows']} observed rows) > privacy.max_accounting_gb = {params.max_accounting_gb}")

    def __init__(self, params: MFGDPParams):
        super().__init__(params)
        self.noise = None
        self.account: dict = {}
        self._step_noise: tuple[int, torch.Tensor] | None = None

    def bind_gossip(self, rel: GossipRelease, algorithm: str, own_correlation: str | None) -> None:
        """Build the correlation, calibrate the noise and do the whole run's accounting (before round 1)."""
        from fgx.privacy.mf.correlations import build_correlation
        from fgx.privacy.mf.gdp import eps_from_mu, rdp_from_mu
        from fgx.privacy.mf.noise import GossipNoise
        from fgx.privacy.mf.pndp import ldp_sens2, pairwise_table
        from fgx.privacy.mf.trust import oriented_incidence

        p, log = self.params, self.ctx.log
        name = resolve_correlation(p, algorithm, own_correlation)
        steps = rel.k * rel.b
        # the utility workload of K gossip steps per gradient is that of one step with W^K
        w_util = np.linalg.matrix_power(rel.w, rel.gossip_steps)
        corr = build_correlation(name, w_util, rel.k, rel.b, p.solver_max_iter, p.solver_tol)
        b_acc = rel.b if p.participation == "record" else 1
        sens2 = float(ldp_sens2(corr.c_local, steps, b_acc, p.sens_bound).max())
        sigma = float(np.sqrt(sens2) / p.mu)                  # noise multiplier per unit of sensitivity
        delta_rec = rel.gradient_sensitivity * (2.0 if p.neighbouring == "replace_one" else 1.0)
        std = delta_rec * sigma
        n = rel.w.shape[0]
        inc = oriented_incidence(rel.w) if p.secret_scale > 0 else None
        self.noise = GossipNoise(corr.noise_mixer, n, rel.dim, std, self.ctx.seed * 7_777_777 + 1, inc, p.secret_scale)
        self.lr = rel.lr
        eps_ldp = eps_from_mu(p.mu, p.delta)
        self.account = {
            "mechanism": "mf_gdp", "algorithm": algorithm, "correlation": name, "trust_model": p.trust_model,
            "participation": {"kind": p.participation, "k": rel.k if p.participation == "record" else steps,
                              "b": b_acc, "steps": steps},
            "neighbouring": p.neighbouring, "sens_bound": p.sens_bound, "gossip_steps": rel.gossip_steps,
            "noise": {"sens2_ldp": sens2, "noise_multiplier": sigma, "record_sensitivity": delta_rec,
                      "std_per_coordinate": std, "secret_scale": p.secret_scale,
                      "message_std_per_coordinate": rel.lr * std * float(np.sqrt((corr.noise_mixer ** 2).sum(1)).max())},
            "ldp": {"mu": p.mu, "epsilon": eps_ldp, "delta": p.delta, f"rdp_alpha{p.alpha:g}": rdp_from_mu(p.mu, p.alpha)},
            "surrogate_objective": corr.objective, "solver": corr.solver_report(),
            "mu": p.mu, "epsilon": eps_ldp, "delta": p.delta,
        }
        if p.trust_model != "ldp":
            attackers = p.attackers if p.attackers is not None else list(range(n))
            log.info("mf_gdp: %s accounting for %d attacker(s) over T = %d steps ...", p.trust_model,
                     len(attackers), steps)
            table = pairwise_table(rel.w, rel.graph, steps, b_acc, corr.c_local, attackers, p.trust_model, sigma,
                                   p.alpha, p.delta, p.sens_bound, p.secret_scale, rel.gossip_steps)
            worst = table["worst_pair"]
            self.account.update(mu=worst["mu"], epsilon=worst["epsilon"], worst_pair=worst, attackers=attackers,
                                by_distance=table["by_distance"], pairs=table["pairs"])
            if p.secret_scale > 0 and p.trust_model == "pndp":
                self.account["note"] = ("pndp accounting ignores the DECOR secrets (valid, conservative); "
                                        "trust_model=secldp counts them")
        log.info("mf_gdp: correlation %s, sens² %.4g, σ %.4g, noise std %.4g per coordinate; %s ε = %.4g "
                 "(δ = %g; LDP ε = %.4g)", name, sens2, sigma, std, p.trust_model, self.account["epsilon"],
                 p.delta, eps_ldp)

    def release(self, kind, payload, src, round):
        if kind != "model" or self.noise is None:
            return payload          # model_averaged: post-processing of noised messages
        t = round - 1
        if self._step_noise is None or self._step_noise[0] != t:
            self._step_noise = (t, self.noise.step(t))
        noise = self._step_noise[1][int(src)]
        return payload - (self.lr * noise).to(device=payload.device, dtype=payload.dtype)

    def on_round_end(self, round: int) -> dict[str, float]:
        return {"epsilon": self.account["epsilon"]} if self.account else {}

    def report(self) -> dict:
        if not self.account:
            return {"mechanism": "mf_gdp", "note": "no gossip messages were released"}
        return dict(self.account)

    def headline(self) -> dict:
        a = self.account
        return {"mechanism": "mf_gdp", "trust_model": a.get("trust_model"), "correlation": a.get("correlation"),
                "epsilon": a.get("epsilon"), "delta": a.get("delta"), "mu": a.get("mu"),
                "epsilon_ldp": a.get("ldp", {}).get("epsilon")}

    def load_state_dict(self, state: dict) -> None:
        if self.noise is not None:       # resume: replay the noise stream from its seed
            self.noise.restart()
        self._step_noise = None
