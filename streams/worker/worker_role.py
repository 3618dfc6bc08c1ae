"""The worker role of ``kip1279-worker`` (``streams.worker.main`` parses the command line): the
Faust app of ``streams.worker.app`` under a ``faust.Worker``, its group membership and its exits."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import replace

from streams import config as worker_config
from streams.config import WorkerConfig, ensure_topics
from streams.worker import membership, profiling
from streams.worker.app import CoordinatorWorker
from streams.worker.exits import EXIT_GROUP_LOST
from streams.worker.liveness import LoopWatchdog
from streams.worker.presence import PresencePublisher
from streams.worker.topics import worker_topic_specs

log = logging.getLogger("streams.worker.main")


def run_worker(cfg: WorkerConfig, args: argparse.Namespace) -> int:
    """Runs the worker until SIGTERM/SIGINT (exit 0), until it is out of its group for good
    (``EXIT_GROUP_LOST``) or until its Faust app crashes (``EXIT_CRASHED``); a clean stop leaves
    the group (see ``streams.worker.membership``), and so does a crash's unless the stop hangs."""
    import faust

    worker_config.install_payload_redaction()
    membership.rejoin_when_left_out()  # an empty assignment (a member the leader left out) is joined again
    if not cfg.group_instance_id:
        cfg = replace(cfg, group_instance_id=membership.instance_id(cfg.cluster_data_dir, cfg.cluster_name))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    profiling.profile_loop(loop)
    loop.run_until_complete(ensure_topics(cfg.bootstrap_servers, worker_topic_specs(cfg)))
    presence = PresencePublisher(cfg, cfg.group_instance_id).start()  # before it joins the group
    coordinator = CoordinatorWorker(cfg, tick_interval=args.tick_interval, threads=args.threads)

    def leave() -> None:  # a stop that hangs never reaches the ``finally`` below
        if coordinator.exit.member_id:
            _leave_group(cfg, coordinator.exit.member_id)

    coordinator.exit.on_fatal = lambda: _stop_self(code=coordinator.exit.exit_code, before_exit=leave)
    crashes = loop.create_task(coordinator.exit.watch_crash())  # noqa: F841 - held, as ``beats``
    out_of_group = loop.create_task(  # noqa: F841 - held, as ``beats``
        coordinator.exit.watch_membership_every(max(1.0, cfg.heartbeat_interval_ms / 1000)))
    watchdog = LoopWatchdog(cfg.unhealthy_exit_ms) if cfg.unhealthy_exit_ms else None
    if watchdog is not None:
        beats = loop.create_task(watchdog.beat())  # noqa: F841 - held: the loop keeps only weak references
    if cfg.metrics_address is not None:
        from streams.worker.metrics import serve_worker

        loop.run_until_complete(serve_worker(coordinator))
    backstop = StopBackstop(cfg.shutdown_timeout_ms / 1000, lambda: coordinator.exit.exit_code, leave,
                            "worker.shutdown.timeout.ms")  # fmt: skip
    fw = _worker_class(faust.Worker, backstop)(coordinator.app, loop=loop, loglevel=args.loglevel.upper(), quiet=True,
                                               redirect_stdouts=False, override_logging=False)  # fmt: skip
    log.info("worker %s for cluster %r starting (model port %s)", cfg.group_instance_id, cfg.cluster_name,
             cfg.extra.get("cluster.model.port"))  # fmt: skip
    code = 0
    try:
        fw.execute_from_commandline()
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        if watchdog is not None:
            watchdog.stop()  # a slow shutdown is not a stuck loop: _stop_self has its own backstop
        coordinator.close()
        presence.stop()
        if coordinator.exit.member_id:
            _leave_group(cfg, coordinator.exit.member_id)
    return coordinator.exit.exit_code or code


class StopBackstop:
    """Bounds a stop: armed by the first SIGTERM or SIGINT, it leaves the group and exits the
    process once the stop has run ``grace_s`` (0: never). A clean stop waits on Faust's services
    and the group's rebalance; should one of them hang, the worker must still go, as a SIGKILL
    would (it loses nothing acknowledged), but out of its group at once, not a session later."""

    def __init__(self, grace_s: float, exit_code: Callable[[], int], before_exit: Callable[[], None],
                 setting: str = "") -> None:  # fmt: skip
        self.grace_s, self.exit_code, self.before_exit, self.setting = grace_s, exit_code, before_exit, setting
        self.timer: threading.Timer | None = None

    def arm(self, *_: object) -> None:
        if self.timer is not None or self.grace_s <= 0:
            return
        self.timer = threading.Timer(self.grace_s, self._exit)
        self.timer.daemon = True
        self.timer.start()

    def _exit(self) -> None:
        code = self.exit_code()
        log.critical("the worker's stop has not finished after %.0f s; exiting with code %d%s", self.grace_s, code,
                     f" ({self.setting})" if self.setting else "")  # fmt: skip
        try:
            self.before_exit()
        finally:
            logging.shutdown()  # flush the lines first
            os._exit(code)


def _worker_class(base: type, backstop: StopBackstop) -> type:
    """``faust.Worker`` whose stop signals also arm ``backstop``. The loop's handlers stay as they
    are (asyncio dispatches them from its wakeup fd); the process-level handler added here runs
    in the main thread even while the loop is blocked, which is when the backstop is needed."""

    class Worker(base):  # type: ignore[misc,valid-type]
        def install_signal_handlers(self) -> None:
            super().install_signal_handlers()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, backstop.arm)

    return Worker


def _stop_self(grace_s: float = 30.0, code: int = EXIT_GROUP_LOST,
               before_exit: Callable[[], None] = lambda: None) -> None:  # fmt: skip
    """Stops this worker as SIGTERM does; should the stop hang, exits anyway with ``code`` after
    ``grace_s``, once ``before_exit`` (leaving the group) has run."""

    StopBackstop(grace_s, lambda: code, before_exit).arm()
    os.kill(os.getpid(), signal.SIGTERM)


def _leave_group(cfg: WorkerConfig, member: str) -> None:
    try:
        error = asyncio.run(membership.leave_group(cfg.bootstrap_servers, cfg.faust_app_id, member,
                                                   client_id=f"{cfg.client_id}-leave"))  # fmt: skip
    except Exception as e:  # noqa: BLE001 - the broker expires the member after its session instead
        log.warning("LeaveGroup for member %s of %s failed: %r", member, cfg.faust_app_id, e)
        return
    if error:
        log.info("member %s of %s was no longer in the group (error code %d)", member, cfg.faust_app_id, error)
    else:
        log.info("member %s left group %s", member, cfg.faust_app_id)
