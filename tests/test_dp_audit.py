"""One-run canary audits (fgx/privacy/audit/): the bounds themselves (Steinke et al.'s, and the Gaussian
audit's error rate and power by simulation), then per mechanism that the correct implementation's audited
ε lower bounds stay below its claimed ε and that each deliberately broken variant - complete breaks (noise
off, clipping off) and partial ones (noise halved, clipping at twice the norm, one round's noise reused) -
is caught: a lower bound exceeds the claim."""
from __future__ import annotations

import json

import numpy as np
import pytest

from fgx.privacy.audit.bound import audit, epsilon_lower_bound, p_value

from audit_cases import BREAKS, CASES

FEDAVG, CE, PERGNN, PNDP = CASES["dp_fedavg"], CASES["metric_dp"], CASES["fedpergnn"], CASES["mf_gdp_pndp"]


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


def test_several_attacks_share_the_confidence():
    rng = np.random.default_rng(1)
    s = rng.random(500) < 0.5
    sc = s + rng.normal(size=500)
    one = audit(sc, s, 1e-5, 0.95)
    two = audit({"a": sc, "b": sc}, s, 1e-5, 0.95)
    assert len(two["tried"]) == 2 * len(one["tried"]) and two["score"] == "a"
    assert two["epsilon_lb"] < one["epsilon_lb"]          # the same guesses, tested at half the level


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


def simulated_gaussian_runs(mu: float, canaries: int, runs: int, rounds: int = 3, seed: int = 0):
    """Canary projections of a Gaussian mechanism that is mu-GDP per canary: per round, the included
    half's contribution (mu / sqrt(rounds)) * sign plus unit noise."""
    rng = np.random.default_rng(seed)
    for _ in range(runs):
        inc = rng.random(canaries) < 0.5
        sign = rng.choice([-1.0, 1.0], (canaries, rounds))
        yield sign * (mu / np.sqrt(rounds)) * inc[:, None] + rng.normal(size=(canaries, rounds)), sign, inc


def test_gaussian_audit_error_rate_and_power_by_simulation():
    """The Gaussian audit's two error rates, by simulation: a mechanism exactly at its claim (ε = 4.011,
    δ = 1e-5) is called above it in at most about 5 % of runs (95 % confidence), and one releasing twice
    its claimed ε is caught in at least the 90 % the power computation promises for the canary count it
    prescribes."""
    from fgx.privacy.audit.gdp import canaries_for_power, gdp_audit, gdp_mu, power

    claim, delta = 4.011, 1e-5
    false_alarms = sum(gdp_audit(y, s, inc, delta, 0.95, None, seed=i)["epsilon_lb"] > claim
                       for i, (y, s, inc) in enumerate(simulated_gaussian_runs(gdp_mu(claim, delta), 400, 300)))
    assert false_alarms <= 25                         # 5 % of 300 is 15; binomial sd 3.8
    m = canaries_for_power(claim, delta, 0.9)
    assert power(claim, delta, m) >= 0.9 > power(claim, delta, m - 1)
    caught = sum(gdp_audit(y, s, inc, delta, 0.95, None, seed=i)["epsilon_lb"] > claim
                 for i, (y, s, inc) in enumerate(simulated_gaussian_runs(gdp_mu(2 * claim, delta), m, 300, seed=1)))
    assert caught >= 0.85 * 300


def test_gaussian_audit_sees_noise_reused_across_rounds():
    """Two rounds sharing one noise draw: the cross-fitted whitening finds the near-singular direction and
    the matched filter's separation grows far beyond the claim's, though the mean shift is unchanged."""
    from fgx.privacy.audit.gdp import gdp_audit, gdp_mu

    mu = gdp_mu(4.011, 1e-5)
    y, s, inc = next(simulated_gaussian_runs(mu, 400, 1, seed=3))
    honest = gdp_audit(y, s, inc, 1e-5, 0.95, 4.011)
    shift = (mu / np.sqrt(3)) * inc
    y[:, 1] = (y[:, 0] - s[:, 0] * shift) + s[:, 1] * shift        # round 1's noise is round 0's
    reused = gdp_audit(y, s, inc, 1e-5, 0.95, 4.011)
    assert honest["epsilon_lb"] < 4.011 < reused["epsilon_lb"]
    assert reused["mu_hat"] > 1.3 * honest["mu_hat"]


# --- every mechanism: the correct run below its claim, each broken variant above it ------------------

@pytest.mark.parametrize("case", list(CASES))
def test_audit_of_the_correct_implementation_stays_below_its_claim(run_fgx, case):
    d = run_fgx(*CASES[case])
    priv = json.loads((d / "privacy.json").read_text())
    a = priv["audit"]
    assert a["canaries"] == int(next(o for o in CASES[case] if "audit.canaries" in o).split("=")[1])
    assert 0 < a["epsilon_lb"] < a["claimed"]["epsilon"] and a["below_claim"] is True
    if "gdp" in a:       # the Gaussian audit: below the claim too, with the power the canary count was chosen for
        assert 0 < a["gdp"]["epsilon_lb"] < a["claimed"]["epsilon"] and a["gdp"]["below_claim"] is True
        assert a["gdp"]["power_2x"] >= 0.9 and a["canaries"] >= a["gdp"]["canaries_for_90_percent_power"]
    if case == "dp_fedavg":
        assert a["claimed"]["rounds"] == 3
    if case == "metric_dp":           # the canaries are not nodes of the run: counts are the real nodes' only
        assert a["claimed"]["releases"] == 3 and priv["releases_per_node"]["nodes"] < 200
    if case == "mf_gdp_pndp":         # the star's 15 leaves, each next to the attacker 0
        assert a["claimed"]["trust_model"] == "pndp" and a["claimed"]["victims"] == 15
        assert all(att == 0 for _, att in a["claimed"]["pairs"])
    if case == "fedpergnn":
        ldp = priv["algorithm_ldp"]
        assert a["claimed"]["epsilon"] == pytest.approx(ldp["epsilon_per_client"][0]) and a["claimed"]["releases"] == 2


@pytest.mark.parametrize("case,label,patch,extra", BREAKS, ids=[f"{c}-{lab}" for c, lab, _, _ in BREAKS])
def test_audit_catches_the_broken_variant(run_fgx, monkeypatch, case, label, patch, extra):
    if patch is not None:
        patch(monkeypatch)
    a = audited(run_fgx(*CASES[case], *extra))
    caught = max(a["epsilon_lb"], a["gdp"]["epsilon_lb"] if "gdp" in a else 0.0)
    assert caught > a["claimed"]["epsilon"] and a["below_claim"] is False


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
    from audit_cases import metric_dp_noise_off

    from fgx.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["privacy", "audit", *CE, "--canaries", "1000", "--out", str(tmp_path / "ok")]) == 0
    out = capsys.readouterr().out
    assert "claimed ε" in out and "lower bound ε ≥" in out and "below the claim" in out
    assert audited(tmp_path / "ok")["canaries"] == 1000
    metric_dp_noise_off(monkeypatch)
    assert main(["privacy", "audit", *CE, "--out", str(tmp_path / "broken")]) == 1
    assert "ABOVE the claim" in capsys.readouterr().out


def test_an_audit_that_is_off_leaves_the_config_fingerprint_alone():
    """Records of runs made before privacy.audit existed stay fresh; an audited run is a different run."""
    from omegaconf import OmegaConf

    from fgx.cli import compose
    from fgx.config import config_fingerprint

    cfg = compose(["privacy=dp_fedavg"])
    off = config_fingerprint(cfg)[1]
    before = OmegaConf.to_container(cfg, resolve=True)
    del before["privacy"]["audit"]
    assert config_fingerprint(before)[1] == off
    assert config_fingerprint(compose(["privacy=dp_fedavg", "privacy.audit.canaries=100"]))[1] != off
