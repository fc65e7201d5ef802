"""Generator presets: Table 3 of CE-FedGNN (AMLworld node/edge counts at scale 1), AMLworld's
illicit ratios (Altman et al. 2023), day ranges and the paper's day splits."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AmlPreset:
    accounts: int
    transactions: int
    illicit_ratio: float          # laundering transactions / all transactions
    days: int
    split_days: tuple             # ((train_lo, train_hi), (val_lo, val_hi), (test_lo, test_hi)), inclusive
    num_clients: int              # Table 3
    accounts_per_bank: int = 100
    cross_bank_rate: float = 0.5  # probability that a pattern member is drawn from any bank


SMALL = ((0, 7), (8, 8), (9, 13))
MEDIUM = ((0, 13), (14, 14), (15, 26))
LARGE = ((0, 94), (95, 95), (96, 162))

PRESETS: dict[str, AmlPreset] = {
    # tiny: tests and the default run; laundering boosted to 1/40 so that a few thousand edges hold
    # enough positives to learn from.
    "tiny": AmlPreset(2_000, 20_000, 1 / 40, 14, SMALL, 4, accounts_per_bank=80),
    "hi_small": AmlPreset(515_088, 5_078_345, 1 / 981, 14, SMALL, 4),
    "li_small": AmlPreset(705_907, 6_924_049, 1 / 1942, 14, SMALL, 4),
    "hi_medium": AmlPreset(2_077_023, 31_898_238, 1 / 905, 27, MEDIUM, 6),
    "li_medium": AmlPreset(2_032_095, 31_251_483, 1 / 1948, 27, MEDIUM, 6),
    "hi_large": AmlPreset(2_116_168, 179_702_229, 1 / 807, 163, LARGE, 32),
    # Table 3 prints HI-Large's edge count for LI-Large (a typo); AMLworld's LI-Large has ~176M.
    "li_large": AmlPreset(2_070_980, 176_066_557, 1 / 1750, 163, LARGE, 6),
}

# Kaggle file names of the real data, per preset
REAL_FILES = {
    "hi_small": "HI-Small_Trans.csv", "li_small": "LI-Small_Trans.csv",
    "hi_medium": "HI-Medium_Trans.csv", "li_medium": "LI-Medium_Trans.csv",
    "hi_large": "HI-Large_Trans.csv", "li_large": "LI-Large_Trans.csv",
}


def get_preset(name: str) -> AmlPreset:
    key = name.removeprefix("aml_")
    if key not in PRESETS:
        raise KeyError(f"unknown AML preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[key]
