"""Decode/encode throughput of framed KRaft metadata records: ours vs kafka-python 3.x and msgspec.

Workload (default 1,000 topics; ``--topics N`` to change), per topic:

- 1 TopicRecord v0;
- 50 PartitionRecords, replicas and ISR of 3: v1 with 3 directories for even-numbered
  topics, v0 for odd-numbered ones;
- 10 PartitionChangeRecords: ISR shrinks/expands, leader changes (with and without a new
  ISR), one v1 reassignment (replicas + directories);
- 1 MirrorTopicStateChangeRecord v0.

Every record is framed as Kafka's ``MetadataRecordSerde`` frames it: uvarint frame version
(1), uvarint apiKey, uvarint version, body. Both sides do the same work on the same bytes:

- decode: framed ``bytes`` -> validate the header, dispatch on apiKey, check the version,
  decode the body, reject trailing bytes -> a message object;
- encode: a message object and a version -> the framed bytes (header cached per
  (apiKey, version) on both sides).

kafka-python has no metadata-record serde, so it gets a small framing shim around its body
codec: its ``ApiData`` classes are loaded from our ``schemas/*.json`` with ``type`` patched
to ``"data"``. kafka-python has two body codecs, both measured:

- ``ApiData``: its data-class API, ``obj.encode(version=v, header=False)`` and
  ``Cls.decode(bytes_io, version=v, header=False)``. The headline ratios
  (``decode_ratio_vs_kafka_python``, ``encode_ratio_vs_kafka_python``) and the goal
  (decode >= 5x, encode >= 3x) are against this path;
- ``codegen``: the compiled per-version functions kafka-python's ``ApiMessage`` (requests
  and responses) uses, ``StructField.compiled_decode_from`` / ``compiled_encode_into``,
  reached through the data class's private ``_struct``. ``ApiData`` does not use them, but
  they are kafka-python's fastest code, so the table and the JSON report them too
  (``*_vs_kafka_python_codegen``). This shim returns the ``bytearray`` kafka-python's
  ``ApiMessage.encode`` returns, without a copy to ``bytes``.

msgspec's limit (``msgspec`` in the table, ``*_vs_msgspec`` in the JSON; goal: ours at least
0.5 of it, decode and encode): msgspec encoding and decoding the same Struct values, of the
same Struct types, in its own binary format (MessagePack, default settings), record by
record: ``msgspec.msgpack.Encoder().encode(struct)`` and
``msgspec.msgpack.Decoder(StructType).decode(bytes)``, one encoder and one decoder per type
built up front. It is a limit, not a rival: msgspec is told each record's type (no header to
read, no dispatch) and writes no version, so ours does strictly more work per record.

Before timing, the bench checks on a sample (all records of the first 20 topics, then every
5th) that every decoder returns the same field values and every encoder produces the same
bytes (msgspec: decodes to values equal to ours, and its encoder round-trips).

Timing: the thread's CPU time (``time.thread_time``; ``--wall`` for ``time.perf_counter``), so
time the process spends waiting for a core on a shared machine is not counted; best of
``--repeat`` (default 5) rounds after a warm-up,
single process, results discarded as they are produced. Every round replays the whole log
once per implementation, cut into chunks of 20 topics (1,240 records) that the
implementations take in turns, so a change in the machine's load hits all of them alike; a
figure is the record count over the sum of every chunk's best time.
Our decoders share one UUID instance per id (``records.codec``); that cache is emptied
before every timed decode run, so each run is a cold replay of the log. The last line
printed is one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import io
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from records import codec as _codec_module
from records.framing import MetadataRecordSerde
from records.registry import PROJECT_SCHEMAS, default_schemas
from records.varint import uvarint_bytes

MESSAGES = ("TopicRecord", "PartitionRecord", "PartitionChangeRecord", "MirrorTopicStateChangeRecord")
PARTITIONS_PER_TOPIC = 50
CHANGES_PER_TOPIC = 10
RECORDS_PER_TOPIC = 1 + PARTITIONS_PER_TOPIC + CHANGES_PER_TOPIC + 1
APIDATA = "kafka-python ApiData"
CODEGEN = "kafka-python codegen"
MSGSPEC = "msgspec"
BROKERS = 12
INT16_MAX = 0x7FFF


# -- workload -------------------------------------------------------------------------------


def build_workload(topics: int, seed: int = 1279) -> list[tuple[str, int, dict[str, Any]]]:
    """(message name, version, field values) of every record, in log order."""
    rnd = random.Random(seed)

    def uid() -> uuid.UUID:
        return uuid.UUID(int=rnd.getrandbits(128) | 1)  # never the all-zero uuid (null to kafka-python)

    dirs = {b: [uid() for _ in range(2)] for b in range(BROKERS)}  # two log dirs per broker
    records: list[tuple[str, int, dict[str, Any]]] = []
    for t in range(topics):
        topic_id = uid()
        records.append(("TopicRecord", 0, {"name": f"mirror-a.orders-{t:05d}", "topic_id": topic_id}))
        with_dirs = t % 2 == 0
        assignment = []
        for p in range(PARTITIONS_PER_TOPIC):
            replicas = [(t + p + i) % BROKERS for i in range(3)]
            assignment.append(replicas)
            fields: dict[str, Any] = {
                "partition_id": p,
                "topic_id": topic_id,
                "replicas": replicas,
                "isr": list(replicas),
                "removing_replicas": [],
                "adding_replicas": [],
                "leader": replicas[0],
                "leader_epoch": rnd.randrange(0, 50),
                "partition_epoch": rnd.randrange(0, 200),
            }
            if with_dirs:
                fields["directories"] = [dirs[b][p % 2] for b in replicas]
            records.append(("PartitionRecord", 1 if with_dirs else 0, fields))
        for c in range(CHANGES_PER_TOPIC):
            p = rnd.randrange(PARTITIONS_PER_TOPIC)
            replicas = assignment[p]
            change: dict[str, Any] = {"partition_id": p, "topic_id": topic_id}
            kind = c % 5
            version = 0
            if kind == 0:  # ISR shrink
                change["isr"] = replicas[:2]
            elif kind == 1:  # ISR expand
                change["isr"] = list(replicas)
            elif kind == 2:  # leader change (new leader epoch implied)
                change["leader"] = replicas[1]
            elif kind == 3:  # unclean-ish: leader and ISR change together
                change["leader"] = replicas[2]
                change["isr"] = [replicas[2]]
                change["leader_recovery_state"] = 1
            else:  # reassignment with log directories
                new = [replicas[0], replicas[1], (replicas[2] + 3) % BROKERS]
                change["replicas"] = new
                change["isr"] = new[:2]
                change["directories"] = [dirs[b][0] for b in new]
                version = 1
            records.append(("PartitionChangeRecord", version, change))
        records.append(
            ("MirrorTopicStateChangeRecord", 0, {"topic_id": topic_id, "mirror_name": "us-east-to-eu-west", "desired_state": t % 3})
        )
    return records


# -- kafka-python ---------------------------------------------------------------------------


def load_kafka_python_classes() -> tuple[dict[str, type], str]:
    """kafka-python ``ApiData`` classes loaded from our schema files, type patched to data."""
    import kafka
    from kafka.protocol.api_data import ApiData

    tmp = Path(tempfile.mkdtemp(prefix="kp-schemas-"))
    try:
        pkg_name = "_bench_kraft_metadata_schemas"
        pkg = tmp / pkg_name
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        for name in MESSAGES:
            shutil.copy(PROJECT_SCHEMAS / f"{name}.json", pkg / f"{name}.json")
        sys.path.insert(0, str(tmp))
        try:
            module = importlib.import_module(pkg_name)

            def json_patch(cls: type, schema: dict[str, Any]) -> dict[str, Any]:
                _require(schema.get("type") == "metadata", f"{schema.get('name')} is not a metadata record schema")
                return {**schema, "type": "data"}  # ApiData accepts only type "data"

            meta = type(ApiData)
            classes = {
                name: meta(name, (ApiData,), {"json_patch": classmethod(json_patch), "__module__": __name__}, load_json=module)
                for name in MESSAGES
            }
        finally:
            sys.path.remove(str(tmp))
            sys.modules.pop(pkg_name, None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return classes, kafka.__version__


class _KpFrameError(ValueError):
    pass


def _kp_read_header(data: bytes) -> tuple[int, int, int]:
    """The three uvarints of a frame, with the checks our serde makes: (apiKey, version, pos)."""
    n = len(data)
    pos = 0
    values = []
    for _ in range(3):
        result = shift = 0
        while True:
            if pos >= n or shift > 28:
                raise _KpFrameError(f"bad frame header at byte {pos}")
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        values.append(result)
    frame, api_key, version = values
    if frame != 1:
        raise _KpFrameError(f"unsupported frame version {frame}")
    if api_key > INT16_MAX or version > INT16_MAX:
        raise _KpFrameError("apiKey or version too large for an int16")
    return api_key, version, pos


class KafkaPythonSerde:
    """A framing shim around kafka-python's body codec, doing what ``MetadataRecordSerde`` does."""

    def __init__(self, classes: dict[str, type], compiled: bool) -> None:
        from kafka.protocol.schemas.fields.codecs import EncodeBuffer

        schemas = default_schemas()
        self.compiled = compiled
        self.by_key: dict[int, type] = {}
        self.api_key_of: dict[type, int] = {}
        self.valid: dict[int, range] = {}
        for name, cls in classes.items():
            spec = schemas.spec(name)
            _require(cls._json["apiKey"] == spec.api_key, f"{name}: apiKey differs from our schema set")
            self.by_key[spec.api_key] = cls
            self.api_key_of[cls] = spec.api_key
            self.valid[spec.api_key] = range(cls.min_version, cls.max_version + 1)
        self._headers: dict[tuple[int, int], bytes] = {}
        self._decoders: dict[tuple[int, int], Callable[..., Any]] = {}
        self._encoders: dict[tuple[type, int], Callable[..., Any]] = {}
        self._out = EncodeBuffer()

    def _decoder(self, api_key: int, version: int) -> Callable[..., Any]:
        fn = self._decoders.get((api_key, version))
        if fn is None:
            cls = self.by_key.get(api_key)
            if cls is None:
                raise _KpFrameError(f"unknown metadata record apiKey {api_key}")
            if version not in self.valid[api_key]:
                raise _KpFrameError(f"{cls.name} has no version {version}")
            flexible = cls.flexible_version_q(version)
            fn = self._decoders[(api_key, version)] = cls._struct.compiled_decode_from(
                version, compact=flexible, tagged=flexible, data_class=cls
            )
        return fn

    def decode(self, data: bytes) -> tuple[Any, int, int]:
        api_key, version, pos = _kp_read_header(data)
        if self.compiled:
            message, end = self._decoder(api_key, version)(memoryview(data), pos)
        else:
            cls = self.by_key.get(api_key)
            if cls is None:
                raise _KpFrameError(f"unknown metadata record apiKey {api_key}")
            if version not in self.valid[api_key]:
                raise _KpFrameError(f"{cls.name} has no version {version}")
            body = io.BytesIO(data)
            body.seek(pos)
            message = cls.decode(body, version=version, header=False)
            end = body.tell()
        if end != len(data):
            raise _KpFrameError(f"{len(data) - end} bytes of garbage after the body")
        return message, version, api_key

    def encode(self, message: Any, version: int) -> bytes | bytearray:
        cls = type(message)
        api_key = self.api_key_of[cls]
        header = self._headers.get((api_key, version))
        if header is None:
            header = self._headers[(api_key, version)] = uvarint_bytes(1) + uvarint_bytes(api_key) + uvarint_bytes(version)
        if not self.compiled:
            return header + message.encode(version=version, header=False)
        fn = self._encoders.get((cls, version))
        if fn is None:
            flexible = cls.flexible_version_q(version)
            fn = self._encoders[(cls, version)] = cls._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)
        out = self._out
        n = len(header)
        out.buf[0:n] = header
        out.pos = n
        fn(message, out)
        return out.result()  # a bytearray copy, as kafka-python's ApiMessage.encode returns


# -- msgspec -------------------------------------------------------------------------------


class MsgspecSide:
    """msgspec's own limit: its MessagePack codec on the same Structs, one decoder per type."""

    def __init__(self, our_msgs: list[tuple[Any, int]]) -> None:
        import msgspec

        self.encoder = msgspec.msgpack.Encoder()
        decoders = {t: msgspec.msgpack.Decoder(t).decode for t in {type(m) for m, _ in our_msgs}}
        # (decoder of the record's type, its MessagePack bytes): the type is known up front.
        self.items = [(decoders[type(m)], self.encoder.encode(m)) for m, _ in our_msgs]


class MsgspecImpl:
    """Same loops as ``Impl``, over msgspec's inputs."""

    reset = None

    def __init__(self, side: MsgspecSide, messages: list[tuple[Any, int]]) -> None:
        self.inputs = side.items
        self.encoder = side.encoder
        self.messages = messages

    def run_decode(self, items: list[tuple[Callable[[bytes], Any], bytes]]) -> None:
        for decode, data in items:
            decode(data)

    def run_encode(self, messages: list[tuple[Any, int]]) -> None:
        encode = self.encoder.encode
        for message, _ in messages:
            encode(message)


# -- checks ---------------------------------------------------------------------------------


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_norm(v) for v in value)
    return value


def field_values(message: Any, attrs: tuple[str, ...]) -> dict[str, Any]:
    return {a: _norm(getattr(message, a)) for a in attrs}


class BenchCheckError(AssertionError):
    pass


def _require(ok: bool, message: str) -> None:
    if not ok:  # not an assert: the checks must run under python -O too
        raise BenchCheckError(message)


def sample_indices(n: int) -> list[int]:
    """The records the checks cover: all of the first 20 topics (every kind of record), then
    every 5th record."""
    head = min(n, 20 * RECORDS_PER_TOPIC)
    return list(range(head)) + list(range(head, n, 5))


def verify(
    ours: MetadataRecordSerde,
    kp: dict[str, KafkaPythonSerde],
    frames: list[bytes],
    our_msgs: list[tuple[Any, int]],
    kp_msgs: list[tuple[Any, int]],
    ms: MsgspecSide,
) -> int:
    """Every decoder gives the same field values, every encoder the same bytes; returns how
    many records were checked."""
    schemas = default_schemas()
    attrs = {
        name: tuple(f for f in schemas.struct(name).__struct_fields__ if f != "unknown_tagged_fields") for name in MESSAGES
    }
    indices = sample_indices(len(frames))
    for i in indices:
        frame = frames[i]
        rec = ours.decode(frame)
        name = type(rec.message).__name__
        _require((rec.message, rec.version) == our_msgs[i], f"record {i}: our decode does not round-trip")
        expected = field_values(rec.message, attrs[name])
        for label, serde in kp.items():
            message, version, api_key = serde.decode(frame)
            _require((version, api_key) == (rec.version, rec.api_key), f"record {i}: {label} header differs")
            _require(type(message).__name__ == name, f"record {i}: {label} decoded a {type(message).__name__}")
            got = field_values(message, attrs[name])
            _require(got == expected, f"record {i} ({name} v{version}): {label} decoded {got}, ours {expected}")
            _require(
                bytes(serde.encode(*kp_msgs[i])) == frame, f"record {i} ({name} v{version}): {label} encodes other bytes"
            )
        decode, data = ms.items[i]
        _require(decode(data) == rec.message, f"record {i} ({name}): msgspec decoded other values")
        _require(ms.encoder.encode(rec.message) == data, f"record {i} ({name}): msgspec encodes other bytes")
    return len(indices)


# -- timing ---------------------------------------------------------------------------------


class Impl:
    """One implementation under test: its serde calls, its message objects, its reset hook."""

    def __init__(
        self,
        decode: Callable[[bytes], Any],
        encode: Callable[[Any, int], Any],
        messages: list[tuple[Any, int]],
        reset: Callable[[], None] | None = None,
    ) -> None:
        self.decode = decode
        self.encode = encode
        self.messages = messages
        self.reset = reset
        self.inputs: list[Any] | None = None  # None: the framed records

    def run_decode(self, frames: list[bytes]) -> None:
        decode = self.decode
        for frame in frames:
            decode(frame)

    def run_encode(self, messages: list[tuple[Any, int]]) -> None:
        encode = self.encode
        for message, version in messages:
            encode(message, version)


def measure(
    impls: dict[str, Impl | MsgspecImpl], frames: list[bytes], repeat: int, chunk: int, clock: Callable[[], float] = time.thread_time
) -> dict[str, dict[str, float]]:
    """Throughput from best-of-``repeat`` times.

    The workload is cut into chunks of ``chunk`` records, in log order. Every round replays
    the whole log once per implementation, the implementations taking turns chunk by chunk,
    so a change in the machine's load hits all of them alike; a figure is the whole log's
    record count over the sum of each chunk's best time.
    """
    n = len(frames)
    bounds = [(i, min(i + chunk, n)) for i in range(0, n, chunk)]
    for impl in impls.values():  # warm-up: compiles the per-version code on every side
        impl.run_decode((frames if impl.inputs is None else impl.inputs)[:chunk])
        impl.run_encode(impl.messages[:chunk])
    inf = float("inf")
    dec = {label: [inf] * len(bounds) for label in impls}
    enc = {label: [inf] * len(bounds) for label in impls}
    for _ in range(repeat):
        for impl in impls.values():
            if impl.reset is not None:
                impl.reset()
        gc.collect()
        for c, (lo, hi) in enumerate(bounds):
            part = frames[lo:hi]
            for label, impl in impls.items():
                inputs = part if impl.inputs is None else impl.inputs[lo:hi]
                t0 = clock()
                impl.run_decode(inputs)
                dec[label][c] = min(dec[label][c], clock() - t0)
            for label, impl in impls.items():
                part_msgs = impl.messages[lo:hi]
                t0 = clock()
                impl.run_encode(part_msgs)
                enc[label][c] = min(enc[label][c], clock() - t0)
    out = {}
    for label, impl in impls.items():
        # MB/s of what each side reads and writes: msgspec's own MessagePack bytes for it
        mb = (sum(map(len, frames)) if impl.inputs is None else sum(len(data) for _, data in impl.inputs)) / 1e6
        d, e = sum(dec[label]), sum(enc[label])
        out[label] = {
            "decode_records_per_s": n / d,
            "decode_mb_per_s": mb / d,
            "encode_records_per_s": n / e,
            "encode_mb_per_s": mb / e,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--topics", type=int, default=1000, help="topics in the workload (62 records each)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per figure; the best is kept")
    parser.add_argument("--wall", action="store_true", help="time with time.perf_counter instead of the thread's CPU time")
    args = parser.parse_args(argv)
    if args.topics < 1 or args.repeat < 1:
        parser.error("--topics and --repeat must be at least 1")

    schemas = default_schemas()
    ours = MetadataRecordSerde(schemas)
    kp_classes, kp_version = load_kafka_python_classes()
    kp = {APIDATA: KafkaPythonSerde(kp_classes, compiled=False), CODEGEN: KafkaPythonSerde(kp_classes, compiled=True)}

    workload = build_workload(args.topics)
    our_msgs = [
        (schemas.struct(name)(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}), version)
        for name, version, fields in workload
    ]
    kp_msgs = [(kp_classes[name](version=version, **fields), version) for name, version, fields in workload]
    frames = [ours.encode(m, v) for m, v in our_msgs]
    ms = MsgspecSide(our_msgs)
    checked = verify(ours, kp, frames, our_msgs, kp_msgs, ms)

    counts: dict[str, int] = {}
    for name, version, _ in workload:
        counts[f"{name} v{version}"] = counts.get(f"{name} v{version}", 0) + 1
    total_bytes = sum(map(len, frames))
    print(f"records_codec bench: Python {platform.python_version()}, kafka-python {kp_version}, "
          f"msgspec {importlib.metadata.version('msgspec')}, best of {args.repeat} ({'perf_counter' if args.wall else 'thread_time'}), "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"workload: {args.topics} topics, {len(frames)} framed records, {total_bytes / 1e6:.2f} MB "
          f"(avg {total_bytes / len(frames):.0f} B/record)")
    for key in sorted(counts):
        print(f"  {key:<34} {counts[key]:>7}")
    print(f"checked: {checked} of the {len(frames)} records (every kind) decode to the same field values "
          f"and encode to identical bytes on all {1 + len(kp)} Kafka sides; msgspec decodes them to equal values")

    chunk = 20 * RECORDS_PER_TOPIC  # every message version appears in every chunk
    # Our decoders share one UUID per id; it starts empty for every timed run, as in a replay.
    reset = getattr(_codec_module, "clear_uuid_cache", None)
    impls: dict[str, Impl | MsgspecImpl] = {"ours": Impl(ours.decode, ours.encode, our_msgs, reset)}
    for label, serde in kp.items():
        impls[label] = Impl(serde.decode, serde.encode, kp_msgs)
    impls[MSGSPEC] = MsgspecImpl(ms, our_msgs)
    clock = time.perf_counter if args.wall else time.thread_time
    results = measure(impls, frames, args.repeat, chunk, clock)

    print()
    print(f"{'implementation':<22} {'decode rec/s':>13} {'decode MB/s':>12} {'encode rec/s':>13} {'encode MB/s':>12}")
    for label, r in results.items():
        print(f"{label:<22} {r['decode_records_per_s']:>13,.0f} {r['decode_mb_per_s']:>12.2f} "
              f"{r['encode_records_per_s']:>13,.0f} {r['encode_mb_per_s']:>12.2f}")
    print()
    o = results["ours"]
    ratios = {
        label: (o["decode_records_per_s"] / r["decode_records_per_s"], o["encode_records_per_s"] / r["encode_records_per_s"])
        for label, r in results.items()
        if label != "ours"
    }
    for label, (dec, enc) in ratios.items():
        print(f"ours / {label:<21} decode {dec:6.2f}x   encode {enc:6.2f}x")
    dec_ratio, enc_ratio = ratios[APIDATA]
    print(f"goal (vs {APIDATA}): decode >= 5x: {'met' if dec_ratio >= 5 else 'MISSED'} ({dec_ratio:.2f}x), "
          f"encode >= 3x: {'met' if enc_ratio >= 3 else 'MISSED'} ({enc_ratio:.2f}x)")
    ms_dec, ms_enc = ratios[MSGSPEC]
    print(f"goal (vs {MSGSPEC}'s limit): decode >= 0.5: {'met' if ms_dec >= 0.5 else 'MISSED'} ({ms_dec:.2f}), "
          f"encode >= 0.5: {'met' if ms_enc >= 0.5 else 'MISSED'} ({ms_enc:.2f})")

    def r2(x: float) -> float:
        return round(x, 2)

    kd = results[APIDATA]
    summary: dict[str, Any] = {
        "bench": "records_codec",
        "python": platform.python_version(),
        "kafka_python_version": kp_version,
        "topics": args.topics,
        "records": len(frames),
        "bytes": total_bytes,
        "repeat": args.repeat,
        "clock": clock.__name__,
        "decode_records_per_s": round(o["decode_records_per_s"]),
        "decode_mb_per_s": r2(o["decode_mb_per_s"]),
        "encode_records_per_s": round(o["encode_records_per_s"]),
        "encode_mb_per_s": r2(o["encode_mb_per_s"]),
        "kafka_python_path": "ApiData obj.encode(version=v, header=False) / Cls.decode(bytes_io, version=v, header=False)",
        "kafka_python_decode_records_per_s": round(kd["decode_records_per_s"]),
        "kafka_python_decode_mb_per_s": r2(kd["decode_mb_per_s"]),
        "kafka_python_encode_records_per_s": round(kd["encode_records_per_s"]),
        "kafka_python_encode_mb_per_s": r2(kd["encode_mb_per_s"]),
        "decode_ratio_vs_kafka_python": r2(dec_ratio),
        "encode_ratio_vs_kafka_python": r2(enc_ratio),
    }
    kc = results[CODEGEN]
    summary.update({
        "kafka_python_codegen_decode_records_per_s": round(kc["decode_records_per_s"]),
        "kafka_python_codegen_decode_mb_per_s": r2(kc["decode_mb_per_s"]),
        "kafka_python_codegen_encode_records_per_s": round(kc["encode_records_per_s"]),
        "kafka_python_codegen_encode_mb_per_s": r2(kc["encode_mb_per_s"]),
        "decode_ratio_vs_kafka_python_codegen": r2(ratios[CODEGEN][0]),
        "encode_ratio_vs_kafka_python_codegen": r2(ratios[CODEGEN][1]),
    })
    km = results[MSGSPEC]
    summary.update({
        "msgspec_version": importlib.metadata.version("msgspec"),
        "msgspec_path": "msgspec.msgpack.Encoder().encode(struct) / msgspec.msgpack.Decoder(StructType).decode(bytes)",
        "msgspec_decode_records_per_s": round(km["decode_records_per_s"]),
        "msgspec_encode_records_per_s": round(km["encode_records_per_s"]),
        "decode_ratio_vs_msgspec": r2(ms_dec),
        "encode_ratio_vs_msgspec": r2(ms_enc),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    })
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
