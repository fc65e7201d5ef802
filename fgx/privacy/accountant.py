"""A privacy accountant in Opacus's shape (``opacus.accountants.RDPAccountant``): ``step(noise_multiplier=,
sample_rate=)`` once per release (a DP-FedAvg round: its Gaussian noise and its client sampling rate),
``get_epsilon(delta)`` for what the steps so far cost, ``history`` as Opacus keeps it (a list of
(noise_multiplier, sample_rate, num_steps), consecutive equal steps merged) and ``state_dict()`` /
``load_state_dict()`` for checkpoints.

Written here rather than imported: Opacus's accountant converts RDP to (ε, δ) with its own orders and
formula, while fgx's DP-FedAvg has always reported dp-accounting's ``RdpAccountant`` (the committed
records' ε), and importing opacus costs a run seconds of start-up for these few lines. The RDP itself is
dp-accounting's: each history entry is a Poisson-subsampled Gaussian (a plain Gaussian at rate 1)
composed ``num_steps`` times."""
from __future__ import annotations


class RDPAccountant:
    def __init__(self) -> None:
        self.history: list[tuple[float, float, int]] = []

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """One release: Gaussian noise of ``noise_multiplier`` times the sensitivity, each contributor
        sampled with probability ``sample_rate`` (1: every one)."""
        if self.history and self.history[-1][:2] == (noise_multiplier, sample_rate):
            self.history[-1] = (noise_multiplier, sample_rate, self.history[-1][2] + 1)
        else:
            self.history.append((noise_multiplier, sample_rate, 1))

    def __len__(self) -> int:
        """The number of steps taken."""
        return sum(n for _, _, n in self.history)

    def get_epsilon(self, delta: float) -> float:
        """ε of every step so far at ``delta`` (0 before any step, infinite with a noiseless step)."""
        import dp_accounting
        from dp_accounting import rdp

        if not self.history:
            return 0.0
        if any(nm == 0 for nm, _, _ in self.history):
            return float("inf")
        acc = rdp.RdpAccountant()
        for nm, q, n in self.history:
            event = dp_accounting.GaussianDpEvent(nm)
            if q < 1.0:
                event = dp_accounting.PoissonSampledDpEvent(q, event)
            acc.compose(dp_accounting.SelfComposedDpEvent(event, n))
        return float(acc.get_epsilon(delta))

    def state_dict(self) -> dict:
        return {"history": [list(h) for h in self.history]}

    def load_state_dict(self, state: dict) -> None:
        self.history = [(float(nm), float(q), int(n)) for nm, q, n in state["history"]]
