"""Reading and writing transaction CSVs in the Kaggle AMLworld schema.

Reading is pandas' C parser with fixed dtypes (fast path). When that fails, or a value is out of
its vocabulary, a second pass finds the first offending cell and raises :class:`DataError` naming
the file, the 1-based line (the header is line 1) and the column."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from fgx.data.base import DataError
from fgx.outputs import file_mode
from fgx.data.aml.schema import COLUMNS, CURRENCIES, PANDAS_COLUMNS, PAYMENT_FORMATS, TIMESTAMP_FORMAT

NUMERIC = {"From Bank": "int64", "To Bank": "int64", "Amount Received": "float64",
           "Amount Paid": "float64", "Is Laundering": "int64"}
DTYPES = {**NUMERIC, "Timestamp": str, "Account": str, "Account.1": str,
          "Receiving Currency": "category", "Payment Currency": "category", "Payment Format": "category"}
VOCAB = {"Receiving Currency": CURRENCIES, "Payment Currency": CURRENCIES, "Payment Format": PAYMENT_FORMATS}


def write_csv_atomic(frames, path: Path) -> None:
    """Write a DataFrame (or an iterable of consecutive DataFrame chunks, to bound memory) under the
    Kaggle header to a temporary file beside ``path``, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, file_mode())      # the user's umask, not mkstemp's 0600
    os.close(fd)
    if isinstance(frames, pd.DataFrame):
        frames = [frames]
    try:
        with open(tmp, "w", newline="") as f:
            f.write(",".join(COLUMNS) + "\n")
            for frame in frames:
                if len(frame):
                    f.write("\n".join(_csv_lines(frame).tolist()) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _two_decimals(values: np.ndarray) -> np.ndarray:
    """'%.2f' of each value, with numpy's string ufuncs (3x faster than pandas' float_format,
    which formats cell by cell in Python)."""
    cents = np.round(np.abs(values) * 100).astype(np.int64)
    text = np.strings.add(np.strings.add((cents // 100).astype("T"), "."),
                          np.strings.zfill((cents % 100).astype("T"), 2))
    return np.where(values < 0, np.strings.add("-", text), text)


def _csv_lines(frame: pd.DataFrame) -> np.ndarray:
    """One CSV line per row (no quoting: AMLworld values contain no commas or quotes)."""
    line = None
    for col in frame.columns:
        v = frame[col].to_numpy()
        text = _two_decimals(v) if v.dtype.kind == "f" else v.astype("T")
        line = text if line is None else np.strings.add(np.strings.add(line, ","), text)
    return line


def _line(row_index: int) -> int:
    return int(row_index) + 2      # header is line 1, first data row line 2


def _check_header(path: Path) -> None:
    with open(path, newline="") as f:
        header = f.readline().rstrip("\r\n").split(",")
    names = [h.strip() for h in header]
    missing = [c for c in dict.fromkeys(COLUMNS) if names.count(c) < COLUMNS.count(c)]
    if missing or len(names) != len(COLUMNS):
        raise DataError(f"{path}: line 1: header {names} does not match the AMLworld schema {COLUMNS}"
                        + (f"; missing column(s) {missing}" if missing else ""))


def _diagnose(path: Path) -> None:
    """Slow pass over the file as text: raise DataError at the first bad cell."""
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.ParserError as e:
        raise DataError(f"{path}: {e}") from None
    for col, kind in NUMERIC.items():
        vals = pd.to_numeric(raw[col], errors="coerce")
        bad = vals.isna() | (np.isfinite(vals) == False)  # noqa: E712 (elementwise)
        if kind == "int64":
            bad |= vals.notna() & (vals != vals.round())
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError(f"{path}: line {_line(i)}, column {col!r}: expected a number, got {raw[col].iloc[i]!r}")
    _check_timestamps(path, raw["Timestamp"])
    for col in ("Account", "Account.1"):
        empty = raw[col].str.len() == 0
        if empty.any():
            i = int(np.flatnonzero(empty.to_numpy())[0])
            raise DataError(f"{path}: line {_line(i)}, column {col!r}: empty account id")


def _check_timestamps(path: Path, stamps: pd.Series) -> pd.Series:
    ts = pd.to_datetime(stamps, format=TIMESTAMP_FORMAT, errors="coerce")
    if ts.isna().any():
        i = int(np.flatnonzero(ts.isna().to_numpy())[0])
        raise DataError(f"{path}: line {_line(i)}, column 'Timestamp': expected YYYY/MM/DD HH:MM, "
                        f"got {stamps.iloc[i]!r}")
    return ts


def read_transactions(path: str | Path) -> pd.DataFrame:
    """The CSV as a DataFrame with a parsed ``Timestamp`` (datetime64) and validated values."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        return _read_checked(path)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _read_checked(path: Path) -> pd.DataFrame:
    _check_header(path)
    try:
        df = pd.read_csv(path, dtype=DTYPES, engine="c")
    except (ValueError, pd.errors.ParserError) as e:
        _diagnose(path)
        raise DataError(f"{path}: {str(e).splitlines()[0]}") from None
    if df.empty:
        raise DataError(f"{path}: no transactions after the header")
    if list(df.columns) != PANDAS_COLUMNS:
        raise DataError(f"{path}: line 1: columns {list(df.columns)} do not match {PANDAS_COLUMNS}")
    for col in ("Account", "Account.1", "Timestamp", "Amount Received", "Amount Paid"):
        if df[col].isna().any():
            i = int(np.flatnonzero(df[col].isna().to_numpy())[0])
            raise DataError(f"{path}: line {_line(i)}, column {col!r}: empty value")
    for col, vocab in VOCAB.items():
        unknown = ~df[col].isin(vocab)
        if unknown.any():
            i = int(np.flatnonzero(unknown.to_numpy())[0])
            raise DataError(f"{path}: line {_line(i)}, column {col!r}: unknown value {df[col].iloc[i]!r}; "
                            f"expected one of {vocab}")
    for col in ("From Bank", "To Bank", "Amount Received", "Amount Paid"):
        values = df[col].to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "a bank id" if "Bank" in col else "an amount"
            raise DataError(f"{path}: line {_line(i)}, column {col!r}: expected {what} >= 0, got {df[col].iloc[i]}")
    labels = df["Is Laundering"]
    if not labels.isin([0, 1]).all():
        i = int(np.flatnonzero(~labels.isin([0, 1]).to_numpy())[0])
        raise DataError(f"{path}: line {_line(i)}, column 'Is Laundering': expected 0 or 1, got {labels.iloc[i]}")
    df["Timestamp"] = _check_timestamps(path, df["Timestamp"])
    return df
