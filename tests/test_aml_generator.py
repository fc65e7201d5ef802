"""AML generator: determinism, statistics of the tiny preset, the eight typologies' shapes."""
from __future__ import annotations

from dataclasses import replace

import networkx as nx
import numpy as np
import pytest

from fgx.data.aml.generator import generate
from fgx.data.aml.presets import PRESETS, get_preset
from fgx.data.aml.schema import TYPOLOGIES

TINY = get_preset("tiny")


@pytest.fixture(scope="module")
def tiny():
    return generate(TINY, 1.0, 0)


def test_same_seed_same_data_other_seed_other_data(tiny):
    again = generate(TINY, 1.0, 0)
    for k in ("minute", "from_account", "to_account", "amount_paid", "payment_format", "is_laundering"):
        assert np.array_equal(getattr(tiny, k), getattr(again, k)), k
    other = generate(TINY, 1.0, 1)
    assert not np.array_equal(tiny.from_account[:1000], other.from_account[:1000])


def test_tiny_statistics_match_preset(tiny):
    n = len(tiny)
    assert abs(n - TINY.transactions) / TINY.transactions < 0.05
    ratio = tiny.is_laundering.mean()
    assert abs(ratio - TINY.illicit_ratio) / TINY.illicit_ratio < 0.05
    accounts = np.unique(np.concatenate([tiny.from_account, tiny.to_account])).size
    assert 0.85 * TINY.accounts <= accounts <= TINY.accounts      # a few accounts never transact
    assert tiny.minute.min() >= 0 and tiny.minute.max() < TINY.days * 1440
    assert np.all(np.diff(tiny.minute) >= 0)                      # sorted by time
    assert set(np.unique(tiny.typology[tiny.is_laundering == 1])) == set(range(len(TYPOLOGIES)))
    assert np.all((tiny.typology >= 0) == (tiny.is_laundering == 1))


def test_heavy_tailed_activity(tiny):
    out_deg = np.bincount(tiny.from_account)
    assert out_deg.max() > 10 * np.median(out_deg[out_deg > 0])


def test_cross_bank_rate_controls_patterns_spanning_banks():
    def crossing_share(rate):
        tx = generate(replace(TINY, cross_bank_rate=rate), 1.0, 3)
        m = tx.is_laundering == 1
        return (tx.from_bank[m] != tx.to_bank[m]).mean()
    low, high = crossing_share(0.0), crossing_share(1.0)
    assert high > 0.6 and low < 0.3, (low, high)


def _pattern_graphs(tx):
    m = tx.is_laundering == 1
    out = {}
    for pid in np.unique(tx.pattern[m]):
        sel = tx.pattern == pid
        g = nx.MultiDiGraph()
        g.add_edges_from(zip(tx.from_account[sel], tx.to_account[sel]))
        out[pid] = (TYPOLOGIES[int(tx.typology[sel][0])], g, tx.from_account[sel], tx.to_account[sel],
                    tx.minute[sel])
    return out


def test_each_typology_has_its_shape(tiny):
    seen = set()
    for pid, (typ, g, src, dst, minute) in _pattern_graphs(tiny).items():
        seen.add(typ)
        ins, outs = dict(g.in_degree()), dict(g.out_degree())
        n = g.number_of_nodes()
        assert not any(u == v for u, v in g.edges()), (typ, pid)
        if typ == "fan_out":
            assert len(set(src)) == 1 and len(set(dst)) == len(dst) >= 3
        elif typ == "fan_in":
            assert len(set(dst)) == 1 and len(set(src)) == len(src) >= 3
        elif typ == "cycle":
            assert all(ins[v] == 1 and outs[v] == 1 for v in g) and nx.is_strongly_connected(g) and n >= 3
        elif typ == "scatter_gather":
            sources = [v for v in g if ins[v] == 0]
            sinks = [v for v in g if outs[v] == 0]
            mids = [v for v in g if ins[v] == 1 and outs[v] == 1]
            assert len(sources) == 1 and len(sinks) == 1 and len(mids) == n - 2 >= 3
        elif typ == "gather_scatter":
            hubs = [v for v in g if ins[v] >= 3 and outs[v] >= 3]
            assert len(hubs) == 1 and n == 1 + ins[hubs[0]] + outs[hubs[0]]
        elif typ == "bipartite":
            senders = {v for v in g if outs[v] > 0}
            receivers = {v for v in g if ins[v] > 0}
            assert not senders & receivers and len(src) == len(senders) * len(receivers)
        elif typ == "stack":
            middle = {v for v in g if ins[v] > 0 and outs[v] > 0}
            first = {v for v in g if ins[v] == 0}
            last = {v for v in g if outs[v] == 0}
            assert middle and len(src) == len(first) * len(middle) + len(middle) * len(last)
        elif typ == "random":
            # a walk: each hop starts where the previous one ended, in time order
            order = np.argsort(minute, kind="stable")
            assert np.array_equal(src[order][1:], dst[order][:-1]) and len(src) >= 4
            assert nx.is_weakly_connected(g)
    assert seen == set(TYPOLOGIES)


def test_presets_carry_table3_counts():
    assert PRESETS["hi_small"].accounts == 515_088 and PRESETS["hi_small"].transactions == 5_078_345
    assert PRESETS["li_small"].transactions == 6_924_049
    assert PRESETS["hi_small"].split_days == ((0, 7), (8, 8), (9, 13))
    with pytest.raises(KeyError, match="unknown AML preset"):
        get_preset("aml_huge")


def test_scale_shrinks_a_full_preset():
    tx = generate(get_preset("hi_small"), 0.01, 0)
    assert abs(len(tx) - 50_783) / 50_783 < 0.05
    assert tx.is_laundering.sum() > 0
