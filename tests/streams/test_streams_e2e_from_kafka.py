"""End to end: ``python -m streams.demo --from-kafka --no-audit``, the main job's migration from a real broker.

A second noida-db is the source, written and read by aiokafka clients; B's coordinator mirrors
it (``kafka-to-b``, ``bootstrap.servers=127.0.0.1:PORT``), fails over, and the consumer group
moves to B. The job's verdict is computed from what the source returns over the Kafka protocol
and from B's log (``streams.demo.from_kafka.verdict_problems``, unit-tested on tampered evidence
in ``tests/streams/test_demo_from_kafka.py``). Here: the command exits 0 with VERDICT OK, every
partition's row says the bytes are the same and the offsets agree, the clients' accounting has
no gap, and a controller started with the source as its destination (what a failback needs)
refused to start, naming the KIP-1279 APIs the source broker lacks.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_from_kafka_migrates_a_real_broker_to_b() -> None:
    # The coordinator's own broker is Apache Kafka here where it can run: its start-up counts too.
    done = subprocess.run([sys.executable, "-m", "streams.demo", "--from-kafka", "--no-audit", "--seed", "5"],
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "\nVERDICT: OK - 6 partitions migrated from a real noida-db broker" in text, text
    rows = [line.split() for line in text.splitlines() if re.match(r"\s+(orders|payments|audit)-\d\s+\d", line)]
    assert len(rows) == 6, text
    opened = 0
    for name, src_hw, src_lso, b_hw, b_lso, b_leo, batches, same, committed, open_at_stop, sle, dle in rows:
        assert (src_hw, src_lso) == (b_hw, b_lso) and same == "yes" and int(batches) > 0, name
        src_c, b_c = committed.split("/")
        assert src_c == b_c and int(src_c) > 0, name
        assert int(b_leo) > int(src_hw), name  # B's producers wrote after the failover
        assert int(dle) >= int(sle), name
        opened += int(open_at_stop)
    assert opened > 0
    m = re.search(r"CLIENTS \(aiokafka\): produced (\d+) records \((\d+) committed, (\d+) in aborted transactions, "
                  r"(\d+) in transactions left open\); group \S+: consumed (\d+) on the source, (\d+) on B after the "
                  r"switch; duplicates (\d+) \(bound: (\d+) .*?\); gaps (\d+);.*produce to the mirror topic before "
                  r"the stop: refused \(UnknownError\)", text)  # fmt: skip
    assert m, text
    produced, committed_n, aborted, left_open, on_src, on_b, dups, bound, gaps = map(int, m.groups())
    assert produced == committed_n + aborted + left_open and min(committed_n, aborted, left_open) > 0
    assert gaps == 0 and dups <= bound and on_src > 0 and on_b > 0
    assert "(its last commit on the source: yes)" in text
    assert "no failback in this mode" in text and "exited with code 2: error: destination.bootstrap.servers=" in text
    assert "is not a KIP-1279 cluster" in text
    for api in ("WriteMirrorStates (101)", "ReadMirrorStates (100)", "BumpLeaderEpochs (105)"):
        assert api in text
