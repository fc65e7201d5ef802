"""AML CSV: generate -> CSV -> load round trip, temporal splits, features, malformed files."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fgx.data.aml.cache import cache_dir, generate_csv, read_patterns
from fgx.data.aml.csv_io import read_transactions
from fgx.data.aml.features import ports
from fgx.data.aml.generator import generate, to_frame
from fgx.data.aml.presets import get_preset
from fgx.data.aml.schema import COLUMNS
from fgx.data.aml.splits import day_split, fraction_split
from fgx.data.aml_synth import AmlParams, load
from fgx.data.base import DataEnv, DataError


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("amldata")


@pytest.fixture(scope="module")
def tiny_csv(root) -> Path:
    path, hit = generate_csv(cache_dir(root, "tiny", 1.0, 0), "tiny", 1.0, 0)
    assert not hit
    return path


def env(root):
    return DataEnv(Path(root), 0, logging.getLogger("test"))


def test_csv_has_kaggle_schema_and_round_trips(tiny_csv):
    header = tiny_csv.read_text().splitlines()[0]
    assert header.split(",") == COLUMNS
    df = read_transactions(tiny_csv)
    tx = generate(get_preset("tiny"), 1.0, 0)
    assert len(df) == len(tx)
    assert np.array_equal(df["Is Laundering"].to_numpy(), tx.is_laundering)
    assert np.allclose(df["Amount Paid"].to_numpy(), tx.amount_paid, atol=0.006)
    assert np.array_equal(df["From Bank"].to_numpy(), tx.bank_ids[tx.from_bank])
    assert (df["Account"].to_numpy() == tx.account_names[tx.from_account]).all()
    minutes = ((df["Timestamp"] - pd.Timestamp("2022-09-01")).dt.total_seconds() // 60).to_numpy()
    assert np.array_equal(minutes, tx.minute)
    pat = read_patterns(tiny_csv)
    assert np.array_equal(np.sort(pat["row"].to_numpy()), np.flatnonzero(tx.is_laundering))


def test_cache_hit_and_no_temp_files_left(root, tiny_csv):
    path, hit = generate_csv(tiny_csv.parent, "tiny", 1.0, 0)
    assert hit and path == tiny_csv
    assert not list(tiny_csv.parent.glob("*.tmp"))


def test_dataset_graph_nodes_are_bank_account_pairs(root, tiny_csv):
    ds = load(AmlParams(preset="tiny"), env(root), "aml_synth", generated_only=True)
    d, info = ds.data, ds.info
    assert info.task == "edge" and info.main_metric == "f1_minority" and info.source == "generated"
    assert info.extra["cache_hit"] and info.extra["preset"] == "tiny"
    df = read_transactions(tiny_csv)
    pairs = set(zip(df["From Bank"], df["Account"])) | set(zip(df["To Bank"], df["Account.1"]))
    assert d.num_nodes == len(pairs) and d.node_bank.numel() == d.num_nodes
    assert d.edge_index.size(1) == len(df) and d.edge_attr.size(0) == len(df)
    # endpoints keep their bank
    assert torch.equal(d.node_bank[d.edge_index[0]], torch.tensor(df["From Bank"].to_numpy()))
    # z-normalised with training statistics: train rows have mean 0, std 1 (non-constant columns)
    tr = d.edge_attr[d.edge_train_mask]
    assert torch.allclose(tr.mean(0), torch.zeros(tr.size(1)), atol=1e-4)
    assert sum(info.extra["split_edges"]) == len(df)


def test_day_split_boundaries(root, tiny_csv):
    ds = load(AmlParams(preset="tiny"), env(root), "aml_synth", generated_only=True)
    df = read_transactions(tiny_csv)
    day = (df["Timestamp"] - df["Timestamp"].min().normalize()).dt.days.to_numpy()
    d = ds.data
    assert day[d.edge_train_mask.numpy()].max() == 7
    assert set(day[d.edge_val_mask.numpy()]) == {8}
    assert day[d.edge_test_mask.numpy()].min() == 9 and day[d.edge_test_mask.numpy()].max() == 13
    m = d.edge_train_mask.int() + d.edge_val_mask.int() + d.edge_test_mask.int()
    assert bool((m == 1).all())


def test_day_split_rejects_overlapping_ranges():
    with pytest.raises(DataError, match="ordered and disjoint"):
        day_split(np.arange(10), ((0, 5), (5, 6), (7, 9)))


def test_fraction_split_is_temporal():
    t = np.random.default_rng(0).integers(0, 1000, 5000)
    tr, va, te = fraction_split(t)
    assert t[tr].max() < t[va].min() and t[va].max() < t[te].min()
    assert abs(tr.mean() - 0.6) < 0.02 and abs(va.mean() - 0.2) < 0.02


def test_ports_number_neighbours_by_first_contact():
    center = np.array([0, 0, 0, 0, 1])
    other = np.array([5, 6, 5, 7, 5])
    t = np.array([3, 1, 4, 5, 0])
    assert ports(center, other, t).tolist() == [1, 0, 1, 2, 0]


def test_real_csv_preferred_when_present(root, tiny_csv):
    real_dir = root / "aml"
    real_dir.mkdir(exist_ok=True)
    (real_dir / "HI-Small_Trans.csv").write_bytes(tiny_csv.read_bytes())
    ds = load(AmlParams(preset="hi_small"), env(root), "aml_hi_small", generated_only=False)
    assert ds.info.source == "real" and ds.info.extra["file"].endswith("HI-Small_Trans.csv")
    with pytest.raises(DataError, match="not found"):
        load(AmlParams(preset="li_small", source="real"), env(root), "aml_li_small", generated_only=False)


def _write(tmp_path, text: str) -> Path:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    return p


HEADER = ",".join(COLUMNS)
ROW = "2022/09/01 00:20,10,8000EBD30,10,8000EBD30,3697.34,US Dollar,3697.34,US Dollar,Reinvestment,0"


def test_missing_column(tmp_path):
    p = _write(tmp_path, HEADER.replace(",Payment Format", "") + "\n")
    with pytest.raises(DataError, match=r"bad\.csv: line 1: .*missing column\(s\) \['Payment Format'\]"):
        read_transactions(p)


def test_bad_number_names_line_and_column(tmp_path):
    bad = ROW.replace("3697.34,US Dollar,3697.34", "3697.34,US Dollar,12x.5")
    p = _write(tmp_path, "\n".join([HEADER, ROW, ROW, bad, ROW]) + "\n")
    with pytest.raises(DataError, match=r"bad\.csv: line 4, column 'Amount Paid': expected a number, got '12x\.5'"):
        read_transactions(p)


def test_bad_bank_id_names_line_and_column(tmp_path):
    p = _write(tmp_path, "\n".join([HEADER, ROW, ROW.replace(",10,8000EBD30,10", ",10,8000EBD30,ten")]) + "\n")
    with pytest.raises(DataError, match=r"line 3, column 'To Bank'"):
        read_transactions(p)


def test_unknown_currency_names_line_and_column(tmp_path):
    p = _write(tmp_path, "\n".join([HEADER, ROW, ROW, ROW.replace(",US Dollar,Reinvestment", ",Doubloon,Reinvestment")]) + "\n")
    with pytest.raises(DataError, match=r"line 4, column 'Payment Currency': unknown value 'Doubloon'"):
        read_transactions(p)


def test_bad_timestamp_and_label(tmp_path):
    p = _write(tmp_path, "\n".join([HEADER, ROW.replace("2022/09/01 00:20", "yesterday")]) + "\n")
    with pytest.raises(DataError, match=r"line 2, column 'Timestamp'"):
        read_transactions(p)
    p = _write(tmp_path, "\n".join([HEADER, ROW, ROW[:-1] + "2"]) + "\n")
    with pytest.raises(DataError, match=r"line 3, column 'Is Laundering'"):
        read_transactions(p)


def test_chunked_csv_write_equals_one_piece(tmp_path):
    from fgx.data.aml.csv_io import write_csv_atomic
    from fgx.data.aml.generator import to_frames

    tx = generate(get_preset("tiny"), 0.2, 5)
    write_csv_atomic(to_frames(tx, chunk=777), tmp_path / "chunked.csv")
    write_csv_atomic(to_frame(tx), tmp_path / "whole.csv")
    assert (tmp_path / "chunked.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()


def test_fast_csv_lines_match_pandas_float_format(tmp_path):
    from fgx.data.aml.csv_io import write_csv_atomic

    frame = to_frame(generate(get_preset("tiny"), 0.05, 1))
    frame.loc[0, "Amount Paid"] = -12.3456     # (exact half-cent ties may round differently)
    frame.loc[1, "Amount Received"] = 0.004
    frame.loc[2, "Amount Received"] = 123456789.999
    write_csv_atomic(frame, tmp_path / "fast.csv")
    frame.to_csv(tmp_path / "pandas.csv", index=False, header=COLUMNS, float_format="%.2f")
    assert (tmp_path / "fast.csv").read_text() == (tmp_path / "pandas.csv").read_text()
