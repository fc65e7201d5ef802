"""Secure aggregation (secure_aggregation=pairwise_mask|ckks, fgx/federation/secure.py): the server sees
only masked vectors or ciphertexts, and learns the same weighted average as plain aggregation (pairwise
masking: exactly, in fixed point, with dropouts; CKKS: within 1e-4); methods that need individual updates
are refused with their reason."""
from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
import torch

from fgx.algorithms.base import weighted_average
from fgx.cli import compose
from fgx.config import ConfigError, validate
from fgx.federation import shamir
from fgx.federation.channel import Channel, ChannelError, Message
from fgx.federation.secagg import MESSAGES, PairwiseMasking, decode_signed, encode
from fgx.federation.secure import PairwiseMaskAggregation, PairwiseMaskParams

F = 32


def masking_channel(seen: list | None = None) -> Channel:
    kinds = {k: Message() for k in MESSAGES}
    return Channel(kinds, auditor=(lambda *a: seen.append(a)) if seen is not None else None)


def client_vectors(n: int, d: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(d, generator=g, dtype=torch.float64) * 0.1 for _ in range(n)]


def fixed_point_sum(vectors: list[torch.Tensor]) -> torch.Tensor:
    """The plain sum of the clients' fixed-point encodings (signed integers, as float64: exact here)."""
    return sum(decode_signed(encode(x, F)).double() for x in vectors)


# -- Shamir's secret sharing -----------------------------------------------------------------------

@pytest.mark.parametrize("n,t", [(5, 3), (6, 6), (4, 1)])
def test_any_t_shares_reconstruct_the_secret_and_fewer_do_not(n, t):
    rng = random.Random(n * 10 + t)
    secret = shamir.random_element(rng)
    shares = shamir.share(secret, n, t, rng)
    for subset in itertools.combinations(range(n), t):
        assert shamir.reconstruct({i: shares[i] for i in subset}, t) == secret
    if t > 1:   # t - 1 shares interpolated as if they were enough: a wrong value, and reconstruct refuses them
        assert shamir.reconstruct({i: shares[i] for i in range(t - 1)}, t - 1) != secret
        with pytest.raises(ValueError, match="cannot reconstruct"):
            shamir.reconstruct({i: shares[i] for i in range(t - 1)}, t)


def test_the_key_agreement_is_symmetric():
    rng = random.Random(0)
    a, b = shamir.random_element(rng), shamir.random_element(rng)
    assert shamir.agree(a, shamir.public_key(b)) == shamir.agree(b, shamir.public_key(a))


# -- pairwise masking ------------------------------------------------------------------------------

@pytest.mark.parametrize("dropped", [set(), {3}, {0, 7}])
def test_masked_sum_equals_the_plain_fixed_point_sum_exactly(dropped):
    cids = list(range(10))
    vectors = client_vectors(10, 257)
    got, survivors = PairwiseMasking(F, 0.5, seed=1).sum(masking_channel(), cids, vectors, dropped, r=2)
    assert survivors == [c for c in cids if c not in dropped]
    want = fixed_point_sum([vectors[c] for c in survivors])
    assert torch.equal(got * (1 << F), want)          # the integers, exactly
    assert (got - sum(vectors[c] for c in survivors)).abs().max() <= len(survivors) * 2.0 ** -F


def test_the_server_sees_only_masked_vectors():
    seen = []
    cids, vectors = list(range(6)), client_vectors(6, 300, seed=3)
    PairwiseMasking(F, 0.5, seed=0).sum(masking_channel(seen), cids, vectors, set(), r=1)
    masked = [(src, payload) for kind, payload, src, dst, _ in seen if kind == "masked_update"]
    assert [src for src, _ in masked] == cids
    for src, y in masked:
        q = encode(vectors[src], F)
        assert y.dtype == torch.int64 and (y == q).float().mean() < 0.01
        # a uniform ring element: its top bit is set about half the time, while the small encoding's
        # top bits are sign copies
        assert 0.35 < float((y >> 61).float().mean()) < 0.65
    assert not any(kind == "update" for kind, *_ in seen)


def test_an_unmask_answer_never_reveals_both_secrets_of_a_client():
    """Each survivor returns self-mask shares of survivors and key shares of the dropped, one per client."""
    seen, cids = [], list(range(8))
    PairwiseMasking(F, 0.5, seed=0).sum(masking_channel(seen), cids, client_vectors(8, 10), {2, 5}, r=1)
    answers = [p for kind, p, *_ in seen if kind == "secagg_unmask_shares"]
    assert len(answers) == 6 and all(a.numel() == 8 * shamir.SECRET_BYTES for a in answers)


def test_too_many_dropouts_to_unmask_is_an_error_naming_the_threshold():
    with pytest.raises(RuntimeError, match="threshold"):
        PairwiseMasking(F, 0.5, seed=0).sum(masking_channel(), list(range(6)), client_vectors(6, 4), {0, 1, 2}, r=1)


def test_a_sum_that_would_overflow_the_ring_is_refused():
    with pytest.raises(OverflowError, match="fractional_bits"):
        PairwiseMasking(48, 0.5, seed=0).sum(masking_channel(), [0, 1], [torch.full((3,), 1e4)] * 2, set(), r=1)


def test_ten_percent_dropouts_drop_one_of_ten_and_the_weighted_average_holds():
    agg = PairwiseMaskAggregation(PairwiseMaskParams(dropout=0.1), seed=4)
    cids = list(range(10))
    deltas = [{"w": v[:200].view(20, 10).float(), "b": v[200:].float()} for v in client_vectors(10, 207, seed=5)]
    weights = [float(3 + c) for c in cids]
    mean, stats = agg.average(masking_channel(), cids, deltas, weights, r=3)
    dropped = agg.dropped(cids, 3)
    assert stats["secagg_dropped"] == 1.0 and len(dropped) == 1
    kept = [c for c in cids if c not in dropped]
    plain = weighted_average([deltas[c] for c in kept], [weights[c] for c in kept])
    for k in plain:
        assert torch.allclose(mean[k].double(), plain[k].double(), atol=1e-6, rtol=0)


# -- inside a run ----------------------------------------------------------------------------------

def test_a_run_under_pairwise_masking_sends_no_clear_update_and_sums_exactly(recorded, run_fgx, tiny_cfg, monkeypatch):
    checked = []
    real = PairwiseMasking.sum

    def spy(self, channel, cids, vectors, dropped, r):
        got, survivors = real(self, channel, cids, vectors, dropped, r)
        checked.append((len(dropped), torch.equal(got * (1 << self.f), fixed_point_sum([vectors[cids.index(c)]
                                                                                           for c in survivors]))))
        return got, survivors

    monkeypatch.setattr(PairwiseMasking, "sum", spy)
    run_fgx(*tiny_cfg, "partitioner.num_clients=10", "secure_aggregation=pairwise_mask",
            "secure_aggregation.dropout=0.1")
    kinds = [a[0] for a in recorded["sent"]]
    assert "update" not in kinds and kinds.count("masked_update") == 3 * 9     # 3 rounds, one of 10 dropped
    assert checked == [(1, True)] * 3
    with pytest.raises(ChannelError, match="not declared"):
        recorded["channel"].send("update", {}, src=0, dst="server", round=1)


def test_without_dropouts_a_masked_run_scores_as_the_plain_run(run_fgx, tiny_cfg):
    import json

    plain = json.loads((run_fgx(*tiny_cfg) / "summary.json").read_text())
    masked = json.loads((run_fgx(*tiny_cfg, "secure_aggregation=pairwise_mask") / "summary.json").read_text())
    assert masked["components"]["secure_aggregation"] == "pairwise_mask"
    for k, v in plain["final"].items():
        assert masked["final"][k] == pytest.approx(v, abs=1e-6)


# -- CKKS ------------------------------------------------------------------------------------------

def test_ckks_sum_is_within_1e_4_of_plain_and_its_bytes_are_in_the_ledger():
    pytest.importorskip("tenseal", reason="pip install 'fgx[tenseal]'")
    from fgx.federation.ckks import MESSAGES as CKKS_KINDS, CKKSAggregation

    seen = []
    ch = Channel({k: Message() for k in CKKS_KINDS}, auditor=lambda *a: seen.append(a))
    cids, vectors = list(range(5)), client_vectors(5, 5000, seed=7)
    got = CKKSAggregation(8192, [60, 40, 60], 40).sum(ch, cids, vectors, key_holder=0, r=1)
    assert (got - sum(vectors)).abs().max() < 1e-4
    ups = [p for kind, p, *_ in seen if kind == "encrypted_update"]
    assert len(ups) == 5 and all(len(p) == 2 for p in ups)      # 5000 values: two ciphertexts of 4096 slots
    assert ch.report()["totals"]["encrypted_update"] == sum(t.numel() for p in ups for t in p) > 5 * 5000 * 8


def test_a_ckks_run_scores_as_the_plain_run(run_fgx, tiny_cfg, recorded):
    pytest.importorskip("tenseal", reason="pip install 'fgx[tenseal]'")
    import json

    plain = json.loads((run_fgx(*tiny_cfg) / "summary.json").read_text())
    recorded["sent"].clear()
    enc = json.loads((run_fgx(*tiny_cfg, "secure_aggregation=ckks") / "summary.json").read_text())
    kinds = {a[0] for a in recorded["sent"]}
    assert "update" not in kinds and {"encrypted_update", "encrypted_sum", "decrypted_sum"} <= kinds
    for k, v in plain["final"].items():
        assert enc["final"][k] == pytest.approx(v, abs=1e-4)


# -- refusals --------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,reason", [
    (["algorithm=gcfl"], "cosine similarity of their individual updates"),
    (["algorithm=gcfl_plus"], "DTW distances"),
    (["algorithm=fedpub"], "personalised similarity weights"),
    (["algorithm=fedtad"], "distils from each client's received update"),
    (["algorithm=fedprox"], "aggregate phase of its own"),
    (["algorithm=fedavg", "privacy=dp_fedavg", "algorithm.weighting=uniform", "algorithm.client_sampling=poisson",
      "algorithm.client_fraction=0.5"], "noises the aggregate on the server"),
    (["algorithm=fedavg", "aggregator.pre=clip"], "aggregator.pre=clip works on each update"),
])
@pytest.mark.parametrize("scheme", ["pairwise_mask", "ckks"])
def test_methods_that_need_individual_updates_are_refused_with_the_reason(overrides, reason, scheme):
    cfg = compose(["dataset=csbm", *overrides, f"secure_aggregation={scheme}"])
    with pytest.raises(ConfigError, match="secure_aggregation.name") as e:
        validate(cfg)
    assert reason in str(e.value)


def test_a_robust_aggregator_is_refused():
    from fgx.federation.secure import refusal

    v = validate(compose(["dataset=csbm", "algorithm=fedavg"]))
    assert refusal(v) is None
    v.names["aggregator"] = "krum"
    assert "aggregator 'krum' compares the individual updates" in refusal(v)


def test_fedavg_and_its_aggregate_phase_heirs_are_accepted():
    for algo in (["algorithm=fedavg"], ["algorithm=fedper"], ["algorithm=fedgcn", "algorithm.hops=0"]):
        validate(compose(["dataset=csbm", *algo, "secure_aggregation=pairwise_mask"]))


def test_the_accepted_algorithms_are_those_docs_threats_md_names():
    """docs/threats.md lists the algorithms secure aggregation accepts: FedAvg and the methods that inherit
    its aggregate phase without a reason to read individual updates."""
    from fgx.federation.secure import accepts_algorithm
    from fgx.registry import ALGORITHMS

    accepted = sorted(n for n in ALGORITHMS.names() if accepts_algorithm(ALGORITHMS.get(n).obj))
    assert accepted == ["adafgl", "fedavg", "fedgcn", "fedgnn", "fedper", "fedsage_plus", "fedstar", "swift_fedgnn"]
    doc = (Path(__file__).resolve().parents[1] / "docs" / "threats.md").read_text()
    assert "accepted: " + ", ".join(f"`{n}`" for n in accepted) in doc


def test_ckks_without_tenseal_is_refused_naming_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tenseal" else real(name, *a))
    with pytest.raises(ConfigError, match=r"fgx\[tenseal\]"):
        validate(compose(["dataset=csbm", "algorithm=fedavg", "secure_aggregation=ckks"]))


def test_more_dropouts_than_the_threshold_allows_is_refused_at_validation():
    with pytest.raises(ConfigError, match="secure_aggregation.dropout"):
        validate(compose(["dataset=csbm", "algorithm=fedavg", "secure_aggregation=pairwise_mask",
                          "secure_aggregation.dropout=0.5"]))


# -- the default changes nothing --------------------------------------------------------------------

def test_none_leaves_the_config_fingerprint_of_earlier_records_unchanged():
    from omegaconf import OmegaConf

    from fgx.config import config_fingerprint

    cfg = compose(["algorithm=fedavg", "dataset=cora"])
    c = OmegaConf.to_container(cfg, resolve=True)
    assert c["secure_aggregation"] == {"name": "none"}
    older = {k: v for k, v in c.items() if k != "secure_aggregation"}    # a record's config from before issue 70
    assert config_fingerprint(cfg)[1] == config_fingerprint(older)[1]
    assert validate(OmegaConf.create(older)).names["secure_aggregation"] == "none"
    masked = compose(["algorithm=fedavg", "dataset=cora", "secure_aggregation=pairwise_mask"])
    assert config_fingerprint(masked)[1] != config_fingerprint(cfg)[1]


def test_a_round_that_samples_no_client_moves_nothing_under_secure_aggregation(run_fgx, tiny_cfg, recorded):
    """Poisson sampling may choose nobody: no protocol message, a zero update, the run goes on."""
    import json

    rd = run_fgx(*tiny_cfg, "algorithm.client_sampling=poisson", "algorithm.client_fraction=0.05",
                 "secure_aggregation=pairwise_mask")
    rounds = {a[4] for a in recorded["sent"] if a[0] == "masked_update"}
    assert rounds < {1, 2, 3}          # at least one of the three rounds chose nobody (seed 0)
    assert json.loads((rd / "summary.json").read_text())["status"] == "completed"
