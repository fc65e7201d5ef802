"""Mechanism diagnostics: the per-round numbers by which a personalised, regularised or noisy method
shows its mechanism acting (an algorithm's or privacy mechanism's round stats, also in metrics.jsonl).
The trainer keeps each one's last, smallest and largest value over the run in summary.json
(``diagnostics``), and ``fgx report`` shows the last values as columns."""
from __future__ import annotations

import math

MECHANISM_DIAGNOSTICS = (
    "agg_weight_min_x_uniform",   # FedIIH, FedGTA, FED-PUB, FedGSP: smallest aggregation weight x M
    "agg_weight_max_x_uniform",   # ... largest (both ~1: FedAvg in effect)
    "agg_effective_clients",      # ... mean 1 / Σ_j W_ij² (M: uniform, 1: each keeps its own)
    "accepted_set_mean",          # FedGTA: clients each client aggregates with (itself included)
    "regulariser_share",          # FedProx, FedRAP, F2MF, MOON, FedProto, FedTGP: the regulariser against the training loss
    "control_variate_norm",       # SCAFFOLD: ‖c‖, the server's control variate (0: FedAvg)
    "prototype_margin",           # FedTGP: the adaptive margin of the server's prototype training
    "drift_to_update",            # FedDC: ‖mean drift‖ / ‖mean update‖ added to the global model
    "fairness_gap",               # F2MF: μ_A − μ_D of the round's (noisy) group statistics
    "noise_to_signal",            # FedPerGNN, dp_fedavg, metric_dp: ‖noise‖ / ‖what it is added to‖
    "kd_loss",                    # FedTAD: class-wise distillation loss after the server's steps
    "clusters",                   # GCFL: clusters after the round
    "first_split_round",          # GCFL: the round of the first split (none: it never split)
    "mean_norm_over_eps1",        # GCFL: smallest ‖mean update‖ / eps1 over clusters (a split needs < 1 ...
    "max_norm_over_eps2",         # ... and ‖largest client update‖ / eps2 > 1 in the same cluster)
)


class Diagnostics:
    def __init__(self):
        self.values: dict[str, dict[str, float]] = {}

    def update(self, stats: dict) -> None:
        for k in MECHANISM_DIAGNOSTICS:
            v = stats.get(k)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                continue
            d = self.values.setdefault(k, {"last": v, "min": v, "max": v})
            d["last"], d["min"], d["max"] = float(v), min(d["min"], v), max(d["max"], v)

    def summary(self) -> dict:
        return {k: dict(v) for k, v in self.values.items()}
