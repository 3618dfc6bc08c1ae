"""No bad input is silent or a traceback (issue #24 item 5): ``kafka-cluster-mirrors`` as a process,
against a controller on a real broker. Every refused pattern or setting, whichever edge it comes
through (a flag, ``--create``'s properties file, ``--alter``), is one ``Error:`` line naming the
key and the reason, exit code 2, no traceback, and nothing changed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams.admin.controller import ClusterMirrorController
from streams.config import WorkerConfig

S = default_schemas()
ADMIN = "User:admin"
MIRROR = "a-to-b"


def amv(_message: str, /, **fields: object) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(S.struct(_message)(**fields), 0, S.spec(_message).api_key)  # type: ignore[arg-type]


@pytest.fixture
async def controller(worker_config: WorkerConfig) -> AsyncIterator[ClusterMirrorController]:
    c = ClusterMirrorController(worker_config, super_users=frozenset({ADMIN}))
    await c.start()
    try:
        tid = uuid.UUID(int=7)
        await c.append([amv("TopicRecord", name="orders", topic_id=tid),
                        amv("PartitionRecord", partition_id=0, topic_id=tid, replicas=(1,), isr=(1,), leader=1)])
        yield c
    finally:
        await c.stop()


async def cli(c: ClusterMirrorController, *argv: str) -> tuple[int, str, str]:
    """``kafka-cluster-mirrors`` as its own process (the controller serves it from this loop):
    exit code, stdout, stderr."""
    assert c.address is not None
    env = dict(os.environ, KIP1279_PRINCIPAL=ADMIN)
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "streams.admin.cli", "--bootstrap-server",
                           f"{c.address[0]}:{c.address[1]}", *argv],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    return done.returncode, done.stdout, done.stderr


# (argv after the mirror, error code, key named, a piece of the reason)
FLAGS = [
    (("--pause", "--topics", "ord(ers", "--exclude", "x"), "INVALID_REQUEST", "--topics", "missing )"),
    (("--resume", "--topics", "ord(ers", "--exclude", "x"), "INVALID_REQUEST", "--topics", "missing )"),
    (("--stop", "--topics", "orders.*", "--exclude", "ord(ers"), "INVALID_REQUEST", "--exclude", "missing )"),
    (("--start", "--topics", "(?<n>orders)"), "INVALID_REQUEST", "--topics", "(?P<name>"),
    (("--start", "--topics", "orders.*", "--exclude", r"\Qx\E"), "INVALID_REQUEST", "--exclude", "\\Q...\\E"),
    (("--stop", "--topics", "ord[a-z&&[^e]]rs"), "INVALID_REQUEST", "--topics", "&&"),
]
ALTERS = [
    ("groups.exclude=[ops-g1,(unclosed]", "groups.exclude", "missing )"),
    ("groups.include=[a.*,x++]", "groups.include", "possessive"),
    (r"mirror.groups.include=orders\p{Lower}", "mirror.groups.include", "\\p{...}"),
    ("mirror.groups.exclude=[a(?i)b]", "mirror.groups.exclude", "global flag"),
    ("acls.include=TOPIC;ord(ers", "acls.include", "missing )"),
    ("mirror.acls.include=TOPIC;orders;READ;ALLOW;User:(?<n>x)", "mirror.acls.include", "(?P<name>"),
    (r"topic.properties.exclude=[retention\.ms,a\z]", "topic.properties.exclude", "\\z"),
    ("mirror.topics.include=[or[d[e]]rs]", "mirror.topics.include", "nested"),
    (r"mirror.topics.exclude=x\vy", "mirror.topics.exclude", "\\v"),
    ("fetch.backoff.ms=soon", "fetch.backoff.ms", "INT"),
]


def one_error(out: str, err: str) -> str:
    assert "Traceback" not in out + err, out + err
    errors = [ln for ln in (out + err).splitlines() if ln.lower().startswith("error")]
    assert len(errors) == 1, out + err
    return errors[0]


async def _create(c: ClusterMirrorController, tmp_path: Path) -> None:
    props = tmp_path / "m.properties"
    props.write_text("bootstrap.servers=127.0.0.1:19092\ngroups.exclude=ops-.*\n")
    code, out, err = await cli(c, "--create", "--mirror", MIRROR, "--mirror-config", str(props))
    assert code == 0, out + err


async def test_bad_flags_are_one_invalid_request_line_and_exit_2(controller: ClusterMirrorController,
                                                                  tmp_path: Path) -> None:  # fmt: skip
    await _create(controller, tmp_path)
    offset = controller.metadata_offset
    for argv, code_name, key, reason in FLAGS:
        code, out, err = await cli(controller, "--mirror", MIRROR, *argv)
        line = one_error(out, err)
        assert code == 2 and line.startswith(f"Error: {code_name}: ") and key in line and reason in line, (argv, out, err)
    assert controller.metadata_offset == offset  # nothing was written


async def test_bad_configs_are_one_invalid_config_line_exit_2_and_change_nothing(controller: ClusterMirrorController,
                                                                                tmp_path: Path) -> None:  # fmt: skip
    await _create(controller, tmp_path)
    before = dict(controller.image.mirrors.mirrors[MIRROR].configs)
    for add, key, reason in ALTERS:
        code, out, err = await cli(controller, "--alter", "--mirror", MIRROR, "--add-config", add)
        line = one_error(out, err)
        assert code == 2 and line.startswith("Error: INVALID_CONFIG: ") and key in line and reason in line, (add, out, err)
        assert dict(controller.image.mirrors.mirrors[MIRROR].configs) == before, add
    # The same rule for a properties file: the mirror is not created.
    props = tmp_path / "bad.properties"
    props.write_text("bootstrap.servers=127.0.0.1:19092\nmirror.groups.exclude=(unclosed\n")
    code, out, err = await cli(controller, "--create", "--mirror", "other", "--mirror-config", str(props))
    line = one_error(out, err)
    assert code == 2 and "INVALID_CONFIG" in line and "mirror.groups.exclude" in line and "missing )" in line, out + err
    assert controller.image.mirrors.get("other") is None
