"""A mirror's long poll on its source: caught-up partitions wait for data instead of being asked.

The fetch round parks a partition whose fetch came back empty at the source's HW (``park``);
this thread keeps them in a fetch session on the source (``fetch_wait`` on the model server:
``clustermodel.fetch_sessions``) and collects those that moved (``take_moved``) for the runner's
next round. After a report it waits ``linger_s`` before its next long poll, as a producer's
linger.ms: partitions that move meanwhile collect in the session and come as one report (one
copy job, one wake-up of the worker's loop), not one request and report each. Requests are incremental (only the partitions parked or unparked since the last
one), as KIP-227 fetch sessions; a session the server lost (FETCH_SESSION_ID_NOT_FOUND) is
started again with a full request, as Kafka's FetchSessionHandler does. Any other failure
reports every watched partition as moved: the runner fetches them and its error handling takes
over, so a broken watch never hides data.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from clustermodel.errors import FetchSessionIdNotFound
from coordinator.ports import TopicPartition

log = logging.getLogger(__name__)
DEFAULT_MAX_WAIT_MS = 500  # Kafka's replica.fetch.wait.max.ms default
_RETRY_S = 1.0


class DataWatch:
    """One source connection parked on a fetch session, on a thread of its own."""

    def __init__(self, open_client: Callable[[], Any], max_wait_ms: int = DEFAULT_MAX_WAIT_MS, name: str = "") -> None:
        self._open = open_client
        self.max_wait_ms = max_wait_ms
        self._lock = threading.Lock()
        self._kick = threading.Event()
        self._stop = threading.Event()
        # What the session should hold, with the runner's own object of each partition: a moved
        # one is reported as that object (its hash cached, its UUID the runner's: no UUID compared in Python).
        self._watched: dict[TopicPartition, tuple[int, int, TopicPartition]] = {}
        self._add: dict[TopicPartition, tuple[int, int]] = {}  # not sent yet
        self._remove: set[TopicPartition] = set()
        self._moved: set[TopicPartition] = set()
        self.polls = 0
        self.linger_s = 0.0  # the least time from a report to the next long poll (``mirror.copy.linger.ms``)
        self.resets = 0
        # Told (on the watch's thread) of partitions newly reported moved: the worker steps them
        # at once rather than at its next round.
        self.on_moved: Callable[[set[TopicPartition]], None] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"data-watch-{name}")
        self._thread.start()

    # ---------------------------------------------------------------- the runner's side

    def park(self, tp: TopicPartition, fetch_offset: int, leader_epoch: int) -> None:
        with self._lock:
            self._add[tp] = (fetch_offset, leader_epoch)
            self._watched[tp] = (fetch_offset, leader_epoch, tp)
            self._remove.discard(tp)
        if not self._kick.is_set():  # set takes a lock and notifies: once per batch of parks
            self._kick.set()

    def unpark(self, tp: TopicPartition) -> None:
        with self._lock:
            if self._watched.pop(tp, None) is not None:
                self._add.pop(tp, None)
                self._remove.add(tp)
            self._moved.discard(tp)

    def unpark_many(self, tps: Iterable[TopicPartition]) -> None:
        """``unpark`` of many partitions under one lock."""
        with self._lock:
            watched, add, remove, moved = self._watched, self._add, self._remove, self._moved
            for tp in tps:
                if watched.pop(tp, None) is not None:
                    add.pop(tp, None)
                    remove.add(tp)
                moved.discard(tp)

    def take_moved(self) -> set[TopicPartition]:
        with self._lock:
            moved, self._moved = self._moved, set()
            return moved

    def peek_moved(self) -> set[TopicPartition]:
        """The partitions ``take_moved`` would give now (a copy; they stay)."""
        with self._lock:
            return set(self._moved)

    def close(self) -> None:
        self._stop.set()
        self._kick.set()
        self._thread.join(self.max_wait_ms / 1000 + 5)

    # ---------------------------------------------------------------- the thread

    def _run(self) -> None:
        client: Any = None
        session = 0
        while not self._stop.is_set():
            with self._lock:
                idle = not self._watched and not self._remove
                if not idle:
                    if session == 0:  # a full request: every watched partition
                        add, remove = {tp: (o, e) for tp, (o, e, _) in self._watched.items()}, set()
                    else:
                        add, remove = self._add, self._remove
                    self._add, self._remove = {}, set()
            if idle:
                self._kick.wait(1.0)
                self._kick.clear()
                continue
            try:
                if client is None:
                    client = self._open()
                    session = 0
                    continue  # the next pass sends a full request
                t0 = time.monotonic()
                session, moved = client.fetch_wait(session, [(tp, o, e) for tp, (o, e) in add.items()],
                                                   list(remove), self.max_wait_ms)  # fmt: skip
                self.polls += 1
                if not moved and (left := self.max_wait_ms / 1000 - (time.monotonic() - t0)) > 0.01:
                    self._stop.wait(left)  # a source that answers an empty long poll at once: no busy loop
            except Exception as e:  # noqa: BLE001 - any failure: reset, and let the runner fetch
                if not isinstance(e, FetchSessionIdNotFound):
                    log.info("data watch: %s; its partitions are fetched", e)
                    self._close(client)
                    client = None
                    with self._lock:
                        told = set(self._watched)
                        self._moved.update(told)
                        self._watched.clear()
                        self._add.clear()
                        self._remove.clear()
                    self._tell(told)
                    self._stop.wait(_RETRY_S)
                session = 0
                self.resets += 1
                continue
            if moved:
                told = set()
                with self._lock:
                    for tp in moved:
                        # Parked again meanwhile (a newer position not sent yet): it waits on that one.
                        if tp not in self._add and (got := self._watched.pop(tp, None)) is not None:
                            self._moved.add(got[2])
                            told.add(got[2])
                self._tell(told)
                if told and self.linger_s > 0:
                    self._stop.wait(self.linger_s)  # what moves meanwhile waits in the session
        self._close(client)

    def _tell(self, moved: set[TopicPartition]) -> None:
        callback = self.on_moved
        if moved and callback is not None:
            try:
                callback(moved)
            except Exception:  # noqa: BLE001 - the next round still finds them (take_moved)
                log.exception("data watch: on_moved failed")

    @staticmethod
    def _close(client: Any) -> None:
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass
