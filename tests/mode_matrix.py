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
A mode a backend cannot run is a refusal (`REFUSALS`): the library's error,
which names the mode. docs/guides/modes.md is the table of the cells.
"""

import contextlib
import dataclasses
import functools
import warnings

import keras
import numpy as np

import keras_vit
from conftest import TINY, to_numpy
from kernel_helpers import BACKEND, onednn_computes_here, taken
from keras_vit import kernels
from keras_vit.execution import tf_xla
from keras_vit.kernels import registry

# "fast": every path of the backend forced on; where several serve one op,
# the dispatcher takes the first registered that computes the call.
# "second": the same with the first of each such op disabled, so that the
# paths "fast" shadows run too (torch's `F.linear` projection, the fused
# attention of jax and tensorflow). "portable": every op in its portable form.
PATH_SETS = ("fast", "second", "portable")

# How `model.compile` is called in each mode of `fit` and `predict`:
# "eager" op by op on every backend; "auto" Keras' default (XLA on jax;
# tensorflow's graph runtime, with keras_vit's XLA predict function in
# float32; eager on torch); "compiled" `jit_compile=True` (XLA on jax and
# tensorflow, torch.compile on torch).
COMPILE_OPTIONS = {"eager": {"run_eagerly": True}, "auto": {}, "compiled": {"jit_compile": True}}
# The modes that run programs of their own on each backend ("auto" is
# "compiled" on jax and "eager" on torch).
MODES = {"jax": ("eager", "compiled"), "tensorflow": ("eager", "auto", "compiled"),
         "torch": ("eager", "compiled")}
# The mode in which the precision, int8 and LoRA cells train: the backend's default.
DEFAULT_MODE = "auto"

# The forced paths that stand aside in a mode (the op then takes the next
# path of the set, or its portable form); docs/guides/modes.md lists them
# with the reason (tests/test_mode_matrix.py checks it does). While
# exporting every fast path does: the exporters trace the portable form.
STANDS_ASIDE = {
    ("torch", "compiled"): ("onednn",),
    ("torch", "vmap"): ("sdpa",),
    **{(backend, "export"): ("every fast path",) for backend in registry.BACKENDS},
}

# The modes a backend refuses, by the library's error: `(backend, mode)` ->
# a fragment of the error's message. docs/guides/modes.md lists them too.
REFUSALS = {
    ("torch", "several devices"): "is not available on the torch backend",
    ("torch", "several processes"): "cannot train over several processes on the torch backend",
}

# Relative tolerances of a cell against the float32 reference, by the
# compute dtype: float32 rounding, and a few roundings of bfloat16's 8 and
# float16's 11 mantissa bits. Each is taken of the reference's largest value.
TOLERANCES = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}

# The matrix's model: TINY with one block (each path runs in every block; a
# second adds compile time and nothing the paths do).
CONFIG = dict(TINY, num_layers=1)
CLASSES = 5
BATCH = 8
_rng = np.random.default_rng(0)
X = _rng.normal(size=(BATCH, CONFIG["image_size"], CONFIG["image_size"], 3)).astype("float32")
Y = keras.utils.to_categorical(np.arange(BATCH) % CLASSES, CLASSES)


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


def aside(mode, backend=BACKEND):
    """The names of the fast paths that stand aside in `mode` (every one while exporting)."""
    names = set(STANDS_ASIDE.get((backend, mode), ()))
    if "every fast path" in names:
        return {name for found in alternatives(backend).values() for name in found}
    return names


def expected_paths(path_set, mode, policy="float32", backend=BACKEND):
    """The paths a forward and backward pass of the tiny ViT takes in a cell.

    Each op's first path of the set that computes its calls: "onednn" only
    where oneDNN has the dtype, "half_layer_norm" only where the norm's
    weights are half precision too (the "bfloat16" policy), the others on
    every call; minus those that stand aside in `mode`.
    """
    forced, _ = forced_and_disabled(path_set, backend)
    skipped = aside(mode, backend)
    dtype = policy.removeprefix("mixed_")
    expected = set()
    for op, names in alternatives(backend).items():
        for name in names:
            if name not in forced or name in skipped or not _computes(name, dtype, policy):
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
    if name in ("channels_last_conv", "xla_convolutions"):
        return False  # the ViT's convolution is its patch embedding, called as a layer (DPT's and EoMT's
        # are held to the portable form by test_fast_paths and test_dense_parity)
    if name in ("chunked_decomposed_attention", "xla_decomposed_attention"):
        return False  # the ViT has no decomposed relative positions (SAM's and ViTDet's blocks: test_fast_paths,
        # test_kernels, test_prompt_masks)
    if name == "row_blocked_convs":
        return False  # the ViT has no dense head (Depth Anything's: test_fast_paths, test_dense_parity)
    if name == "row_chunked_mlp":
        return False  # the tiny ViT's MLP is far under the 32 MiB it waits for (test_fast_paths holds it)
    if name == "interpolate":
        return False  # the ViT resizes nothing (DPT's and EoMT's resizes: test_fast_paths, test_dense_parity)
    if name == "fused_attention" and BACKEND == "jax":
        return dtype != "float16"  # XLA's CPU dot refuses jax's float16 form
    return True


def distinct(path_sets, mode, policy="float32", skip=()):
    """The path sets of `path_sets` whose cells in `mode` run paths no earlier one ran.

    "portable" always counts (its cell holds the portable form in the
    mode); `skip` lists path sets left out (the reference itself).
    """
    chosen, seen = [], []
    for path_set in path_sets:
        found = expected_paths(path_set, mode, policy)
        if path_set not in skip and (path_set == "portable" or found not in seen):
            chosen.append(path_set)
        seen.append(found)
    return chosen


def check_paths(taken_paths, path_set, mode, policy="float32"):
    """The cell ran the paths of its set (none that stand aside in its mode)."""
    forced, _ = forced_and_disabled(path_set)
    expected = expected_paths(path_set, mode, policy)
    taken_paths = set(taken_paths)
    assert expected <= taken_paths <= forced, (sorted(expected), sorted(taken_paths))
    assert not taken_paths & aside(mode), sorted(taken_paths & aside(mode))


@functools.lru_cache(maxsize=None)
def _initial_weights():
    keras.utils.set_random_seed(1)
    model = keras_vit.ViT(**CONFIG, classes=CLASSES, classifier_activation="softmax")
    rng = np.random.default_rng(3)
    return tuple(rng.normal(scale=0.2, size=w.shape).astype("float32") for w in model.get_weights())


def initial_weights():
    """The tiny classifier's weights, every one random (the head starts at
    zero, which would make the outputs constant)."""
    return list(_initial_weights())


def make_model(weights=None, policy="float32", variant=None):
    """The tiny classifier under `policy`, with `weights` (default `initial_weights()`).

    `variant`: None, "int8" (`model.quantize("int8")` after the weights are
    set) or "lora" (LoRA of rank 2 on the queries, values and the MLP's first
    projection, the rest frozen but the head, its adapters random: the `B`
    factors start at zero, which would leave the `A` factors' gradients zero).
    """
    keras.utils.set_random_seed(1)
    model = keras_vit.ViT(**CONFIG, classes=CLASSES, classifier_activation="softmax", dtype=policy)
    model.set_weights(initial_weights() if weights is None else weights)
    if variant == "int8":
        with warnings.catch_warnings():
            # Keras names every layer without int8 weights (norms, dropout, ...).
            warnings.filterwarnings("ignore", message=".*does not have a `quantize` method")
            model.quantize("int8")
    elif variant == "lora":
        model.enable_lora(2, targets=("query", "value", "Dense_0"), verbose=False)
        rng = np.random.default_rng(4)
        for variable in model.weights:
            if "lora_kernel" in variable.path:
                variable.assign(rng.normal(scale=0.3, size=variable.shape).astype("float32"))
    elif variant is not None:
        raise ValueError(f"Unknown variant {variant!r}")
    return model


@dataclasses.dataclass
class Run:
    """What a cell computed: `fit`'s loss, `evaluate`'s loss (None where the
    cell does not evaluate), `predict`'s outputs, the trained weights, the
    fast paths that computed, and the graphs torch.compile made of `predict`."""

    losses: list
    loss: float
    predictions: np.ndarray
    weights: list
    paths: set = dataclasses.field(default_factory=set)
    predict_graphs: int = 0


def records_paths(mode, backend=BACKEND):
    """Whether a cell in `mode` records the paths it ran (`kernel_helpers.taken`).

    Not inside torch.compile: a fast path that breaks the graph makes
    torch.compile resume the dispatcher's loop over the paths, and with
    `taken`'s recording wrappers in that loop it resumes on a tuple it
    rebuilt wrongly (IndexError in `tuple_iterator_getitem`, torch 2.13).
    Those cells are held to the reference and must compile a graph.
    """
    return not (backend == "torch" and mode == "compiled")


def evaluates(model):
    """Whether `evaluate` runs a program that neither `fit` nor `predict` runs.

    On tensorflow, where keras_vit compiles the float32 predict function with
    XLA (`tf_xla.uses_xla`), `evaluate` is the graph runtime's inference;
    elsewhere it is `predict`'s forward pass plus the loss, and is not run.
    """
    return tf_xla.uses_xla(model)


def train(model, mode, evaluate=None):
    """One step of `fit` on the batch, then `evaluate` (where it runs a
    program of its own, or as `evaluate` says) and `predict`, in `mode`."""
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="categorical_crossentropy",
                  **COMPILE_OPTIONS[mode])
    evaluate = evaluates(model) if evaluate is None else evaluate
    with (taken() if records_paths(mode) else contextlib.nullcontext([])) as seen:
        losses = model.fit(X, Y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0).history["loss"]
        loss = model.evaluate(X, Y, batch_size=BATCH, verbose=0) if evaluate else None
        with graphs_made() as graphs:
            predictions = model.predict(X, batch_size=BATCH, verbose=0)
    weights = [_float32(w) for w in model.trainable_weights]
    return Run(losses, loss, _float32(predictions), weights, set(seen), graphs[0])


def _float32(x):
    return np.asarray(to_numpy(keras.ops.cast(x, "float32")), "float32")


@functools.lru_cache(maxsize=None)
def reference(variant=None, mode="eager"):
    """The portable form's `train` of `make_model(variant=variant)` in `mode`
    (default: eager, `evaluate` included), once per process; the cells take
    it as it is."""
    with paths("portable"):
        return train(make_model(variant=variant), mode, evaluate=True if mode == "eager" else None)


@functools.lru_cache(maxsize=None)
def portable_predictions(variant=None):
    """The portable form's `predict` of `make_model(variant=variant)`, before any training."""
    with paths("portable"):
        return make_model(variant=variant).predict(X, batch_size=BATCH, verbose=0)


def assert_close(what, got, expected, dtype="float32"):
    """`got` equals `expected` within `dtype`'s tolerance of `expected`'s largest value."""
    tolerance = TOLERANCES[dtype]
    expected = np.asarray(expected, "float32")
    scale = max(float(np.abs(expected).max()), 1e-3)
    np.testing.assert_allclose(np.asarray(got, "float32"), expected, rtol=tolerance,
                               atol=tolerance * scale, err_msg=what)


def assert_agrees(run, reference_run, dtype="float32"):
    """`run` against `reference_run` within `dtype`'s tolerance: losses,
    outputs and the weights the gradients moved."""
    pairs = [("fit losses", run.losses, reference_run.losses),
             ("predict", run.predictions, reference_run.predictions)]
    if run.loss is not None:
        pairs.append(("evaluate", run.loss, reference_run.loss))
    trained = zip(run.weights, reference_run.weights)
    pairs += [(f"trained weight {i}", a, b) for i, (a, b) in enumerate(trained)]
    assert len(run.weights) == len(reference_run.weights)
    for what, got, expected in pairs:
        assert_close(what, got, expected, dtype)


@contextlib.contextmanager
def graphs_made():
    """Counts the graphs torch.compile makes within the context (a list of one int)."""
    count = [0]
    if BACKEND != "torch":
        yield count
        return
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    try:
        yield count
    finally:
        count[0] = counters["stats"]["unique_graphs"] - before


@contextlib.contextmanager
def compiled_graphs():
    """Counts the graphs torch.compile makes within the context, from an empty cache.

    torch.compile keeps what it compiled across models and, past a function's
    recompilation limit, runs it eagerly with a warning: a cell starts from an
    empty cache, and counts the graphs it made to show it compiled. Inductor
    writes its loops without SIMD intrinsics here (`cpp.vec_isa_ok=False`):
    the same graphs, fusions and library kernels (the products, the fused
    attention), compiled faster (docs/guides/modes.md).
    """
    if BACKEND != "torch":
        with graphs_made() as count:
            yield count
        return
    import torch

    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch({"cpp.vec_isa_ok": False}), graphs_made() as count:
            yield count
    finally:
        torch._dynamo.reset()
