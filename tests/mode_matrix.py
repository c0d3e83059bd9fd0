"""The parts of the mode matrix (tests/test_mode_matrix*.py): the sets of fast
paths a cell forces, the modes it runs, the tiny task and the comparison with
the portable reference.

A cell runs the tiny task under one set of fast paths, forced on whatever
this machine's hardware rules would choose (so the matrix runs the same on
an AVX2 and an AVX-512 CPU), in one mode, and holds it to the portable
reference: every op in its `keras.ops` form, run eagerly, in float32. It
also records which fast paths computed (`kernel_helpers.taken`) and checks
them against the set it forced, less the paths that stand aside in that mode
(`STANDS_ASIDE`), so that a cell cannot pass by running the portable form.
docs/guides/modes.md is the table of the cells.
"""

import contextlib
import dataclasses

import keras
import numpy as np

import keras_vit
from conftest import TINY, to_numpy
from kernel_helpers import BACKEND, onednn_computes_here, taken
from keras_vit import kernels
from keras_vit.kernels import registry

# "fast": every path of the backend forced on; where several serve one op,
# the dispatcher takes the first registered that computes the call.
# "second": the same with the first of each such op disabled, so that the
# paths "fast" shadows run too (torch's `F.linear` projection, the fused
# attention of jax and tensorflow). "portable": every op in its portable form.
PATH_SETS = ("fast", "second", "portable")

# How `model.compile` is called in each mode of `fit`, `evaluate`, `predict`:
# "eager" op by op on every backend; "auto" Keras' default (XLA on jax;
# tensorflow's graph runtime, with keras_vit's XLA predict function in
# float32; eager on torch); "compiled" `jit_compile=True` (XLA on jax and
# tensorflow, torch.compile on torch).
COMPILE_OPTIONS = {"eager": {"run_eagerly": True}, "auto": {}, "compiled": {"jit_compile": True}}
# The modes that run programs of their own on each backend ("auto" is
# "compiled" on jax and "eager" on torch).
MODES = {"jax": ("eager", "compiled"), "tensorflow": ("eager", "auto", "compiled"),
         "torch": ("eager", "compiled")}
# The mode in which the precision cells train: the backend's default.
DEFAULT_MODE = "auto"

# The forced paths that stand aside in a mode (the op then takes the next
# path of the set, or its portable form); docs/guides/modes.md lists them
# with the reason (tests/test_mode_matrix.py checks it does).
STANDS_ASIDE = {("torch", "compiled"): ("onednn",)}

# Relative tolerances of a cell against the float32 reference, by the
# compute dtype: float32 rounding, and a few roundings of bfloat16's 8 and
# float16's 11 mantissa bits. Each is taken of the reference's largest value.
TOLERANCES = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}

CLASSES = 5
_rng = np.random.default_rng(0)
X = _rng.normal(size=(8, TINY["image_size"], TINY["image_size"], 3)).astype("float32")
Y = keras.utils.to_categorical(np.arange(8) % CLASSES, CLASSES)


def alternatives(backend=BACKEND):
    """`{op: [names of its paths, in the dispatcher's order]}` (exporters' workarounds aside)."""
    found = {}
    for override in registry.registered(backend=backend):
        if not override.export:
            found.setdefault(override.op, []).append(override.name)
    return found


def forced_and_disabled(path_set, backend=BACKEND):
    """The names `path_set` forces on and those it disables, as two frozensets."""
    if path_set == "portable":
        return frozenset(), frozenset(registry.names())
    ops = alternatives(backend)
    forced = {name for names in ops.values() for name in names}
    disabled = {names[0] for names in ops.values() if len(names) > 1} if path_set == "second" else set()
    return frozenset(forced - disabled), frozenset(disabled)


@contextlib.contextmanager
def paths(path_set):
    """A context in which `path_set` (one of `PATH_SETS`) chooses the paths."""
    if path_set == "portable":
        with kernels.portable_only():
            yield
        return
    forced, disabled = forced_and_disabled(path_set)
    with kernels.forced(*forced), kernels.disabled(*disabled):
        yield


def expected_paths(path_set, mode, policy="float32", backend=BACKEND):
    """The paths a forward and backward pass of the tiny ViT takes in a cell.

    Each op's first path of the set that computes its calls: "onednn" only
    where oneDNN has the dtype, "half_layer_norm" only where the norm's
    weights are half precision too (the "bfloat16" policy), the others on
    every call; minus those that stand aside in `mode`.
    """
    forced, _ = forced_and_disabled(path_set, backend)
    aside = set(STANDS_ASIDE.get((backend, mode), ()))
    dtype = policy.removeprefix("mixed_")
    expected = set()
    for op, names in alternatives(backend).items():
        for name in names:
            if name not in forced or name in aside or not _computes(name, dtype, policy):
                continue
            expected.add(name)
            if op in ("dense", "attention"):
                break  # the op's first path that computes takes every call
    return expected


def _computes(name, dtype, policy):
    if name == "onednn":
        return onednn_computes_here(dtype)
    if name == "half_layer_norm":
        return policy in ("bfloat16", "float16")
    if name == "onednn_packing":
        return False  # only `for_inference` packs
    if name == "fused_attention" and BACKEND == "jax":
        return dtype != "float16"  # XLA's CPU dot refuses jax's float16 form
    return True


def initial_weights():
    """The tiny classifier's weights, every one random (the head starts at
    zero, which would make the outputs constant)."""
    keras.utils.set_random_seed(1)
    model = keras_vit.ViT(**TINY, classes=CLASSES, classifier_activation="softmax")
    rng = np.random.default_rng(3)
    return [rng.normal(scale=0.2, size=w.shape).astype("float32") for w in model.get_weights()]


def make_model(weights, policy="float32"):
    """The tiny classifier under `policy`, with `weights`."""
    keras.utils.set_random_seed(1)
    model = keras_vit.ViT(**TINY, classes=CLASSES, classifier_activation="softmax", dtype=policy)
    model.set_weights(weights)
    return model


@dataclasses.dataclass
class Run:
    """What a cell computed: `fit`'s losses, `evaluate`'s loss, `predict`'s
    outputs, the trained weights, and the fast paths that computed."""

    losses: list
    loss: float
    predictions: np.ndarray
    weights: list
    paths: set = dataclasses.field(default_factory=set)


def records_paths(mode, backend=BACKEND):
    """Whether a cell in `mode` records the paths it ran (`kernel_helpers.taken`).

    Not inside torch.compile: a fast path that breaks the graph makes
    torch.compile resume the dispatcher's loop over the paths, and with
    `taken`'s recording wrappers in that loop it resumes on a tuple it
    rebuilt wrongly (IndexError in `tuple_iterator_getitem`, torch 2.13).
    Those cells are held to the reference and must compile a graph.
    """
    return not (backend == "torch" and mode == "compiled")


def train(model, mode):
    """One epoch of `fit` (two steps), then `evaluate` and `predict`, in `mode`."""
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy",
                  **COMPILE_OPTIONS[mode])
    with (taken() if records_paths(mode) else contextlib.nullcontext([])) as seen:
        losses = model.fit(X, Y, batch_size=4, epochs=1, shuffle=False, verbose=0).history["loss"]
        loss = model.evaluate(X, Y, batch_size=8, verbose=0)
        predictions = model.predict(X, batch_size=8, verbose=0)
    weights = [_float32(w) for w in model.trainable_weights]
    return Run(losses, loss, _float32(predictions), weights, set(seen))


def _float32(x):
    return np.asarray(to_numpy(keras.ops.cast(x, "float32")), "float32")


def assert_agrees(run, reference, dtype="float32"):
    """`run` against `reference` within `dtype`'s tolerance: losses, outputs and
    the weights the gradients moved."""
    tolerance = TOLERANCES[dtype]
    pairs = [("fit losses", run.losses, reference.losses), ("evaluate", run.loss, reference.loss),
             ("predict", run.predictions, reference.predictions)]
    pairs += [(f"trained weight {i}", a, b) for i, (a, b) in enumerate(zip(run.weights, reference.weights))]
    for what, got, expected in pairs:
        expected = np.asarray(expected, "float32")
        scale = max(float(np.abs(expected).max()), 1e-3)
        np.testing.assert_allclose(np.asarray(got, "float32"), expected, rtol=tolerance,
                                   atol=tolerance * scale, err_msg=what)


@contextlib.contextmanager
def compiled_graphs():
    """Counts the graphs torch.compile makes within the context (a list of one int).

    torch.compile keeps what it compiled across models and, past a function's
    recompilation limit, runs it eagerly with a warning: a cell starts from an
    empty cache, and counts the graphs it made to show it compiled.
    """
    count = [0]
    if BACKEND != "torch":
        yield count
        return
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    try:
        yield count
    finally:
        count[0] = counters["stats"]["unique_graphs"] - before
        torch._dynamo.reset()
