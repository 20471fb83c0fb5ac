import math

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from agentperf.engine import frontier
from agentperf.engine.frontier import Point

A = [Point(1, 200.0, 100.0), Point(8, 100.0, 400.0), Point(32, 50.0, 1000.0)]


def test_speed_between_two_points_is_interpolated_linearly():
    # halfway between (100, 400) and (50, 1000)
    assert frontier.throughput_at_speed(A, 75.0) == pytest.approx(700.0)


def test_speed_at_a_measured_point_returns_that_point():
    assert frontier.throughput_at_speed(A, 100.0) == 400.0


def test_a_reading_says_whether_it_was_measured_or_read_between_points():
    assert frontier.read_at_speed(A, 100.0) == frontier.AT_POINT
    assert frontier.read_at_speed(A, 75.0) == frontier.BETWEEN_POINTS
    assert frontier.read_at_speed(A, 250.0) is None  # outside: no value, no reading
    assert frontier.read_at_speed([], 75.0) is None


def test_speed_outside_the_measured_range_has_no_value():
    assert frontier.throughput_at_speed(A, 250.0) is None
    assert frontier.throughput_at_speed(A, 20.0) is None


def test_a_dominated_point_is_left_off_the_frontier():
    noisy = [*A, Point(16, 60.0, 300.0)]  # slower than (100, 400) and less throughput
    assert Point(16, 60.0, 300.0) not in frontier.pareto_frontier(noisy)
    assert frontier.throughput_at_speed(noisy, 75.0) == pytest.approx(700.0)


def test_repeated_concurrency_is_averaged_for_iso_concurrency():
    pts = [Point(4, 100.0, 400.0), Point(4, 90.0, 440.0), Point(8, 80.0, 600.0)]
    assert frontier.throughput_at_concurrency(pts, 4) == pytest.approx(420.0)
    assert frontier.throughput_at_concurrency(pts, 6) == pytest.approx(510.0)
    assert frontier.throughput_at_concurrency(pts, 16) is None


def test_single_agent_speed_is_the_speed_at_the_lowest_concurrency():
    assert frontier.single_agent(A) == (1, 200.0)
    assert frontier.single_agent([]) is None


def test_ratio_is_none_when_a_side_is_missing_or_the_base_is_zero():
    assert frontier.ratio(3.0, 2.0) == 1.5
    assert frontier.ratio(None, 2.0) is None
    assert frontier.ratio(3.0, None) is None
    assert frontier.ratio(3.0, 0.0) is None


def test_common_concurrencies_are_those_every_result_measured():
    b = [Point(1, 1.0, 1.0), Point(8, 1.0, 1.0), Point(16, 1.0, 1.0)]
    assert frontier.common_concurrencies(A, b) == [1, 8]


# --- properties ---------------------------------------------------------------------

speeds = st.floats(min_value=1.0, max_value=1000.0, allow_nan=False)
throughputs = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
point_lists = st.lists(
    st.builds(Point, st.integers(min_value=1, max_value=1024), speeds, throughputs),
    min_size=1,
    max_size=30,
)


@given(point_lists)
def test_frontier_throughput_falls_as_speed_rises(points):
    front = frontier.pareto_frontier(points)
    assert front, "a non-empty set always has a frontier"
    for a, b in zip(front, front[1:], strict=False):
        assert a.speed < b.speed
        assert a.throughput > b.throughput


@given(point_lists)
def test_no_point_beats_a_frontier_point_on_both_axes(points):
    for f in frontier.pareto_frontier(points):
        assert not any(
            p.speed >= f.speed
            and p.throughput >= f.throughput
            and p != f
            and (p.speed > f.speed or p.throughput > f.throughput)
            for p in points
        )


@given(point_lists, st.floats(min_value=0.0, max_value=1.0))
def test_interpolated_throughput_lies_between_its_neighbours(points, t):
    front = frontier.pareto_frontier(points)
    lo, hi = front[0].speed, front[-1].speed
    x = min(hi, lo + (hi - lo) * t)  # lo + (hi - lo) can round one ulp past hi
    y = frontier.throughput_at_speed(points, x)
    assert y is not None
    assert front[-1].throughput - 1e-6 <= y <= front[0].throughput + 1e-6


@given(point_lists)
def test_every_frontier_point_reads_back_exactly(points):
    for f in frontier.pareto_frontier(points):
        assert frontier.throughput_at_speed(points, f.speed) == pytest.approx(f.throughput)


def _inside(points, t):
    front = frontier.pareto_frontier(points)
    # clamped: lo + (hi - lo) * 1.0 can round past hi (1.0795 + (514.0 - 1.0795) > 514.0)
    lo, hi = front[0].speed, front[-1].speed
    return min(hi, max(lo, lo + (hi - lo) * t))


@given(point_lists, st.floats(min_value=0.01, max_value=100.0), st.floats(0.0, 1.0))
def test_scaling_one_system_scales_its_iso_speed_ratio(points, k, t):
    scaled = [Point(p.concurrency, p.speed, p.throughput * k) for p in points]
    x = _inside(points, t)
    base = frontier.throughput_at_speed(points, x)
    assume(base > 1e-3)
    r = frontier.ratio(frontier.throughput_at_speed(scaled, x), base)
    assert r == pytest.approx(k, rel=1e-9)


@given(point_lists, st.floats(0.0, 1.0))
@example(points=[Point(1, 1.0795053940514094, 1.0), Point(1, 513.9999999999999, 0.0)], t=1.0)
def test_a_result_compared_with_itself_has_ratio_one(points, t):
    y = frontier.throughput_at_speed(points, _inside(points, t))
    assume(y > 0)
    assert frontier.ratio(y, y) == 1.0


grid_points = st.lists(
    st.builds(
        Point,
        st.integers(min_value=1, max_value=64),
        st.sampled_from([10.0, 50.0, 100.0, 200.0]),
        st.floats(min_value=1.0, max_value=1e6),
    ),
    min_size=2,
    max_size=12,
)


@given(grid_points, grid_points, st.sampled_from([10.0, 30.0, 75.0, 100.0, 150.0]))
def test_swapping_the_baseline_inverts_the_ratio(a, b, x):
    ya, yb = frontier.throughput_at_speed(a, x), frontier.throughput_at_speed(b, x)
    assume(ya is not None and yb is not None and ya > 1e-3 and yb > 1e-3)
    assert frontier.ratio(ya, yb) * frontier.ratio(yb, ya) == pytest.approx(1.0)


@given(point_lists)
def test_invalid_points_never_reach_the_frontier(points):
    bad = [Point(1, math.nan, 1.0), Point(1, 5.0, math.inf), Point(1, 0.0, 10.0)]
    assert set(frontier.pareto_frontier(points + bad)) == set(frontier.pareto_frontier(points))
