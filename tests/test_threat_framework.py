"""The threat and aggregator groups (issue 70, docs/threats.md): what every run computed before is
unchanged (fingerprints of committed records, tests/test_behaviour_unchanged.py), a run's malicious clients
come from its seed, and a threat or aggregator is refused where an algorithm would ignore it."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from fgx.cli import compose
from fgx.config import ConfigError, config_fingerprint, validate
from fgx.registry import ALGORITHMS
from fgx.threats.base import choose_malicious


def test_default_groups_leave_the_config_fingerprint_of_earlier_records_unchanged():
    cfg = compose(["algorithm=fedavg", "dataset=cora"])
    c = OmegaConf.to_container(cfg, resolve=True)
    assert c["threat"] == {"name": "none"} and c["aggregator"]["name"] == "mean"
    older = {k: v for k, v in c.items() if k not in ("threat", "aggregator")}   # a config from before issue 70
    assert config_fingerprint(cfg)[1] == config_fingerprint(older)[1]
    validate(OmegaConf.create(older))        # a record's saved config without the groups still validates
    attacked = compose(["algorithm=fedavg", "dataset=cora", "aggregator.pre=nnm"])
    assert config_fingerprint(attacked)[1] != config_fingerprint(cfg)[1]


def test_malicious_clients_are_a_seeded_fraction():
    a = choose_malicious(10, 0.2, seed=3)
    assert len(a) == 2 and a == choose_malicious(10, 0.2, seed=3) and a <= set(range(10))
    assert len({frozenset(choose_malicious(10, 0.2, s)) for s in range(20)}) > 5
    assert len(choose_malicious(10, 0.0, 0)) == 0 and len(choose_malicious(7, 1.0, 0)) == 7


@pytest.mark.parametrize("name, calls", [("fedavg", True), ("fedprox", True), ("scaffold", True), ("moon", True),
                                         ("fedper", True), ("fedstar", True), ("gcfl", False), ("feddc", False),
                                         ("ce_fedgnn", False), ("fedpub", False), ("local", False)])
def test_which_algorithms_call_the_threat_hooks(name, calls):
    from fgx.algorithms.base import calls_threat_hooks

    assert calls_threat_hooks(ALGORITHMS.get(name).obj) is calls


@pytest.mark.parametrize("name", ["gcfl", "gcfl_plus", "fedpub", "fedtad", "fedgta"])
def test_servers_that_need_individual_updates_say_why(name):
    why = ALGORITHMS.get(name).obj.needs_individual_updates
    assert isinstance(why, str) and len(why) > 20
    assert ALGORITHMS.get("fedavg").obj.needs_individual_updates is None


def test_an_aggregator_an_algorithm_would_ignore_is_refused_before_work():
    with pytest.raises(ConfigError) as e:
        validate(compose(["algorithm=gcfl", "dataset=mutag", "aggregator.pre=nnm"]))
    assert e.value.key == "aggregator.name" and "does not call the aggregator" in str(e.value)
    validate(compose(["algorithm=fedprox", "dataset=cora", "aggregator.pre=nnm"]))


def test_a_robust_rule_under_a_dp_mechanism_is_refused():
    with pytest.raises(ConfigError) as e:
        validate(compose(["algorithm=fedavg", "dataset=cora", "privacy=dp_fedavg", "algorithm.weighting=uniform",
                          "aggregator.pre=clip"]))
    assert "calibrated" in str(e.value)
    validate(compose(["algorithm=fedavg", "dataset=cora", "privacy=dp_fedavg", "algorithm.weighting=uniform"]))
