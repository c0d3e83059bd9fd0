"""Keeps a model's variables when a `fit`, `evaluate` or `predict` fails on jax.

Keras' JAX trainer runs its loops without a second copy of the weights: it
detaches every variable's value at the start (`_purge_model_variables`),
threads the arrays through jitted steps that donate their inputs (the
previous arrays are deleted), and reattaches the state only when a loop ends
normally (`fit` also in a `finally`, which has nothing to reattach when its
first step fails). An exception or a Ctrl-C inside a loop would leave the
model with no values: every later call, `save` included, fails.

`JaxStateGuard`, a mixin of every keras_vit model (through `ModelBase`):

- keeps references to the values Keras detaches (no copy);
- records the state each jitted step returns before any other Python code
  runs, holding a Ctrl-C that arrives during a step back until then;
- after a failed call, reattaches the last recorded state (the values of
  the last completed step), or the detached values when no step completed.

Everything here is inert on the other backends, whose trainers keep the
variables attached.
"""

import contextlib
import signal
import threading

import keras

_STATE_KEYS = {
    "train_function": (
        "trainable_variables",
        "non_trainable_variables",
        "optimizer_variables",
        "metrics_variables",
    ),
    "test_function": ("trainable_variables", "non_trainable_variables", "metrics_variables"),
    "predict_function": ("trainable_variables", "non_trainable_variables"),
}


def on_jax():
    return keras.backend.backend() == "jax"


@contextlib.contextmanager
def interrupts_deferred():
    """Holds back a Ctrl-C (SIGINT) until the block has run to its end."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives signals
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received and callable(previous):
            previous(signal.SIGINT, received[0])
        elif received and previous == signal.SIG_DFL:
            raise KeyboardInterrupt


class _Record:
    """What the guard keeps during a call (a plain object: Keras tracks lists)."""

    def __init__(self):
        self.depth = 0
        self.detached = []


class JaxStateGuard:
    """Mixin: the jax trainer's variables survive a failed or interrupted call."""

    def _guard_record(self):
        record = getattr(self, "_keras_vit_guard", None)
        if record is None:
            record = _Record()
            self._keras_vit_guard = record
        return record

    def _purge_model_variables(self, **kinds):
        record = self._guard_record()
        groups = {
            "trainable_variables": lambda: self.trainable_variables,
            "non_trainable_variables": lambda: self.non_trainable_variables,
            "optimizer_variables": lambda: self.optimizer.variables,
            "metrics_variables": lambda: self.metrics_variables,
        }
        for kind, variables in groups.items():
            if kinds.get(kind):
                record.detached.extend((v, v._value) for v in variables())
        super()._purge_model_variables(**kinds)

    def _record_steps(self, name):
        """Wraps the jitted step function `name` so that its state is recorded."""
        function = getattr(self, name)
        if not on_jax() or function is None or getattr(function, "_records_state", False):
            return function
        keys = _STATE_KEYS[name]

        def step(state, iterator):
            with interrupts_deferred():
                outputs, new_state = function(state, iterator)
                self._jax_state = dict(zip(keys, new_state))
                self._jax_state_synced = False
            return outputs, new_state

        step._records_state = True
        setattr(self, name, step)
        return step

    @contextlib.contextmanager
    def _state_kept(self):
        """The body runs a trainer call; its failure leaves the variables attached."""
        if not on_jax():
            yield
            return
        record = self._guard_record()
        if record.depth == 0:
            record.detached = []
            self._jax_state = None  # never reattach a state left by an earlier call
        record.depth += 1
        try:
            yield
        except BaseException:
            if record.depth == 1:
                self._reattach(record)
            raise
        finally:
            record.depth -= 1
            if record.depth == 0:
                record.detached = []

    def _reattach(self, record):
        if getattr(self, "_jax_state", None) and not self._jax_state_synced:
            self.jax_state_sync()
        for variable, value in record.detached:
            if variable._value is None and value is not None and not value.is_deleted():
                variable._value = value
        self._jax_state = None
