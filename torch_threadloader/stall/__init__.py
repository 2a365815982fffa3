"""``stall_report_after``: what a waiting ``next()`` waits for (samples, stages, stacks), warned,
logged and kept (``loader.stalls()``), without stopping anything."""

from torch_threadloader.stall.caller import CALLER_WATCH_NAME, CallerWatch
from torch_threadloader.stall.log import KEPT_REPORTS, LOGGER, LoaderStallWarning, StallLog, make_report
from torch_threadloader.stall.report import InFlight, StallReport, ThreadStack

__all__ = [
    "CALLER_WATCH_NAME",
    "CallerWatch",
    "KEPT_REPORTS",
    "LOGGER",
    "InFlight",
    "LoaderStallWarning",
    "StallLog",
    "StallReport",
    "ThreadStack",
    "make_report",
]
