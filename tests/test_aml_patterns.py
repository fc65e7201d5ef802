"""Laundering-pattern statistics (fgx/data/aml/patterns.py): AMLworld's Patterns.txt blocks beside a
Kaggle CSV, counted per typology, with days spanned and laundering outside every block."""
from __future__ import annotations

import pytest

from fgx.data.aml.patterns import kaggle_patterns_file, pattern_stats, read_kaggle_patterns
from fgx.data.base import DataError

ROW = "{day} 10:0{m},010,A{m},011,B{m},10.00,US Dollar,10.00,US Dollar,ACH,1"


def write(tmp_path, blocks: list[tuple[str, list[str]]]):
    trans = tmp_path / "HI-Small_Trans.csv"
    trans.write_text("header\n")
    lines = []
    for marker, rows in blocks:
        lines += [f"BEGIN LAUNDERING ATTEMPT - {marker}", *rows, f"END LAUNDERING ATTEMPT - {marker.split(':')[0]}", ""]
    kaggle_patterns_file(trans).write_text("\n".join(lines) + "\n")
    return trans


def test_kaggle_blocks_counted_per_typology_with_days_and_unannotated(tmp_path):
    trans = write(tmp_path, [
        ("FAN-OUT:  Max 16-degree Fan-Out", [ROW.format(day="2022/09/01", m=i) for i in range(3)]),
        ("CYCLE:  Max 4 hops", [ROW.format(day="2022/09/01", m=1), ROW.format(day="2022-09-02", m=2)]),
        ("SCATTER-GATHER", [ROW.format(day="2022/09/03", m=1)]),
        ("CYCLE:  Max 2 hops", [ROW.format(day="2022/09/04", m=1), ROW.format(day="2022/09/04", m=2)]),
    ])
    assert kaggle_patterns_file(trans).name == "HI-Small_Patterns.txt"
    s = pattern_stats(trans, laundering=10)
    assert s["source"] == "HI-Small_Patterns.txt"
    assert (s["patterns"], s["in_patterns"], s["in_no_pattern"], s["patterns_over_one_day"]) == (4, 8, 2, 1)
    assert s["per_typology"] == {"fan_out": {"patterns": 1, "transactions": 3, "over_one_day": 0},
                                 "cycle": {"patterns": 2, "transactions": 4, "over_one_day": 1},
                                 "scatter_gather": {"patterns": 1, "transactions": 1, "over_one_day": 0}}


def test_no_patterns_file_gives_none(tmp_path):
    trans = tmp_path / "LI-Small_Trans.csv"
    trans.write_text("header\n")
    assert pattern_stats(trans, laundering=3) is None


@pytest.mark.parametrize("text,message", [
    ("BEGIN LAUNDERING ATTEMPT - FAN-OUT\nBEGIN LAUNDERING ATTEMPT - CYCLE\n", "before the previous one ended"),
    ("END LAUNDERING ATTEMPT - FAN-OUT\n", "END without BEGIN"),
    ("2022/09/01 10:00,010,A,011,B,1,US Dollar,1,US Dollar,ACH,1\n", "outside any BEGIN/END block"),
    ("BEGIN LAUNDERING ATTEMPT - FAN-OUT\n2022/09/01 10:00,010,A,011,B,1,US Dollar,1,US Dollar,ACH,1\n", "no END"),
    ("BEGIN LAUNDERING ATTEMPT - SMURFING\n", "unknown laundering typology"),
])
def test_malformed_patterns_file_names_the_problem(tmp_path, text, message):
    path = tmp_path / "X_Patterns.txt"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        read_kaggle_patterns(path)
