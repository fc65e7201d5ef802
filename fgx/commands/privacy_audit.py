"""`fgx privacy audit OVERRIDES`: one run of `fgx run OVERRIDES` with canaries inserted
(privacy.audit.*, fgx/privacy/audit/), then the claimed ε and the audited ε lower bounds (the one-run
bound; for Gaussian mechanisms the Gaussian audit with its power). Exit code 1 when a lower bound exceeds
the claim (the implementation releases more than its accountant says). ``--power-table``: the canaries
the Gaussian audit needs for 90 % power against a 2x ε inflation, per claimed ε."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from fgx.commands.privacy import privacy_subparsers


def register(sub) -> None:
    p = privacy_subparsers(sub).add_parser(
        "audit", help="one-run canary audit (Steinke et al. 2023): claimed ε vs an empirical ε lower bound")
    p.add_argument("overrides", nargs="*", help="the run's config overrides, as for `fgx run` (privacy=..., "
                                                "algorithm=..., dataset=...)")
    p.add_argument("--canaries", type=int, help="m canaries (privacy.audit.canaries; default 1000 unless set there)")
    p.add_argument("--confidence", type=float, help="of the lower bound (privacy.audit.confidence; default 0.95)")
    p.add_argument("--out", help="run directory (default outputs/audit/<date>/<time>)")
    p.add_argument("--json", action="store_true", help="print privacy.json's audit entry as JSON")
    p.add_argument("--dry-run", action="store_true", help="check the config and stop")
    p.add_argument("--power-table", action="store_true",
                   help="print how many canaries the Gaussian audit needs to catch a 2x ε inflation with 90%% "
                        "probability, per claimed ε (at --delta), and stop")
    p.add_argument("--delta", type=float, default=1e-5, help="δ of --power-table (default 1e-5)")
    p.set_defaults(func=audit)


def power_table(delta: float, confidence: float = 0.95) -> None:
    from fgx.privacy.audit.gdp import canaries_for_power, gdp_mu, power

    share = 1 - (1 - confidence) / 2          # the Gaussian audit's share of the audit's confidence
    print(f"Gaussian audit at {share:.1%} confidence (its share of a {confidence:.0%} audit), δ = {delta:g}: "
          f"canaries (half included) to catch a mechanism releasing 2x its claimed ε")
    confidence = share
    print("| claimed ε | claim's μ (GDP) | μ at 2x ε | canaries for 90% power | power with 400 | power with 1000 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for eps in (0.5, 1.0, 2.0, 4.0, 8.0):
        print(f"| {eps:g} | {gdp_mu(eps, delta):.3f} | {gdp_mu(2 * eps, delta):.3f} | "
              f"{canaries_for_power(eps, delta, 0.9, 2.0, confidence)} | {power(eps, delta, 400, 2.0, confidence):.3f} | "
              f"{power(eps, delta, 1000, 2.0, confidence):.3f} |")


def _overrides(args) -> list[str]:
    mine = list(args.overrides)
    keys = {o.lstrip("+~").split("=")[0] for o in mine}
    if args.canaries is not None:
        mine.append(f"privacy.audit.canaries={args.canaries}")
    elif "privacy.audit.canaries" not in keys:
        mine.append("privacy.audit.canaries=1000")
    if args.confidence is not None:
        mine.append(f"privacy.audit.confidence={args.confidence}")
    return mine


def audit(args) -> int:
    from fgx.cli import main, prevalidate

    if args.power_table:
        power_table(args.delta)
        return 0

    overrides = _overrides(args)
    if any(o.lstrip("+~").startswith("hydra") for o in overrides):
        print("fgx privacy audit: give the run directory with --out, not hydra.* overrides", file=sys.stderr)
        return 2
    try:
        prevalidate(overrides, False)
    except SystemExit as e:
        print(f"fgx privacy audit: {e.code}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0
    out = Path(args.out or Path("outputs", "audit", time.strftime("%Y-%m-%d"), time.strftime("%H-%M-%S")))
    rc = main(["run", *overrides, f"hydra.run.dir={out}"])
    if rc != 0:
        return rc
    res = json.loads((out / "privacy.json").read_text())["audit"]
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        c = res["claimed"]
        attacks = len({t["score"] for t in res["tried"]})
        tried = f"{len(res['tried'])} guess counts" + (f" over {attacks} scores (best: {res['score']})" if attacks > 1
                                                         else "")
        print(f"audit: {res['canaries']} canaries ({res['included']} included), best of {tried}: "
              f"{res['correct']} of {res['guesses']} guesses correct")
        print(f"claimed ε {c['epsilon']:.4g} (δ {c['delta']:g}; {c['what']})")
        print(f"one-run lower bound ε ≥ {res['epsilon_lb']:.4g}")
        g = res.get("gdp")
        if g is not None:
            print(f"Gaussian audit: separation μ = {g['mu_hat']:.3f} (claim's μ {g['mu_claim']:.3f}), "
                  f"lower bound ε ≥ {g['epsilon_lb']:.4g}; power against a 2x ε inflation {g['power_2x']:.0%}"
                  + ("" if g["power_2x"] >= 0.9 else
                     f" (below 90%: rerun with --canaries {g['canaries_for_90_percent_power']})"))
        verdict = "below the claim" if res["below_claim"] else "ABOVE the claim: the run releases more than it claims"
        print(f"audited at {res['confidence']:.0%} confidence: {verdict}")
    return 0 if res["below_claim"] in (True, None) else 1
