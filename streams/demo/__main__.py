"""The main job: failover and failback between two model clusters, end to end, on loopback.

    python -m streams.demo [--workdir DIR] [--seed N] [--keep] [--no-audit] [--from-kafka] [--broker noida]

The job itself is ``streams.demo.job``; ``--from-kafka`` runs ``streams.demo.from_kafka`` instead.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from streams.brokers.own import CHOICES, FLAG_HELP
from streams.demo.from_kafka import FromKafkaDemo
from streams.demo.job import Demo


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m streams.demo", description=__doc__.splitlines()[0])
    p.add_argument("--workdir", help="keep everything here (default: a temporary directory, removed at the end)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    p.add_argument("--no-audit", action="store_true", help="skip the audit snapshot and its Spark verdict at the end")
    p.add_argument("--from-kafka", action="store_true",
                   help="migrate from a real noida-db broker (a second instance) to model cluster B instead: "
                        "mirror kafka-to-b, failover, clients moving to B; no failback (streams.demo.from_kafka)")
    p.add_argument("--broker", choices=CHOICES, help=FLAG_HELP)
    p.add_argument("--ha", action="store_true",
                   help="the HA setup: Apache Kafka with 3 brokers, the coordinator's topics at replication factor 3 "
                        "and min.insync.replicas 2, 3 controllers and 2 workers per destination cluster")  # fmt: skip
    args = p.parse_args(argv)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="kip1279-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.from_kafka:
        demo: Demo = FromKafkaDemo(workdir, args.seed, audit=not args.no_audit, broker=args.broker)
    else:
        demo = Demo(workdir, args.seed, audit=not args.no_audit, broker=args.broker, ha=args.ha)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    code = 1
    try:
        code = demo.run()
    except KeyboardInterrupt:
        sys.stdout.write("interrupted; cleaning up\n")
        code = 130
    except Exception as e:  # noqa: BLE001 - any failure: a clear message, non-zero exit
        sys.stdout.write(f"\nDEMO FAILED: {type(e).__name__}: {e}\n(logs in {workdir})\n")
        args.keep = True
    finally:
        demo.close()
        sys.stdout.write(f"demo finished in {time.monotonic() - demo.t0:.1f}s\n")
        if not args.workdir and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            if demo.audit_enabled and code != 130:
                sys.stdout.write(f"(temporary {workdir} removed, audit snapshot with it: --workdir DIR or --keep keeps it)\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
