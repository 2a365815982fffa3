"""Work counters that every node keeps for ``stats()``."""

from __future__ import annotations

import dataclasses
import threading

__all__ = ["NodeStats", "StatsCounter"]


@dataclasses.dataclass(frozen=True)
class NodeStats:
    """A snapshot of one node's counters, summed over every epoch so far.

    ``busy_s`` is time spent in the node's own work (a user function, collating),
    summed over its threads; ``wait_source_s`` is time spent waiting for the source's
    next item; ``wait_consumer_s`` is time finished results waited for buffer space
    because the consumer was slower; ``peak_buffered`` is the largest number of finished
    results held at once.
    """

    name: str
    items_in: int = 0
    items_out: int = 0
    errors: int = 0
    skipped: int = 0
    busy_s: float = 0.0
    wait_source_s: float = 0.0
    wait_consumer_s: float = 0.0
    peak_buffered: int = 0

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


class StatsCounter:
    """Thread-safe counters behind :class:`NodeStats`.

    Each update is one short critical section; nothing is computed until
    :meth:`snapshot` is called, so unread counters cost a lock and an addition.
    """

    __slots__ = ("_lock", "_name", "_values")

    _FIELDS = tuple(f.name for f in dataclasses.fields(NodeStats) if f.name != "name")

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self._name = name
        self._values: dict[str, float] = dict.fromkeys(self._FIELDS, 0)

    def add(self, **deltas: float) -> None:
        """Add each delta to its counter; ``peak_buffered`` is raised to its value instead."""
        with self._lock:
            values = self._values
            for key, delta in deltas.items():
                if key == "peak_buffered":
                    if delta > values[key]:
                        values[key] = delta
                else:
                    values[key] += delta

    def peak(self, buffered: int) -> None:
        """Record ``buffered`` as the new peak if it is larger."""
        with self._lock:
            if buffered > self._values["peak_buffered"]:
                self._values["peak_buffered"] = buffered

    def snapshot(self) -> NodeStats:
        with self._lock:
            values = dict(self._values)
        ints = {k: int(v) for k, v in values.items() if not k.endswith("_s")}
        floats = {k: float(v) for k, v in values.items() if k.endswith("_s")}
        return NodeStats(self._name, **ints, **floats)  # type: ignore[arg-type]
