"""Full-jitter backoff: delays within bounds and spread out, so retries after an outage do not align."""

import random
import statistics

from engine import backoff_s


def test_backoff_is_full_jitter_within_bounds_and_spread():
    rng = random.Random(1)
    for attempt, ceiling in [(1, 2), (2, 4), (3, 8), (5, 32), (9, 32)]:
        delays = [backoff_s(attempt, rng) for _ in range(500)]
        assert min(delays) >= 1.0
        assert max(delays) <= ceiling
        assert statistics.pstdev(delays) > (ceiling - 1) / 5  # spread out, not all equal
        assert len({round(d, 3) for d in delays}) > 400
