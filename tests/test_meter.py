"""``service.meter.BusyMeter``: the model thread's share of time at work, on an injected clock."""

from mlx_ssbd.service.meter import BusyMeter

import pytest


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def work(meter: BusyMeter, clock: Clock, seconds: float) -> None:
    with meter.working():
        clock.now += seconds


def test_the_share_counts_work_since_the_start_until_the_window_is_full():
    clock = Clock()
    meter = BusyMeter(clock, window_s=30.0)
    assert meter.snapshot() == {"busy": 0.0, "window_s": 30.0, "busy_s": 0.0, "uptime_s": 0.0}
    clock.now += 7.0  # idle
    work(meter, clock, 3.0)
    snap = meter.snapshot()
    assert snap["busy"] == pytest.approx(0.3) and snap["busy_s"] == pytest.approx(3.0)
    assert snap["uptime_s"] == pytest.approx(10.0)


def test_only_the_last_window_counts_in_the_share_and_all_of_it_in_the_total():
    clock = Clock()
    meter = BusyMeter(clock, window_s=30.0)
    work(meter, clock, 20.0)  # 100-120
    clock.now += 30.0  # idle to 150
    work(meter, clock, 6.0)  # 150-156: the window is 126-156
    snap = meter.snapshot()
    assert snap["busy"] == pytest.approx(0.2) and snap["busy_s"] == pytest.approx(26.0)
    clock.now = 165.0  # window 135-165: only the 6 s
    assert meter.snapshot()["busy"] == pytest.approx(0.2)
    work(meter, clock, 0.0)
    clock.now = 200.0  # nothing in 170-200
    assert meter.snapshot()["busy"] == 0.0 and meter.snapshot()["busy_s"] == pytest.approx(26.0)


def test_a_stretch_cut_by_the_window_and_one_under_way_count_in_part():
    clock = Clock()
    meter = BusyMeter(clock, window_s=10.0)
    work(meter, clock, 15.0)  # 100-115: 105-115 inside the window at 115
    assert meter.snapshot()["busy"] == pytest.approx(1.0)
    clock.now += 5.0  # 120: 110-115 of it left
    with meter.working():
        clock.now += 2.0  # under way since 120, now 122: 112-115 and 120-122 in the window
        snap = meter.snapshot()
        assert snap["busy"] == pytest.approx(0.5) and snap["busy_s"] == pytest.approx(17.0)
    assert meter.snapshot()["busy_s"] == pytest.approx(17.0)


def test_a_window_must_be_positive():
    with pytest.raises(ValueError):
        BusyMeter(Clock(), window_s=0)


def test_back_to_back_stretches_are_kept_as_one():
    clock = Clock()
    meter = BusyMeter(clock, window_s=30.0)
    for _ in range(1000):  # a busy loop's turns, no wait between them
        work(meter, clock, 0.01)
    clock.now += 5.0
    work(meter, clock, 1.0)
    assert len(meter._spans) == 2
    snap = meter.snapshot()
    assert snap["busy_s"] == pytest.approx(11.0) and snap["busy"] == pytest.approx(
        11.0 / 16.0, abs=1e-3
    )  # to 3 places
