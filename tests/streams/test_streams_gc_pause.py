"""Jobs run with the cyclic collector paused (``streams.worker.mirror_jobs.cyclic_gc_paused``): it resumes
after the last of overlapping jobs, and after a job that raised."""

from __future__ import annotations

import gc
import threading

import pytest

from streams.worker.mirror_jobs import cyclic_gc_paused


def test_paused_while_any_job_runs_and_resumed_after_the_last() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    release = threading.Event()

    def job() -> None:
        with cyclic_gc_paused():
            inside.set()
            release.wait(5)

    other = threading.Thread(target=job)
    with cyclic_gc_paused():
        other.start()
        assert inside.wait(5)
        assert not gc.isenabled()
    assert not gc.isenabled(), "the other job still runs"
    release.set()
    other.join(5)
    assert gc.isenabled()


def test_resumed_after_a_job_that_raised() -> None:
    with pytest.raises(RuntimeError):
        with cyclic_gc_paused():
            assert not gc.isenabled()
            raise RuntimeError("boom")
    assert gc.isenabled()
