"""In a worker's process whose engine reads the machine's time (``time_source = "wall"``),
datetime's ``now()`` and ``utcnow()`` answer the harness's clock as ``time.time()`` does, also
where a module imported the class by name (``from datetime import datetime``, as engines do);
``time.sleep`` and the test's own process keep the machine's time."""

from __future__ import annotations

import datetime as datetime_module
import time
from datetime import datetime  # bound by name at import, as an engine binds it

from types import SimpleNamespace

from chaos.core.clock import SharedClock, engine_reads
from chaos.core.models import TimeSource
from chaos.core.process import fork

AT = 1_700_000_000.0  # 2023-11-14T22:13:20Z
HOUR_S = 3600.0
UTC = datetime_module.timezone.utc


# What engine_reads is given: the target as resolved at the door, of which it reads the time source
# (an adapter's ``time_source = "wall"``, or the default, the clock open() passes).
def wall_target() -> SimpleNamespace:
    return SimpleNamespace(name="wall-engine", time_source=TimeSource.WALL)


def passed_target() -> SimpleNamespace:
    return SimpleNamespace(name="passed-engine", time_source=TimeSource.PASSED)


def _in_worker(adapter) -> tuple:
    clock = SharedClock(AT)
    made_before = datetime(2020, 1, 1)
    sleep = time.sleep

    def body() -> tuple:
        engine_reads(adapter, clock)
        clock.advance(HOUR_S)  # the harness moves its clock: past a lease, a backoff
        return (datetime.now(UTC).timestamp(), datetime_module.datetime.utcnow().replace(tzinfo=UTC).timestamp(),
                datetime.now().timestamp(), isinstance(made_before, datetime), type(datetime(2021, 1, 1)) is type(made_before),
                time.sleep is sleep)

    ended = fork(body).wait()
    assert ended.error == "", ended.error
    return ended.value


def test_datetime_now_and_utcnow_follow_the_harness_clock_in_a_wall_time_worker():
    now_utc, utcnow, now_local, still_instance, same_type, real_sleep = _in_worker(wall_target())
    assert (now_utc, utcnow, now_local) == (AT + HOUR_S, AT + HOUR_S, AT + HOUR_S)
    assert still_instance and same_type  # a datetime made before the swap is still one, and new ones are real datetimes
    assert real_sleep  # time.sleep is left alone: nothing waits for the harness's clock


def test_the_tests_process_and_an_engine_on_the_passed_clock_keep_the_machines_time():
    now_utc, *_ = _in_worker(passed_target())
    assert abs(now_utc - time.time()) < 600
    assert abs(datetime.now(UTC).timestamp() - time.time()) < 600  # this process was never swapped
    assert datetime_module.datetime is datetime
