"""A reading shared by the requests that come close together (``SharedReading``)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from bridge.manage.web.reading import SharedReading


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """A read that counts itself, and that a test can hold until it lets it go."""

    def __init__(self) -> None:
        self.count = 0
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.fail = False

    def __call__(self) -> int:
        self.started.set()
        assert self.gate.wait(10)
        if self.fail:
            raise RuntimeError("the database is away")
        self.count += 1
        return self.count

    def hold(self) -> None:
        self.gate.clear()
        self.started.clear()


def test_one_reading_serves_every_request_while_it_is_fresh() -> None:
    clock, reads = Clock(), Reads()
    reading = SharedReading(reads, fresh_for=2.0, stale_for=30.0, clock=clock)
    assert [reading.get() for _ in range(5)] == [1] * 5
    clock.now += 1.9
    assert reading.get() == 1 and reads.count == 1


def test_a_lone_request_past_fresh_gets_a_reading_made_for_it() -> None:
    clock, reads = Clock(), Reads()
    reading = SharedReading(reads, fresh_for=2.0, stale_for=30.0, clock=clock)
    assert reading.get() == 1
    clock.now += 5
    assert reading.get() == 2


def test_requests_during_a_reading_get_the_one_before_at_once() -> None:
    clock, reads = Clock(), Reads()
    reading = SharedReading(reads, fresh_for=2.0, stale_for=30.0, clock=clock)
    assert reading.get() == 1
    clock.now += 5
    reads.hold()
    with ThreadPoolExecutor(1) as pool:
        first: Future[int] = pool.submit(reading.get)
        assert reads.started.wait(10)
        # The scan is held: the requests that come meanwhile are not.
        assert [reading.get() for _ in range(3)] == [1, 1, 1]
        reads.gate.set()
        assert first.result(10) == 2
    assert reading.get() == 2 and reads.count == 2


def test_a_reading_too_old_is_not_handed_out_even_during_a_reading() -> None:
    clock, reads = Clock(), Reads()
    reading = SharedReading(reads, fresh_for=2.0, stale_for=30.0, clock=clock)
    assert reading.get() == 1
    clock.now += 31
    reads.hold()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(reading.get)
        assert reads.started.wait(10)
        second = pool.submit(reading.get)
        with pytest.raises(TimeoutError):  # it waits for the reading being made
            second.result(0.3)
        reads.gate.set()
        assert (first.result(10), second.result(10)) == (2, 2)


def test_a_failed_reading_raises_to_its_caller_and_the_next_reads_again() -> None:
    clock, reads = Clock(), Reads()
    reading = SharedReading(reads, fresh_for=2.0, stale_for=30.0, clock=clock)
    assert reading.get() == 1
    clock.now += 5
    reads.fail = True
    with pytest.raises(RuntimeError, match="away"):
        reading.get()
    reads.fail = False
    assert reading.get() == 2
