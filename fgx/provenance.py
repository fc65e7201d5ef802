"""Where a result came from: the command, the commit, the date, the machine, and the code itself.

Every run writes this into its summary.json (``provenance``), so a table record keeps each run's
own origin, also when a table is resumed or collected later. ``code`` fingerprints what the run
executed: a hash of every fgx source file the run had imported and the versions of the libraries
fgx computes with. A record goes stale when one of those files or versions changes
(fgx/tables/records.py), not only when a preset does.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

LAUNCHED_BY = "FGX_LAUNCHED_BY"     # set by `fgx repro` / `fgx tune` around the jobs they launch
PACKAGE_DIR = Path(__file__).resolve().parent
REPO = PACKAGE_DIR.parent
# the libraries whose version can change a number fgx computes (pyproject's dependencies that compute)
DEPENDENCIES = ("torch", "torch_geometric", "numpy", "scipy", "scikit-learn", "networkx", "pymetis", "pandas",
                "dp-accounting", "opacus", "hydra-core", "omegaconf")


# the code that launches, records and judges runs, not what they compute: a change there leaves results as they are
NOT_COMPUTATION = ("fgx/tables/", "fgx/report/", "fgx/commands/", "fgx/cli.py", "fgx/launch.py", "fgx/provenance.py")


def _semantic_sha(source: bytes) -> str | None:
    """sha of a module's syntax tree without comments and docstrings: a change to either leaves what
    the code computes as it was, so it must not make a record stale. Not parseable: the raw bytes."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return hashlib.sha256(source).hexdigest()[:12]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree, annotate_fields=False).encode()).hexdigest()[:12]


def file_sha(path: Path) -> str | None:
    try:
        source = path.read_bytes()
    except OSError:
        return None
    return _semantic_sha_of(hashlib.sha256(source).digest(), source)


def _semantic_sha_of(digest: bytes, source: bytes) -> str | None:
    # memoised by the raw bytes' digest (hashing them is cheap, parsing is not): every run fingerprints
    # every fgx file it imported, and parsing ~100 modules per run dominated processes that run many jobs
    # (the tests; mutmut's, whose mutated copies are many times larger)
    sha = _SEMANTIC.get(digest)
    if sha is None:
        sha = _SEMANTIC[digest] = _semantic_sha(source)
    return sha


_SEMANTIC: dict[bytes, str | None] = {}


def _unchanged_since(f: str, sha: str, commit: str | None) -> bool:
    """Whether ``f`` computes what it did when its sha was recorded. Records written before fingerprints
    ignored comments hold the sha of the raw file: the file at the record's commit tells both apart."""
    now = file_sha(REPO / f)
    if now == sha:
        return True
    if now is None or not commit:
        return False
    old = _git_bytes("show", f"{commit}:{f}")
    return old is not None and hashlib.sha256(old).hexdigest()[:12] == sha and _semantic_sha(old) == now


def loaded_source_files() -> list[str]:
    """The fgx source files imported in this process, relative to the package's parent (``fgx/trainer.py``).
    Jobs of one sweep share a process, so a later job also lists what an earlier one imported: a record
    may go stale for a file one of its runs did not need, never the other way round."""
    out = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not f:
            continue
        p = Path(f).resolve()
        if p.suffix == ".py" and PACKAGE_DIR in p.parents:
            rel = p.relative_to(REPO).as_posix()
            if not rel.startswith(NOT_COMPUTATION):
                out.add(rel)
    return sorted(out)


def dependency_versions() -> dict[str, str | None]:
    out = {}
    for name in DEPENDENCIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


CONSTRAINTS = REPO / "constraints.txt"   # the pinned versions of DEPENDENCIES (README's install uses it)
_judged_against: dict[str, str | None] | None = None


def pinned_versions() -> dict[str, str | None]:
    """constraints.txt's ``name==version`` pins of DEPENDENCIES (None for one it does not pin), read with
    packaging (pip's own parser; hydra-core depends on it), names compared as pip normalises them."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            exact = [s.version for s in req.specifier if s.operator == "=="]
            if exact:
                pins[canonicalize_name(req.name)] = exact[0]
    return {d: pins.get(canonicalize_name(d)) for d in DEPENDENCIES}


@contextlib.contextmanager
def judged_against_pins():
    """Inside: records' library versions are compared with constraints.txt's pins, not with this
    environment's. What the repository declares, so a document generated from it (docs/REPRODUCTION.md)
    reads the same on every machine; `fgx repro NAME` outside it still names this environment's drift."""
    global _judged_against
    before, _judged_against = _judged_against, pinned_versions()
    try:
        yield
    finally:
        _judged_against = before


def _same_version(recorded: str | None, now: str | None) -> bool:
    if _judged_against is None:
        return recorded == now
    # a pin names the release; the build's local label (torch's "+cpu") is the kernels' business, which
    # a record names apart (run_kernels)
    from packaging.version import InvalidVersion, Version

    if recorded is None or now is None:
        return False
    try:
        return Version(recorded).public == Version(now).public
    except InvalidVersion:
        return recorded == now


def code_fingerprint(files: list[str] | None = None) -> dict:
    """``{"files": {path: sha}, "deps": {distribution: version}}`` of this process's fgx code."""
    files = loaded_source_files() if files is None else files
    return {"files": {f: file_sha(REPO / f) for f in files}, "deps": dependency_versions()}


def code_changes(code: dict, commit: str | None = None) -> list[str]:
    """What differs between a recorded fingerprint and the code here now: changed or removed files
    and changed library versions, each named. ``commit``: the commit the fingerprint was taken at."""
    now = dependency_versions() if _judged_against is None else _judged_against
    out = [f"{f} {'removed' if file_sha(REPO / f) is None else 'changed'}"
           for f, sha in sorted((code.get("files") or {}).items())
           if not f.startswith(NOT_COMPUTATION) and not _unchanged_since(f, sha, commit)]
    out += [f"{d} {v} → {now.get(d)}" for d, v in sorted((code.get("deps") or {}).items())
            if not _same_version(v, now.get(d))]
    return out


def _git_bytes(*args: str) -> bytes | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def machine() -> dict:
    import torch

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"system": platform.system(), "cpu": cpu, "cores": os.cpu_count(),
            "omp_threads": os.environ.get("OMP_NUM_THREADS"), "python": platform.python_version(),
            "torch": torch.__version__, "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "kernels": kernels()}


def kernels() -> dict:
    """The instruction sets torch and numpy's BLAS chose on this CPU: the same code and libraries give
    other floating-point results under other kernels (AVX2 against AVX-512), which is what a spot check
    of a record made elsewhere may see (docs/tables.md)."""
    import torch

    out = {"torch": torch.backends.cpu.get_cpu_capability()}
    try:
        from threadpoolctl import threadpool_info

        out["blas"] = sorted({f"{i.get('internal_api')} {i.get('architecture')}" for i in threadpool_info()
                              if i.get("user_api") == "blas"})
    except ImportError:         # threadpoolctl comes with scikit-learn; without it the BLAS is not named
        pass
    return out


_DATA_SHA: dict = {}


def data_fingerprint(data_dir: Path, path: Path | None, source: str | None = None) -> dict:
    """A hash of the data files a run read: every file under ``path`` (a dataset's folder or file under
    the data root), by relative name, size and content; PyG's ``processed/`` copies are left out (they are
    derived from the raw files, and rewritten by other library versions). ``{"generated": true}`` for data
    a generator made from the config (nothing to read); ``{"unknown": ...}`` where the loader's files
    cannot be told. ``path`` is kept relative to the data root, so another machine's copy compares."""
    if path is None:
        return {"generated": True} if source == "generated" else {"unknown": "the loader names no files"}
    path = Path(path).expanduser().resolve()
    if not path.exists():
        return {"unknown": f"{path.name} not found"}
    files = [path] if path.is_file() else sorted(
        f for f in path.rglob("*") if f.is_file() and "processed" not in f.relative_to(path).parts
        and not f.name.startswith("."))
    key = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    if key not in _DATA_SHA:
        h = hashlib.sha256()
        for f in files:
            h.update(f"{f.relative_to(path.parent)}\0{f.stat().st_size}\0".encode())
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        _DATA_SHA[key] = h.hexdigest()[:16]
    try:
        rel = path.relative_to(Path(data_dir).expanduser().resolve()).as_posix()
    except ValueError:
        rel = path.name
    return {"path": rel, "files": len(files), "sha": _DATA_SHA[key]}


def data_changes(data: dict | None, data_root: Path) -> tuple[list[str], str | None]:
    """(what changed, what cannot be told) between a run's recorded data fingerprint and the files under
    ``data_root`` now. A run recorded before data fingerprints, or whose files are not here, is unknown:
    shown, never stale by itself."""
    if not isinstance(data, dict):
        return [], "recorded before data fingerprints"
    if data.get("generated"):
        return [], None
    if "sha" not in data:
        return [], str(data.get("unknown") or "unknown")
    here = Path(data_root) / data["path"]
    if not here.exists():
        return [], f"{data['path']} is not under the data root here"
    now = data_fingerprint(data_root, here)
    return ([f"data files of {data['path']} changed ({data['sha']} → {now['sha']})"] if now.get("sha") != data["sha"]
            else []), None


def head_commit() -> str | None:
    """The checkout's commit, 12 hex digits (None outside a git checkout)."""
    return _git("rev-parse", "--short=12", "HEAD")


def provenance(command: str) -> dict:
    """The command, the commit (and whether fgx/ or conf/ had uncommitted changes), the date, the machine."""
    commit = head_commit()
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", "fgx", "conf") if commit else None
    out = {"command": command, "commit": commit, "dirty": bool(dirty) if dirty is not None else None,
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": machine()}
    if os.environ.get(LAUNCHED_BY):
        out["launched_by"] = os.environ[LAUNCHED_BY]
    return out


def run_command() -> str:
    """The `fgx run` command line of the current Hydra job (its own overrides, also inside a sweep)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return " ".join(["fgx run", *HydraConfig.get().overrides.task])
    except Exception:  # noqa: BLE001 - only a label
        pass
    return " ".join(["fgx", *sys.argv[1:]])


@contextlib.contextmanager
def launched_by(command: str):
    """Each run launched inside keeps, beside its own `fgx run` command, the table command that launched it."""
    old = os.environ.get(LAUNCHED_BY)
    os.environ[LAUNCHED_BY] = command
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(LAUNCHED_BY, None)
        else:
            os.environ[LAUNCHED_BY] = old
