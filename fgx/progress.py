"""Progress: a rich bar on a terminal; plain log lines in CI, in pipes and in logs."""
from __future__ import annotations

import logging
import os
import sys


def use_rich(mode: str) -> bool:
    if mode == "rich":
        return True
    if mode in ("plain", "off"):
        return False
    return sys.stderr.isatty() and os.environ.get("CI", "").lower() not in ("1", "true", "yes")


class Progress:
    def __init__(self, total: int, mode: str, log: logging.Logger, start: int = 0):
        self.total, self.log, self.mode = total, log, mode
        self._bar = None
        if use_rich(mode):
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)
            self._bar = RichProgress(TextColumn("[bold]round"), MofNCompleteColumn(), BarColumn(),
                                     TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                     TextColumn("ETA"), TimeRemainingColumn(), transient=False)
            self._bar.start()
            self._task = self._bar.add_task("rounds", total=total, completed=start, status="")

    def update(self, r: int, status: str, evaluated: bool) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=r, status=status)
        elif evaluated and self.mode != "off":
            self.log.info("round %d/%d %s", r, self.total, status)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
