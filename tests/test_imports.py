"""fgx's import graph: no circle (module-level and function-level imports alike: a lazy import inside
a function still ties the two modules together), and fgx/report, which only reads run directories,
reaches nothing of the command line, the privacy mechanisms or the decentralised runtime."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx

FGX = Path(__file__).resolve().parents[1] / "fgx"


def _module_names() -> dict[str, Path]:
    out = {}
    for f in FGX.rglob("*.py"):
        parts = f.relative_to(FGX.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _imports(tree: ast.AST, package: str):
    """Every fgx name an ast imports (``from a import b`` names both a and a.b), leaving out imports
    under ``if TYPE_CHECKING:``, which never run."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = package
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def import_graph() -> nx.DiGraph:
    mods = _module_names()

    def owner(name: str) -> str | None:     # the module an imported name lives in
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    g = nx.DiGraph()
    for name, path in mods.items():
        g.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target in _imports(ast.parse(path.read_text()), package):
            if target.split(".")[0] == "fgx" and (mod := owner(target)) not in (None, name):
                g.add_edge(name, mod)
    return g


def test_the_graph_sees_lazy_imports():
    g = import_graph()
    assert g.has_edge("fgx.config", "fgx.registry")         # inside validate()
    assert g.has_edge("fgx.trainer", "fgx.config")           # at module level
    assert len(g) > 100 and g.number_of_edges() > 300


def test_no_import_circle_in_fgx():
    cycles = list(nx.simple_cycles(import_graph(), length_bound=6))
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:10])


def test_an_import_circle_is_found(tmp_path, monkeypatch):
    """The check itself: two modules importing each other inside functions form a circle."""
    pkg = tmp_path / "fgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from fgx.b import g\n")
    (pkg / "b.py").write_text("def g():\n    from fgx import a\n")
    monkeypatch.setattr(sys.modules[__name__], "FGX", pkg)
    assert list(nx.simple_cycles(import_graph())) != []


def test_report_reaches_no_cli_commands_privacy_or_decentral():
    g = import_graph()
    forbidden = ("fgx.cli", "fgx.commands", "fgx.privacy", "fgx.decentral")
    for mod in [m for m in g if m == "fgx.report" or m.startswith("fgx.report.")]:
        reached = nx.descendants(g, mod)
        bad = sorted(m for m in reached if m.startswith(forbidden))
        assert not bad, f"{mod} imports (directly or through others) {bad}"


def test_commands_use_the_tables_face_only():
    """fgx/commands reach fgx/tables through fgx/tables/__init__.py (reproduce, record_result, spot_check,
    tune_table, load_targets, markdown, ..., TablesError), never its modules."""
    g = import_graph()
    reach = sorted((a, b) for a, b in g.edges if a.startswith("fgx.commands") and b.startswith("fgx.tables."))
    assert not reach, f"commands import fgx/tables modules directly: {reach}"
    assert g.has_edge("fgx.commands.repro", "fgx.tables")


def private_imports_across_packages() -> list[str]:
    """``from fgx.x.y import _name`` where the importing module is not in package fgx.x."""
    out = []
    for f in FGX.rglob("*.py"):
        mod = ".".join(f.relative_to(FGX.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fgx."):
                package = node.module.rpartition(".")[0]
                if not mod.startswith(package + ".") or package == "fgx":
                    out += [f"{mod}: from {node.module} import {a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_private_name_is_imported_from_another_package():
    assert not private_imports_across_packages()


def test_the_private_import_check_sees_one(tmp_path, monkeypatch):
    pkg = tmp_path / "fgx"
    (pkg / "commands").mkdir(parents=True)
    (pkg / "commands" / "x.py").write_text("def f():\n    from fgx.launch import _job_overrides\n")
    (pkg / "tables").mkdir()
    (pkg / "tables" / "a.py").write_text("from fgx.tables.b import _same\n")     # inside one package: allowed
    monkeypatch.setattr(sys.modules[__name__], "FGX", pkg)
    assert private_imports_across_packages() == ["fgx.commands.x: from fgx.launch import _job_overrides"]
