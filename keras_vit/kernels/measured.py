"""Hardware rules settled by a short measurement at first use.

Where the machine's instruction sets do not say which of two paths is the
faster (torch's oneDNN product on a packed kernel against `F.linear` on an
AVX2-only CPU: docs/performance.md), a rule times both once, for the call's
shapes, and keeps the answer for the life of the process (`faster`).
`choices()` lists what was measured; `assume(...)` stands in for the timing
within a context, so that each branch of such a rule can be tested on any
machine.
"""

import contextlib
import time

# Each candidate runs once to warm up, then this many times, alternating.
REPEATS = 3
_CHOICES = {}
_ASSUMED = {}


@contextlib.contextmanager
def assume(first_is_faster):
    """Within this context every measurement answers `first_is_faster` without timing.

    Args:
        first_is_faster: bool, the answer `faster` gives.

    Example:

    >>> with assume(False):
    ...     faster("example", lambda: None, lambda: time.sleep(0.01))
    False
    """
    if not isinstance(first_is_faster, bool):
        raise ValueError(
            f"`first_is_faster` must be True or False. Received: first_is_faster={first_is_faster!r}"
        )
    previous = dict(_ASSUMED)
    _ASSUMED["answer"] = first_is_faster
    try:
        yield
    finally:
        _ASSUMED.clear()
        _ASSUMED.update(previous)


def assumed():
    """The answer `assume(...)` gives within its context, else None."""
    return _ASSUMED.get("answer")


def faster(key, first, second, repeats=REPEATS):
    """Whether `first()` runs faster than `second()`: timed once per `key`, then remembered.

    Each runs once to warm up (its first call may allocate or pack), then
    `repeats` times, the two alternating so that a change in the machine's
    load falls on both; the better time of each decides.

    Args:
        key: a hashable naming what is compared (the op, its shapes, its
            dtype, the thread count): one measurement per key.
        first, second: functions of no arguments computing the same thing.
        repeats: int, timed calls of each.

    Returns:
        bool.

    Example:

    >>> faster("example: sleeping less", lambda: None, lambda: time.sleep(0.005))
    True
    >>> choices()["example: sleeping less"]
    True
    >>> forget()
    """
    if "answer" in _ASSUMED:
        return _ASSUMED["answer"]
    if key not in _CHOICES:
        _CHOICES[key] = _first_is_faster(first, second, repeats)
    return _CHOICES[key]


def _first_is_faster(first, second, repeats):
    first()
    second()
    best = [float("inf"), float("inf")]
    for _ in range(max(1, int(repeats))):
        for i, candidate in enumerate((first, second)):
            start = time.perf_counter()
            candidate()
            best[i] = min(best[i], time.perf_counter() - start)
    return best[0] < best[1]


def choices():
    """Every measurement made in this process: {key: whether the first was faster}."""
    return dict(_CHOICES)


def forget():
    """Forgets every measurement (the next call with each key times again)."""
    _CHOICES.clear()
