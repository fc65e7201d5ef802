"""Generated CSVs cached on disk by (preset, scale, seed), written atomically."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from fgx.data.aml.csv_io import write_csv_atomic
from fgx.data.aml.generator import generate, to_frames
from fgx.data.aml.presets import get_preset
from fgx.data.aml.schema import TYPOLOGIES

# bump when the generator's output changes for the same (preset, scale, seed): old caches are ignored
GENERATOR_VERSION = 3
TRANS_FILE = "Trans.csv"
PATTERNS_FILE = "Patterns.csv"   # sidecar: typology and pattern id of each laundering row


def cache_dir(root: Path, preset: str, scale: float, seed: int) -> Path:
    return Path(root) / "aml_synth" / f"{preset.removeprefix('aml_')}-scale{scale:g}-seed{seed}-v{GENERATOR_VERSION}"


def generate_csv(out_dir: Path, preset: str, scale: float, seed: int, cross_bank_rate: float | None = None
                 ) -> tuple[Path, bool]:
    """Path of the CSV for (preset, scale, seed) under ``out_dir``; generated unless already there.
    Returns (path, cache_hit). Parallel jobs generate it once: the first holds a lock on the cache
    folder, the others wait and reuse its files (each file is written atomically, the CSV last)."""
    from fgx.data.prepare import preparation_lock

    path = Path(out_dir) / TRANS_FILE
    if path.is_file() and (Path(out_dir) / PATTERNS_FILE).is_file():
        return path, True
    with preparation_lock(Path(out_dir).parent / f".{Path(out_dir).name}.lock", f"generated AML data {out_dir}"):
        if path.is_file() and (Path(out_dir) / PATTERNS_FILE).is_file():
            return path, True
        return _generate(out_dir, preset, scale, seed, cross_bank_rate), False


def _generate(out_dir: Path, preset: str, scale: float, seed: int, cross_bank_rate: float | None) -> Path:
    path = Path(out_dir) / TRANS_FILE
    p = get_preset(preset)
    if cross_bank_rate is not None:
        from dataclasses import replace
        p = replace(p, cross_bank_rate=cross_bank_rate)
    tx = generate(p, scale, seed)
    launder = tx.typology >= 0
    sidecar = pd.DataFrame({"row": launder.nonzero()[0], "pattern": tx.pattern[launder],
                            "typology": pd.Categorical.from_codes(tx.typology[launder], TYPOLOGIES)})
    _write_sidecar(sidecar, Path(out_dir) / PATTERNS_FILE)
    write_csv_atomic(to_frames(tx), path)
    return path


def _write_sidecar(frame: pd.DataFrame, path: Path) -> None:
    import os
    import tempfile

    from fgx.outputs import file_mode
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, file_mode())      # the user's umask, not mkstemp's 0600
    os.close(fd)
    try:
        frame.to_csv(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_patterns(csv_path: Path) -> pd.DataFrame | None:
    side = Path(csv_path).parent / PATTERNS_FILE
    return pd.read_csv(side) if side.is_file() else None
