"""The run directory: every file fgx writes about a run goes through RunDir, atomically."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


class OutputError(RuntimeError):
    pass


def _clean(obj: Any) -> Any:
    """JSON has no NaN/inf: write them as null. Tensors and numpy scalars become numbers/lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return _clean(obj.tolist())
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return _clean(obj.item())
        except (ValueError, TypeError):
            pass
    if hasattr(obj, "tolist"):
        return _clean(obj.tolist())
    return obj


def _umask() -> int:
    """The process umask, read without changing it where /proc says it (os.umask can only be read by
    setting it, which briefly affects files other threads create)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a plain `open(path, "w")` gives a new file: 0666 less the umask. Temporary files
    (tempfile.mkstemp) are 0600; a file fgx renames into place gets this mode first."""
    return 0o666 & ~_umask()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, file_mode())
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None


def dumps(obj: Any, indent: int | None = 2) -> str:
    return json.dumps(_clean(obj), indent=indent, allow_nan=False)


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".fgx_write_probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise OutputError(f"output directory {self.path} is not writable: {e.strerror or e}") from None

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, obj: Any) -> None:
        atomic_write_bytes(self.file(name), (dumps(obj) + "\n").encode())

    def read_json(self, name: str) -> Any:
        return json.loads(self.file(name).read_text())

    def append_jsonl(self, name: str, obj: Any) -> None:
        line = (dumps(obj, indent=None) + "\n").encode()
        try:
            with open(self.file(name), "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise OutputError(f"cannot write {self.file(name)}: {e.strerror or e}") from None

    def read_jsonl(self, name: str) -> list[dict]:
        p = self.file(name)
        if not p.exists():
            return []
        out = []
        for line in p.read_text().splitlines():
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    break   # a torn last line from a killed run
        return out

    def rewrite_jsonl(self, name: str, rows: list[dict]) -> None:
        atomic_write_bytes(self.file(name), "".join(dumps(r, indent=None) + "\n" for r in rows).encode())

    def save_checkpoint(self, state: dict) -> None:
        import io
        buf = io.BytesIO()
        torch.save(state, buf)
        atomic_write_bytes(self.file("checkpoint.pt"), buf.getvalue())

    def load_checkpoint(self) -> dict | None:
        p = self.file("checkpoint.pt")
        if not p.exists():
            return None
        # weights_only: a checkpoint is data, never code
        try:
            return torch.load(p, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - torch raises UnpicklingError/RuntimeError/EOFError here
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise OutputError(f"cannot resume from checkpoint {p}: it is damaged or holds more than tensors and "
                              f"plain data, and fgx loads checkpoints with weights_only=True, never running code "
                              f"from them ({first[:200]})") from None
