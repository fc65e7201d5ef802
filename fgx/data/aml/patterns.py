"""Laundering patterns of a transaction file, summarised per typology: how many patterns, how many
laundering transactions they hold, how many last more than one calendar day, and how many laundering
transactions sit in no pattern at all.

Two sources: fgx's ``Patterns.csv`` beside a generated ``Trans.csv`` (row, pattern id, typology of every
laundering row), and AMLworld's ``<name>_Patterns.txt`` beside a Kaggle ``<name>_Trans.csv``: blocks of
transaction lines in the CSV's column order fenced by
``BEGIN LAUNDERING ATTEMPT - FAN-OUT:  Max 16-degree Fan-Out`` / ``END LAUNDERING ATTEMPT - FAN-OUT``.
The same statistics from both let a user compare generated data with the real files (docs/aml.md)."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from fgx.data.aml.cache import PATTERNS_FILE, read_patterns
from fgx.data.aml.schema import TYPOLOGIES
from fgx.data.base import DataError

BEGIN = re.compile(r"^BEGIN LAUNDERING ATTEMPT - ([A-Z-]+)")
END = "END LAUNDERING ATTEMPT"


def kaggle_patterns_file(trans_csv: Path) -> Path:
    """``HI-Small_Trans.csv`` -> ``HI-Small_Patterns.txt`` (the Kaggle bundle's naming)."""
    trans_csv = Path(trans_csv)
    return trans_csv.with_name(trans_csv.name.replace("_Trans.csv", "_Patterns.txt"))


def typology_name(marker: str) -> str:
    """AMLworld's block name (``SCATTER-GATHER``) as fgx's typology (``scatter_gather``)."""
    name = marker.strip().lower().replace("-", "_")
    if name not in TYPOLOGIES:
        raise DataError(f"unknown laundering typology {marker!r} (known: {', '.join(TYPOLOGIES)})")
    return name


def read_kaggle_patterns(path: Path) -> pd.DataFrame:
    """One row per transaction line of an AMLworld patterns file: pattern (block ordinal), typology,
    day (calendar date of its timestamp)."""
    rows, pattern, typology = [], -1, None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            begin = BEGIN.match(line)
            if begin:
                if typology is not None:
                    raise DataError(f"{path}:{n}: a block begins before the previous one ended")
                pattern, typology = pattern + 1, typology_name(begin.group(1))
            elif line.startswith(END):
                if typology is None:
                    raise DataError(f"{path}:{n}: END without BEGIN")
                typology = None
            elif typology is None:
                raise DataError(f"{path}:{n}: a transaction line outside any BEGIN/END block")
            else:
                # the date part uses '/' in the transactions file and sometimes '-' here
                rows.append((pattern, typology, line.split(",", 1)[0][:10].replace("-", "/")))
    if typology is not None:
        raise DataError(f"{path}: the last block has no END line")
    return pd.DataFrame(rows, columns=["pattern", "typology", "day"])


def read_generated_patterns(trans_csv: Path) -> pd.DataFrame:
    """fgx's sidecar with each laundering row's calendar date from the transactions file."""
    side = read_patterns(trans_csv)
    stamps = pd.read_csv(trans_csv, usecols=["Timestamp"], dtype=str)["Timestamp"].to_numpy()
    return pd.DataFrame({"pattern": side["pattern"], "typology": side["typology"],
                         "day": [s[:10] for s in stamps[side["row"].to_numpy()]]})


def pattern_stats(trans_csv: Path, laundering: int) -> dict | None:
    """Per typology: patterns, laundering transactions in them, patterns spanning more than one
    calendar day; plus the laundering transactions (``laundering`` in all) in no pattern. None when
    no patterns file is beside ``trans_csv``."""
    trans_csv = Path(trans_csv)
    if (trans_csv.parent / PATTERNS_FILE).is_file():
        rows, source = read_generated_patterns(trans_csv), PATTERNS_FILE
    elif kaggle_patterns_file(trans_csv).is_file():
        rows, source = read_kaggle_patterns(kaggle_patterns_file(trans_csv)), kaggle_patterns_file(trans_csv).name
    else:
        return None
    span = rows.groupby("pattern")["day"].nunique()
    per = rows.groupby("pattern")["typology"].first()
    out = {"source": source, "patterns": int(per.size), "in_patterns": int(len(rows)),
           "in_no_pattern": int(laundering) - int(len(rows)),
           "patterns_over_one_day": int((span > 1).sum()), "per_typology": {}}
    for t in TYPOLOGIES:
        ids = per.index[per == t]
        if ids.size:
            out["per_typology"][t] = {"patterns": int(ids.size), "transactions": int((rows["typology"] == t).sum()),
                                      "over_one_day": int((span[ids] > 1).sum())}
    return out
