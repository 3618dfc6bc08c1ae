"""No bad input is silent or a traceback (issue #24 item 5): ``kafka-cluster-mirrors`` against a
controller on a real broker. Every refused pattern or setting, whichever edge it comes through (a
flag, ``--create``'s properties file, ``--alter``), is one ``Error:`` line naming the key and the
reason, exit code 2, no traceback, and nothing changed.

Each case runs the console script's ``main`` in this interpreter (a thread of its own, its output
and its log lines captured as the process would print them): a process per case cost ~1-3 s of
interpreter start-up and imports. One case of each edge, and the exit code 1 of a refusal, also
run as a process of their own, for the exit code and the process boundary."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import subprocess
import sys
import threading
import traceback
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from worker_harness import Rig

from coordinator.image import AclOperation, ConfigResourceType
from records.framing import ApiMessageAndVersion
from records.registry import default_schemas
from streams.admin import cli as admin_cli
from streams.admin.controller import ClusterMirrorController
from streams.brokers.noida import LocalBroker
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


async def cli_process(c: ClusterMirrorController, *argv: str, principal: str = ADMIN) -> tuple[int, str, str]:
    """``kafka-cluster-mirrors`` as its own process (the controller serves it from this loop):
    exit code, stdout, stderr."""
    assert c.address is not None
    env = dict(os.environ, KIP1279_PRINCIPAL=principal)
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "streams.admin.cli", "--bootstrap-server",
                           f"{c.address[0]}:{c.address[1]}", *argv],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    return done.returncode, done.stdout, done.stderr


_principal_lock = threading.Lock()


def _main_in_thread(argv: list[str], principal: str) -> tuple[int, str, str]:
    """``main`` as ``python -m streams.admin.cli`` runs it: what it prints to stdout and stderr, its
    log records (basicConfig sends them to stderr in the process), and SystemExit as an exit code."""
    out, err = io.StringIO(), io.StringIO()
    me = threading.get_ident()
    handler = logging.StreamHandler(err)
    handler.addFilter(lambda r: r.thread == me)  # the controller logs from this process too
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.addHandler(handler)
    with _principal_lock, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        old = os.environ.get("KIP1279_PRINCIPAL")
        os.environ["KIP1279_PRINCIPAL"] = principal
        try:
            code = admin_cli.main(argv, out, err)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            err.write(traceback.format_exc())  # the traceback the process would print
            code = 1
        finally:
            if old is None:
                os.environ.pop("KIP1279_PRINCIPAL", None)
            else:
                os.environ["KIP1279_PRINCIPAL"] = old
            root.handlers[:] = saved[0]
            root.setLevel(saved[1])
    return code, out.getvalue(), err.getvalue()


async def cli(c: ClusterMirrorController, *argv: str, principal: str = ADMIN) -> tuple[int, str, str]:
    """``kafka-cluster-mirrors`` in this interpreter: exit code, stdout, stderr."""
    assert c.address is not None
    args = ["--bootstrap-server", f"{c.address[0]}:{c.address[1]}", *argv]
    return await asyncio.to_thread(_main_in_thread, args, principal)


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
    for i, (argv, code_name, key, reason) in enumerate(FLAGS):
        code, out, err = await (cli_process if i == 0 else cli)(controller, "--mirror", MIRROR, *argv)
        line = one_error(out, err)
        assert code == 2 and line.startswith(f"Error: {code_name}: ") and key in line and reason in line, (argv, out, err)
    assert controller.metadata_offset == offset  # nothing was written


async def test_bad_configs_are_one_invalid_config_line_exit_2_and_change_nothing(controller: ClusterMirrorController,
                                                                                tmp_path: Path) -> None:  # fmt: skip
    await _create(controller, tmp_path)
    before = dict(controller.image.mirrors.mirrors[MIRROR].configs)
    for i, (add, key, reason) in enumerate(ALTERS):
        run = cli_process if i == 0 else cli
        code, out, err = await run(controller, "--alter", "--mirror", MIRROR, "--add-config", add)
        line = one_error(out, err)
        assert code == 2 and line.startswith("Error: INVALID_CONFIG: ") and key in line and reason in line, (add, out, err)
        assert dict(controller.image.mirrors.mirrors[MIRROR].configs) == before, add
    # The same rule for a properties file: the mirror is not created.
    props = tmp_path / "bad.properties"
    props.write_text("bootstrap.servers=127.0.0.1:19092\nmirror.groups.exclude=(unclosed\n")
    code, out, err = await cli_process(controller, "--create", "--mirror", "other", "--mirror-config", str(props))
    line = one_error(out, err)
    assert code == 2 and "INVALID_CONFIG" in line and "mirror.groups.exclude" in line and "missing )" in line, out + err
    assert controller.image.mirrors.get("other") is None


async def test_a_stored_config_it_cannot_use_is_shown_by_describe(controller: ClusterMirrorController,
                                                                  tmp_path: Path) -> None:  # fmt: skip
    await _create(controller, tmp_path)
    # As an older version let it in: straight into the metadata log, past today's validation.
    await controller.append([amv("ConfigRecord", resource_type=int(ConfigResourceType.CLUSTER_MIRROR),
                                 resource_name=MIRROR, name="groups.exclude", value="ops-g1,(unclosed")])  # fmt: skip
    code, out, err = await cli(controller, "--describe")
    assert code == 0 and "Traceback" not in out + err, out + err
    (line,) = [ln for ln in out.splitlines() if ln.startswith(MIRROR)]
    assert "unusable config:" in line and "groups.exclude" in line and "unterminated subpattern" in line, out
    # The mirror is not stuck: the other keys still alter, and fixing the bad one clears it.
    code, out, err = await cli(controller, "--alter", "--mirror", MIRROR, "--add-config", "groups.exclude=[ops-g1,ops-g2]")
    assert code == 0, out + err
    code, out, _ = await cli(controller, "--describe")
    assert code == 0 and "unusable config" not in out, out


async def test_describe_of_all_mirrors_shows_those_the_principal_may_describe(controller: ClusterMirrorController,
                                                                              tmp_path: Path) -> None:  # fmt: skip
    await _create(controller, tmp_path)
    props = tmp_path / "b.properties"
    props.write_text("bootstrap.servers=127.0.0.1:19093\n")
    assert (await cli(controller, "--create", "--mirror", "b-to-a", "--mirror-config", str(props)))[0] == 0
    await controller.create_acls("User:bob", [AclOperation.DESCRIBE], mirror=MIRROR)

    def mirrors_in(text: str) -> set[str]:
        return {ln.split()[0] for ln in text.splitlines() if ln.split() and ln.split()[0] in (MIRROR, "b-to-a")}

    code, listed, _ = await cli(controller, "--list", principal="User:bob")
    assert code == 0 and mirrors_in(listed) == {MIRROR}, listed
    code, out, err = await cli(controller, "--describe", principal="User:bob")
    assert code == 0 and mirrors_in(out) == {MIRROR} and "b-to-a" not in out + err, out + err
    code, out, _ = await cli(controller, "--describe", "--json", principal="User:bob")
    assert code == 0 and "b-to-a" not in out, out
    # Named, it is refused as before: a denied caller learns nothing more.
    code, out, _ = await cli_process(controller, "--describe", "--mirror", "b-to-a", principal="User:bob")
    assert code == 1 and "CLUSTER_MIRROR_AUTHORIZATION_FAILED" in out, out
    # Nothing to describe is not an error either.
    code, out, _ = await cli(controller, "--describe", principal="User:nobody")
    assert code == 0 and mirrors_in(out) == set(), out


def test_list_shows_the_cluster_id_its_source_answered(broker: LocalBroker, tmp_path: Path) -> None:
    rig = Rig(tmp_path, broker.bootstrap, {"orders": 1})
    try:
        rig.start(("B",))
        rig.create_mirror("B", MIRROR, "A")
        want = rig.clients["A"].cluster_id()
        assert want

        def listed() -> list[str]:
            return rig.cli("B", "--list").splitlines()[1].split()

        rig.wait("--list to show A's cluster ID", lambda: listed()[2] != "-", 30)
        assert listed() == [MIRROR, "0", want, "model://A"]
    finally:
        rig.close()
