"""One dispatcher for every concurrent node, over a transport (threads, the event loop, and
``torch_threadloader``'s worker processes).

:class:`Dispatcher` owns the contract (order, the bound on what is taken ahead, ``timeout``,
a close from another thread, a lost worker, exact progress for ``state_dict()``); a
:class:`Transport` only moves work and results. ``ThreadMapper`` is the dispatcher over
:class:`ThreadTransport`; ``AsyncFetcher`` the dispatcher over :class:`LoopTransport`; a
``ThreadLoader``'s epoch in worker processes the dispatcher over
``torch_threadloader.processes.ProcessTransport``.
"""

from datapipes.dispatch.dispatcher import Dispatcher, DispatchSettings
from datapipes.dispatch.loop import LoopTransport
from datapipes.dispatch.stall import StallView, StallWatch, Where
from datapipes.dispatch.threads import ThreadTransport
from datapipes.dispatch.transport import Transport

__all__ = [
    "DispatchSettings",
    "Dispatcher",
    "LoopTransport",
    "StallView",
    "StallWatch",
    "ThreadTransport",
    "Transport",
    "Where",
]
