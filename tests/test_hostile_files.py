"""Hostile data files, generated (hypothesis), for every file loader that tests/test_hostile_inputs.py
does not already fuzz: the heterophilous .npz, Planetoid's raw pickles, OGB's ogbn-arxiv CSVs,
MovieLens' u.data and the FedGB folder. Every generated input is damaged (truncated, empty, wrong
dtype or shape, NaN/inf, negative or out-of-range indices, labels beyond the classes, missing
pieces, code in a pickle); each must end in a DataError that names the file, or (where the damage
happens to be harmless) in data that passes the trainer's checks; never another exception, never
a processed cache or temporary folder left behind.

The default suite runs FGX_FUZZ_EXAMPLES (25) inputs per loader; the slow test at the end runs
these tests and tests/test_hostile_inputs.py' file fuzzers with 250 each and checks that at least
200 damaged inputs per loader were tried."""
from __future__ import annotations

import gzip
import io
import json
import logging
import os
import pickle
import string
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from fgx.config import ConfigError
from fgx.data.base import DataEnv, DataError
from fgx.data.checks import check_graph

# importing ogb starts a thread that asks PyPI for a newer version (package 'outdated'): tests never
# reach the network, so that check is switched off here (ogb then skips it)
if "ogb" not in sys.modules:
    sys.modules.setdefault("outdated", None)

EXAMPLES = int(os.environ.get("FGX_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
REPO = Path(__file__).resolve().parents[1]


def count(loader: str) -> None:
    """Note one generated input (the slow test below counts them per loader)."""
    out = os.environ.get("FGX_FUZZ_COUNT_DIR")
    if out:
        with open(Path(out) / f"{loader}.count", "a") as f:
            f.write("1\n")


def env(root: Path) -> DataEnv:
    return DataEnv(Path(root), 0, logging.getLogger("test"))


def expect_refusal(load, names: list[str], root: Path, dataset: str, must_fail: bool = True,
                   cache_allowed: bool = False) -> None:
    """The contract: a DataError (or ConfigError) that names one of ``names``, or data that the
    trainer's checks accept when the damage was harmless; nothing half-prepared and no lock file left in ``root``, and
    no processed cache built from a damaged file (``cache_allowed``: the damage is in a file the
    cache is not built from)."""
    try:
        ds = load()
    except (DataError, ConfigError) as e:
        msg = str(e)
        assert any(n in msg for n in names), msg
        assert "Traceback" not in msg
        left = [p for p in Path(root).rglob("*") if ".tmp-" in p.name or p.name.endswith(".lock") or
                (p.name == ".fgx-complete" and not cache_allowed)]
        assert not left, f"a refused input left {left}"
        return
    try:
        check_graph(ds, dataset)
    except DataError as e:
        assert dataset in str(e), str(e)
        return
    assert not must_fail, "a damaged input was accepted"


def mutate_bytes(data, raw: bytes) -> tuple[bytes, bool]:
    """Damaged bytes, and whether the damage may be harmless (one flipped byte can land where it
    changes nothing, e.g. in a tensor's values or a zip member's padding)."""
    kind = data.draw(st.sampled_from(["truncate", "garbage", "empty", "flip"]))
    if kind == "truncate":
        return raw[: data.draw(st.integers(0, max(0, len(raw.rstrip()) - 1)))], False
    if kind == "garbage":
        return data.draw(st.binary(min_size=1, max_size=64)), False
    if kind == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        return raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:], True
    return b"", False


# --------------------------------------------------------------------------------------------- npz
NPZ_KINDS = ["bytes", "drop_key", "features_dtype", "features_shape", "nan", "label_range", "label_float",
             "label_shape", "edge_range", "edge_shape", "edge_dtype", "mask_shape", "mask_dtype", "object"]


def valid_npz(n: int = 12) -> dict:
    g = np.random.default_rng(0)
    return {"node_features": g.normal(size=(n, 3)).astype(np.float32),
            "node_labels": g.integers(0, 2, n).astype(np.int64),
            "edges": np.stack([np.arange(n), (np.arange(n) + 1) % n], 1).astype(np.int64),
            "train_masks": g.random((10, n)) < 0.5, "val_masks": g.random((10, n)) < 0.25,
            "test_masks": g.random((10, n)) < 0.25}


def damage_npz(data, arrays: dict, kind: str) -> tuple[dict, bytes, bool]:
    n = arrays["node_features"].shape[0]
    if kind == "drop_key":
        arrays.pop(data.draw(st.sampled_from(sorted(arrays))))
    elif kind == "features_dtype":
        arrays["node_features"] = arrays["node_features"].astype(str)
    elif kind == "features_shape":
        arrays["node_features"] = arrays["node_features"].reshape(-1) if data.draw(st.booleans()) \
            else arrays["node_features"][:, :, None]
    elif kind == "nan":
        f = arrays["node_features"]
        f[data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, 2))] = data.draw(
            st.sampled_from([np.nan, np.inf, -np.inf]))
    elif kind == "label_range":
        arrays["node_labels"][data.draw(st.integers(0, n - 1))] = data.draw(
            st.one_of(st.integers(-10**6, -1), st.integers(2, 10**6)))
    elif kind == "label_float":
        arrays["node_labels"] = arrays["node_labels"] + 0.5
    elif kind == "label_shape":
        arrays["node_labels"] = arrays["node_labels"][:-1] if data.draw(st.booleans()) \
            else arrays["node_labels"][:, None]
    elif kind == "edge_range":
        arrays["edges"][data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, 1))] = data.draw(
            st.one_of(st.integers(-10**9, -1), st.integers(n, 10**9)))
    elif kind == "edge_shape":
        arrays["edges"] = np.concatenate([arrays["edges"], arrays["edges"][:, :1]], 1) \
            if data.draw(st.booleans()) else arrays["edges"].reshape(-1)
    elif kind == "edge_dtype":
        arrays["edges"] = arrays["edges"].astype(np.float64) + 0.25
    elif kind == "mask_shape":
        key = data.draw(st.sampled_from(["train_masks", "val_masks", "test_masks"]))
        arrays[key] = arrays[key][0] if data.draw(st.booleans()) else arrays[key][:, :-1]
    elif kind == "mask_dtype":
        key = data.draw(st.sampled_from(["train_masks", "val_masks", "test_masks"]))
        arrays[key] = arrays[key].astype(np.int64) * 2
    elif kind == "object":
        arrays["node_labels"] = np.array([{"x": 1}] * n, dtype=object)
    buf = io.BytesIO()
    np.savez(buf, **arrays, allow_pickle=True) if kind == "object" else np.savez(buf, **arrays)
    raw, maybe_harmless = buf.getvalue(), False
    if kind == "bytes":
        raw, maybe_harmless = mutate_bytes(data, raw)
    return arrays, raw, maybe_harmless


@FUZZ
@given(data=st.data())
def test_damaged_heterophilous_npz_is_refused_naming_the_file(tmp_path_factory, data):
    from fgx.data.heterophilous import HeterophilousParams, load_heterophilous

    count("npz")
    root = tmp_path_factory.mktemp("npz")
    raw_dir = root / "minesweeper" / "raw"
    raw_dir.mkdir(parents=True)
    kind = data.draw(st.sampled_from(NPZ_KINDS))
    arrays, raw, harmless = damage_npz(data, valid_npz(), kind)
    (raw_dir / "minesweeper.npz").write_bytes(raw)
    expect_refusal(lambda: load_heterophilous(HeterophilousParams(), env(root)), ["minesweeper.npz"], root,
                   "minesweeper", must_fail=not harmless)


def test_a_valid_npz_loads_and_is_cached_once(tmp_path):
    from fgx.data.heterophilous import HeterophilousParams, load_heterophilous

    raw_dir = tmp_path / "minesweeper" / "raw"
    raw_dir.mkdir(parents=True)
    np.savez(raw_dir / "minesweeper.npz", **valid_npz())
    ds = load_heterophilous(HeterophilousParams(), env(tmp_path))
    assert ds.data.num_nodes == 12 and (tmp_path / "minesweeper" / "processed" / ".fgx-complete").is_file()


GEOM_KINDS = ["bytes", "label_range", "label_text", "edge_range", "edge_fields", "id_duplicate", "feature_text",
              "feature_nan", "split_key", "split_dtype", "split_length", "missing"]


@FUZZ
@given(data=st.data())
def test_damaged_geom_gcn_files_are_refused_naming_the_file(tmp_path_factory, data):
    """Geom-GCN's text files and split .npz, as PyG's WikipediaNetwork / Actor read them."""
    from fgx.data.geom_gcn import GeomGcnParams, load_geom_gcn
    from test_heterophily_sets import write_geom_gcn

    count("geom_gcn")
    root = tmp_path_factory.mktemp("geom")
    name = data.draw(st.sampled_from(["chameleon", "actor"]))
    raw = root / ("chameleon/geom_gcn" if name == "chameleon" else "actor_pyg") / "raw"
    write_geom_gcn(raw, name, n=20)
    nodes, edges = raw / "out1_node_feature_label.txt", raw / "out1_graph_edges.txt"
    split = raw / f"{'film' if name == 'actor' else name}_split_0.6_0.2_{data.draw(st.integers(0, 9))}.npz"
    kind = data.draw(st.sampled_from(GEOM_KINDS))
    target, harmless = nodes, False
    lines = nodes.read_text().split("\n")
    row = data.draw(st.integers(1, 20))
    nid, feats, label = lines[row].split("\t")
    if kind == "bytes":
        target = data.draw(st.sampled_from([nodes, edges, split]))
        raw_bytes, harmless = mutate_bytes(data, target.read_bytes())
        target.write_bytes(raw_bytes)
    elif kind in ("label_range", "label_text", "id_duplicate", "feature_text", "feature_nan"):
        if kind == "label_range":
            label = str(data.draw(st.one_of(st.integers(-10**6, -1), st.integers(5, 10**6))))
        elif kind == "label_text":
            label = data.draw(st.sampled_from(["", "x", "1.5"]))
        elif kind == "id_duplicate":
            nid = str(data.draw(st.sampled_from([0, 25, -1])) if row != 1 else 25)
        elif kind == "feature_text":
            feats = feats + data.draw(st.sampled_from([",a", ",", ";1"]))
        else:
            feats = "nan," + feats if name == "chameleon" else "-3," + feats
        lines[row] = "\t".join([nid, feats, label])
        nodes.write_text("\n".join(lines))
    elif kind in ("edge_range", "edge_fields"):
        target = edges
        e = edges.read_text().split("\n")
        e[1] = f"0\t{data.draw(st.sampled_from([20, 10**9, -1]))}" if kind == "edge_range" else "0\t1\t2"
        edges.write_text("\n".join(e))
    elif kind == "missing":
        target = data.draw(st.sampled_from([nodes, edges, split]))
        target.unlink()
    else:
        target = split
        with np.load(split) as z:
            m = dict(z)
        key = data.draw(st.sampled_from(sorted(m)))
        if kind == "split_key":
            m.pop(key)
        elif kind == "split_dtype":
            m[key] = m[key].astype(np.float64) + 0.5
        else:
            m[key] = m[key][:-1]
        np.savez(split, **m)
    if kind == "missing":     # PyG would download it: offline here, that must fail naming the folder
        from unittest import mock

        with mock.patch("urllib.request.urlopen", side_effect=OSError("network is unreachable")):
            expect_refusal(lambda: load_geom_gcn(GeomGcnParams(dataset=name), env(root)), [str(raw.parent)], root,
                           name)
        return
    expect_refusal(lambda: load_geom_gcn(GeomGcnParams(dataset=name), env(root)), [target.name], root,
                   name if name != "actor" else "actor_pyg", must_fail=not harmless)


# --------------------------------------------------------------------------------------- Planetoid
class _Runs:
    """A pickle that would run a shell command when unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def planetoid_files(n_train: int = 3, n_test: int = 4, f: int = 5, classes: int = 7) -> dict:
    import scipy.sparse as sp

    g = np.random.default_rng(1)
    n_all = n_train + 500 + 2
    n = n_all + n_test
    onehot = np.eye(classes, dtype=np.int64)[g.integers(0, classes, n)]
    feats = (g.random((n, f)) < 0.4).astype(np.float32)
    graph = defaultdict(list, {i: [(i + 1) % n, (i + 7) % n] for i in range(n)})
    test = g.permutation(np.arange(n_all, n))
    return {"x": sp.csr_matrix(feats[:n_train]), "y": onehot[:n_train], "allx": sp.csr_matrix(feats[:n_all]),
            "ally": onehot[:n_all], "tx": sp.csr_matrix(feats[n_all:]), "ty": onehot[n_all:], "graph": graph,
            "test.index": "\n".join(map(str, test)) + "\n"}


PLANETOID_KINDS = ["bytes", "code", "wrong_type", "classes", "feature_columns", "rows", "nan", "graph_range",
                   "graph_type", "graph_not_dict", "test_text", "test_range", "test_duplicate", "missing"]


def write_planetoid(raw: Path, files: dict) -> dict[str, bytes]:
    out = {}
    for k, v in files.items():
        out[k] = v.encode() if k == "test.index" else pickle.dumps(v, protocol=2)
        (raw / f"ind.cora.{k}").write_bytes(out[k])
    return out


@FUZZ
@given(data=st.data())
def test_damaged_planetoid_raw_files_are_refused_naming_the_file(tmp_path_factory, data):
    import scipy.sparse as sp

    from fgx.data.planetoid import PlanetoidParams, load_planetoid

    count("planetoid")
    root = tmp_path_factory.mktemp("planetoid")
    raw = root / "Cora" / "raw"
    raw.mkdir(parents=True)
    files = planetoid_files()
    kind = data.draw(st.sampled_from(PLANETOID_KINDS))
    target = data.draw(st.sampled_from(["x", "y", "tx", "ty", "allx", "ally"]))
    marker = root / "code-ran"
    harmless = False
    if kind == "code":
        files[data.draw(st.sampled_from(["x", "y", "allx", "graph"]))] = _Runs(marker)
    elif kind == "wrong_type":
        files[data.draw(st.sampled_from([target, "graph"]))] = data.draw(
            st.sampled_from([[1, 2], "text", 7, {"a": 1}, None, np.zeros(3)]))
    elif kind == "classes":
        label = data.draw(st.sampled_from(["y", "ty", "ally"]))
        files[label] = np.concatenate([files[label], np.zeros((files[label].shape[0], 2), np.int64)], 1)
    elif kind == "feature_columns":
        feat = data.draw(st.sampled_from(["tx", "allx"]))
        files[feat] = sp.hstack([files[feat], sp.csr_matrix(np.ones((files[feat].shape[0], 1)))]).tocsr()
    elif kind == "rows":
        files[target] = files[target][:-1]
    elif kind == "nan":
        feat = data.draw(st.sampled_from(["x", "tx", "allx"]))
        dense = np.asarray(files[feat].todense())
        dense[0, data.draw(st.integers(0, 4))] = data.draw(st.sampled_from([np.nan, np.inf]))
        files[feat] = dense if data.draw(st.booleans()) else sp.csr_matrix(dense)
    elif kind == "graph_range":
        node = data.draw(st.integers(0, 508))
        files["graph"][node] = [data.draw(st.one_of(st.integers(-10**6, -1), st.integers(509, 10**12)))]
    elif kind == "graph_type":
        files["graph"][data.draw(st.integers(0, 508))] = [data.draw(st.sampled_from(["3", 1.5, None]))]
    elif kind == "graph_not_dict":
        files["graph"] = [[1, 2], [0]]
    elif kind == "test_text":
        files["test.index"] = data.draw(st.text(alphabet=string.ascii_letters + ".-,", min_size=1, max_size=12))
    elif kind == "test_range":
        values = files["test.index"].split()
        values[data.draw(st.integers(0, len(values) - 1))] = str(data.draw(
            st.one_of(st.integers(-10**6, 504), st.integers(509, 10**30))))
        files["test.index"] = "\n".join(values)
    elif kind == "test_duplicate":
        values = files["test.index"].split()
        files["test.index"] = "\n".join(values[:-1] + values[:1])
    written = write_planetoid(raw, files)
    if kind == "bytes":
        name = data.draw(st.sampled_from(sorted(written)))
        damaged, harmless = mutate_bytes(data, written[name])
        (raw / f"ind.cora.{name}").write_bytes(damaged)
    elif kind == "missing":
        (raw / f"ind.cora.{data.draw(st.sampled_from(sorted(written)))}").unlink()
    expect_refusal(lambda: load_planetoid(PlanetoidParams(), env(root)), ["ind.cora."], root, "cora",
                   must_fail=not harmless)
    assert not marker.exists(), "code inside a data file ran"


def test_a_valid_tiny_planetoid_set_loads(tmp_path):
    from fgx.data.planetoid import PlanetoidParams, load_planetoid

    raw = tmp_path / "Cora" / "raw"
    raw.mkdir(parents=True)
    write_planetoid(raw, planetoid_files())
    ds = load_planetoid(PlanetoidParams(), env(tmp_path))
    assert ds.data.num_nodes == 509 and ds.info.num_classes == 7


# --------------------------------------------------------------------------------------------- OGB
HAS_OGB = __import__("importlib").util.find_spec("ogb") is not None
OGB_FILES = ["edge", "num-node-list", "num-edge-list", "node-feat", "node-label", "node_year"]


def ogb_tables(n: int = 8) -> dict[str, list[list]]:
    g = np.random.default_rng(2)
    edges = [[i, (i + 1) % n] for i in range(n)] + [[0, 4], [2, 6]]
    return {"edge": edges, "num-node-list": [[n]], "num-edge-list": [[len(edges)]],
            "node-feat": [list(map(float, r)) for r in g.normal(size=(n, 3)).round(3)],
            "node-label": [[int(v)] for v in g.integers(0, 40, n)], "node_year": [[2010 + i % 5] for i in range(n)],
            "train": [[0], [1], [2], [3]], "valid": [[4], [5]], "test": [[6], [7]]}


def write_ogb(folder: Path, tables: dict) -> dict[str, Path]:
    (folder / "raw").mkdir(parents=True, exist_ok=True)
    (folder / "split" / "time").mkdir(parents=True, exist_ok=True)
    (folder / "RELEASE_v1.txt").write_text("ogbn-arxiv v1\n")
    paths = {}
    for name, rows in tables.items():
        path = folder / ("split/time" if name in ("train", "valid", "test") else "raw") / f"{name}.csv.gz"
        path.write_bytes(gzip.compress("".join(",".join(map(str, r)) + "\n" for r in rows).encode()))
        paths[name] = path
    return paths


OGB_KINDS = ["bytes", "plain_text", "cell", "label_range", "edge_range", "node_count", "edge_count", "columns",
             "missing", "release", "split"]


@pytest.mark.skipif(not HAS_OGB, reason="ogb is not installed (pip install -e '.[ogb]')")
@FUZZ
@given(data=st.data())
def test_damaged_ogbn_arxiv_files_are_refused_naming_the_file(tmp_path_factory, data):
    from fgx.data.ogbn_arxiv import OgbnArxivParams, load_ogbn_arxiv

    count("ogb")
    root = tmp_path_factory.mktemp("ogb")
    folder = root / "ogbn_arxiv"
    tables = ogb_tables()
    kind = data.draw(st.sampled_from(OGB_KINDS))
    name = data.draw(st.sampled_from(OGB_FILES))
    if kind == "cell":
        which = data.draw(st.sampled_from(["node-feat", "node-label", "edge"]))
        table = tables[which]
        row = table[data.draw(st.integers(0, len(table) - 1))]
        bad = ["nan", "inf", "-inf", "x", "", "1.5e"] + ([] if which == "node-feat" else ["1.5"])
        row[data.draw(st.integers(0, len(row) - 1))] = data.draw(st.sampled_from(bad))
    elif kind == "label_range":
        tables["node-label"][data.draw(st.integers(0, 7))] = [data.draw(st.one_of(st.integers(-99, -1),
                                                                                  st.integers(40, 10**6)))]
    elif kind == "edge_range":
        tables["edge"][data.draw(st.integers(0, 9))][data.draw(st.integers(0, 1))] = data.draw(
            st.one_of(st.integers(-10**6, -1), st.integers(8, 10**15)))
    elif kind == "node_count":
        tables["num-node-list"] = [[data.draw(st.sampled_from([0, 7, 9, 10**6]))]]
    elif kind == "edge_count":
        tables["num-edge-list"] = [[data.draw(st.sampled_from([0, 9, 11]))]]
    elif kind == "columns":
        tables["node-label"] = [r + [1] for r in tables["node-label"]]
    elif kind == "split":
        part = tables[data.draw(st.sampled_from(["train", "valid", "test"]))]
        part[0] = [data.draw(st.sampled_from([-1, 8, 10**9, "a"]))]
    paths = write_ogb(folder, tables)
    harmless = False
    if kind == "bytes":
        damaged, harmless = mutate_bytes(data, paths[name].read_bytes())
        paths[name].write_bytes(damaged)
    elif kind == "plain_text":
        paths[name].write_text("0,1\n1,2\n")
    elif kind == "missing":
        paths[name].unlink()
    elif kind == "release":
        (folder / "RELEASE_v1.txt").unlink()
    p = OgbnArxivParams(split="official" if kind == "split" else "random", lcc=False)
    expect_refusal(lambda: load_ogbn_arxiv(p, env(root)), [".csv.gz", "RELEASE_v1.txt"], root, "ogbn_arxiv",
                   must_fail=not harmless, cache_allowed=kind == "split")


@pytest.mark.skipif(not HAS_OGB, reason="ogb is not installed (pip install -e '.[ogb]')")
def test_a_valid_tiny_ogbn_arxiv_folder_loads_offline(tmp_path):
    from fgx.data.ogbn_arxiv import OgbnArxivParams, load_ogbn_arxiv

    write_ogb(tmp_path / "ogbn_arxiv", ogb_tables())
    ds = load_ogbn_arxiv(OgbnArxivParams(split="official", lcc=False), env(tmp_path))
    assert ds.data.num_nodes == 8 and int(ds.data.train_mask.sum()) == 4
    assert (tmp_path / "ogbn_arxiv" / "processed" / ".fgx-complete").is_file()
    again = load_ogbn_arxiv(OgbnArxivParams(split="official", lcc=False), env(tmp_path))   # from the cache
    assert torch.equal(again.data.x, ds.data.x)


# --------------------------------------------------------------------------------------- MovieLens
GOOD_LINE = "{u}\t{i}\t{r}\t88125{t:04d}"
ML_KINDS = ["id_text", "id_negative", "id_huge", "fields", "rating", "empty", "bytes"]


@FUZZ
@given(data=st.data())
def test_damaged_movielens_file_is_refused_naming_the_line(tmp_path_factory, data):
    from fgx.data.movielens import ML100KParams, load_movielens100k

    count("movielens")
    root = tmp_path_factory.mktemp("ml")
    (root / "ml-100k").mkdir()
    path = root / "ml-100k" / "u.data"
    lines = [GOOD_LINE.format(u=1 + k % 9, i=1 + (k * 7) % 13, r=1 + k % 5, t=k) for k in range(60)]
    kind = data.draw(st.sampled_from(ML_KINDS))
    i = data.draw(st.integers(0, len(lines) - 1))
    parts = lines[i].split("\t")
    if kind == "id_text":
        parts[data.draw(st.integers(0, 1))] = data.draw(st.sampled_from(["x", "1.5", "", "nan", "0x1f", "१"]))
    elif kind == "id_negative":
        parts[data.draw(st.integers(0, 1))] = str(data.draw(st.integers(-10**12, -1)))
    elif kind == "id_huge":
        parts[data.draw(st.integers(0, 1))] = str(data.draw(st.integers(2**62, 10**40)))
    elif kind == "fields":
        parts = parts[: data.draw(st.integers(1, 2))]
    elif kind == "rating":
        parts[2] = data.draw(st.sampled_from(["nan", "inf", "-inf", "x", "", "1e999"]))
    lines[i] = "\t".join(parts)
    raw = "\n".join(lines).encode()
    if kind == "empty":
        raw = data.draw(st.sampled_from([b"", b"\n\n", b"   \n"]))
    elif kind == "bytes":
        raw = raw + b"\n" + data.draw(st.binary(min_size=1, max_size=16)).replace(b"\n", b"\xff") + b"\t\xff"
    path.write_bytes(raw)
    expect_refusal(lambda: load_movielens100k(ML100KParams(download=False), env(root)), [str(path)], root,
                   "movielens100k")


@FUZZ
@given(pairs=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=6))
def test_degenerate_but_well_formed_ratings_never_crash(tmp_path_factory, pairs):
    """Valid lines that make a degenerate graph (one user, duplicates): loaded or refused, no traceback."""
    from fgx.data.movielens import ML100KParams, load_movielens100k

    root = tmp_path_factory.mktemp("mld")
    (root / "ml-100k").mkdir()
    (root / "ml-100k" / "u.data").write_text("\n".join(f"{u}\t{i}\t3\t0" for u, i in pairs))
    expect_refusal(lambda: load_movielens100k(ML100KParams(download=False), env(root)),
                   ["u.data", "interaction", "user", "split"], root, "movielens100k", must_fail=False)


# ------------------------------------------------------------------------------------------- FedGB
FEDGB_KINDS = ["manifest_json", "manifest_type", "schema", "level", "num_clients", "feature_dim", "num_classes",
               "pt_bytes", "pt_foreign", "pt_code", "field_missing", "x_shape", "x_nan", "edge_range", "y_float",
               "y_length", "global_map", "split_length", "split_dtype", "split_overlap", "split_missing",
               "sums_mismatch", "sums_format", "sums_escape"]


def _rewrite_client(part: Path, i: int, **changes) -> None:
    from fgx.data.fedgb import load_pt

    d = load_pt(part / f"data_{i}.pt")
    for k, v in changes.items():
        if v is None:
            delattr(d, k)
        else:
            setattr(d, k, v)
    torch.save(d, part / f"data_{i}.pt")


@FUZZ
@given(data=st.data())
def test_damaged_fedgb_folder_is_refused_naming_the_file(tmp_path_factory, data):
    from fedgb_folder import make_fedgb, write_sums
    from fgx.data.fedgb import FedGBParams, load_fedgb

    count("fedgb")
    root = tmp_path_factory.mktemp("fedgb")
    folder = make_fedgb(root, num_clients=2, nodes=10, features=4, classes=3, sums=False)
    part = folder / "distrib" / "natural"
    manifest = json.loads((folder / "fedgb_manifest.json").read_text())
    kind = data.draw(st.sampled_from(FEDGB_KINDS))
    i = data.draw(st.integers(0, 1))
    marker = root / "code-ran"
    split = part / "node_cls" / "default_split" / f"{data.draw(st.sampled_from(['train', 'val', 'test']))}_{i}.pt"
    harmless = False
    if kind == "manifest_json":
        text = mutate_bytes(data, json.dumps(manifest).encode())[0]
        (folder / "fedgb_manifest.json").write_bytes(text[:-1] or b"{")
    elif kind == "manifest_type":
        (folder / "fedgb_manifest.json").write_text(json.dumps(data.draw(st.sampled_from([[], "x", 3, None]))))
    elif kind in ("schema", "level", "num_clients", "feature_dim", "num_classes"):
        key = {"schema": "schema_version", "level": "level"}.get(kind, kind)
        manifest[key] = data.draw({"schema": st.sampled_from(["0.9", "2.0", 1.0, None, ""]),
                                   "level": st.sampled_from(["graph", "hetero_subgraph", "", None]),
                                   "num_clients": st.sampled_from([0, -1, "2", 2.5, 3, 50, True]),
                                   "feature_dim": st.sampled_from([0, 3, 5, "4"]),
                                   "num_classes": st.sampled_from([0, 1, 2, -3])}[kind])
        (folder / "fedgb_manifest.json").write_text(json.dumps(manifest))
        harmless = kind == "num_classes" and manifest["num_classes"] == 2   # if no labelled node has class 2
    elif kind == "pt_bytes":
        target = data.draw(st.sampled_from([part / f"data_{i}.pt", split]))
        damaged, harmless = mutate_bytes(data, target.read_bytes())
        target.write_bytes(damaged)
    elif kind == "pt_foreign":
        torch.save(data.draw(st.sampled_from([{"x": torch.zeros(2)}, [1, 2], torch.zeros(3), "x"])),
                   part / f"data_{i}.pt")
    elif kind == "pt_code":
        with open(part / f"data_{i}.pt", "wb") as f:
            torch.save(_Runs(marker), f)
    elif kind == "field_missing":
        _rewrite_client(part, i, **{data.draw(st.sampled_from(["x", "edge_index", "y", "global_map"])): None})
    elif kind == "x_shape":
        _rewrite_client(part, i, x=torch.zeros(10))
    elif kind == "x_nan":
        x = torch.randn(10, 4)
        x[data.draw(st.integers(0, 9)), 0] = data.draw(st.sampled_from([float("nan"), float("inf")]))
        _rewrite_client(part, i, x=x)
    elif kind == "edge_range":
        _rewrite_client(part, i, edge_index=torch.tensor([[0, data.draw(st.one_of(st.integers(-99, -1),
                                                                                   st.integers(10, 10**9)))], [1, 2]]))
    elif kind == "y_float":
        _rewrite_client(part, i, y=torch.rand(10))
    elif kind == "y_length":
        _rewrite_client(part, i, y=torch.zeros(data.draw(st.sampled_from([0, 9, 11])), dtype=torch.long))
    elif kind == "global_map":
        _rewrite_client(part, i, global_map=data.draw(st.sampled_from(
            [torch.full((10,), -1), torch.zeros(3, dtype=torch.long), torch.rand(10)])))
    elif kind == "split_length":
        torch.save(torch.zeros(data.draw(st.sampled_from([0, 9, 11])), dtype=torch.bool), split)
    elif kind == "split_dtype":
        torch.save(torch.zeros(10, dtype=data.draw(st.sampled_from([torch.long, torch.float]))), split)
    elif kind == "split_overlap":
        torch.save(torch.ones(10, dtype=torch.bool), split)
    elif kind == "split_missing":
        split.unlink()
    if kind.startswith("sums") or data.draw(st.booleans()):
        write_sums(folder)                 # checksums over the damaged files: the deeper checks must catch it
    if kind == "sums_mismatch":
        (part / f"data_{i}.pt").write_bytes((part / f"data_{i}.pt").read_bytes() + b"\0")
    elif kind == "sums_format":
        with open(folder / "SHA256SUMS", "a") as f:
            f.write(data.draw(st.sampled_from(["nothex  data_0.pt\n", "abc\n", "0" * 64 + "\n"])))
    elif kind == "sums_escape":
        with open(folder / "SHA256SUMS", "a") as f:
            f.write("0" * 64 + "  ../../etc/passwd\n")
    expect_refusal(lambda: load_fedgb(FedGBParams(variant="TOY", root=str(root)), env(root)),
                   [str(folder)], root, "fedgb_TOY", must_fail=not harmless)
    assert not marker.exists(), "code inside a data file ran"


# ------------------------------------------------------------------------- 200+ inputs per loader
@pytest.mark.slow
def test_every_file_loader_survives_at_least_200_damaged_inputs(tmp_path):
    """Runs every file fuzzer (this module and test_hostile_inputs.py) with 250 examples each."""
    counts = tmp_path / "counts"
    counts.mkdir()
    env_vars = {**os.environ, "FGX_FUZZ_EXAMPLES": "250", "FGX_FUZZ_COUNT_DIR": str(counts),
                "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                          str(REPO / "tests" / "test_hostile_files.py"), str(REPO / "tests" / "test_hostile_inputs.py"),
                          "-k", "damaged or malformed"], cwd=tmp_path, env=env_vars, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    seen = {f.stem: len(f.read_text().split()) for f in counts.glob("*.count")}
    loaders = {"npz", "geom_gcn", "planetoid", "movielens", "fedgb", "aml_csv", "ratings_dat", "lightgcn", "edge_list",
               "tabular_csv"} | ({"ogb"} if HAS_OGB else set())
    assert loaders <= set(seen), sorted(loaders - set(seen))
    assert all(seen[name] >= 200 for name in loaders), seen


# ----------------------------------------------------------------------------------- AML CSV, whole loader
AML_HEADER = "Timestamp,From Bank,Account,To Bank,Account,Amount Received,Receiving Currency,Amount Paid," \
             "Payment Currency,Payment Format,Is Laundering"


def aml_rows(n: int = 30) -> list[list[str]]:
    rows = []
    for k in range(n):
        a, b = k % 6, (k * 5 + 1) % 6
        amount = f"{100 + 37 * k:.2f}"
        rows.append([f"2022/09/{1 + k % 3:02d} 0{k % 10}:{k % 60:02d}", f"{a % 2:03d}", f"80{a}A", f"{b % 2:03d}",
                     f"80{b}A", amount, "US Dollar", amount, "US Dollar", "ACH", str(int(k % 7 == 0))])
    return rows


AML_CELLS = {0: ["2022-09-01 00:20", "yesterday", "", "2022/13/01 00:00"],
             1: ["-1", "x", "", "1.5", "nan"], 2: [""], 5: ["-5.00", "nan", "inf", "x", "", "1e999"],
             6: ["Martian Dollar", ""], 9: ["Carrier Pigeon", ""], 10: ["2", "-1", "x", "", "0.5"]}


@FUZZ
@given(data=st.data())
def test_damaged_aml_csv_is_refused_by_the_whole_loader(tmp_path_factory, data):
    from fgx.data.aml_synth import AmlParams, load_aml

    count("aml_csv")
    root = tmp_path_factory.mktemp("aml")
    path = root / "Trans.csv"
    rows = aml_rows()
    kind = data.draw(st.sampled_from(["cell", "fields", "header", "bytes", "empty"]))
    if kind == "cell":
        col = data.draw(st.sampled_from(sorted(AML_CELLS)))
        rows[data.draw(st.integers(0, len(rows) - 1))][col] = data.draw(st.sampled_from(AML_CELLS[col]))
    elif kind == "fields":
        r = rows[data.draw(st.integers(0, len(rows) - 1))]
        del r[data.draw(st.integers(1, len(r) - 1)):]      # (no fields at all is a blank line, skipped)
    header = AML_HEADER if kind != "header" else AML_HEADER.replace(data.draw(st.sampled_from(
        ["Timestamp", "Amount Paid", "Is Laundering", ",Account"])), "", 1)
    raw = ("\n".join([header] + [",".join(r) for r in rows]) + "\n").encode()
    harmless = False
    if kind == "bytes":
        raw, harmless = mutate_bytes(data, raw)
    elif kind == "empty":
        raw = data.draw(st.sampled_from([b"", (header + "\n").encode()]))
    path.write_bytes(raw)
    p = AmlParams(path=str(path), source="real", split="fraction")
    expect_refusal(lambda: load_aml(p, env(root)), [str(path)], root, "aml", must_fail=not harmless)
