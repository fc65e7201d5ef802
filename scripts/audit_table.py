"""The figures of docs/privacy_audit.md: every canary audit of tests/audit_cases.py, the correct
implementation and each deliberately broken variant, run through `fgx privacy audit` in this process
(the one-run bound, and for Gaussian mechanisms the Gaussian audit with its power against a 2× ε).

    python scripts/audit_table.py > results/benchmarks/audit_table.txt
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from audit_cases import BREAKS, CASES  # noqa: E402


def run(case: str, extra: list[str], patch, out: Path) -> dict:
    import contextlib
    import io

    from fgx.cli import main

    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()):
        if patch is not None:
            patch(mp)
        main(["privacy", "audit", *CASES[case], *extra, "--out", str(out)])
    return json.loads((out / "privacy.json").read_text())["audit"]


def main() -> None:
    import logging

    logging.disable(logging.INFO)
    rows = [(case, "correct", None, []) for case in CASES] + [(c, f"broken: {lab}", p, e) for c, lab, p, e in BREAKS]
    print("| audit | implementation | canaries | claimed ε (δ) | best score | correct / guesses | "
          "one-run ε lower bound | Gaussian audit: μ̂ (claim's μ) | Gaussian ε lower bound | power vs 2× | verdict |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (case, label, patch, extra) in enumerate(rows):
            a = run(case, extra, patch, Path(tmp) / f"r{i}")
            c = a["claimed"]
            verdict = "below the claim" if a["below_claim"] else "**above the claim**"
            g = a.get("gdp")
            gauss = (f"{g['mu_hat']:.3f} ({g['mu_claim']:.3f}) | {g['epsilon_lb']:.3f} | {g['power_2x']:.3f}" if g
                     else "— | — | —")
            print(f"| {case} | {label} | {a['canaries']} | {c['epsilon']:.3f} ({c['delta']:g}) | "
                  f"{a['score']} | {a['correct']} / {a['guesses']} | {a['epsilon_lb']:.3f} | {gauss} | {verdict} |",
                  flush=True)


if __name__ == "__main__":
    main()
