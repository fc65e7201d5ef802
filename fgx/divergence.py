"""Divergence watch: a run whose training loss becomes non-finite, grows in magnitude past ``FACTOR`` (10)
times its first round's for ``PATIENCE`` (3) rounds in a row, or past ``FACTOR_AT_ONCE`` (100) times it in
one round, has diverged. For a classifier the yardstick is at most ln C, the cross-entropy of a uniform
prediction: a first round that already blew up (lr 100: 2e7 within round 1's local steps) is no yardstick.
A loss that spikes for a round or two and comes back is not divergence: FedSSP's consensus term switches on
in round 2 (tau 1000: 0.63, 16.9, 7.0, 3.2, ...). The trainer stops a diverged run at that round, scores
that round's model once, and ends it with status ``diverged`` (summary.json's ``diverged`` says where and
why): `fgx run` exits 1, and `fgx report`, the tables and sweeps list it apart from completed runs, never
in a mean."""
from __future__ import annotations

import math

FACTOR, PATIENCE, FACTOR_AT_ONCE = 10.0, 3, 100.0
RULE = (f"training loss non-finite, or |loss| > {FACTOR:g} x the first round's for {PATIENCE} rounds in a row or "
        f"> {FACTOR_AT_ONCE:g} x it once (for a classifier the first round's at most ln C)")


class DivergenceWatch:
    """``cap``: the largest yardstick a first round may set, ln C for a C-class classifier (the loss of a
    uniform prediction, about where an untrained model starts)."""

    def __init__(self, factor: float = FACTOR, cap: float | None = None, patience: int = PATIENCE,
                 at_once: float = FACTOR_AT_ONCE):
        self.factor, self.cap, self.patience, self.at_once = factor, cap, patience, at_once
        self.first: tuple[int, float] | None = None     # (round, loss) of the first finite loss
        self.above = 0                                   # rounds in a row past factor x the reference
        self.event: dict | None = None

    def update(self, r: int, loss) -> str | None:
        """Returns a one-line note the first time the run diverges, else None."""
        if self.event is not None or not isinstance(loss, (int, float)):
            return None
        if self.first is None and math.isfinite(loss):
            self.first = (r, float(loss))
        base = self.reference()
        if math.isfinite(loss):
            ref = max(base, 1e-8) if base is not None else None
            self.above = self.above + 1 if ref is not None and abs(loss) > self.factor * ref else 0
            if ref is None or (self.above < self.patience and abs(loss) <= self.at_once * ref):
                return None
        self.event = {"round": r, "loss": float(loss), "first_round": self.first[0] if self.first else None,
                      "first_loss": self.first[1] if self.first else None, "reference": base,
                      "rule": RULE}
        return (f"training diverged at round {r}: loss {loss:.4g}"
                + (f" against {base:.4g} (round {self.first[0]}'s loss"
                   + (f", at most ln C = {self.cap:.4g}" if self.cap is not None else "") + ")" if base is not None else "")
                + " (learning rate, clipping or noise scale too large?); the run stops here with status diverged")

    def reference(self) -> float | None:
        if self.first is None:
            return None
        base = abs(self.first[1])
        return min(base, self.cap) if self.cap is not None else base


def holds_nan(state) -> bool:
    """Whether an algorithm's state (its checkpoint: nested dicts and lists of tensors) holds a NaN. A NaN
    round loss is also what a round without a training client reports (`mean_loss`): only a NaN in the
    models makes it divergence."""
    import torch

    if isinstance(state, torch.Tensor):
        return state.is_floating_point() and bool(torch.isnan(state).any())
    if isinstance(state, dict):
        return any(holds_nan(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return any(holds_nan(v) for v in state)
    return False


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
