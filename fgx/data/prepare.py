"""Dataset preparation that parallel jobs on one data root can share.

Preparing a dataset (PyG/OGB turning raw files into ``processed/``, a download, fgx's generated
caches) happens once, under an OS file lock, into a private temporary folder that is renamed into
place only when complete. Any number of jobs (a joblib sweep, SLURM array tasks on a shared disk)
either wait and then reuse the result, or prepare it themselves; none ever reads a partial file,
and a job killed half-way leaves at most a temporary folder that nothing reads.

The lock is ``filelock.FileLock``: ``flock``/``fcntl`` on POSIX, so the kernel releases it when its
holder dies. A lock file left behind by a killed job is just a file and does not block anyone; a
job that waits logs who it is waiting for every 30 s and gives up with a clear error after
``FGX_LOCK_TIMEOUT`` seconds (default 6 hours), so a hung holder cannot block forever either."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from fgx.data.base import DataError, load_ecosystem

COMPLETE = ".fgx-complete"       # written inside processed/ before it is renamed into place
WAIT_LOG_S = 30.0
log = logging.getLogger("fgx")


def lock_timeout() -> float:
    try:
        return float(os.environ.get("FGX_LOCK_TIMEOUT", 6 * 3600))
    except ValueError:
        return 6 * 3600.0


@contextmanager
def preparation_lock(lock_path: Path, what: str):
    """Hold the exclusive lock ``lock_path`` while preparing ``what``; waits for another holder."""
    from filelock import FileLock, Timeout

    lock_path = Path(lock_path)
    made = not lock_path.parent.exists()
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{what}: cannot create {lock_path.parent} to prepare the data there ({e.strerror})") from None
    lock = FileLock(str(lock_path))
    start = time.monotonic()
    while True:
        try:
            lock.acquire(timeout=WAIT_LOG_S)
            break
        except Timeout:
            waited = time.monotonic() - start
            if waited >= lock_timeout():
                raise DataError(f"{what}: another process has been preparing it for {waited:.0f} s (lock "
                                f"{lock_path} is held). If no fgx job is running on this data root, that "
                                f"process is hung: stop it; FGX_LOCK_TIMEOUT sets how long to wait") from None
            log.info("%s: waiting for another job that is preparing it (lock %s, %.0f s so far)",
                     what, lock_path, waited)
        except OSError as e:
            raise DataError(f"{what}: cannot lock {lock_path} ({e.strerror or e})") from None
    try:
        yield
    finally:
        # the lock file goes while still held: no 0-byte .<name>.lock stays in the user's data folder, also
        # not after a refused file. A job waiting on the unlinked file sees it gone once it gets it and
        # takes the new one (filelock >= 4 checks st_nlink after flock), so the lock stays exclusive.
        with contextlib.suppress(OSError):
            lock_path.unlink()
        lock.release()
        if made:                          # a folder made only to hold the lock (nothing was prepared)
            with contextlib.suppress(OSError):
                lock_path.parent.rmdir()


def is_complete(folder: Path) -> bool:
    return (Path(folder) / "processed" / COMPLETE).is_file()


def prepared_ecosystem(name: str, root: Path, folder: str, build: Callable[[Path], Any],
                       check_raw: Callable[[Path], None] | None = None,
                       check_built: Callable[[Any, Path], None] | None = None) -> Any:
    """The PyG/OGB dataset object ``build(root)`` for files under ``root/folder``, preparing its
    ``processed/`` folder (and downloading missing raw files) under the lock first when needed.

    Preparation runs the loader on a private root whose ``folder`` links to the real one's raw
    files; what it downloads and the finished ``processed/`` are then renamed into ``root/folder``."""
    root = Path(root)
    target = root / folder
    if not is_complete(target):
        with preparation_lock(root / f".{folder}.lock", f"dataset {name!r}"):
            if not is_complete(target):
                _prepare(name, root, folder, build, check_raw, check_built)
    return load_ecosystem(name, target, lambda: build(root))


def _prepare(name: str, root: Path, folder: str, build: Callable[[Path], Any], check_raw, check_built) -> None:
    target = root / folder
    checked = check_raw is not None and target.is_dir()
    if checked:
        check_raw(target)
    log.info("dataset %r: preparing %s (processed files are renamed into place when complete)", name, target)
    tmp_root = Path(tempfile.mkdtemp(prefix=f".{folder}.tmp-", dir=root))
    try:
        tmp = tmp_root / folder
        if target.is_dir():
            tmp.mkdir()
            for entry in target.iterdir():
                if entry.name != "processed":
                    (tmp / entry.name).symlink_to(entry.resolve())
        ds = load_ecosystem(name, target, lambda: build(tmp_root))
        if check_raw is not None and not checked:     # downloaded just now
            check_raw(tmp)
        if check_built is not None:
            check_built(ds, target)
        made = tmp / "processed"
        if not made.is_dir():
            raise DataError(f"dataset {name!r}: the loader wrote no processed/ folder under {tmp}")
        (made / COMPLETE).write_text(json.dumps({"prepared_by_pid": os.getpid(), "time": time.time()}))
        target.mkdir(parents=True, exist_ok=True)
        for entry in tmp.iterdir():       # what the loader downloaded (raw/, OGB's mapping/ ...)
            if entry.name != "processed" and not entry.is_symlink() and not (target / entry.name).exists():
                os.replace(entry, target / entry.name)
        old = target / "processed"
        if old.exists():                  # left by an older fgx or by PyG itself: not known complete
            os.replace(old, tmp_root / "replaced-processed")
        os.replace(made, old)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)


def atomic_dir(final: Path, fill: Callable[[Path], None]) -> None:
    """Create the directory ``final`` by filling a temporary sibling and renaming it (call under a lock)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        fill(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def staged_root(data_dir: Path, folder: str, required: list[str]) -> Path:
    """PyG writes ``processed/`` next to ``raw/``. When the data root is read-only (a shared
    copy), stage the raw files into a writable cache and load from there (copied under a lock into
    a temporary folder that is renamed into place, so parallel jobs never see a partial copy)."""
    src = Path(data_dir) / folder
    try:
        fd, probe = tempfile.mkstemp(prefix=".fgx_write_probe", dir=src)
        os.close(fd)
        os.unlink(probe)
        return Path(data_dir)
    except OSError:
        from fgx.config import default_data_dir

        dst_root = Path(default_data_dir()) / "staged"
        dst = dst_root / folder
        if not all((dst / "raw" / r).exists() for r in required):
            with preparation_lock(dst_root / f".{folder}.lock", f"staging {src}"):
                if not all((dst / "raw" / r).exists() for r in required):
                    dst.mkdir(parents=True, exist_ok=True)
                    atomic_dir(dst / "raw", lambda tmp: shutil.copytree(src / "raw", tmp, dirs_exist_ok=True))
        return dst_root
