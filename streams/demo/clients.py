"""The main job's applications: aiokafka clients on the model clusters' Kafka listeners, and the
accounting of what they saw.

- ``produce_mix``: keyed records from an idempotent producer, and transactions (committed or
  aborted) from a transactional one, until told to stop; ``leave_open`` then opens transactions
  and walks away from them (each with its own transactional ID, as a crashed application).
- ``consume_group``: one member of a consumer group, ``read_committed``, committing its position
  every second; on ``drain`` it reads up to the end a ``read_committed`` client sees (the LSO),
  then commits or not (an application stopped at the failover does not).
- ``committed_offsets``: a group's committed offsets as a client fetches them (OffsetFetch).
- ``read_committed``: what a plain ``read_committed`` consumer reads of some partitions, up to given ends.
- ``refused_produce``: one produce that must be refused (a read-only mirror topic).
- ``account``: pure. From what was produced and consumed, and the group's offsets, it counts
  duplicates and gaps and lists what is wrong.

Offsets identify records across the switch: a mirror partition holds A's records at A's offsets.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")
TP = tuple[str, int]  # (topic name, partition)
COMMITTED_STATUSES = frozenset({"plain", "committed"})


class Produced(NamedTuple):
    topic: str
    partition: int
    offset: int
    value: bytes
    status: str  # plain (idempotent producer), committed, aborted, open


class Consumed(NamedTuple):
    topic: str
    partition: int
    offset: int
    value: bytes


class ClientLoop:
    """An event loop on its own thread for the aiokafka clients, so the demo's synchronous steps
    (CLI calls, waits) and the clients run side by side."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="kafka-clients")
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        if self.loop.is_running():
            async def cancel_all() -> None:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            try:
                self.run(cancel_all(), 15)
            except Exception:  # noqa: BLE001 - closing: nothing more to do
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        if not self.loop.is_running() and not self.loop.is_closed():
            self.loop.close()


def _producer(bootstrap: str, **kw: Any) -> Any:
    from aiokafka import AIOKafkaProducer

    settings = {"request_timeout_ms": 10000, "retry_backoff_ms": 50, "client_id": "kip1279-demo-app", **kw}
    return AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)


async def create_topics(bootstrap: str, topics: Mapping[str, int], replication_factor: int = 3) -> None:
    """CreateTopics through the Kafka admin client."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="kip1279-demo-admin")
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, n, replication_factor) for t, n in topics.items()])
    finally:
        await admin.close()


async def produce_mix(bootstrap: str, tag: str, topics: Sequence[str], stop: threading.Event, seed: int,
                      records_per_s: float = 300.0, batch: int = 5, txn_ratio: float = 0.3,
                      abort_ratio: float = 0.3) -> list[Produced]:  # fmt: skip
    """Steps of ``batch`` keyed records until ``stop``: plain ones from an idempotent producer, or
    (``txn_ratio``) one transaction over several topics, aborted with ``abort_ratio``."""
    rng = random.Random(seed)
    plain = _producer(bootstrap, enable_idempotence=True, acks="all")
    txn = _producer(bootstrap, transactional_id=f"demo-{tag}-txn")
    await plain.start()
    await txn.start()
    out: list[Produced] = []
    seq, t0 = 0, time.monotonic()
    try:
        while not stop.is_set():
            transactional = rng.random() < txn_ratio
            p = txn if transactional else plain
            if transactional:
                await p.begin_transaction()
            sends = []
            for _ in range(batch):
                key, value = f"key-{rng.randrange(40)}".encode(), f"{tag}-{seq}".encode()
                seq += 1
                sends.append((value, await p.send(rng.choice(topics), value, key=key)))
            acked = [(value, await fut) for value, fut in sends]
            status = "plain"
            if transactional:
                status = "aborted" if rng.random() < abort_ratio else "committed"
                await (p.abort_transaction() if status == "aborted" else p.commit_transaction())
            out.extend(Produced(md.topic, md.partition, md.offset, v, status) for v, md in acked)
            await asyncio.sleep(max(0.0, t0 + seq / records_per_s - time.monotonic()))
    finally:
        await plain.stop()
        await txn.stop()
    return out


async def leave_open(bootstrap: str, tag: str, topics: Sequence[str], count: int, seed: int) -> list[Produced]:
    """``count`` transactions, each from its own transactional producer, left open: the producer
    goes away without committing or aborting (its records hold the LSO until the transaction ends)."""
    rng = random.Random(seed)
    out: list[Produced] = []
    for i in range(count):
        p = _producer(bootstrap, transactional_id=f"demo-{tag}-open-{i}")
        await p.start()
        try:
            await p.begin_transaction()
            for j, topic in enumerate(rng.sample(list(topics), 2)):
                value = f"{tag}-open-{i}-{j}".encode()
                md = await (await p.send(topic, value, key=f"key-{rng.randrange(40)}".encode()))
                out.append(Produced(md.topic, md.partition, md.offset, value, "open"))
        finally:
            await p.stop()
    return out


async def committed_offsets(bootstrap: str, group: str, partitions: Sequence[TP]) -> dict[TP, int | None]:
    """The group's committed offsets as a client fetches them, without joining the group."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         client_id="kip1279-demo-offsets")  # fmt: skip
    await c.start()
    try:
        return {tp: await c.committed(TopicPartition(*tp)) for tp in partitions}
    finally:
        await c.stop()


async def consume_group(bootstrap: str, group: str, topics: Sequence[str], partitions: int, out: list[Consumed],
                        drain: threading.Event, final_commit: bool, commit_every_s: float = 1.0,
                        timeout_s: float = 60.0) -> dict[TP, int]:  # fmt: skip
    """One member of ``group``, read_committed. Reads into ``out`` and commits its position every
    ``commit_every_s``; once ``drain`` is set, reads up to the read_committed end (LSO) of each of
    its ``partitions`` partitions, commits if ``final_commit``, leaves. Returns those ends."""
    from aiokafka import AIOKafkaConsumer

    c = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group, isolation_level="read_committed",
                         auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                         heartbeat_interval_ms=500, client_id="kip1279-demo-app")  # fmt: skip
    await c.start()
    try:
        last_commit, ends, deadline = time.monotonic(), None, None
        while True:
            for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                out.extend(Consumed(tp.topic, tp.partition, m.offset, m.value) for m in msgs)
            assigned = c.assignment()
            if time.monotonic() - last_commit >= commit_every_s and assigned:
                await c.commit()
                last_commit = time.monotonic()
            if drain.is_set() and deadline is None:
                deadline = time.monotonic() + timeout_s
            if drain.is_set() and len(assigned) == partitions:
                if ends is None:  # the producers are quiet by now: the ends no longer move
                    ends = await c.end_offsets(list(assigned))
                positions = {tp: await c.position(tp) for tp in ends}
                if all(positions[tp] >= end for tp, end in ends.items()):
                    break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"group {group}: not at the read_committed end within {timeout_s:.0f}s "
                                   f"({len(assigned)} of {partitions} partitions assigned)")  # fmt: skip
        if final_commit:
            await c.commit()
        return {(tp.topic, tp.partition): end for tp, end in ends.items()}
    finally:
        await c.stop()


async def read_committed(bootstrap: str, ends: Mapping[TP, int], timeout_s: float = 30.0) -> dict[TP, list[tuple[int, bytes]]]:
    """(offset, value) of what a plain ``read_committed`` consumer (no group) reads of each
    partition in ``ends``, from its log start up to that end (an LSO)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
                         auto_offset_reset="earliest", client_id="kip1279-demo-referee")  # fmt: skip
    await c.start()
    try:
        tps = {TopicPartition(*tp): end for tp, end in ends.items()}
        c.assign(list(tps))
        await c.seek_to_beginning(*tps)
        out: dict[TP, list[tuple[int, bytes]]] = {tp: [] for tp in ends}
        deadline = time.monotonic() + timeout_s
        while [tp for tp, end in tps.items() if await c.position(tp) < end]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read_committed: not at the given ends within {timeout_s:.0f}s")
            for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                out[(tp.topic, tp.partition)].extend((m.offset, m.value) for m in msgs if m.offset < tps[tp])
        return out
    finally:
        await c.stop()


async def refused_produce(bootstrap: str, topic: str) -> str | None:
    """One produce to ``topic``; the name of the error it got, None if it was accepted.

    A read-only mirror topic answers READ_ONLY_TOPIC (134). aiokafka 0.14 has no class for that
    code and raises ``UnknownError``, which it does not retry."""
    from aiokafka.errors import KafkaError

    p = _producer(bootstrap, acks=1, request_timeout_ms=5000)
    await p.start()
    try:
        await p.send_and_wait(topic, b"refused: produced before the stop", partition=0)
        return None
    except KafkaError as e:
        return type(e).__name__
    finally:
        await p.stop()


class ClientReport(NamedTuple):
    produced: int
    committed: int
    aborted: int
    left_open: int
    consumed_a: int
    consumed_b: int
    duplicates: int
    duplicate_bound: int  # records read on A at or past the group's last commit there
    gaps: int
    held: int  # committed records past the final read_committed end (behind a transaction left open)
    problems: list[str]
    # Committed transactional records below the group's last commit on A that A's broker never
    # served to the live group (``source_skips_open_transactions``); 0 otherwise.
    skipped_by_source: int = 0


def account(produced: Sequence[Produced], consumed_a: Sequence[Consumed], consumed_b: Sequence[Consumed],
            committed_a: Mapping[TP, int | None], synced_b: Mapping[TP, int | None],
            ends: Mapping[TP, int], source_skips_open_transactions: bool = False) -> ClientReport:  # fmt: skip
    """What the clients saw, checked.

    ``committed_a``: the group's offsets on A when its member there stopped; ``synced_b``: its
    offsets on B when it started there (what the coordinator's last sync wrote); ``ends``: the
    read_committed end of each partition on B when the group finished there.

    - every record read is one that was produced, with the same value, and committed (plain or in
      a committed transaction): read_committed never shows aborted or open records;
    - no gap: every committed record below ``ends`` was read at least once, on A or on B;
    - the switch: the group's offsets on B are its last commit on A, B reads nothing below them,
      and the duplicates of a partition are at most the records read on A at or past that commit.

    ``source_skips_open_transactions``: A is a broker whose read_committed Fetch serves past the
    LSO, leaving out the batches of transactions still open (noida-db 0.2.3; Kafka stops at the
    LSO), so a live group never sees records whose transaction commits after it read past them.
    Such records below the group's last commit on A (transactional, committed) count as
    ``skipped_by_source``, not as gaps: the switch only decides what is read from that commit on.
    """
    problems: list[str] = []
    by_key = {(p.topic, p.partition, p.offset): p for p in produced}
    if len(by_key) != len(produced):
        problems.append(f"{len(produced) - len(by_key)} produce(s) acknowledged at an offset already acknowledged")
    reads = Counter((c.topic, c.partition, c.offset) for c in (*consumed_a, *consumed_b))
    for c in (*consumed_a, *consumed_b):
        p = by_key.get((c.topic, c.partition, c.offset))
        where = f"{c.topic}-{c.partition}@{c.offset}"
        if p is None:
            problems.append(f"read {where}, which no producer wrote")
        elif p.value != c.value:
            problems.append(f"read {where} = {c.value!r}, produced {p.value!r}")
        elif p.status not in COMMITTED_STATUSES:
            problems.append(f"read_committed read {where}, a record of an {p.status} transaction")
    committed = [p for p in produced if p.status in COMMITTED_STATUSES]
    missing = [p for p in committed if p.offset < ends.get((p.topic, p.partition), 0)
               and (p.topic, p.partition, p.offset) not in reads]  # fmt: skip
    skipped = []
    if source_skips_open_transactions:
        below = [p.status == "committed" and p.offset < (committed_a.get((p.topic, p.partition)) or 0) for p in missing]
        skipped = [p for p, b in zip(missing, below) if b]
        missing = [p for p, b in zip(missing, below) if not b]
    held = sum(1 for p in committed if p.offset >= ends.get((p.topic, p.partition), 0))
    if missing:
        shown = ", ".join(f"{p.topic}-{p.partition}@{p.offset}" for p in missing[:5])
        problems.append(f"{len(missing)} committed record(s) never read (gaps): {shown}{' ...' if len(missing) > 5 else ''}")
    dup_by_tp: dict[TP, int] = defaultdict(int)
    for (topic, part, _), n in reads.items():
        dup_by_tp[(topic, part)] += n - 1
    bound_by_tp: dict[TP, int] = defaultdict(int)
    for c in consumed_a:
        last = committed_a.get((c.topic, c.partition))
        if last is None or c.offset >= last:
            bound_by_tp[(c.topic, c.partition)] += 1
    for tp in sorted(set(committed_a) | set(synced_b)):
        if synced_b.get(tp) != committed_a.get(tp):
            problems.append(f"{tp[0]}-{tp[1]}: the group's offset on B at the switch is {synced_b.get(tp)}, "
                            f"its last commit on A {committed_a.get(tp)}")  # fmt: skip
    for c in consumed_b:
        start = synced_b.get((c.topic, c.partition))
        if start is not None and c.offset < start:
            problems.append(f"{c.topic}-{c.partition}: read {c.offset} on B, below the synced offset {start}")
            break
    for tp, dups in sorted(dup_by_tp.items()):
        if dups > bound_by_tp[tp]:
            problems.append(f"{tp[0]}-{tp[1]}: {dups} duplicate(s), more than the {bound_by_tp[tp]} record(s) "
                            "read on A past the group's last commit")  # fmt: skip
    return ClientReport(
        produced=len(produced), committed=len(committed),
        aborted=sum(1 for p in produced if p.status == "aborted"), left_open=sum(1 for p in produced if p.status == "open"),
        consumed_a=len(consumed_a), consumed_b=len(consumed_b), duplicates=sum(dup_by_tp.values()),
        duplicate_bound=sum(bound_by_tp.values()), gaps=len(missing), held=held, problems=problems,
        skipped_by_source=len(skipped),
    )  # fmt: skip
