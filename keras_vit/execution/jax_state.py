"""Keeps a model's variables when a `fit`, `evaluate` or `predict` fails on jax.

Keras' JAX trainer runs its loops without a second copy of the weights: it
detaches every variable's value at the start (`_purge_model_variables`),
threads the arrays through jitted steps that donate their inputs (the
previous arrays are deleted), and reattaches the state only when a loop ends
normally (`fit` also in a `finally`, which has nothing to reattach when its
first step fails). An exception or a Ctrl-C inside a loop would leave the
model with no values: every later call, `save` included, fails.

`keep_state(model)`, a context around each trainer call of a keras_vit
model (`keras_vit.models.base.ModelBase`), for the duration of the call:

- keeps references to the values Keras detaches (no copy);
- records the state each jitted step returns before any other Python code
  runs, holding a Ctrl-C that arrives during a step back until then;
- after a failed call, reattaches the last recorded state (the values of
  the last completed step), or the detached values when no step completed.

It hooks the model's own Keras methods on the instance while the call runs
and removes the hooks afterwards; on the other backends, whose trainers keep
the variables attached, it does nothing.
"""

import contextlib
import signal
import threading

import keras

# The state each step function returns, by the function's name.
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
# The Keras methods that make each step function.
_MAKERS = {
    "make_train_function": "train_function",
    "make_test_function": "test_function",
    "make_predict_function": "predict_function",
}


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


def _record_steps(model, name):
    """Wraps the jitted step function `name` of `model` so that its state is recorded."""
    function = getattr(model, name)
    if function is None or getattr(function, "_records_state", False):
        return function
    keys = _STATE_KEYS[name]

    def step(state, iterator):
        with interrupts_deferred():
            outputs, new_state = function(state, iterator)
            model._jax_state = dict(zip(keys, new_state))
            model._jax_state_synced = False
        return outputs, new_state

    step._records_state = True
    setattr(model, name, step)
    return step


class _Guard:
    """What `keep_state` keeps for one model (a plain object: Keras tracks lists)."""

    def __init__(self, model):
        self.model = model
        self.depth = 0
        self.detached = []

    def _purge_model_variables(self, **kinds):
        model = self.model
        groups = {
            "trainable_variables": lambda: model.trainable_variables,
            "non_trainable_variables": lambda: model.non_trainable_variables,
            "optimizer_variables": lambda: model.optimizer.variables,
            "metrics_variables": lambda: model.metrics_variables,
        }
        for kind, variables in groups.items():
            if kinds.get(kind):
                self.detached.extend((v, v._value) for v in variables())
        type(model)._purge_model_variables(model, **kinds)

    def _maker(self, maker):
        def make(force=False):
            getattr(type(self.model), maker)(self.model, force)
            return _record_steps(self.model, _MAKERS[maker])

        return make

    def install(self):
        self.detached = []
        self.model._jax_state = None  # never reattach a state left by an earlier call
        # On the instance, where Keras' trainer looks them up first; not
        # through Keras' attribute tracking.
        hooks = {"_purge_model_variables": self._purge_model_variables}
        hooks.update({maker: self._maker(maker) for maker in _MAKERS})
        for name, hook in hooks.items():
            object.__setattr__(self.model, name, hook)

    def uninstall(self):
        for name in ("_purge_model_variables", *_MAKERS):
            vars(self.model).pop(name, None)
        self.detached = []

    def reattach(self):
        model = self.model
        if getattr(model, "_jax_state", None) and not model._jax_state_synced:
            model.jax_state_sync()
        for variable, value in self.detached:
            if variable._value is None and value is not None and not value.is_deleted():
                variable._value = value
        model._jax_state = None


def _guard(model):
    guard = vars(model).get("_keras_vit_guard")
    if guard is None:
        guard = _Guard(model)
        object.__setattr__(model, "_keras_vit_guard", guard)
    return guard


@contextlib.contextmanager
def keep_state(model):
    """The body runs a trainer call of `model`; its failure leaves the variables attached.

    Nested calls (the validation `evaluate` inside `fit`) share the outer
    call's guard. Does nothing on the tensorflow and torch backends.

    Args:
        model: a Keras model.
    """
    if keras.backend.backend() != "jax":
        yield
        return
    guard = _guard(model)
    if guard.depth == 0:
        guard.install()
    guard.depth += 1
    try:
        yield
    except BaseException:
        if guard.depth == 1:
            guard.reattach()
        raise
    finally:
        guard.depth -= 1
        if guard.depth == 0:
            guard.uninstall()
