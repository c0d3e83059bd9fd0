"""The contexts that steer what the kernels emit.

Each switch is a context that sets a process-wide state and restores the
previous one on exit (contexts nest; an error inside restores too). Tracing
reads them, so a context changes what a function traced inside it computes,
not what an already compiled function does.

- `export_mode()`: the exporters' form (every fast path off, backend
  workarounds for exporters on); `keras_vit.export` enters it.
- `xla_compiled()`: tensorflow is tracing for XLA; `keras_vit.execution.tf_xla`
  enters it around the predict function it compiles.
- `disabled(*names)`, `portable_only()`: fast paths off by name, or all.
- `forced(*names)`: fast paths taken wherever they can compute, whatever
  their hardware rule says (tests and benchmarks compare paths with it).
"""

import contextlib

import keras

from keras_vit.kernels import registry


class _State:
    """A process-wide value that a context replaces and then restores."""

    def __init__(self, value):
        self.value = value

    @contextlib.contextmanager
    def set_to(self, value):
        previous, self.value = self.value, value
        try:
            yield
        finally:
            self.value = previous


_EXPORT_MODE = _State(False)
_XLA_COMPILED = _State(False)
# Names of the fast paths turned off (`registry.ALL`: every one) and forced on.
_DISABLED = _State(frozenset())
_FORCED = _State(frozenset())


def export_mode():
    """Within this context the kernels emit their exporter-friendly form.

    Plain matrix products on the tensors as they are, no reshape that merges
    the symbolic batch axis into another axis (which jax2onnx cannot
    express), no backend-specific call except the exporters' workarounds
    (`registry.register(..., export=True)`).

    Example:

    >>> with export_mode():
    ...     exporting()
    True
    >>> exporting()
    False
    """
    return _EXPORT_MODE.set_to(True)


def exporting():
    """Whether the kernels are being traced for an exporter (`export_mode`)."""
    return _EXPORT_MODE.value


def xla_compiled():
    """Within this context tensorflow traces the layers for XLA.

    `keras_vit.execution.tf_xla` enters it around the float32 predict function it
    compiles with XLA on a tensorflow CPU; attention then groups heads as on
    jax (`keras_vit.kernels.xla.head_group`).

    Example:

    >>> with xla_compiled():
    ...     compiled_by_xla() == (keras.backend.backend() in ("jax", "tensorflow"))
    True
    """
    return _XLA_COMPILED.set_to(True)


def compiled_by_xla():
    """Whether the kernels are traced for XLA: on jax always, on tensorflow inside `xla_compiled()`."""
    backend = keras.backend.backend()
    return backend == "jax" or (backend == "tensorflow" and _XLA_COMPILED.value)


def disabled(*names):
    """Within this context the named fast paths are not taken.

    Args:
        *names: names of registered fast paths (`registry.names()`), of any
            backend.

    Example:

    >>> with disabled("onednn", "sdpa"):
    ...     is_enabled("onednn"), is_enabled("xla_attention")
    (False, True)
    """
    names = registry.check_names(names, "disabled")
    return _DISABLED.set_to(_DISABLED.value | names)


def portable_only():
    """Within this context every op runs its portable form (`keras_vit.kernels.portable`).

    Example:

    >>> with portable_only():
    ...     is_enabled("onednn")
    False
    """
    return _DISABLED.set_to(registry.ALL)


def forced(*names):
    """Within this context the named fast paths skip their hardware rule.

    A forced path is taken wherever it can compute the call, as on a machine
    where it pays; `disabled` still wins over it.

    Example:

    >>> with forced("fused_attention"):
    ...     is_forced("fused_attention")
    True
    """
    names = registry.check_names(names, "forced")
    return _FORCED.set_to(_FORCED.value | names)


def is_enabled(name):
    """Whether the fast path `name` may be taken (not `disabled`)."""
    return name not in _DISABLED.value


def is_forced(name):
    """Whether the fast path `name` skips its hardware rule (`forced`)."""
    return name in _FORCED.value
