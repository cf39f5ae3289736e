"""The lease: how long a claim holds its job, when it is renewed, and when renewal stops.

A claim is a timestamped lease that expires, so a dead worker releases its job without any lock
service. A call that outlives the lease would let a second worker run the same step, so every step
has a timeout shorter than the lease, a long step heartbeats, and renewal stops at the step's
deadline: a hung step eventually frees its job. Every write a worker makes is fenced by the lease
token the claim handed out (see :mod:`engine._sqlstore`); this module only decides the times.

>>> lease = LeasePolicy.for_steps(60.0, {"fetch": None, "extract": 10.0})
>>> lease.step_timeout_s(None), lease.step_timeout_s(10.0)
(45.0, 10.0)
>>> lease.renewed(claimed_until=160.0, now=100.0)  # taken a moment ago: kept as it is
160.0
>>> lease.renewed(claimed_until=160.0, now=130.0)  # half used: renewed for the next step
190.0
>>> lease.heartbeat_until(lease_until=160.0, deadline=145.0, now=101.0) is None  # too small a gain
True
>>> lease.heartbeat_until(lease_until=160.0, deadline=145.0, now=130.0)
190.0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._errors import InvalidInput
from ._inputs import finite_number

__all__ = ["LeasePolicy", "LEASE_S_DEFAULT", "STEP_TIMEOUT_SHARE_DEFAULT"]

LEASE_S_DEFAULT = 120.0
# A step without a timeout of its own (and no worker-wide one) may run this share of the lease.
STEP_TIMEOUT_SHARE_DEFAULT = 0.75
# The threaded runner heartbeats this many times per lease, so one missed renewal costs nothing.
HEARTBEATS_PER_LEASE = 3
# A heartbeat writes only when it would extend the lease by at least this fraction of it: a step
# may call ``ctx.heartbeat()`` as often as it likes without a commit each time, and every
# heartbeat that is not a no-op pushes the lease as far as it may go.
HEARTBEAT_MIN_EXTENSION_FRACTION = 1 / 8
# A step completion renews the lease for the next step unless it was taken or renewed less than
# this long ago (capped at half the gap between the lease and the longest step timeout, so the next
# step always starts with more lease left than its timeout).
RENEW_SLACK_S_MAX = 1.0
# The longest lease a worker may take: a dead worker's job waits this long before another worker
# takes it over, so a longer one is a typo (and one near the float limit overflows the clock's
# arithmetic, failing every job it claims).
LEASE_S_MAX = 7 * 24 * 3600.0


@dataclass(frozen=True)
class LeasePolicy:
    """The lease rules of one worker: its length, the steps' timeouts, renewal and heartbeats."""

    lease_s: float
    default_timeout_s: float
    renew_slack_s: float

    @classmethod
    def for_steps(cls, lease_s: float, timeouts_s: Mapping[str, float | None], *, default_timeout_s: float | None = None) -> "LeasePolicy":
        """The policy for steps with these timeouts (step name -> seconds, None: the default).

        Raises :class:`InvalidInput` naming the setting and the fix when a timeout is not shorter
        than the lease: a call could then outlive the lease and run twice.
        """
        lease_s = finite_number("lease_s", lease_s)  # NaN passes every comparison: refused by name
        if not 0 < lease_s <= LEASE_S_MAX:
            raise InvalidInput(  # not a crash point: a bad setting, refused when the worker is made
                f"lease_s={lease_s!r} must be > 0 and at most {LEASE_S_MAX:.0f} (a week): a dead worker's job waits "
                "that long before another worker takes it over"
            )
        if default_timeout_s is not None:
            default = finite_number("step_timeout_s", default_timeout_s)  # not a crash point: a setting, read when the worker is made
        else:
            default = lease_s * STEP_TIMEOUT_SHARE_DEFAULT
        longest_s = 0.0
        for name, timeout_s in timeouts_s.items():
            step_timeout_s = timeout_s if timeout_s is not None else default
            if not 0 < step_timeout_s < lease_s:
                raise InvalidInput(  # not a crash point: a bad setting, refused when the worker is made
                    f"step {name!r} timeout {step_timeout_s}s must be > 0 and shorter than the lease ({lease_s}s), or a "
                    "call could outlive the lease and run twice; lower the timeout or raise lease_s"
                )
            longest_s = max(longest_s, step_timeout_s)
        return cls(lease_s, default, min(RENEW_SLACK_S_MAX, (lease_s - longest_s) / 2))

    @property
    def heartbeat_every_s(self) -> float:
        return self.lease_s / HEARTBEATS_PER_LEASE

    def step_timeout_s(self, timeout_s: float | None) -> float:
        """A step's timeout: its own, or the policy's default."""
        return timeout_s if timeout_s is not None else self.default_timeout_s

    def renewed(self, *, claimed_until: float, now: float) -> float:
        """The lease a step completion hands to the next step of the same claim.

        A lease taken or renewed within ``renew_slack_s`` is kept as it is (the next step still
        starts with more lease left than its timeout), so a completion does not rewrite the lease,
        and with it the claim index, for nothing.
        """
        if claimed_until - now > self.lease_s - self.renew_slack_s:
            return claimed_until
        return now + self.lease_s

    def heartbeat_until(self, *, lease_until: float, deadline: float, now: float) -> float | None:
        """The lease a heartbeat at ``now`` writes, or None when it need not write at all.

        Renewal stops at the step's ``deadline`` (so a hung step frees its job one lease later),
        and a renewal that would gain less than an eighth of the lease is skipped.
        """
        if now >= deadline:
            return None
        until = min(now + self.lease_s, deadline + self.lease_s)
        if until - lease_until < self.lease_s * HEARTBEAT_MIN_EXTENSION_FRACTION:
            return None
        return until
