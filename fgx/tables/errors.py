"""The error of fgx/tables: a table that cannot be loaded, run, recorded, tuned or checked. A subclass of
fgx/report's ReportError (which reads run directories) so that a command catching either keeps working."""
from __future__ import annotations

from fgx.report.runs import ReportError


class TablesError(ReportError):
    pass
