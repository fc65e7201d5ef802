"""AMLworld-like transaction generator (vectorised numpy), deterministic by seed.

Banks hold accounts (individuals and companies) of heavy-tailed activity. Background transactions
pick a payer by activity and a payee among the payer's regular counterparties, its own bank or
any bank; amounts follow per-type log-normals converted between the banks' currencies. Laundering
is injected as the eight AMLworld typologies among "mule" accounts (low background activity), with
members drawn from several banks at ``cross_bank_rate``. Laundering amounts and formats are close to
the background ones, so telling them apart needs the graph."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from fgx.data.aml.presets import AmlPreset
from fgx.data.aml.schema import CURRENCIES, PAYMENT_FORMATS, TYPOLOGIES, USD_RATES
from fgx.data.aml.typologies import BUILDERS

START = np.datetime64("2022-09-01T00:00")
FMT = {f: i for i, f in enumerate(PAYMENT_FORMATS)}
# background payment-format mix per account type (index order = PAYMENT_FORMATS; Reinvestment is
# only for self-transfers, set separately)
FORMAT_P_INDIVIDUAL = np.array([0.26, 0.24, 0.26, 0.05, 0.15, 0.0, 0.04])
FORMAT_P_COMPANY = np.array([0.34, 0.30, 0.10, 0.20, 0.04, 0.0, 0.02])
FORMAT_P_LAUNDERING = np.array([0.36, 0.22, 0.20, 0.08, 0.10, 0.0, 0.04])
HOME_CURRENCY_P = np.array([0.42, 0.18, 0.06, 0.03, 0.04, 0.05, 0.04, 0.04, 0.0, 0.03, 0.03, 0.03, 0.02,
                            0.02, 0.01])
REGULAR_COUNTERPARTIES = 4


@dataclass
class Transactions:
    """Column arrays of generated transactions (one row each), sorted by time."""
    minute: np.ndarray          # minutes since START
    from_bank: np.ndarray
    from_account: np.ndarray    # global account index
    to_bank: np.ndarray
    to_account: np.ndarray
    amount_paid: np.ndarray
    pay_currency: np.ndarray    # index into CURRENCIES
    amount_received: np.ndarray
    recv_currency: np.ndarray
    payment_format: np.ndarray  # index into PAYMENT_FORMATS
    is_laundering: np.ndarray
    typology: np.ndarray        # -1 background, else index into TYPOLOGIES
    pattern: np.ndarray         # -1 background, else pattern id
    bank_ids: np.ndarray        # bank code of each bank index (as written to the CSV)
    account_names: np.ndarray   # hex account id of each account index

    def __len__(self) -> int:
        return int(self.minute.size)


def _weighted_pick(rng, cum: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Index i with cum[i-1] <= u < cum[i] for u uniform in [lo, hi): a weighted draw restricted to
    a range of the cumulative weights (a bank's accounts are contiguous)."""
    u = lo + rng.random(lo.shape) * (hi - lo)
    return np.minimum(np.searchsorted(cum, u, side="right"), cum.size - 1)


def generate(preset: AmlPreset, scale: float = 1.0, seed: int = 0) -> Transactions:
    rng = np.random.default_rng(seed)
    n_acc = max(50, int(round(preset.accounts * scale)))
    n_tx = max(500, int(round(preset.transactions * scale)))
    n_bank = max(8, n_acc // preset.accounts_per_bank)

    # banks: log-normal sizes, contiguous account ranges, a home currency each
    bank_w = rng.lognormal(0.0, 1.0, n_bank)
    bank_size = np.maximum(1, np.floor(bank_w / bank_w.sum() * n_acc)).astype(np.int64)
    bank_size[np.argmax(bank_size)] += n_acc - bank_size.sum()
    acc_bank = np.repeat(np.arange(n_bank), bank_size)
    bank_start = np.concatenate([[0], np.cumsum(bank_size)])
    bank_cur = rng.choice(len(CURRENCIES), size=n_bank, p=HOME_CURRENCY_P / HOME_CURRENCY_P.sum())
    bank_ids = np.sort(rng.choice(np.arange(10, 10 * n_bank + 10), size=n_bank, replace=False))

    # accounts: 10% companies; heavy-tailed activity; mules get little background activity
    company = rng.random(n_acc) < 0.10
    activity = rng.lognormal(0.0, 1.1, n_acc) * np.where(company, 4.0, 1.0)
    n_launder = int(round(n_tx * preset.illicit_ratio))
    n_mules = int(np.clip(1.0 * n_launder, 20, n_acc // 3))
    mules = np.sort(rng.choice(n_acc, size=n_mules, replace=False))
    activity[mules] *= 0.3
    acc_cur = bank_cur[acc_bank]
    names = np.char.upper(np.char.mod("%09x", rng.choice(2**35, size=n_acc, replace=False) + 2**32))

    bg = _background(rng, n_tx - n_launder, preset.days, activity, company, acc_bank, bank_start)
    ml = _laundering(rng, n_launder, preset, mules, acc_bank, bank_start, company)
    cols = [np.concatenate([a, b]) for a, b in zip(bg, ml)]
    minute, src, dst, usd, fmt, typ, pat = cols
    pay_cur, recv_cur = acc_cur[src].copy(), acc_cur[dst].copy()
    btc = fmt == FMT["Bitcoin"]
    pay_cur[btc] = recv_cur[btc] = CURRENCIES.index("Bitcoin")
    rates = np.array([USD_RATES[c] for c in CURRENCIES])
    paid = np.round(usd / rates[pay_cur], 2)
    received = np.round(usd / rates[recv_cur], 2)
    order = np.argsort(minute, kind="stable")
    return Transactions(
        minute=minute[order], from_bank=acc_bank[src][order], from_account=src[order],
        to_bank=acc_bank[dst][order], to_account=dst[order], amount_paid=paid[order],
        pay_currency=pay_cur[order], amount_received=received[order], recv_currency=recv_cur[order],
        payment_format=fmt[order], is_laundering=(typ >= 0)[order].astype(np.int8), typology=typ[order],
        pattern=pat[order], bank_ids=bank_ids, account_names=names)


def _background(rng, n, days, activity, company, acc_bank, bank_start):
    n_acc = activity.size
    cum = np.cumsum(activity)
    bank_lo = np.concatenate([[0.0], cum])[bank_start[:-1]]
    bank_hi = cum[bank_start[1:] - 1]
    # regular counterparties: half in the account's own bank, half anywhere (weighted by activity)
    own = np.repeat(acc_bank, REGULAR_COUNTERPARTIES)
    local = rng.random(own.size) < 0.5
    regular = np.where(local, _weighted_pick(rng, cum, bank_lo[own], bank_hi[own]),
                       _weighted_pick(rng, cum, np.zeros(own.size), np.full(own.size, cum[-1])))
    regular = regular.reshape(n_acc, REGULAR_COUNTERPARTIES)

    src = _weighted_pick(rng, cum, np.zeros(n), np.full(n, cum[-1]))
    mode = rng.random(n)
    dst = regular[src, rng.integers(0, REGULAR_COUNTERPARTIES, n)]
    same_bank = (mode >= 0.6) & (mode < 0.8)
    dst[same_bank] = _weighted_pick(rng, cum, bank_lo[acc_bank[src[same_bank]]], bank_hi[acc_bank[src[same_bank]]])
    anywhere = mode >= 0.8
    dst[anywhere] = _weighted_pick(rng, cum, np.zeros(int(anywhere.sum())), np.full(int(anywhere.sum()), cum[-1]))

    self_tx = rng.random(n) < 0.02      # reinvestment: an account paying itself
    dst[self_tx] = src[self_tx]
    # every account transacts at least once (Table 3 counts accounts that appear in the data):
    # accounts no draw reached become the payee of as many random transactions
    seen = np.zeros(n_acc, dtype=bool)
    seen[src] = seen[dst] = True
    idle = np.flatnonzero(~seen)
    if 0 < idle.size < n // 2:
        slots = rng.choice(np.flatnonzero(~self_tx), size=idle.size, replace=False)
        dst[slots] = idle
    is_co = company[src]
    fmt = np.where(is_co, _categorical(rng, FORMAT_P_COMPANY, n), _categorical(rng, FORMAT_P_INDIVIDUAL, n))
    fmt[self_tx] = FMT["Reinvestment"]
    usd = _amounts_usd(rng, is_co, fmt)
    minute = _times(rng, n, days)
    neg = np.full(n, -1, dtype=np.int64)
    return minute, src.astype(np.int64), dst.astype(np.int64), usd, fmt, neg, neg


def _categorical(rng, p, n):
    return np.searchsorted(np.cumsum(p / p.sum()), rng.random(n), side="right").clip(0, p.size - 1)


def _amounts_usd(rng, is_company, fmt):
    mu = np.where(is_company, np.log(2500.0), np.log(250.0))
    mu = mu + np.where(fmt == FMT["Cash"], -0.7, 0.0) + np.where(fmt == FMT["Wire"], 1.0, 0.0)
    return np.exp(rng.normal(mu, 1.4))


def _times(rng, n, days):
    day = rng.integers(0, days, n)
    hour_of_day = np.clip(rng.normal(13.0, 4.5, n), 0, 23.99)
    return day * 1440 + (hour_of_day * 60).astype(np.int64)


def _draw_members(rng, m, mules, mule_bank, bank_start, acc_bank, cross_rate):
    """``m`` distinct accounts: the first a random mule; each other one a mule of any bank with
    probability ``cross_rate``, else a mule of the first one's bank (any of its accounts if it has
    too few mules)."""
    first = int(rng.choice(mules))
    home = acc_bank[first]
    home_mules = mules[mule_bank == home]
    chosen = {first}
    for _ in range(m - 1):
        for _attempt in range(20):
            if rng.random() < cross_rate:
                cand = int(rng.choice(mules))
            elif home_mules.size > 1 and rng.random() < 0.8:
                cand = int(rng.choice(home_mules))
            else:
                cand = int(rng.integers(bank_start[home], bank_start[home + 1]))
            if cand not in chosen:
                break
        else:
            cand = int(rng.integers(0, acc_bank.size))
            while cand in chosen:
                cand = int(rng.integers(0, acc_bank.size))
        chosen.add(cand)
    out = np.fromiter(chosen, dtype=np.int64)
    out[[0, list(chosen).index(first)]] = out[[list(chosen).index(first), 0]]
    return out


def _laundering(rng, n_edges, preset: AmlPreset, mules, acc_bank, bank_start, company):
    """Whole patterns until ``n_edges`` laundering transactions exist (the last one may overshoot).
    A Python loop over patterns (a few thousand at full Small scale) — the per-transaction work is
    vectorised in ``_background``."""
    mule_bank = acc_bank[mules]
    srcs, dsts, typs, pats, minutes = [], [], [], [], []
    total, pid = 0, 0
    span_days = max(1, min(3, preset.days // 4))   # a pattern lasts up to this many days
    while total < n_edges:
        t = int(rng.integers(0, len(TYPOLOGIES)))
        m, s, d = BUILDERS[TYPOLOGIES[t]](rng)
        members = _draw_members(rng, m, mules, mule_bank, bank_start, acc_bank, preset.cross_bank_rate)
        k = s.size
        # hops happen in order within the pattern's duration (an hour to span_days); durations vary so
        # that the illicit share stays roughly flat over the days, including the first and last ones
        span = int(rng.integers(60, span_days * 1440 + 1))
        start = int(rng.integers(0, preset.days * 1440 - span + 1))
        minute = start + np.sort(rng.integers(0, span, k))
        srcs.append(members[s]); dsts.append(members[d]); typs.append(np.full(k, t))
        pats.append(np.full(k, pid)); minutes.append(minute)
        total += k
        pid += 1
    if not srcs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, np.zeros(0), empty, empty, empty
    src, dst = np.concatenate(srcs), np.concatenate(dsts)
    typ, pat = np.concatenate(typs), np.concatenate(pats)
    n = src.size
    fmt = _categorical(rng, FORMAT_P_LAUNDERING, n)
    # a pattern moves amounts of one size: a base amount per pattern, jittered per hop
    base = _amounts_usd(rng, company[src], fmt)
    per_pattern = base[np.unique(pat, return_index=True)[1]][pat]
    usd = per_pattern * rng.uniform(0.85, 1.0, n)
    return np.concatenate(minutes), src, dst, usd, fmt, typ.astype(np.int64), pat.astype(np.int64)


def to_frames(tx: Transactions, chunk: int = 1_000_000):
    """``to_frame`` over consecutive row chunks (CSV writing without all rows as Python objects)."""
    for lo in range(0, len(tx), chunk):
        yield to_frame(tx, slice(lo, lo + chunk))


def to_frame(tx: Transactions, rows: slice = slice(None)) -> pd.DataFrame:
    """The Kaggle CSV columns (pandas names: the second Account is ``Account.1``) of ``rows``."""
    tx = Transactions(**{k: (v[rows] if k not in ("bank_ids", "account_names") else v)
                         for k, v in vars(tx).items()})
    minutes_unique, inv = np.unique(tx.minute, return_inverse=True)
    stamps = pd.to_datetime(START + minutes_unique.astype("timedelta64[m]")).strftime("%Y/%m/%d %H:%M")
    cur = np.array(CURRENCIES, dtype=object)
    fmt = np.array(PAYMENT_FORMATS, dtype=object)
    return pd.DataFrame({
        "Timestamp": np.asarray(stamps, dtype=object)[inv],
        "From Bank": tx.bank_ids[tx.from_bank],
        "Account": tx.account_names.astype(object)[tx.from_account],
        "To Bank": tx.bank_ids[tx.to_bank],
        "Account.1": tx.account_names.astype(object)[tx.to_account],
        "Amount Received": tx.amount_received,
        "Receiving Currency": cur[tx.recv_currency],
        "Amount Paid": tx.amount_paid,
        "Payment Currency": cur[tx.pay_currency],
        "Payment Format": fmt[tx.payment_format],
        "Is Laundering": tx.is_laundering,
    })
