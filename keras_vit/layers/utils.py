"""Small helpers shared by the layers: argument checks and size pairs."""


def pair(value, name):
    """Returns `value` as a `(height, width)` tuple of positive ints.

    Args:
        value: an int, or a sequence of two ints.
        name: the argument's name, used in the error message.

    Raises:
        ValueError: when `value` is not a positive int or a pair of them.
    """
    if isinstance(value, bool):
        raise ValueError(
            f"`{name}` must be a positive int or a pair of positive ints. "
            f"Received: {name}={value!r}"
        )
    if isinstance(value, int):
        value = (value, value)
    try:
        value = tuple(value)
    except TypeError:
        value = None
    if (
        value is None
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        or not all(v > 0 for v in value)
    ):
        raise ValueError(
            f"`{name}` must be a positive int or a pair of positive ints. "
            f"Received: {name}={value!r}"
        )
    return value


def check_bool(value, name):
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return value


def check_rate(value, name):
    """Checks that a dropout-like rate lies in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"`{name}` must be a float in [0, 1). Received: {name}={value!r}"
        )
    if not 0.0 <= value < 1.0:
        raise ValueError(
            f"`{name}` must be a float in [0, 1). Received: {name}={value!r}"
        )
    return float(value)


def check_positive_int(value, name, allow_none=False):
    """Checks that `value` is a positive int (or None when allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "a positive int or None" if allow_none else "a positive int"
        raise ValueError(
            f"`{name}` must be {allowed}. Received: {name}={value!r}"
        )
    return value


def check_positive_float(value, name):
    """Checks that `value` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"`{name}` must be a positive float. Received: {name}={value!r}"
        )
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(
            f"`{name}` must be a positive float. Received: {name}={value!r}"
        )
    return float(value)
