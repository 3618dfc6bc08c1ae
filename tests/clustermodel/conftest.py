"""Fixtures of the cluster model tests: a model server in a subprocess on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from model_server import ServerProcess


@pytest.fixture(scope="session")
def model_server() -> Iterator[ServerProcess]:
    server = ServerProcess("--cluster", "default", "--seed", "1")
    yield server
    assert server.stop() == 0


@pytest.fixture
def server_factory() -> Iterator[type[ServerProcess]]:
    started: list[ServerProcess] = []

    class Factory(ServerProcess):
        def __init__(self, *args: str) -> None:
            super().__init__(*args)
            started.append(self)

    yield Factory
    for server in started:
        server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test that used an in-process model prints its seed and the steps to reproduce it."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    from clustermodel import ClusterModel

    funcargs = getattr(item, "funcargs", {})
    for name, value in funcargs.items():
        if isinstance(value, ClusterModel):
            report.sections.append((f"model {name!r}: seed and steps", value.format_repro()))
