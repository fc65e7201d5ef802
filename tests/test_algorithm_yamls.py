"""conf/algorithm/*.yaml inherit what they share with Hydra ``defaults:`` (local training's keys from
local.yaml, FedAvg's from fedavg.yaml) instead of repeating them: a key repeated with the inherited value
stays only with a note of the method's own (a comment)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

CONF = Path(__file__).resolve().parents[1] / "conf" / "algorithm"


def parents(name: str) -> list[str]:
    """The algorithm YAMLs ``name`` inherits (its defaults entries without a group), nearest first."""
    d = yaml.safe_load((CONF / f"{name}.yaml").read_text()).get("defaults") or []
    return [e for e in d if isinstance(e, str) and e != "_self_" and (CONF / f"{e}.yaml").exists()]


def inherited(name: str) -> dict:
    out: dict = {}
    for p in parents(name):
        out.update(inherited(p))
        out.update({k: v for k, v in yaml.safe_load((CONF / f"{p}.yaml").read_text()).items() if k != "defaults"})
    return out


def repeats(name: str) -> list[str]:
    """Keys ``name``'s YAML sets to the value it inherits, on a line without a comment."""
    base = inherited(name)
    own = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    lines = {m.group(1): line for line in (CONF / f"{name}.yaml").read_text().splitlines()
             if (m := re.match(r"^(\w+):", line))}
    return [k for k, v in own.items() if k not in ("name", "defaults") and k in base and base[k] == v
            and "#" not in lines[k]]


def test_algorithm_yamls_do_not_repeat_what_they_inherit():
    bad = {f.stem: r for f in sorted(CONF.glob("*.yaml")) if (r := repeats(f.stem))}
    assert not bad, f"keys repeated with the inherited value: {bad}"
    assert parents("fedprox") == ["fedavg"] and parents("fedavg") == ["local"]


def test_the_repeat_check_sees_a_repeated_key(tmp_path, monkeypatch):
    (tmp_path / "local.yaml").write_text("name: local\nlr: 0.01\n")
    (tmp_path / "x.yaml").write_text("defaults:\n  - local\n  - _self_\nname: x\nlr: 0.01\n")
    monkeypatch.setattr(sys.modules[__name__], "CONF", tmp_path)
    assert repeats("x") == ["lr"]
