"""Divergence watch: a run whose training loss becomes non-finite, or grows in magnitude to more than
``FACTOR`` (10) times its first round's, has diverged. The trainer stops it at that round, scores that
round's model once, and ends it with status ``diverged`` (summary.json's ``diverged`` says where and why):
`fgx run` exits 1, and `fgx report`, the tables and sweeps list it apart from completed runs, never in a
mean. A loss that grows tenfold over its first round's is no longer training."""
from __future__ import annotations

import math

FACTOR = 10.0
RULE = (f"training loss non-finite, or |loss| > {FACTOR:g} x the first round's (for classification: at most "
        f"ln C, a uniform prediction's cross-entropy)")


class DivergenceWatch:
    """``cap``: the largest yardstick a first round may set, ln C for a C-class classifier (the loss of a
    uniform prediction, about where an untrained model starts): a run whose first round already blew
    up (lr 100: loss 2e7 within round 1's local steps) is measured against it, not against itself."""

    def __init__(self, factor: float = FACTOR, cap: float | None = None):
        self.factor = factor
        self.cap = cap
        self.first: tuple[int, float] | None = None     # (round, loss) of the first finite loss
        self.event: dict | None = None

    def update(self, r: int, loss) -> str | None:
        """Returns a one-line note the first time the run diverges, else None."""
        if self.event is not None or not isinstance(loss, (int, float)):
            return None
        fresh = self.first is None and math.isfinite(loss)
        if fresh:
            self.first = (r, float(loss))
        base = self.reference()
        if math.isfinite(loss) and (base is None or abs(loss) <= self.factor * max(base, 1e-8)):
            return None
        self.event = {"round": r, "loss": float(loss), "first_round": self.first[0] if self.first else None,
                      "first_loss": self.first[1] if self.first else None, "reference": base,
                      "rule": f"training loss non-finite or |loss| > {self.factor:g} x {base:.4g} (the first "
                              f"round's loss{f', at most ln C = {self.cap:.4g}' if self.cap is not None else ''})"
                      if base is not None else "training loss non-finite"}
        return (f"training diverged at round {r}: loss {loss:.4g}"
                + (f" against {base:.4g} (round {self.first[0]}'s loss"
                   + (f", at most ln C = {self.cap:.4g}" if self.cap is not None else "") + ")" if base is not None else "")
                + " (learning rate, clipping or noise scale too large?); the run stops here with status diverged")

    def reference(self) -> float | None:
        if self.first is None:
            return None
        base = abs(self.first[1])
        return min(base, self.cap) if self.cap is not None else base


def describe(event: dict) -> str:
    """One line for a report: where a run diverged and the loss that said so."""
    ref = event.get("reference")
    against = f" against {ref:.4g}" if isinstance(ref, (int, float)) else ""
    return f"diverged at round {event.get('round')}: loss {event.get('loss', float('nan')):.4g}{against}"


def classification_cap(task: str, num_classes) -> float | None:
    """ln C for the classification tasks (cross-entropy of a uniform prediction); None otherwise."""
    if task in ("node", "edge", "graph") and isinstance(num_classes, int) and num_classes >= 2:
        return math.log(num_classes)
    return None
