"""Argument checks shared by every part of keras_vit.

Each checker returns the (normalised) value or raises a `ValueError` of the
form "`name` must be <what is allowed>. Received: name=<value>", so that a
bad argument is reported before any work starts; `check_keywords` refuses
keyword arguments a function does not take (`UnknownArgumentError`). Plain Python: no Keras and
nothing else of keras_vit is imported here.
"""

import dataclasses
import difflib
import inspect
import math
import numbers


def _fail(name, allowed, value):
    raise ValueError(f"`{name}` must be {allowed}. Received: {name}={value!r}")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    # NumPy's scalars too (np.float32(0.5)); never a bool, a string or an array.
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def pair(value, name):
    """Returns `value` as a `(height, width)` tuple of positive ints.

    Args:
        value: an int, or a sequence of two ints.
        name: the argument's name, used in the error message.

    Returns:
        A tuple of two positive ints.

    Raises:
        ValueError: when `value` is not a positive int or a pair of them.

    Example:

    >>> pair(16, "patch_size")
    (16, 16)
    >>> pair([8, 12], "image_size")
    (8, 12)
    """
    allowed = "a positive int or a pair of positive ints"
    if _is_int(value):
        value = (value, value)
    try:
        items = tuple(value)
    except TypeError:
        _fail(name, allowed, value)
    if len(items) != 2 or not all(_is_int(v) and v > 0 for v in items):
        _fail(name, allowed, value)
    return items


def check_bool(value, name):
    """Checks that `value` is True or False."""
    if not isinstance(value, bool):
        _fail(name, "True or False", value)
    return value


def check_rate(value, name):
    """Checks that a dropout-like rate is a number in [0, 1)."""
    if not _is_number(value) or not 0.0 <= value < 1.0:
        _fail(name, "a float in [0, 1)", value)
    return float(value)


def check_int(value, name, minimum=None, maximum=None, allow_none=False):
    """Checks that `value` is an int within `[minimum, maximum]`.

    Example:

    >>> check_int(3, "bits", minimum=1, maximum=8)
    3
    >>> check_int(9, "bits", minimum=1, maximum=8)
    Traceback (most recent call last):
    ...
    ValueError: `bits` must be an int in [1, 8]. Received: bits=9
    """
    if value is None and allow_none:
        return None
    if minimum is not None and maximum is not None:
        allowed = f"an int in [{minimum}, {maximum}]"
    elif minimum is not None:
        allowed = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    else:
        allowed = "an int"
    if allow_none:
        allowed += " or None"
    ok = (
        _is_int(value)
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    )
    if not ok:
        _fail(name, allowed, value)
    return value


def check_positive_int(value, name, allow_none=False):
    """Checks that `value` is an int >= 1 (or None when allowed)."""
    return check_int(value, name, minimum=1, allow_none=allow_none)


def check_float(value, name, minimum=None, maximum=None):
    """Checks that `value` is a finite number within `[minimum, maximum]`."""
    if minimum is not None and maximum is not None:
        allowed = f"a number in [{minimum}, {maximum}]"
    elif minimum is not None:
        allowed = f"a number >= {minimum}"
    else:
        allowed = "a finite number"
    ok = (
        _is_number(value)
        and math.isfinite(value)
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    )
    if not ok:
        _fail(name, allowed, value)
    return float(value)


def check_ids(values, name, count, allow_none=True):
    """Checks that `values` is a list of ints in `[0, count)` (class ids,
    say), or None when allowed; returns them as a tuple.

    Example:

    >>> check_ids([0, 2], "stuff_classes", 3)
    (0, 2)
    >>> check_ids([7], "stuff_classes", 3)
    Traceback (most recent call last):
    ...
    ValueError: `stuff_classes` must be None or a list of ints in [0, 2]. Received: stuff_classes=[7]
    """
    if values is None and allow_none:
        return None
    allowed = ("None or " if allow_none else "") + f"a list of ints in [0, {count - 1}]"
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        _fail(name, allowed, values)
    items = tuple(values)
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v < count for v in items):
        _fail(name, allowed, values)
    return tuple(int(v) for v in items)


def check_fraction(value, name, allow_none=False):
    """Checks that `value` is a number in (0, 1] (or None when allowed)."""
    if value is None and allow_none:
        return None
    if not _is_number(value) or not 0 < value <= 1:
        _fail(name, "a number in (0, 1]" + (" or None" if allow_none else ""), value)
    return float(value)


def check_positive_float(value, name):
    """Checks that `value` is a finite number > 0."""
    if not _is_number(value) or not math.isfinite(value) or not value > 0:
        _fail(name, "a positive float", value)
    return float(value)


def head_width(width, num_heads, name="width"):
    """The width of one attention head: `width // num_heads`.

    Raises:
        ValueError: when `width` (named `name`) is unknown or not divisible
            by `num_heads`.

    Example:

    >>> head_width(768, 12)
    64
    """
    if width is None or width % num_heads:
        raise ValueError(
            f"`{name}` must be divisible by `num_heads`. "
            f"Received: {name}={width}, num_heads={num_heads}"
        )
    return width // num_heads


def check_record_config(cls, config, name):
    """A copy of `config`, the config dict of the dataclass `cls`, checked
    to name only fields of `cls`.

    Raises:
        ValueError: naming the argument `name`, when `config` is not a dict
            or names a field `cls` does not have.

    Example:

    >>> import dataclasses
    >>> Size = dataclasses.make_dataclass("Size", ["height", "width"])
    >>> check_record_config(Size, {"height": 2}, "size")
    {'height': 2}
    """
    fields = [field.name for field in dataclasses.fields(cls)]
    if not isinstance(config, dict):
        raise ValueError(
            f"`{name}` must be a {cls.__name__} or its config dict. Received: {name}={config!r}"
        )
    unknown = sorted(set(config) - set(fields))
    if unknown:
        raise ValueError(
            f"`{name}` names no field {unknown[0]!r} of a {cls.__name__}; its fields are "
            f"{fields}. Received: {name}={config!r}"
        )
    return dict(config)


def check_choice(value, allowed, name):
    """Checks that `value` is one of `allowed`.

    Example:

    >>> check_choice("avg", ("token", "avg", "max"), "pooling")
    'avg'
    """
    if value not in allowed:
        _fail(name, f"one of {tuple(allowed)}", value)
    return value


def check_verbose(verbose, steps):
    """Keras' `verbose` of a call of `steps` steps: "auto" is a progress bar
    (1) when there is more than one step, else silence (0); 0, 1 and 2 as
    Keras' `predict` takes them.

    Example:

    >>> check_verbose("auto", 1), check_verbose("auto", 3), check_verbose(2, 1)
    (0, 1, 2)
    """
    check_choice(verbose, ("auto", 0, 1, 2), "verbose")
    if verbose == "auto":
        return 1 if steps > 1 else 0
    return int(verbose)


class UnknownArgumentError(TypeError, ValueError):
    """A keyword argument that the called function does not take.

    A `TypeError`, as Python (and `keras.applications`) raise for an
    unexpected keyword argument, and a `ValueError`, as keras_vit raises for
    every other bad argument: code catching either one catches it.
    """


def argument_names(*functions):
    """The names of the named parameters of `functions` (classes: `__init__`).

    Example:

    >>> def build(weights=None, classes=1000, **kwargs): ...
    >>> argument_names(build)
    ('weights', 'classes')
    """
    names = []
    for function in functions:
        for parameter in inspect.signature(function).parameters.values():
            named = parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
            if named and parameter.name != "self" and parameter.name not in names:
                names.append(parameter.name)
    return tuple(names)


def check_keywords(kwargs, allowed, caller, aliases=None):
    """Refuses keyword arguments outside `allowed`, naming the closest valid one.

    Functions that forward `**kwargs` (to a base class, to Keras, to
    another function) call this first, so that a misspelt argument fails
    instead of being dropped silently.

    Args:
        kwargs: the dict of keyword arguments received.
        allowed: every name the caller accepts, its own and those it
            forwards.
        caller: how the caller is named in the message, e.g. "ViTTi16".
        aliases: None or `{other library's name: allowed name}`, e.g.
            `{"num_classes": "classes"}`: a name close to an alias is
            answered with the allowed name.

    Raises:
        UnknownArgumentError: for the first name not in `allowed` (a
            `TypeError` and a `ValueError`).

    Example:

    >>> check_keywords({"weight": "x.npz"}, ("weights", "classes"), "ViTTi16")
    Traceback (most recent call last):
    ...
    keras_vit.validation.UnknownArgumentError: ViTTi16() got an unexpected keyword argument 'weight'; did you mean 'weights'? ...
    """
    unknown = [name for name in kwargs if name not in allowed]
    if not unknown:
        return
    name = unknown[0]
    allowed = tuple(dict.fromkeys(allowed))
    targets = dict(zip(allowed, allowed))
    targets.update((k, v) for k, v in (aliases or {}).items() if v in targets)
    close = difflib.get_close_matches(name, tuple(targets), n=1, cutoff=0.6)
    hint = f"; did you mean {targets[close[0]]!r}?" if close else "."
    raise UnknownArgumentError(
        f"{caller}() got an unexpected keyword argument {name!r}{hint} "
        f"It takes: {', '.join(sorted(allowed))}. Received: {name}={kwargs[name]!r}"
    )
