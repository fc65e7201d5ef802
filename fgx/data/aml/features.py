"""From a transaction table to fgx's global edge-task graph (Multi-GNN's features).

Nodes are (bank, account) pairs. Edge features: timestamp (shifted to the first), log amount
received, receiving currency id, payment format id, and optionally in/out port numbers and the
time since the previous transaction in/out of the endpoint. All z-normalised with statistics of
the training edges only."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from fgx.data.aml.schema import CURRENCIES, PAYMENT_FORMATS

BASE_FEATURES = ["timestamp", "log_amount_received", "receiving_currency", "payment_format"]
PORT_FEATURES = ["in_port", "out_port"]
DELTA_FEATURES = ["in_time_delta", "out_time_delta"]


def node_ids(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, bank of each node): node = (bank, account) factorised over both endpoints."""
    accounts = pd.concat([df["Account"], df["Account.1"]], ignore_index=True)
    acc_code, _ = pd.factorize(accounts)
    banks = np.concatenate([df["From Bank"].to_numpy(), df["To Bank"].to_numpy()]).astype(np.int64)
    key = acc_code.astype(np.int64) * (int(banks.max()) + 1) + banks
    node, first = pd.factorize(key)
    n = df.shape[0]
    bank_of_node = np.asarray(first) % (int(banks.max()) + 1)
    return node[:n].astype(np.int64), node[n:].astype(np.int64), bank_of_node


def ports(center: np.ndarray, other: np.ndarray, time: np.ndarray) -> np.ndarray:
    """Port number of each edge at its ``center`` node: the center's distinct ``other`` neighbours
    numbered 0, 1, ... in order of their first transaction with it (Multi-GNN's port numbering)."""
    n = center.size
    order = np.lexsort((np.arange(n), time, center))        # by center, then time
    c, o = center[order], other[order]
    pair = pd.MultiIndex.from_arrays([c, o])
    first = ~pair.duplicated()                              # first edge of each (center, other) pair
    new_center = np.r_[True, c[1:] != c[:-1]]
    rank = np.cumsum(first)                                 # running count of distinct pairs
    base = np.maximum.accumulate(np.where(new_center, rank - first, 0))
    pair_rank = pd.Series(rank - base - 1)                  # port of first occurrences
    port_of_pair = pd.Series(pair_rank[first].to_numpy(), index=pair[first])
    out = np.empty(n, dtype=np.int64)
    out[order] = port_of_pair.reindex(pair).to_numpy()
    return out


def time_deltas(center: np.ndarray, time: np.ndarray) -> np.ndarray:
    """Seconds since the center node's previous transaction (0 for its first)."""
    n = center.size
    order = np.lexsort((np.arange(n), time, center))
    c, t = center[order], time[order]
    d = np.r_[0, np.diff(t)].astype(np.float64)
    d[np.r_[True, c[1:] != c[:-1]]] = 0.0
    out = np.empty(n)
    out[order] = d
    return out


def edge_features(df: pd.DataFrame, src: np.ndarray, dst: np.ndarray, use_ports: bool,
                  use_time_deltas: bool, use_timestamp: bool = True) -> tuple[np.ndarray, list[str]]:
    seconds = (df["Timestamp"].astype("int64").to_numpy() // 10**9).astype(np.int64)
    t = seconds - seconds.min()
    cols = [t.astype(np.float64), np.log1p(df["Amount Received"].to_numpy(np.float64)),
            pd.Categorical(df["Receiving Currency"], categories=CURRENCIES).codes.astype(np.float64),
            pd.Categorical(df["Payment Format"], categories=PAYMENT_FORMATS).codes.astype(np.float64)]
    names = list(BASE_FEATURES)
    if not use_timestamp:
        cols, names = cols[1:], names[1:]
    if use_ports:
        cols += [ports(dst, src, t).astype(np.float64), ports(src, dst, t).astype(np.float64)]
        names += PORT_FEATURES
    if use_time_deltas:
        cols += [time_deltas(dst, t), time_deltas(src, t)]
        names += DELTA_FEATURES
    return np.stack(cols, 1), names


def znorm_with_train(attr: np.ndarray, train: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """z-normalise each column with the mean/std of the training rows only."""
    ref = attr[train] if train.any() else attr
    mean, std = ref.mean(0), ref.std(0)
    std = np.where(std > 0, std, 1.0)
    return (attr - mean) / std, mean, std


def to_graph(df: pd.DataFrame, masks: tuple, use_ports: bool = True, use_time_deltas: bool = False,
             use_timestamp: bool = True):
    """PyG Data for the edge task, plus the edge-feature names."""
    from torch_geometric.data import Data

    src, dst, bank = node_ids(df)
    attr, names = edge_features(df, src, dst, use_ports, use_time_deltas, use_timestamp)
    attr, _, _ = znorm_with_train(attr, masks[0])
    n = bank.size
    data = Data(x=torch.ones(n, 1), edge_index=torch.from_numpy(np.stack([src, dst])),
                edge_attr=torch.from_numpy(attr).float(), num_nodes=n)
    data.edge_y = torch.from_numpy(df["Is Laundering"].to_numpy().astype(np.int64))
    data.edge_train_mask, data.edge_val_mask, data.edge_test_mask = (torch.from_numpy(m) for m in masks)
    data.node_bank = torch.from_numpy(bank.astype(np.int64))
    return data, names
