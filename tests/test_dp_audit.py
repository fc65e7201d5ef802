"""One-run canary audits (fgx/privacy/audit/): the bound itself, then per mechanism that the correct
implementation's audited ε lower bound stays below its claimed ε and that a deliberately broken
variant (noise off, clipping off) is caught — its lower bound exceeds the claim."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fgx.privacy.audit.bound import audit, epsilon_lower_bound, p_value

FEDAVG = ["algorithm=fedavg", "dataset=csbm", "dataset.num_nodes=200", "dataset.num_features=128",
          "partitioner=random", "partitioner.num_clients=4", "rounds=3", "eval_every=3", "model.hidden=32",
          "privacy=dp_fedavg", "algorithm.weighting=uniform", "privacy.noise_multiplier=2",
          "privacy.audit.canaries=2000", "output.progress=off"]
CE = ["algorithm=ce_fedgnn", "dataset=csbm", "dataset.num_nodes=200", "dataset.num_features=16",
      "partitioner=random", "partitioner.num_clients=3", "rounds=3", "eval_every=3", "model.hidden=16",
      "algorithm.local_steps=2", "privacy=metric_dp", "privacy.public_messages=[update,grad_estimator]",
      "privacy.k=5", "privacy.delta=1e-5", "privacy.audit.canaries=3000", "output.progress=off"]
GOSSIP = ["privacy=mf_gdp", "privacy.mu=1.0", "dataset=diabetes", "partitioner=topology", "model=mlp_tabular",
          "model.hidden=32", "algorithm.k=2", "algorithm.b=2", "rounds=4", "eval_every=4",
          "privacy.audit.canaries=2000", "output.progress=off"]
PERGNN = ["algorithm=fedpergnn", "dataset=synthetic_bipartite", "dataset.num_users=90", "dataset.num_items=120",
          "dataset.mean_degree=12", "partitioner=random_users", "partitioner.num_clients=3", "rounds=2", "eval_every=2",
          "output.checkpoint=false", "model.dim=16", "algorithm.local_epochs=1", "algorithm.neighbors=0",
          "algorithm.ldp_epsilon=0.05", "privacy.audit.canaries=2000", "output.progress=off"]
LDP = ["algorithm=dp_dsgd", "partitioner.graph=florentine", *GOSSIP]
PNDP = ["algorithm=antipgd", "partitioner.graph=star", "privacy.trust_model=pndp", "privacy.attackers=[0]", *GOSSIP]


def audited(run_dir) -> dict:
    return json.loads((run_dir / "privacy.json").read_text())["audit"]


# --- the bound -------------------------------------------------------------------------------------

def test_p_value_is_the_binomial_tail_plus_the_delta_term():
    from scipy.stats import binom

    q = np.exp(1.0) / (1 + np.exp(1.0))
    assert p_value(100, 50, 40, 1.0, 0.0) == pytest.approx(binom.sf(39, 50, q))
    with_delta = p_value(100, 50, 40, 1.0, 1e-3)
    alpha = max(binom.pmf(range(40 - i, 40), 50, q).sum() / i for i in range(1, 41))
    assert with_delta == pytest.approx(binom.sf(39, 50, q) + 2 * 100 * 1e-3 * alpha)
    with pytest.raises(ValueError):
        p_value(10, 20, 5, 1.0, 0.0)


def test_lower_bound_rejects_exactly_the_epsilons_below_it():
    lb = epsilon_lower_bound(1000, 200, 180, 1e-5, 0.05)
    assert 0 < lb < 5
    assert p_value(1000, 200, 180, lb - 1e-3, 1e-5) <= 0.05 < p_value(1000, 200, 180, lb + 1e-3, 1e-5)
    assert epsilon_lower_bound(1000, 200, 100, 1e-5, 0.05) == 0.0          # chance accuracy: nothing rejected


def test_randomised_response_at_epsilon_is_not_audited_above_it():
    """ε-DP randomised response on every canary (the tightest ε-DP mechanism): at 95% confidence the
    audit may exceed ε in at most about 5% of runs, and with ε large it finds a bound near ε."""
    rng = np.random.default_rng(0)
    eps, over, bounds = 1.0, 0, []
    for _ in range(100):
        s = rng.random(1000) < 0.5
        truthful = rng.random(1000) < np.exp(eps) / (1 + np.exp(eps))
        guess = np.where(truthful, s, ~s)
        res = audit(guess.astype(float) + rng.random(1000) * 1e-3, s, 0.0, 0.95)
        over += res["epsilon_lb"] > eps
        bounds.append(res["epsilon_lb"])
    assert over <= 10 and np.median(bounds) > 0.6


# --- dp_fedavg: canary clients ----------------------------------------------------------------------

def test_dp_fedavg_audit_stays_below_its_claim(run_fgx):
    a = audited(run_fgx(*FEDAVG))
    assert a["canaries"] == 2000 and a["claimed"]["rounds"] == 3
    assert 0 < a["epsilon_lb"] < a["claimed"]["epsilon"] and a["below_claim"] is True


def test_dp_fedavg_audit_catches_noise_off(run_fgx, monkeypatch):
    from fgx.privacy.dp_fedavg import DPFedAvg

    def no_noise(self, kind, payload, num_contributors, round):
        scale = num_contributors / (self.q * len(self.ctx.clients))
        return {k: v * scale if v.is_floating_point() else v for k, v in payload.items()}

    monkeypatch.setattr(DPFedAvg, "aggregate", no_noise)
    a = audited(run_fgx(*FEDAVG))
    assert a["epsilon_lb"] > a["claimed"]["epsilon"] and a["below_claim"] is False


def test_dp_fedavg_audit_catches_clipping_off(run_fgx, monkeypatch):
    import fgx.privacy.dp_fedavg as mod

    monkeypatch.setattr(mod, "clip_by_global_norm", lambda tensors, max_norm: tensors)
    a = audited(run_fgx(*FEDAVG))
    assert a["epsilon_lb"] > a["claimed"]["epsilon"]


# --- metric_dp: canary embedding rows --------------------------------------------------------------

def test_metric_dp_audit_stays_below_its_claim_and_leaves_the_run_alone(run_fgx):
    d = run_fgx(*CE)
    priv = json.loads((d / "privacy.json").read_text())
    a = priv["audit"]
    assert a["claimed"]["releases"] == 3 and a["claimed"]["rho"] == 0.5
    assert 0 < a["epsilon_lb"] < a["claimed"]["epsilon"]
    # the canaries are not nodes of the run: release counts are the real nodes' only
    assert priv["releases_per_node"]["nodes"] < 200 and priv["steps_used"] <= 3 * 3


def test_metric_dp_audit_catches_noise_off(run_fgx, monkeypatch):
    import torch

    from fgx.privacy.metric_dp import MetricDP

    monkeypatch.setattr(MetricDP, "_noise", lambda self, like, std: torch.zeros_like(like))
    a = audited(run_fgx(*CE))
    assert a["epsilon_lb"] > a["claimed"]["epsilon"]


def test_metric_dp_audit_catches_normalisation_off(run_fgx):
    """embedding_norm=clip with a bound far above 1 leaves the canaries (norm 10) unnormalised: the
    ε the accountant reports assumes unit embeddings, and the audit says it does not hold."""
    a = audited(run_fgx(*CE, "privacy.embedding_norm=clip", "privacy.clip_embedding=100"))
    assert a["epsilon_lb"] > a["claimed"]["epsilon"]


# --- mf_gdp: canary records of gossip nodes --------------------------------------------------------

@pytest.mark.parametrize("cfg", [LDP, PNDP], ids=["ldp", "pndp"])
def test_mf_gdp_audit_stays_below_its_claim(run_fgx, cfg):
    a = audited(run_fgx(*cfg))
    assert 0 < a["epsilon_lb"] < a["claimed"]["epsilon"]
    if cfg is PNDP:
        assert a["claimed"]["trust_model"] == "pndp" and a["claimed"]["victims"] == 15
        assert all(att == 0 for _, att in a["claimed"]["pairs"])


@pytest.mark.parametrize("cfg", [LDP, PNDP], ids=["ldp", "pndp"])
def test_mf_gdp_audit_catches_noise_off(run_fgx, monkeypatch, cfg):
    import torch

    from fgx.privacy.mf.noise import GossipNoise

    monkeypatch.setattr(GossipNoise, "step", lambda self, t: torch.zeros(self.n, self.dim))
    a = audited(run_fgx(*cfg))
    assert a["epsilon_lb"] > a["claimed"]["epsilon"]


# --- FedPerGNN's per-batch local DP: canary gradient coordinates -----------------------------------

def test_fedpergnn_audit_stays_below_its_claim(run_fgx):
    d = run_fgx(*PERGNN)
    a = audited(d)
    ldp = json.loads((d / "privacy.json").read_text())["algorithm_ldp"]
    assert a["claimed"]["epsilon"] == pytest.approx(ldp["epsilon_per_client"][0]) and a["claimed"]["releases"] == 2
    assert 0 < a["epsilon_lb"] < a["claimed"]["epsilon"]


def test_fedpergnn_audit_catches_noise_off(run_fgx, monkeypatch):
    from fgx.algorithms import fedpergnn

    real = np.random.default_rng

    class Quiet:
        def __init__(self, rng):
            self.rng = rng

        def laplace(self, loc, scale, size):
            return np.zeros(size)

        def __getattr__(self, name):
            return getattr(self.rng, name)

    monkeypatch.setattr(fedpergnn.np.random, "default_rng", lambda *a, **k: Quiet(real(*a, **k)))
    a = audited(run_fgx(*PERGNN))
    assert a["epsilon_lb"] > a["claimed"]["epsilon"]


def test_fedpergnn_audit_catches_clipping_off(run_fgx, monkeypatch):
    import torch

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, max_norm, *a, **k: None)
    a = audited(run_fgx(*PERGNN))
    assert a["epsilon_lb"] > a["claimed"]["epsilon"]


# --- refusals and the command ----------------------------------------------------------------------

def test_audit_refusals_name_the_key(tmp_path, monkeypatch, capsys):
    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["privacy", "audit", "algorithm=fedavg", "dataset=csbm", "--dry-run"]) == 2
    assert "privacy.audit.canaries" in capsys.readouterr().err
    assert main(["privacy", "audit", *[o for o in PNDP if o != "partitioner.graph=star"], "--dry-run"]) == 2
    assert "only neighbour is an attacker" in capsys.readouterr().err
    assert main(["privacy", "audit", *FEDAVG, "resume=true", "--dry-run"]) == 2
    assert main(["privacy", "audit", *PERGNN, "algorithm.ldp_epsilon=null", "--dry-run"]) == 2
    assert "no local DP" in capsys.readouterr().err
    assert main(["privacy", "audit", *FEDAVG, "--dry-run"]) == 0
    assert not list(tmp_path.iterdir())


def test_audit_command_prints_claim_and_bound_and_fails_a_broken_run(tmp_path, monkeypatch, capsys):
    import torch

    from fgx.cli import main
    from fgx.privacy.metric_dp import MetricDP

    monkeypatch.chdir(tmp_path)
    assert main(["privacy", "audit", *CE, "--canaries", "1000", "--out", str(tmp_path / "ok")]) == 0
    out = capsys.readouterr().out
    assert "claimed ε" in out and "lower bound ε ≥" in out and "below the claim" in out
    assert audited(tmp_path / "ok")["canaries"] == 1000
    monkeypatch.setattr(MetricDP, "_noise", lambda self, like, std: torch.zeros_like(like))
    assert main(["privacy", "audit", *CE, "--out", str(tmp_path / "broken")]) == 1
    assert "ABOVE the claim" in capsys.readouterr().out
