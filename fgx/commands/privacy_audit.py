"""`fgx privacy audit OVERRIDES`: one run of `fgx run OVERRIDES` with canaries inserted
(privacy.audit.*, fgx/privacy/audit/), then the claimed ε and the audited ε lower bound. Exit code 1
when the lower bound exceeds the claim (the implementation releases more than its accountant says)."""
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
    p.set_defaults(func=audit)


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
        verdict = "below the claim" if res["below_claim"] else "ABOVE the claim: the run releases more than it claims"
        print(f"audited lower bound ε ≥ {res['epsilon_lb']:.4g} at {res['confidence']:.0%} confidence: {verdict}")
    return 0 if res["below_claim"] in (True, None) else 1
