"""The power of the two canary audits against a mechanism releasing twice its claimed ε, by simulation
(docs/privacy_audit.md, *Power*): Gaussian canary scores (m canaries, half included, 3 releases with a
random sign each) at the claim's μ (a correct Gaussian mechanism at its claim) and at μ(2ε) (twice the
claimed ε), audited by the one-run bound (Steinke et al.) and by the Gaussian audit, 95% confidence.

    python scripts/audit_power.py > results/benchmarks/audit_power.txt
"""
from __future__ import annotations

import numpy as np

from fgx.privacy.audit.bound import audit
from fgx.privacy.audit.gdp import gdp_audit, gdp_mu, power


def main(claim: float = 4.011, delta: float = 1e-5, runs: int = 20, rounds: int = 3) -> None:
    print(f"claimed ε {claim} at δ {delta:g}; {runs} simulated runs per row; one-run bound and Gaussian audit at 95%")
    print("| canaries | mechanism | one-run bound: median | caught | Gaussian audit: median | caught | predicted power |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for m in (100, 400, 2000, 20000):
        for label, mu in (("at its claim", gdp_mu(claim, delta)), ("2× its claimed ε", gdp_mu(2 * claim, delta))):
            one, gauss = [], []
            for i in range(runs):
                inc = rng.random(m) < 0.5
                sign = rng.choice([-1.0, 1.0], (m, rounds))
                y = sign * (mu / np.sqrt(rounds)) * inc[:, None] + rng.normal(size=(m, rounds))
                one.append(audit((y * sign).sum(1), inc, delta, 0.95)["epsilon_lb"])
                gauss.append(gdp_audit(y, sign, inc, delta, 0.95, None, seed=i)["epsilon_lb"])
            one, gauss = np.array(one), np.array(gauss)
            predicted = f"{power(claim, delta, m):.3f}" if label != "at its claim" else "—"
            print(f"| {m} | {label} | {np.median(one):.2f} | {np.mean(one > claim):.2f} | {np.median(gauss):.2f} | "
                  f"{np.mean(gauss > claim):.2f} | {predicted} |", flush=True)


if __name__ == "__main__":
    main()
