"""``kafka-cluster-mirrors``: the admin tool, modelled on KIP-1279's ``kafka-cluster-mirrors.sh``.

    kafka-cluster-mirrors --bootstrap-server 127.0.0.1:9393 --create --mirror a-to-b --mirror-config a.properties
    kafka-cluster-mirrors ... --start  --mirror a-to-b --topics 'orders,payments'
    kafka-cluster-mirrors ... --stop   --mirror a-to-b --topics '.*' --wait 600      # mass failover
    kafka-cluster-mirrors ... --stop|--start --dry-run --mirror a-to-b --topics '.*' [--json]  # its cost first
    kafka-cluster-mirrors ... --stop --consistent-cut [--dry-run] --mirror a-to-b --topics 'orders|payments'
    kafka-cluster-mirrors ... --promote --mirror a-to-b --topics '.*' [--abort-open-transactions] [--timeout S]
    kafka-cluster-mirrors ... --pause|--resume --mirror a-to-b --topics 'orders-.*' [--exclude 'orders-tmp']
    kafka-cluster-mirrors ... --list
    kafka-cluster-mirrors ... --describe [--mirror a-to-b] [--json] [--failed] [--max-age MS]
    kafka-cluster-mirrors ... --delete --mirror a-to-b
    kafka-cluster-mirrors ... --alter --mirror a-to-b --add-config 'bootstrap.servers=h:9092,mirror.topics.include=[a.*,b.*]' [--delete-config k[,k]]
    kafka-cluster-mirrors ... --describe-config --mirror a-to-b

``--bootstrap-server`` is the controllers' admin endpoints (env ``KIP1279_CONTROLLER``): a
request goes to the active one, follows NOT_CONTROLLER and is retried where its connection broke
(``--retry-timeout``); a state-changing one carries a request ID, so it is applied once.
``--command-config`` takes Kafka's client keys: with ``security.protocol=SSL`` and the ``ssl.*``
keys (PEM key and trust stores, see ``streams.tls``) the client authenticates with its
certificate, whose subject is its principal. Without TLS (local mode, loopback) the principal is
claimed: ``principal=User:alice`` there or env ``KIP1279_PRINCIPAL``, so it is a development mode.
Credentials in mirror configs are never printed: every config shown is redacted.

``kip1279-controller`` runs the controller itself (see ``controller_main``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import ssl
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from records.redact import redact_config
from coordinator.states import ErrorCode, MirrorState
from coordinator.topic_filter import compile_patterns, pattern_list_problem
from streams import tls
from streams import config as worker_config
from streams.admin import preview, promote
from streams.admin.describe_output import describe_rows, print_failed, print_partitions, print_readiness, truncate_left
from streams.admin.client import (
    DEFAULT_RETRY_TIMEOUT_S,
    AdminError,
    ClusterMirrorAdmin,
    looks_like_topic_list,
    scrub,
    secret_values,
)

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
# Refusals of what the user typed: exit 2, as a usage error, and not 1 (a state or a permission).
BAD_INPUT = frozenset({ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG})


class UsageError(Exception):
    pass


class BadFlag(Exception):
    """A flag's value refused before anything is sent: INVALID_REQUEST, as the controller would."""

    def __init__(self, flag: str, problem: str) -> None:
        super().__init__(f"{problem} (in {flag})")


def _exit_for(code: int) -> int:
    return EXIT_USAGE if code in BAD_INPUT else EXIT_ERROR


def _check_patterns(args: argparse.Namespace) -> None:
    """--topics (when it is no list of names) and --exclude: the Java regex rule of the configs
    they end up in (``coordinator.topic_filter``), before connecting."""
    if args.topics is not None and not looks_like_topic_list(args.topics.strip()):
        problem = pattern_list_problem((args.topics.strip(),))
        if problem is not None:
            raise BadFlag("--topics", problem)
    for value in args.exclude:
        problem = pattern_list_problem((value.strip(),))
        if problem is not None:
            raise BadFlag("--exclude", problem)


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"ERROR_{code}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kafka-cluster-mirrors", description="Manage KIP-1279 cluster mirrors.")
    p.add_argument("--bootstrap-server", default=os.environ.get("KIP1279_CONTROLLER"),
                   help="the controllers' admin endpoints HOST:PORT[,HOST:PORT...] (env KIP1279_CONTROLLER); "
                        "a request goes to the active one, wherever a NOT_CONTROLLER answer points")  # fmt: skip
    p.add_argument("--retry-timeout", type=float, default=DEFAULT_RETRY_TIMEOUT_S, metavar="SECONDS",
                   help="how long a request whose connection broke, or that a standby refused, is tried again "
                        f"(default {DEFAULT_RETRY_TIMEOUT_S:.0f}; 0: once)")  # fmt: skip
    p.add_argument("--command-config",
                   help="client properties: security.protocol=SSL with Kafka's ssl.* keys (PEM), client.id; "
                        "local mode only: principal=User:NAME")  # fmt: skip
    ops = p.add_mutually_exclusive_group(required=True)
    for op in ("create", "start", "stop", "pause", "resume", "list", "describe", "delete", "alter", "describe-config",
               "promote"):
        ops.add_argument(f"--{op}", action="store_true")
    p.add_argument("--mirror", help="cluster mirror name")
    p.add_argument("--mirror-config", help="properties file of the mirror (bootstrap.servers, security, ...)")
    p.add_argument("--add-config", metavar="K=V[,K=V]",
                   help="alter: configs to set, as kafka-configs takes them (a value with commas in [])")  # fmt: skip
    p.add_argument("--delete-config", metavar="K[,K]", help="alter: configs to delete")
    p.add_argument("--topics", help="comma-separated topic names, or a regex ('.*' for all)")
    p.add_argument("--exclude", action="append", default=[], help="regex of topics to leave out (repeatable)")
    p.add_argument("--json", action="store_true", help="describe, describe-config, start, stop, pause, resume: print JSON")
    p.add_argument("--failed", action="store_true", help="describe: only FAILED partitions")
    p.add_argument("--max-age", type=int, metavar="MS",
                   help="describe: offsets looked up at most MS ms ago may be shown (default: looked up now)")  # fmt: skip
    p.add_argument("--validate-states", action="store_true",
                   help="refuse the change if a topic's mirror state changed since it was described")  # fmt: skip
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="start/stop/pause/resume: poll describe and show progress until done or SECONDS pass")  # fmt: skip
    preview.add_arguments(p)
    promote.add_arguments(p)
    p.add_argument("--verbose", action="store_true")
    return p


def _client_settings(args: argparse.Namespace, err: TextIO) -> tuple[str | None, str, ssl.SSLContext | None]:
    """(claimed principal, client.id, TLS context) from ``--command-config`` and the environment."""
    principal, client_id = os.environ.get("KIP1279_PRINCIPAL"), "kafka-cluster-mirrors"
    props: dict[str, str] = {}
    if args.command_config:
        props = worker_config.load_properties(args.command_config)
        principal = props.get("principal", principal)
        client_id = props.get("client.id", client_id)
    context = tls.client_context(props)
    if context is not None and principal:
        # The controller takes the certificate's subject; a claim would only mislead the reader.
        err.write(f"warning: principal {principal} is ignored with security.protocol=SSL: the controller "
                  f"takes the principal from the client certificate\n")  # fmt: skip
        principal = None
    return principal, client_id, context


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]`` as kafka-configs' ``--add-config`` reads it: commas split the pairs
    except inside square brackets, which hold a list value (the brackets are dropped)."""
    pairs, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            pairs.append(cur)
            cur = ""
        else:
            cur += ch
    pairs.append(cur)
    out: dict[str, str] = {}
    for pair in (p.strip() for p in pairs):
        if not pair:
            continue
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--add-config takes K=V pairs, not {pair!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key.strip()] = value
    return out


async def _alter(admin: ClusterMirrorAdmin, args: argparse.Namespace, out: TextIO) -> int:
    sets = parse_add_config(args.add_config or "")
    deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    r: Any = (await admin.alter_configs(args.mirror, sets, deletes)).response
    secrets = secret_values(sets)
    if r.error_code:
        out.write(f"Error: {_code_name(r.error_code)}: {scrub(r.error_message, secrets)}\n")
        return _exit_for(r.error_code)
    refused = [c for c in r.configs if c.error_code]
    if refused:
        # As kafka-configs: nothing was changed; every refused key and why.
        for c in refused:
            out.write(f"Error: {_code_name(c.error_code)}: {scrub(c.error_message, secrets)}\n")
        out.write(f"No config of cluster-mirror {args.mirror} was changed\n")
        return EXIT_USAGE if all(c.error_code in BAD_INPUT for c in refused) else EXIT_ERROR
    out.write(f"Completed updating config for cluster-mirror {args.mirror}.\n")
    return EXIT_OK


async def _describe_config(admin: ClusterMirrorAdmin, args: argparse.Namespace, out: TextIO) -> int:
    r: Any = (await admin.describe_configs(args.mirror)).response
    if r.error_code:
        out.write(f"Error: {_code_name(r.error_code)}: {r.error_message}\n")
        return EXIT_ERROR
    if args.json:
        out.write(json.dumps({c.name: c.value for c in r.configs}) + "\n")
        return EXIT_OK
    # kafka-configs --describe's layout; a sensitive value shows as the marker.
    out.write(f"Dynamic configs for cluster-mirror {args.mirror} are:\n")
    for c in r.configs:
        out.write(f"  {c.name}={c.value} sensitive={str(c.is_sensitive).lower()}\n")
    return EXIT_OK


def _need(args: argparse.Namespace, *names: str) -> None:
    for n in names:
        if not getattr(args, n.replace("-", "_")):
            raise UsageError(f"--{n} is required here")


async def _topic_selection(admin: ClusterMirrorAdmin, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(names, include regexes) for the request; regexes with --exclude are expanded here."""
    value = args.topics.strip()
    if looks_like_topic_list(value) and not args.exclude:
        return [t.strip() for t in value.split(",")], []
    if args.start or (args.stop and not args.exclude):
        return [], [value]  # the controller matches the pattern (and records it in the mirror's config)
    # Checked by _check_patterns: Java's meaning, as the controller matches a start's patterns.
    regex, excludes = compile_patterns((value,)), compile_patterns(tuple(e.strip() for e in args.exclude))
    members = await admin.mirror_topics(args.mirror)
    return [t for t in members if regex is not None and regex.fullmatch(t)
            and not (excludes is not None and excludes.fullmatch(t))], []  # fmt: skip


def _print_topic_results(out: TextIO, verb: str, mirror: str, response: Any, as_json: bool = False) -> int:
    skipped = sorted((t.name, t.reason) for t in getattr(response, "skipped_topics", None) or ())
    if as_json:
        doc: dict[str, Any] = {"mirror": mirror}
        if response.error_code:
            doc["error"] = {"code": _code_name(response.error_code), "message": response.error_message}
        doc["topics"] = [
            {"topic": t.name, "result": verb} if not t.error_code
            else {"topic": t.name, "error": _code_name(t.error_code), "message": t.error_message}
            for t in sorted(response.topics, key=lambda t: t.name)
        ]
        doc["skipped"] = [{"topic": n, "reason": why} for n, why in skipped]
        out.write(json.dumps(doc, indent=1) + "\n")
        if response.error_code:
            return _exit_for(response.error_code)
        return EXIT_ERROR if any(t.error_code for t in response.topics) else EXIT_OK
    failed = 0
    if response.error_code:
        out.write(f"Error: {_code_name(response.error_code)}: {response.error_message}\n")
        return _exit_for(response.error_code)
    for t in sorted(response.topics, key=lambda t: t.name):
        if t.error_code:
            failed += 1
            out.write(f"  {t.name}: {_code_name(t.error_code)}: {t.error_message}\n")
        else:
            out.write(f"  {t.name}: {verb}\n")
    for name, why in skipped:  # matched by a pattern, not started: say why
        out.write(f"  {name}: skipped: {why}\n")
    ok = len(response.topics) - failed
    tail = "".join(f"; {n} {what}" for n, what in ((failed, "refused"), (len(skipped), "skipped")) if n)
    out.write(f"{verb.capitalize()} {ok} topic(s) of mirror {mirror}{tail}\n")
    return EXIT_ERROR if failed else EXIT_OK


_TARGET = {"start": MirrorState.MIRRORING, "resume": MirrorState.MIRRORING, "stop": MirrorState.STOPPED, "pause": MirrorState.PAUSED}


async def wait_for_states(admin: ClusterMirrorAdmin, mirror: str, topics: set[str] | None, target: MirrorState,
                          timeout: float, err: TextIO, interval: float = 0.5) -> bool:  # fmt: skip
    """Polls describe, printing 'N/M partitions STOPPED' as it moves; True when all are there."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        asked = time.monotonic()
        # Progress needs counts per state, not offsets nor a row per partition.
        reply = await admin.describe([mirror], offsets=False, counts_only=True)
        took = time.monotonic() - asked
        total = done = failed = 0
        for m in reply.response.mirrors:  # type: ignore[attr-defined]
            for t in m.topics:
                if topics is not None and t.topic_name not in topics:
                    continue
                # StateCounts, or each partition from a controller that answers with details.
                for state, n in [(c.state, c.count) for c in t.state_counts] or [(p.state, 1) for p in t.partitions]:
                    total += n
                    done += n if state == target else 0
                    failed += n if state == MirrorState.FAILED else 0
        line = f"{done}/{total} partitions {target.name}" + (f", {failed} FAILED" if failed else "")
        if line != last:
            err.write(line + "\n")
            err.flush()
            last = line
        if total and done == total:
            return True
        if time.monotonic() >= deadline:
            err.write(f"timed out after {timeout:.0f}s: {line}\n")
            return False
        # A describe of tens of thousands of partitions costs the controller real CPU: poll no
        # more often than twice its duration (up to a second), so waiting takes little from the stop.
        await asyncio.sleep(min(max(interval, min(2 * took, 1.0)), max(0.0, deadline - time.monotonic())))


async def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.bootstrap_server:
        raise UsageError("--bootstrap-server (or env KIP1279_CONTROLLER) is required")
    if args.create:
        _need(args, "mirror", "mirror-config")
    elif args.delete or args.alter or args.describe_config:
        _need(args, "mirror")
    elif not (args.list or args.describe):
        _need(args, "mirror", "topics")
    if args.alter and not (args.add_config or args.delete_config):
        raise UsageError("--alter needs --add-config or --delete-config")
    if (args.add_config or args.delete_config) and not args.alter:
        raise UsageError("--add-config and --delete-config go with --alter")
    if args.alter:
        parse_add_config(args.add_config or "")  # a malformed pair is a usage error, before connecting
    if args.dry_run and not (args.stop or args.start):
        raise UsageError("--dry-run goes with --stop or --start")
    if args.consistent_cut and not args.stop:
        raise UsageError("--consistent-cut goes with --stop")
    if args.max_age is not None and (not args.describe or args.max_age < 0):
        raise UsageError("--max-age takes MS >= 0 and is only supported for describing mirrors")
    if args.exclude and not (args.start or args.stop or args.pause or args.resume):
        raise UsageError("--exclude goes with --start, --stop, --pause or --resume")
    _check_patterns(args)
    # File reads (and key loading) stay off the loop.
    principal, client_id, context = await asyncio.to_thread(_client_settings, args, err)
    async with ClusterMirrorAdmin(args.bootstrap_server, principal=principal, client_id=client_id,
                                  ssl_context=context, retry_timeout=max(0.0, args.retry_timeout)) as admin:  # fmt: skip
        if args.create:
            config = await asyncio.to_thread(worker_config.load_properties, args.mirror_config)
            secrets = secret_values(config)
            reply = await admin.create(args.mirror, config)
            r: Any = reply.response
            if r.error_code:
                out.write(f"Error: {_code_name(r.error_code)}: {scrub(r.error_message, secrets)}\n")
                return _exit_for(r.error_code)
            shown = ", ".join(f"{k}={v}" for k, v in sorted(redact_config(config).items()))
            out.write(f"Created cluster mirror {args.mirror} ({shown})\n")
            return EXIT_OK
        if args.alter:
            return await _alter(admin, args, out)
        if args.describe_config:
            return await _describe_config(admin, args, out)
        if args.list:
            reply = await admin.list(include_topic_names=True)
            r = reply.response
            if r.error_code:
                out.write(f"Error: {_code_name(r.error_code)}: {r.error_message}\n")
                return EXIT_ERROR
            if not r.mirrors:
                out.write("No mirrors found\n")
                return EXIT_OK
            # The prototype's listClusterMirrors.
            out.write("%-30s %-10s %-26s %-50s\n" % ("MIRROR", "TOPICS", "SOURCE-CLUSTER-ID", "SOURCE-BOOTSTRAP-SERVER"))
            for m in sorted(r.mirrors, key=lambda m: m.mirror_name):
                out.write("%-30s %-10d %-26s %-50s\n" % (truncate_left(m.mirror_name, 30), m.topic_count,
                                                         m.source_cluster_id or "-",
                                                         truncate_left(m.source_bootstrap or "-", 50)))  # fmt: skip
            return EXIT_OK
        if args.describe:
            reply = await admin.describe([args.mirror] if args.mirror else [], max_age_ms=args.max_age or 0)
            r = reply.response
            if r.error_code:
                out.write(f"Error: {_code_name(r.error_code)}: {r.error_message}\n")
                return EXIT_ERROR
            rows, refused = describe_rows(r, args.failed, reply.metadata_offset)
            for m in refused:  # the prototype's describe fails as a whole on these
                out.write(f"Error: {_code_name(m.error_code)}: {m.error_message}\n")
            if refused:
                return EXIT_ERROR
            if args.json:
                out.write(json.dumps(rows) + "\n")  # the prototype's array of PartitionInfo
            elif not r.mirrors:
                out.write("No mirror partitions found\n")
            elif args.failed:
                if rows:
                    print_failed(out, rows)
                else:
                    out.write("No failed partitions found\n")
            else:
                if rows:
                    print_partitions(out, rows)
                print_readiness(out, list(r.mirrors))
            return EXIT_OK
        if args.delete:
            svo = (await admin.describe([args.mirror])).metadata_offset if args.validate_states else -1
            r = (await admin.delete(args.mirror, state_validation_offset=svo)).response
            if r.error_code:
                out.write(f"Error: {_code_name(r.error_code)}: {r.error_message}\n")
                return EXIT_ERROR
            out.write(f"Deleted cluster mirror {args.mirror}\n")
            return EXIT_OK
        if args.promote:
            names, patterns = await _topic_selection(admin, args)
            return await promote.promote(admin, args.mirror, names, patterns, abort_open=args.abort_open_transactions,
                                         timeout=args.timeout, out=out, err=err, wait_for_states=wait_for_states)  # fmt: skip
        op = next(o for o in ("start", "stop", "pause", "resume") if getattr(args, o))
        names, patterns = await _topic_selection(admin, args)
        if args.dry_run:
            return await preview.dry_run(admin, args.mirror, names, patterns, args.exclude, op == "start", out, args.json,
                                         consistent_cut=args.consistent_cut)  # fmt: skip
        svo = (await admin.describe([args.mirror])).metadata_offset if args.validate_states else -1
        if op == "start":
            reply = await admin.start(args.mirror, names, include=patterns, exclude=args.exclude, state_validation_offset=svo)
        elif op == "stop":
            reply = await admin.stop(args.mirror, names, patterns=patterns, state_validation_offset=svo,
                                     consistent_cut=args.consistent_cut)  # fmt: skip
        elif op == "pause":
            reply = await admin.pause(args.mirror, names, state_validation_offset=svo)
        else:
            reply = await admin.resume(args.mirror, names, state_validation_offset=svo)
        verb = {"start": "started", "stop": "stopped", "pause": "paused", "resume": "resumed"}[op]
        code = _print_topic_results(out, verb, args.mirror, reply.response, as_json=args.json)
        if code == EXIT_OK and args.wait > 0:
            accepted = {t.name for t in reply.response.topics if not t.error_code}  # type: ignore[attr-defined]
            done = await wait_for_states(admin, args.mirror, accepted or None, _TARGET[op], args.wait, err)
            code = EXIT_OK if done else EXIT_ERROR
        return code


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["audit"]:
        # `kafka-cluster-mirrors audit [QUERY ...] --snapshots DIR`: the Spark audit queries.
        from audit.cli import main as audit_main

        return audit_main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=err)
    try:
        return asyncio.run(run(args, out, err))
    except BadFlag as e:
        out.write(f"Error: {ErrorCode.INVALID_REQUEST.name}: {e}\n")
        return EXIT_USAGE
    except (UsageError, worker_config.ConfigError, ValueError) as e:
        err.write(f"error: {e}\n")
        return EXIT_USAGE
    except AdminError as e:
        err.write(f"error: {e}\n")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def controller_main(argv: Sequence[str] | None = None) -> int:
    """``kip1279-controller``: the cluster mirror controller of one destination cluster."""
    from streams.admin.controller import run_controller

    p = argparse.ArgumentParser(prog="kip1279-controller", description=controller_main.__doc__)
    p.add_argument("--config", help="worker properties (bootstrap.servers, cluster.name, controller.listener, ...)")
    p.add_argument("--bootstrap-server", help="Kafka bootstrap servers (env KIP1279_BOOTSTRAP)")
    p.add_argument("--listener", help="admin endpoint HOST:PORT (default 127.0.0.1:9393); off loopback only "
                                      "with TLS (admin.listener.ssl.* in --config)")
    p.add_argument("--super-users", default="",
                   help="principals allowed everything, ';'-separated as Kafka's super.users (User:CN=admin,O=acme;User:bob)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    try:
        cfg = worker_config.load(args.config, bootstrap_servers=args.bootstrap_server, controller_listener=args.listener)
        from streams.runner.destination_check import check_destination

        check_destination(cfg.extra)  # fails fast on a destination without KIP-1279
    except worker_config.ConfigError as e:
        sys.stderr.write(f"error: {e}\n")
        return EXIT_USAGE
    supers = tls.parse_super_users(args.super_users)
    try:
        asyncio.run(run_controller(cfg, supers))
    except worker_config.ConfigError as e:  # a bad admin.listener.ssl.* setting, an unsafe bind
        sys.stderr.write(f"error: {e}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        pass
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
