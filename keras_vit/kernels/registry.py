"""The registry of fast paths: what each backend module overrides.

An override is a function of an op's arguments that computes what the
portable form computes (`keras_vit.kernels.portable`), faster on some
backend and hardware. It returns `NotImplemented` for a call it cannot
compute (another dtype, device or layer), and carries a hardware rule,
`pays(*args)`, that says whether it is the faster choice on this machine
(`keras_vit.kernels.hardware`). For each call the dispatcher
(`keras_vit.kernels.api`) takes the first override of the backend, in
registration order, that is enabled, pays and computes; otherwise the
portable form.

An override registered with `export=True` is an exporter's workaround
instead: it runs only inside `export_mode()`, where the fast paths do not.
"""

import dataclasses
import difflib
from typing import Callable

# The ops the kernels dispatch, and the arguments their functions take.
OPS = {
    "dense": "(x, kernel, bias, axes, activation)",
    "mlp": "(x, kernel_0, bias_0, kernel_1, bias_1, activation)",
    "attention": "(q, k, v, scale, mask)",
    "decomposed_attention": "(q, k, v, scale, rows, columns)",
    "gelu": "(x, approximate)",
    "call_sublayer": "(layer, x, args, kwargs)",
    "conv_relu_conv": "(x, first, second, size)",
    "pack_for_inference": "(variables,)",
    "take": "(x, indices, axis)",
    "resize_bilinear": "(images, size, align_corners, scale)",
}
BACKENDS = ("jax", "tensorflow", "torch")


def _always(*args):
    return True


@dataclasses.dataclass(frozen=True)
class Override:
    """One fast path: `function` for `op` on `backend`, taken where `pays`."""

    op: str
    backend: str
    name: str
    function: Callable
    pays: Callable = _always
    export: bool = False


class _All:
    """Every name, as a set of names (`switches.portable_only`)."""

    def __contains__(self, name):
        return True

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __repr__(self):
        return "ALL"


ALL = _All()
_OVERRIDES = []


def register(op, backend, name, pays=None, export=False):
    """A decorator registering the function as `backend`'s override of `op`.

    Args:
        op: one of `OPS`.
        backend: "jax", "tensorflow" or "torch".
        name: the name `disabled()`/`forced()` take; one override per name
            and backend (the same name on two backends is one fast path).
        pays: None (always) or a function of the op's arguments: the
            hardware rule.
        export: True for an exporter's workaround (runs only while exporting).

    Example:

    >>> @register("gelu", "jax", "example_gelu")
    ... def gelu(x, approximate):
    ...     return NotImplemented
    >>> [o.name for o in registered("gelu", "jax")][-1]
    'example_gelu'
    >>> unregister("gelu", "jax", "example_gelu")
    """
    if op not in OPS or backend not in BACKENDS:
        raise ValueError(
            f"Unknown op or backend. Received: op={op!r}, backend={backend!r}; "
            f"ops: {sorted(OPS)}, backends: {list(BACKENDS)}"
        )

    def decorate(function):
        if any(o.name == name and o.backend == backend for o in _OVERRIDES):
            raise ValueError(f"A fast path named {name!r} is already registered for {backend}.")
        _OVERRIDES.append(Override(op, backend, name, function, pays or _always, export))
        clear_cache()
        return function

    return decorate


def unregister(op, backend, name):
    """Removes an override (tests register and remove their own)."""
    _OVERRIDES[:] = [o for o in _OVERRIDES if (o.op, o.backend, o.name) != (op, backend, name)]
    clear_cache()


def registered(op=None, backend=None):
    """The overrides registered for `op` and `backend` (None: any), in order."""
    return tuple(
        o for o in _OVERRIDES
        if (op is None or o.op == op) and (backend is None or o.backend == backend)
    )


def names():
    """The names of every registered override, all backends."""
    return sorted({o.name for o in _OVERRIDES})


def check_names(given, argument):
    """`given` as a frozenset, each a registered name, or a ValueError naming the closest."""
    known = names()
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(
                f"`{argument}` takes names of registered fast paths: {known}. "
                f"Received: {name!r}.{hint}"
            )
    return frozenset(given)


# `active`'s answers, per `(op, backend, exporting, disabled)`. A plain
# dict rather than `functools.lru_cache`, which torch.compile traces through
# with a warning of possible silent errors at every compiled training step.
_ACTIVE = {}


def active(op, backend, exporting, disabled):
    """The overrides the dispatcher may try for one call, in order.

    `disabled` is a frozenset of names or `ALL`.
    """
    key = (op, backend, exporting, disabled)
    found = _ACTIVE.get(key)
    if found is None:
        found = _ACTIVE[key] = _select(op, backend, exporting, disabled)
    return found


def clear_cache():
    """Forgets `active`'s answers (after `_OVERRIDES` changed)."""
    _ACTIVE.clear()


def _select(op, backend, exporting, disabled):
    if exporting:
        return tuple(o for o in _OVERRIDES if o.op == op and o.backend == backend and o.export)
    return tuple(
        o for o in _OVERRIDES
        if o.op == op and o.backend == backend and not o.export and o.name not in disabled
    )
