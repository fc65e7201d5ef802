"""Hostile inputs: property-based tests over configs and file loaders, plus the graph-level cases
(NaN features, clients without training nodes, more clients than nodes, empty files). Every case
ends in a clear error that names the input (ConfigError / DataError / a `fgx:` message), never a
traceback from inside torch, and never a half-written run directory."""
from __future__ import annotations

import json
import logging
import os
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fgx.data.base import DataEnv, DataError

# FGX_FUZZ_EXAMPLES: tests/test_hostile_files.py's slow test reruns the file fuzzers with 250 each
FUZZ = settings(max_examples=int(os.environ.get("FGX_FUZZ_EXAMPLES", "40")), deadline=None,
                suppress_health_check=list(HealthCheck), database=None)


def count(loader: str) -> None:
    """Note one generated input (counted per loader by the slow test in test_hostile_files.py)."""
    out = os.environ.get("FGX_FUZZ_COUNT_DIR")
    if out:
        with open(Path(out) / f"{loader}.count", "a") as f:
            f.write("1\n")

# ------------------------------------------------------------------------------------------ configs
KEYS = ["rounds", "seed", "eval_every", "device", "main_metric", "output.progress", "output.checkpoint",
        "partitioner.num_clients", "model.hidden", "model.num_layers", "model.dropout", "algorithm.lr",
        "algorithm.local_steps", "algorithm.batch_size", "algorithm.fanouts", "algorithm.client_fraction",
        "dataset.num_nodes", "dataset.homophily", "dataset.train", "dataset.val", "logger", "nonexistent.key",
        "dataset", "model", "algorithm", "partitioner", "privacy"]
VALUES = st.one_of(
    st.integers(min_value=-10**12, max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "null", "true", "[]", "[1,-2]", "[a, b]", "{}", "{x: 1}", "nan", "-inf", "1e400",
                     "'quoted'", "cpu", "cuda", "gcn", "fedavg", "metis", "csbm", "${oc.env:NOPE}", "${rounds}"]),
    st.text(alphabet=string.ascii_letters + string.digits + "_-.:/ ", max_size=12),
)


@FUZZ
@given(pairs=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), min_size=1, max_size=3))
def test_any_override_either_validates_or_fails_with_an_fgx_message(pairs):
    from fgx.cli import prevalidate

    overrides = [f"{k}={v}" for k, v in pairs]
    try:
        prevalidate(["dataset=csbm", *overrides], multirun=False)
    except SystemExit as e:
        msg = str(e.code)
        assert msg.startswith("fgx: ") and "Traceback" not in msg, msg
        assert "config error" in msg or "Could not" in msg or "override" in msg.lower(), msg


# ------------------------------------------------------------------------------------------ AML CSV
AML_HEADER = "Timestamp,From Bank,Account,To Bank,Account,Amount Received,Receiving Currency,Amount Paid," \
             "Payment Currency,Payment Format,Is Laundering"
AML_ROW = "2022/09/01 00:20,010,8000EBD30,010,8000EBD30,3697.34,US Dollar,3697.34,US Dollar,Reinvestment,0"
CELL = st.one_of(st.text(alphabet=string.printable, max_size=8), st.sampled_from(["", "nan", "-1", "1e309", "\x00"]))


@FUZZ
@given(data=st.data())
def test_malformed_aml_csv_is_a_data_error_naming_the_file(tmp_path_factory, data):
    from fgx.data.aml.csv_io import read_transactions

    count("aml_csv_reader")
    rows = [AML_ROW.split(",") for _ in range(data.draw(st.integers(0, 4)))]
    for row in rows:
        for _ in range(data.draw(st.integers(0, 2))):
            i = data.draw(st.integers(0, len(row) - 1))
            row[i] = data.draw(CELL).replace(",", ";").replace("\n", " ")
    lines = [AML_HEADER] + [",".join(r) for r in rows]
    if data.draw(st.booleans()):
        lines = lines[: data.draw(st.integers(0, len(lines)))]
    path = tmp_path_factory.mktemp("aml") / "Trans.csv"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + data.draw(st.sampled_from([b"", b"\n", b"\xff\xfe"])))
    try:
        df = read_transactions(path)
    except DataError as e:
        assert str(path) in str(e)
        return
    assert 0 < len(df) <= len(rows)


# ------------------------------------------------------------------------------------------ ratings
LINE = st.one_of(
    st.tuples(st.integers(-5, 10**20), st.integers(-5, 10**20), st.integers(0, 5), st.integers(0, 10**9))
      .map(lambda t: "\t".join(map(str, t))),
    st.text(alphabet=string.printable, max_size=30),
)


def _env(tmp: Path) -> DataEnv:
    return DataEnv(tmp, 0, logging.getLogger("test"))


@FUZZ
@given(lines=st.lists(LINE, max_size=8), tail=st.sampled_from([b"", b"\xff\xfe\x00", b"\n\n"]))
def test_malformed_ratings_file_is_a_data_error_naming_the_file(tmp_path_factory, lines, tail):
    from fgx.data.movielens import ML1MParams, load_movielens1m

    count("ratings_dat")
    d = tmp_path_factory.mktemp("ml")
    path = d / "ratings.dat"
    path.write_bytes("\n".join(l.replace("\t", "::") for l in lines).encode() + tail)
    try:
        load_movielens1m(ML1MParams(path=str(path)), _env(d))
    except DataError as e:
        assert str(path) in str(e) or "dataset." in str(e) or "interaction" in str(e) or "user" in str(e), str(e)


@FUZZ
@given(train=st.lists(st.text(alphabet=string.digits + " -x\t", max_size=20), max_size=6),
       tail=st.sampled_from([b"", b"\xff\xfe\x00", b"\n"]))
def test_malformed_lightgcn_files_are_a_data_error_naming_the_file(tmp_path_factory, train, tail):
    from fgx.data.lightgcn_files import LightGCNFilesParams, load_lightgcn_files

    count("lightgcn")
    d = tmp_path_factory.mktemp("lg")
    (d / "train.txt").write_bytes("\n".join(train).encode() + tail)
    (d / "test.txt").write_text("0 1\n1 0\n")
    p = LightGCNFilesParams(train_path=str(d / "train.txt"), test_path=str(d / "test.txt"))
    try:
        load_lightgcn_files(p, _env(d))
    except DataError as e:
        assert "train.txt" in str(e) or "test.txt" in str(e) or "interaction" in str(e) or "user" in str(e), str(e)


# ------------------------------------------------------------------------------------------ graphs
def _failed(run_dir: Path) -> dict:
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "failed"
    assert not list(run_dir.glob(".*.tmp")), "a temporary file was left behind"
    return s


def _refused(run_fgx, capsys, *args) -> str:
    """A single run refused once its data are loaded: exit 2, the error on stderr, and no run directory."""
    capsys.readouterr()
    run_dir = run_fgx(*args, expect_rc=2)
    assert not run_dir.exists(), "a refused run left a run directory"
    return capsys.readouterr().err


def test_nan_features_are_refused_naming_the_dataset(run_fgx, tiny_cfg, monkeypatch, capsys):
    import fgx.data.csbm as csbm

    real = csbm.csbm_graph

    def poisoned(*a, **k):
        data = real(*a, **k)
        data.x[7, 3] = float("nan")
        return data

    monkeypatch.setattr(csbm, "csbm_graph", poisoned)
    err = _refused(run_fgx, capsys, *tiny_cfg)
    assert "fgx: data error: dataset 'csbm'" in err and "node 7, column 3" in err


def test_a_client_without_training_nodes_is_refused(run_fgx, tiny_cfg, capsys):
    err = _refused(run_fgx, capsys, *tiny_cfg, "dataset.train=0.01", "partitioner.num_clients=12")
    assert "data error" in err and "hold no training nodes" in err and "partitioner.num_clients" in err


def test_more_clients_than_nodes_is_refused(run_fgx, tiny_cfg, capsys):
    err = _refused(run_fgx, capsys, *tiny_cfg, "partitioner.num_clients=301")
    assert "num_clients=301" in err and "300 nodes" in err


def test_edges_outside_the_graph_are_refused():
    import torch
    from torch_geometric.data import Data

    from fgx.data.base import DatasetInfo, GraphDataset
    from fgx.data.checks import check_graph

    data = Data(x=torch.zeros(3, 2), edge_index=torch.tensor([[0, 1], [1, 5]]), y=torch.zeros(3, dtype=torch.long))
    with pytest.raises(DataError, match=r"'g': edge endpoints must lie in \[0, 3\); found 5"):
        check_graph(GraphDataset(data, DatasetInfo("g", "node", 2, "accuracy", "generated")), "g")
    empty = Data(x=torch.zeros(0, 2), edge_index=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(DataError, match="has no nodes"):
        check_graph(GraphDataset(empty, DatasetInfo("g", "node", 2, "accuracy", "generated")), "g")


def test_missing_data_file_is_refused_before_training(run_fgx, tmp_path, capsys):
    err = _refused(run_fgx, capsys, "dataset=movielens1m", f"dataset.path={tmp_path / 'nope.dat'}",
                   "partitioner=random_users", "model=lgcn", "algorithm=lpsfed", "rounds=1")
    assert "nope.dat" in err and "does not exist" in err


@FUZZ
@given(junk=st.one_of(st.binary(max_size=64), st.sampled_from([b"PK\x03\x04", b"\x93NUMPY"])))
def test_a_damaged_eigenpair_cache_is_recomputed(tmp_path_factory, junk):
    import numpy as np

    from fgx.recsys.spectral import cached_eigenpairs

    d = tmp_path_factory.mktemp("eig")
    users, items = np.array([0, 0, 1, 2, 2]), np.array([0, 1, 1, 0, 2])
    w0, v0 = cached_eigenpairs(users, items, 3, 3, 2, d)
    (cache,) = d.glob("eig_*.npz")
    cache.write_bytes(junk)
    w, v = cached_eigenpairs(users, items, 3, 3, 2, d)
    assert np.allclose(w, w0) and v.shape == v0.shape


# ------------------------------------------------------------------------------------------ edge lists
EDGE_LINE = st.one_of(
    st.tuples(st.integers(0, 30), st.integers(0, 30)).map(lambda t: f"{t[0]} {t[1]}"),
    st.text(alphabet=string.digits + string.ascii_letters + " \t#.-{}", max_size=16),
)


@FUZZ
@given(lines=st.lists(EDGE_LINE, max_size=10), tail=st.sampled_from([b"", b"\xff\xfe\x00", b"\n"]))
def test_malformed_edge_list_is_an_error_naming_the_file(tmp_path_factory, lines, tail):
    from fgx.config import ConfigError
    from fgx.decentral.topology import read_edgelist

    count("edge_list")
    path = tmp_path_factory.mktemp("el") / "graph.edges"
    path.write_bytes("\n".join(lines).encode() + tail)
    try:
        g = read_edgelist(str(path))
    except DataError as e:
        assert str(path) in str(e) and "partitioner.edgelist_path" in str(e), str(e)
        return
    except ConfigError as e:
        assert "partitioner.edgelist_path" in str(e), str(e)
        return
    # accepted: then every non-comment line was exactly an edge and the graph is their largest component
    assert g.number_of_nodes() >= 2 and g.number_of_edges() >= 1


def test_edge_list_line_with_one_id_is_refused_not_skipped(tmp_path):
    from fgx.decentral.topology import read_edgelist

    path = tmp_path / "g.edges"
    path.write_text("0 1\n1 2\n7\n2 0\n")
    with pytest.raises(DataError, match=r"g\.edges, line 3: expected two node ids"):
        read_edgelist(str(path))
    path.write_text("0 1 0.5\n# comment\n1 2   # trailing\n")
    assert sorted(read_edgelist(str(path)).edges()) == [("0", "1"), ("1", "2")]


# ------------------------------------------------------------------------------------------ tabular CSV
CSV_CELL = st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
                     st.sampled_from(["", "nan", "x", "1e400", "-", "1,2"]))


@FUZZ
@given(rows=st.lists(st.lists(CSV_CELL, min_size=1, max_size=4), max_size=6),
       tail=st.sampled_from([b"", b"\xff\xfe\x00", b"\n"]))
def test_malformed_tabular_csv_is_a_data_error_naming_the_file(tmp_path_factory, rows, tail):
    from fgx.data.tabular import TabularParams, load_housing

    count("tabular_csv")
    d = tmp_path_factory.mktemp("csv")
    path = d / "housing.csv"
    path.write_bytes(("a,b,c\n" + "\n".join(",".join(r) for r in rows)).encode() + tail)
    try:
        ds = load_housing(TabularParams(path=str(path)), _env(d))
    except DataError as e:
        assert str(path) in str(e), str(e)
        return
    assert torch_finite(ds.data.x) and torch_finite(ds.data.y)


def test_tabular_csv_error_names_line_and_column(tmp_path):
    from fgx.data.tabular import TabularParams, load_housing

    path = tmp_path / "h.csv"
    path.write_text("f1,f2,target\n1,2,3\n4,oops,6\n7,8,9\n")
    with pytest.raises(DataError, match=r"h\.csv, line 3, column 2 \('f2'\): 'oops' is not a finite number"):
        load_housing(TabularParams(path=str(path)), _env(tmp_path))


def torch_finite(t) -> bool:
    import torch

    return bool(torch.isfinite(t).all())


# ------------------------------------------------------------------------------------------ ecosystem loaders
@pytest.mark.parametrize("junk", [b"", b"PK\x03\x04 not a zip", b"\x93NUMPY\x01\x00garbage"])
def test_damaged_npz_of_a_pyg_dataset_is_a_data_error_naming_it(tmp_path, junk):
    """PyG's HeterophilousGraphDataset reads <root>/minesweeper/raw/minesweeper.npz with numpy;
    a damaged file must not surface as numpy's traceback."""
    from fgx.data.heterophilous import HeterophilousParams, load_heterophilous

    raw = tmp_path / "minesweeper" / "raw"
    raw.mkdir(parents=True)
    (raw / "minesweeper.npz").write_bytes(junk)
    with pytest.raises(DataError, match=r"minesweeper\.npz: not a readable \.npz file"):
        load_heterophilous(HeterophilousParams(), _env(tmp_path))
    assert not (tmp_path / "minesweeper" / "processed" / "data.pt").exists()


def test_damaged_planetoid_raw_file_is_a_data_error_naming_it(tmp_path):
    from fgx.data.planetoid import RAW, PlanetoidParams, load_planetoid

    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    for r in RAW:
        (raw / r.format("cora")).write_bytes(b"not a pickle")
    with pytest.raises(DataError, match=r"ind\.cora\.x: not a readable Planetoid pickle"):
        load_planetoid(PlanetoidParams(), _env(tmp_path))
