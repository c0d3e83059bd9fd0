"""Checks shared by the test modules: docstring examples and layer contracts."""

import doctest
import inspect
import os
import sys
import tempfile

import keras
import numpy as np

import keras_vit
from conftest import inference

DOCTEST_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def run_doctests(obj):
    """Runs the docstring examples of a module (or of one function or class).

    Fails unless some examples ran and all passed. Examples run with the
    globals of the module they are defined in, plus `keras_vit`.

    Returns:
        The number of examples that ran.
    """
    module = obj if inspect.ismodule(obj) else sys.modules[obj.__module__]
    name = getattr(obj, "__qualname__", obj.__name__)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=DOCTEST_FLAGS)
    globs = dict(vars(module), keras_vit=keras_vit)
    for test in finder.find(obj, name, globs=globs):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"
    return result.attempted


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _build(layer, inputs):
    """Builds `layer` for `inputs` on a symbolic call, so that its first call
    on the values can be one compiled call on jax (`conftest.inference`): an
    eager call of a new layer on jax compiles each operation on its own."""
    layer(keras.KerasTensor(inputs.shape, dtype=str(inputs.dtype)))
    return layer


def _copy_weights(source, target):
    for a, b in zip(source.weights, target.weights):
        b.assign(_numpy(a))


def run_layer_test(make_layer, inputs, expected_shape=None, mixed_precision=True, training=True):
    """The contract of every keras_vit layer, on the current backend.

    - the output shape equals `compute_output_shape` (and `expected_shape`);
    - `get_config()` round-trips through `from_config` and JSON
      serialisation, and the restored layer with the same weights gives the
      same outputs;
    - inside a `keras.Model`, it survives `model.save`/`load_model`;
    - under `mixed_float16` and `mixed_bfloat16` it computes in the policy's
      dtype, with outputs close to float32's;
    - with `training`, every trainable weight receives a finite gradient
      (checked through a tiny `fit` step changing the weights).

    Args:
        make_layer: callable `(**kwargs) -> layer`; `dtype=...` is passed for
            the mixed-precision checks.
        inputs: a NumPy input batch.
        expected_shape: optional expected output shape.
        mixed_precision: bool, default True.
        training: bool, default True.

    Returns:
        `(layer, outputs)`: the float32 layer and its outputs as NumPy.
    """
    inputs = np.asarray(inputs)
    layer = _build(make_layer(), inputs)
    expected = inference(layer, inputs)
    shape = tuple(layer.compute_output_shape(inputs.shape))
    assert expected.shape == shape, (expected.shape, shape)
    if expected_shape is not None:
        assert shape == tuple(expected_shape), (shape, expected_shape)

    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer) and restored.get_config() == config
    _copy_weights(layer, _build(restored, inputs))
    np.testing.assert_allclose(inference(restored, inputs), expected, rtol=1e-5, atol=1e-5)

    _check_saving(layer, inputs, expected)
    if mixed_precision:
        _check_mixed_precision(make_layer, layer, inputs, expected)
    if training and layer.trainable_weights:
        _check_gradients(make_layer, inputs)
    return layer, expected


def _check_saving(layer, inputs, expected):
    model_input = keras.Input(shape=inputs.shape[1:], dtype=str(inputs.dtype))
    model = keras.Model(model_input, layer(model_input))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "layer.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(inference(loaded, inputs), expected, rtol=1e-5, atol=1e-5)


def _check_mixed_precision(make_layer, layer, inputs, expected):
    for policy, tolerance in (("mixed_float16", 5e-2), ("mixed_bfloat16", 2e-1)):
        mixed = _build(make_layer(dtype=policy), inputs)
        _copy_weights(layer, mixed)
        # NumPy keeps the backend's dtype (bfloat16 as ml_dtypes').
        out = inference(mixed, inputs)
        assert keras.backend.standardize_dtype(out.dtype) in (policy.split("_")[1], "float32")
        for variable in mixed.weights:
            assert keras.backend.standardize_dtype(variable.dtype) == "float32", variable.path
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(out.astype("float32"), expected, atol=tolerance * scale)


def _check_gradients(make_layer, inputs):
    layer = make_layer()
    model_input = keras.Input(shape=inputs.shape[1:], dtype=str(inputs.dtype))
    outputs = layer(model_input)
    model = keras.Model(model_input, outputs)
    # Random values everywhere: zero-initialised scales (the last GroupNorm
    # of a bottleneck unit) would block the gradients behind them.
    rng = np.random.default_rng(2)
    for weight in layer.weights:
        weight.assign(rng.normal(scale=0.5, size=weight.shape).astype(weight.dtype))
    before = [_numpy(w).copy() for w in layer.trainable_weights]
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    target = np.random.default_rng(1).normal(size=(inputs.shape[0],) + tuple(outputs.shape[1:]))
    model.fit(inputs, target.astype("float32"), epochs=1, batch_size=inputs.shape[0], verbose=0)
    for weight, old in zip(layer.trainable_weights, before):
        new = _numpy(weight)
        assert np.all(np.isfinite(new)), weight.path
        if weight.path.endswith("key/bias"):
            # A key bias shifts every logit of a query alike and the softmax
            # cancels it: its gradient is zero up to rounding, and exactly
            # zero on some CPUs' kernels.
            continue
        assert not np.array_equal(new, old), f"{weight.path} received no gradient"
