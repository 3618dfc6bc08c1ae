"""The records CLI: validate schemas, encode and decode messages, dump log segments.

JSON in, JSON out. Bad input gets one precise line on stderr (the field, the byte offset)
and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence, TextIO

from records.codec import CodecError
from records.dump_log import EXIT_DAMAGED  # noqa: F401 - dump-log: the files were dumped, and damage was found in them
from records.framing import FrameError, MetadataRecordSerde
from records.jsonform import JsonFormError
from records.redact import redact_message_json
from records.registry import PROJECT_SCHEMAS, SchemaSet
from records.schema import SchemaError, load_schema_dir

EXIT_BAD_INPUT = 2
SECRETS_HELP = "print sensitive config values (passwords, JAAS configs, keys) instead of (redacted)"


DUMP_LOG_HELP = """\
Dumps log segments (.log, and KRaft .checkpoint snapshots) and a log directory's other files
(.index, .timeindex, .txnindex, producer .snapshot) as JSON lines, or with --format kafka exactly
as Apache Kafka's kafka-dump-log prints them, so that the two can be diffed. A damaged batch is
shown (isvalid: false) with the records that could be read, and the dump goes on.

Sensitive config values (every config Kafka does not know and every PASSWORD-typed one, as
Kafka's RecordRedactor decides), SCRAM key material and the bytes of a record that does not
decode are printed as (redacted) unless --include-secrets. Kafka 4.4.0's kafka-dump-log prints
them in clear: that is the intended difference of --format kafka (besides going on, with a
report, where Kafka's tool stops with an exception).

exit codes: 0 all read and sound; 2 bad usage or a file that cannot be read;
3 damage found (an invalid batch or CRC, a record or value that does not decode,
invalid bytes at the end, an index entry that does not match its log, a corrupt index
or snapshot), reported on stderr.
"""


class UsageError(Exception):
    """A one-line error for the user."""


def _schemas(directory: str | None) -> SchemaSet:
    path = Path(directory) if directory else PROJECT_SCHEMAS
    try:
        return SchemaSet.load(path)
    except SchemaError as e:
        raise UsageError(f"schema error: {e}") from None


def _hex_bytes(text: str) -> bytes:
    cleaned = "".join(text.split())
    if cleaned.startswith(("0x", "0X")):
        cleaned = cleaned[2:]
    try:
        return bytes.fromhex(cleaned)
    except ValueError:
        bad = next((i for i, c in enumerate(cleaned) if c not in "0123456789abcdefABCDEF"), None)
        if bad is not None:
            raise UsageError(f"input is not hex: character {cleaned[bad]!r} at position {bad}") from None
        raise UsageError(f"input is not hex: odd number of digits ({len(cleaned)})") from None


def _json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(obj, ensure_ascii=False) + "\n")


def cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    directory = Path(args.schemas) if args.schemas else PROJECT_SCHEMAS
    try:
        specs, errors = load_schema_dir(directory)
    except SchemaError as e:
        raise UsageError(str(e)) from None
    if not errors:
        try:
            SchemaSet(specs, str(directory))  # duplicate names and apiKeys
        except SchemaError as e:
            errors.append(e)
    for e in errors:
        sys.stderr.write(f"error: {e}\n")
    versions = sum(len(s.versions()) for s in specs)
    out.write(f"{len(specs)} schemas ({versions} versions) valid, {len(errors)} with errors in {directory}\n")
    return EXIT_BAD_INPUT if errors else 0


def _read_stdin_json() -> Any:
    text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"input is not JSON: line {e.lineno} column {e.colno}: {e.msg}") from None


def cmd_encode(args: argparse.Namespace, out: TextIO) -> int:
    schemas = _schemas(args.schemas)
    obj = _read_stdin_json()
    if args.type not in schemas.specs:
        raise UsageError(f"no message named {args.type!r} in {schemas.source}")
    if args.frame and isinstance(obj, dict) and set(obj) == {"type", "version", "data"}:
        obj = obj["data"]  # accept decode --frame's own output
    value = schemas.from_json(args.type, obj, args.version)
    if args.frame:
        data = MetadataRecordSerde(schemas).encode(value, args.version)
    else:
        data = schemas.encode(value, args.version)
    out.write(data.hex() + "\n")
    return 0


def cmd_decode(args: argparse.Namespace, out: TextIO) -> int:
    schemas = _schemas(args.schemas)
    text = args.hex if args.hex is not None else sys.stdin.read()
    data = _hex_bytes(text)
    if args.frame:
        serde = MetadataRecordSerde(schemas)
        record = serde.decode(data)
        if args.type and type(record.message).__name__ != args.type:
            raise UsageError(f"the frame holds {type(record.message).__name__}, not {args.type}")
        framed = serde.to_json(record)
        if not args.include_secrets:
            framed["data"] = redact_message_json(type(record.message).__name__, framed["data"])
        _json(framed, out)
        return 0
    if not args.type or args.version is None:
        raise UsageError("decode needs --type and --version (or --frame)")
    if args.type not in schemas.specs:
        raise UsageError(f"no message named {args.type!r} in {schemas.source}")
    value = schemas.decode(args.type, data, args.version)
    obj = schemas.to_json(value, args.version)
    _json(obj if args.include_secrets else redact_message_json(args.type, obj), out)
    return 0


def cmd_dump_log(args: argparse.Namespace, out: TextIO) -> int:
    from records.dump_log import DumpLogOptions, dump_files

    files = list(args.files)
    if args.files_csv:
        files += [f for f in args.files_csv.split(",") if f]
    if not files:
        raise UsageError("dump-log needs at least one FILE (or --files FILE1,FILE2)")
    coordinator = "offsets" if args.offsets_decoder else "transaction-log" if args.transaction_log_decoder else None
    if coordinator and args.format != "kafka":
        raise UsageError("--offsets-decoder and --transaction-log-decoder go with --format kafka")
    options = DumpLogOptions(
        kafka_format=args.format == "kafka",
        deep_iteration=args.deep_iteration,
        print_data=args.print_data_log or args.data or args.cluster_metadata_decoder or coordinator is not None,
        coordinator=coordinator,
        metadata=args.cluster_metadata_decoder or (args.format == "json" and not args.data),
        raw=args.raw,
        include_secrets=args.include_secrets,
        index_sanity_check=args.index_sanity_check,
        verify_index_only=args.verify_index_only,
        max_message_size=args.max_message_size,
        max_bytes=args.max_bytes,
    )
    return dump_files(files, _schemas(args.schemas), options, out, sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kafka-records", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="check every schema of a folder and report all errors")
    v.add_argument("--schemas", help=f"schema folder (default: {PROJECT_SCHEMAS})")
    v.set_defaults(run=cmd_validate)

    e = sub.add_parser("encode", help="read a message's JSON data object on stdin; print hex")
    e.add_argument("--schemas")
    e.add_argument("--type", required=True, help="message name, e.g. TopicRecord")
    e.add_argument("--version", required=True, type=int)
    e.add_argument("--frame", action="store_true", help="frame as a KRaft metadata record")
    e.set_defaults(run=cmd_encode)

    d = sub.add_parser("decode", help="decode hex (argument or stdin); print JSON")
    d.add_argument("--schemas")
    d.add_argument("--type")
    d.add_argument("--version", type=int)
    d.add_argument("--frame", action="store_true", help="the input is a framed KRaft metadata record")
    d.add_argument("--include-secrets", action="store_true", help=SECRETS_HELP)
    d.add_argument("hex", nargs="?")
    d.set_defaults(run=cmd_decode)

    dl = sub.add_parser(
        "dump-log",
        help="dump log segments and a log directory's other files, as JSON lines or as kafka-dump-log prints them",
        description=DUMP_LOG_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dl.add_argument("files", nargs="*", metavar="FILE", help=".log, .index, .timeindex, .txnindex, .snapshot or .checkpoint files")
    dl.add_argument("--files", dest="files_csv", metavar="FILE1,FILE2", help="comma-separated files, as kafka-dump-log takes them")
    dl.add_argument("--format", choices=("json", "kafka"), default="json",
                    help="json: one JSON line per batch and per record (default); kafka: kafka-dump-log's text, line for line")  # fmt: skip
    dl.add_argument("--schemas")
    dl.add_argument("--raw", action="store_true", help="json: print payloads as base64 instead of decoding them")
    dl.add_argument("--include-secrets", action="store_true", help=SECRETS_HELP)
    dl.add_argument(
        "--data",
        action="store_true",
        help="a data topic's segment: print keys and values as text (kafka-dump-log --print-data-log), "
        "not as metadata records",
    )
    dl.add_argument("--deep-iteration", action="store_true", help="kafka: one line per record too, not only per batch")
    dl.add_argument("--print-data-log", action="store_true", help="kafka: print keys and values (as text); implies --deep-iteration")
    dl.add_argument("--cluster-metadata-decoder", action="store_true",
                    help="kafka: print values as KRaft metadata records (__cluster_metadata); implies --print-data-log")  # fmt: skip
    dl.add_argument("--offsets-decoder", action="store_true", help="kafka: print __consumer_offsets records as Kafka's JSON")
    dl.add_argument("--transaction-log-decoder", action="store_true", help="kafka: print __transaction_state records as Kafka's JSON")
    dl.add_argument("--index-sanity-check", action="store_true", help="index files: only run the check a broker runs at start-up")
    dl.add_argument("--verify-index-only", action="store_true", help="index files: check entries against the log, print only mismatches")
    dl.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, help="index files: the largest batch to read (default 5 MiB)")
    dl.add_argument("--max-bytes", type=int, help="log files: read only this many bytes")
    dl.set_defaults(run=cmd_dump_log)
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args, out)
    except (UsageError, SchemaError, CodecError, FrameError, JsonFormError, KeyError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        sys.stderr.write(f"error: {message}\n")
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
