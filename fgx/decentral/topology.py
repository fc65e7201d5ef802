"""Communication graphs and gossip matrices for decentralised learning.

A topology is a connected networkx graph with nodes relabelled 0..n-1 (networkx order); node i is
client i. Gossip matrices follow Definition 2 of Bellet et al. (2025): row-stochastic, W[u, v] > 0
only if v is u or a neighbour of u."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np

from fgx.config import ConfigError, spec
from fgx.data.base import DataError

GRAPHS = ("florentine", "karate", "les_miserables", "davis", "erdos_renyi", "random_regular", "ring",
          "path", "grid", "torus", "star", "complete", "edgelist")
GOSSIP = ("uniform", "metropolis_hastings")


@dataclass
class TopologyParams:
    graph: str = field(default="florentine", metadata=spec(choices=list(GRAPHS)))
    num_nodes: int = field(default=16, metadata=spec(
        min=2, help="nodes of generated graphs (erdos_renyi, random_regular, ring, path, star, complete)"))
    p: float = field(default=0.2, metadata=spec(gt=0.0, max=1.0, help="erdos_renyi edge probability"))
    degree: int = field(default=3, metadata=spec(min=1, help="random_regular degree"))
    rows: int = field(default=4, metadata=spec(min=1, help="grid/torus rows"))
    cols: int = field(default=4, metadata=spec(min=1, help="grid/torus columns"))
    edgelist_path: str | None = field(default=None, metadata=spec(
        help="edge list file (two node ids per line, e.g. SNAP 414.edges); its largest connected component is used"))
    graph_seed: int = field(default=0, metadata=spec(min=0, help="seed of random graphs (retried until connected)"))

    def validate(self, prefix: str) -> None:
        if self.graph == "edgelist" and not self.edgelist_path:
            raise ConfigError(f"{prefix}.edgelist_path", None, "a path to an edge-list file when graph=edgelist")
        if self.graph == "random_regular" and (self.degree >= self.num_nodes or self.degree * self.num_nodes % 2):
            raise ConfigError(f"{prefix}.degree", self.degree,
                              f"< num_nodes ({self.num_nodes}) with degree * num_nodes even")


def build_graph(p: TopologyParams) -> nx.Graph:
    """The communication graph, nodes relabelled 0..n-1. Random graphs are redrawn (seed
    graph_seed * 1000 + try) until connected."""
    name = p.graph
    if name == "florentine":
        g = nx.florentine_families_graph()
    elif name == "karate":
        g = nx.karate_club_graph()
    elif name == "les_miserables":
        g = nx.les_miserables_graph()
    elif name == "davis":
        g = nx.davis_southern_women_graph()
    elif name == "ring":
        g = nx.cycle_graph(p.num_nodes)
    elif name == "path":
        g = nx.path_graph(p.num_nodes)
    elif name == "star":
        g = nx.star_graph(p.num_nodes - 1)
    elif name == "complete":
        g = nx.complete_graph(p.num_nodes)
    elif name == "grid":
        g = nx.grid_2d_graph(p.rows, p.cols)
    elif name == "torus":
        g = nx.grid_2d_graph(p.rows, p.cols, periodic=True)
    elif name in ("erdos_renyi", "random_regular"):
        for attempt in range(1000):
            s = p.graph_seed * 1000 + attempt
            g = (nx.erdos_renyi_graph(p.num_nodes, p.p, seed=s) if name == "erdos_renyi"
                 else nx.random_regular_graph(p.degree, p.num_nodes, seed=s))
            if nx.is_connected(g):
                break
        else:
            raise ConfigError("partitioner.p", p.p, f"a value giving a connected {name} graph (1000 draws failed)")
    elif name == "edgelist":
        g = read_edgelist(p.edgelist_path)
    else:  # validated by spec(choices=...)
        raise ConfigError("partitioner.graph", name, list(GRAPHS))
    g = nx.Graph(g)
    g.remove_edges_from(nx.selfloop_edges(g))
    return nx.convert_node_labels_to_integers(g)


def read_edgelist(path: str) -> nx.Graph:
    """Two node ids per line (an optional numeric third column, e.g. a weight, is ignored); ``#``
    starts a comment. Parsed here rather than with ``nx.read_edgelist``, which silently skips a
    line with one id and ignores anything after the second, so a damaged file would give a
    different graph without a word."""
    f = Path(path).expanduser()
    if not f.is_file():
        raise ConfigError("partitioner.edgelist_path", path, "an existing edge-list file")
    try:
        text = f.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"partitioner.edgelist_path: {f} is not UTF-8 text (byte {e.start})") from None
    g = nx.Graph()
    for lineno, line in enumerate(text.splitlines(), 1):
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        if len(tokens) not in (2, 3) or (len(tokens) == 3 and not _is_number(tokens[2])):
            raise DataError(f"partitioner.edgelist_path: {f}, line {lineno}: expected two node ids "
                            f"(and an optional number), got {line.strip()[:80]!r}")
        if tokens[0] != tokens[1]:
            g.add_edge(tokens[0], tokens[1])
    if g.number_of_edges() == 0:
        raise ConfigError("partitioner.edgelist_path", path, "an edge list with at least one edge between two nodes")
    return g.subgraph(max(nx.connected_components(g), key=len)).copy()


def _is_number(token: str) -> bool:
    try:
        return np.isfinite(float(token))
    except ValueError:
        return False


def gossip_matrix(g: nx.Graph, kind: str = "uniform") -> np.ndarray:
    """``uniform``: (A + I) row-normalised (average over the closed neighbourhood; the paper's
    choice). ``metropolis_hastings``: W_uv = 1 / (1 + max(d_u, d_v)) on edges, the rest on the
    diagonal (symmetric, doubly stochastic)."""
    a = nx.to_numpy_array(g, nodelist=range(g.number_of_nodes()), weight=None)
    if kind == "uniform":
        m = a + np.eye(len(a))
        return m / m.sum(1, keepdims=True)
    if kind == "metropolis_hastings":
        deg = a.sum(1)
        w = a / (1.0 + np.maximum(deg[:, None], deg[None, :]))
        w[np.diag_indices_from(w)] = 1.0 - w.sum(1)
        return w
    raise ConfigError("algorithm.gossip", kind, list(GOSSIP))


def check_gossip_matrix(w: np.ndarray, g: nx.Graph, atol: float = 1e-10) -> None:
    """Definition 2: non-negative, row-stochastic, supported on edges and self-loops."""
    n = g.number_of_nodes()
    if w.shape != (n, n) or (w < -atol).any() or not np.allclose(w.sum(1), 1.0, atol=1e-8):
        raise ValueError("gossip matrix must be non-negative and row-stochastic")
    support = nx.to_numpy_array(g, nodelist=range(n), weight=None) + np.eye(n)
    if (np.abs(w[support == 0]) > atol).any():
        raise ValueError("gossip matrix has weight outside the graph's edges and self-loops")
