"""Divergence watch: a run whose training loss becomes non-finite, or grows in magnitude to more than
``factor`` times its first round's, says so once in its log and in summary.json (``diverged``).
A diverged run still completes: its metrics are what they are, and the note tells a reader why."""
from __future__ import annotations

import math


class DivergenceWatch:
    def __init__(self, factor: float = 10.0):
        self.factor = factor
        self.first: tuple[int, float] | None = None     # (round, loss) of the first finite loss
        self.event: dict | None = None

    def update(self, r: int, loss) -> str | None:
        """Returns a one-line note the first time the run diverges, else None."""
        if self.event is not None or not isinstance(loss, (int, float)):
            return None
        if self.first is None and math.isfinite(loss):
            self.first = (r, float(loss))
            return None
        base = abs(self.first[1]) if self.first else None
        if math.isfinite(loss) and (base is None or abs(loss) <= self.factor * max(base, 1e-8)):
            return None
        self.event = {"round": r, "loss": float(loss), "first_round": self.first[0] if self.first else None,
                      "first_loss": self.first[1] if self.first else None,
                      "rule": f"training loss non-finite or |loss| > {self.factor:g} x |first round's loss|"}
        return (f"training diverged at round {r}: loss {loss:.4g}"
                + (f" against {self.first[1]:.4g} at round {self.first[0]}" if self.first else "")
                + " (learning rate, clipping or noise scale too large?)")
