"""The one backoff (slurmbridge/backoff.py): doubling from base to cap, jitter only shortening."""

from hypothesis import given, strategies as st

from slurmbridge.backoff import Backoff


def test_doubles_from_base_to_cap_without_jitter():
    b = Backoff(base=1.0, cap=30.0, jitter=0.0)
    assert [b.delay(n) for n in range(0, 8)] == [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_the_loop_form_gives_the_same_delays():
    b = Backoff(base=0.1, cap=2.0, jitter=0.0)
    loop = b.delays()
    assert [round(next(loop), 3) for _ in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


def test_jitter_spreads_retries_that_failed_together():
    b = Backoff(base=1.0, cap=10.0)
    assert len({round(b.delay(3), 6) for _ in range(50)}) > 10


@given(failures=st.integers(min_value=1, max_value=10_000), draw=st.floats(min_value=0.0, max_value=1.0))
def test_jitter_never_lengthens_a_delay_nor_halves_it(failures, draw):
    exact = Backoff(base=0.5, cap=10.0, jitter=0.0).delay(failures)
    jittered = Backoff(base=0.5, cap=10.0, jitter=0.2, rng=lambda: draw).delay(failures)
    assert 0.8 * exact - 1e-9 <= jittered <= exact
