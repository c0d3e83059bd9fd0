"""The model-level contract every test family passes, on the backend of the suite.

keras-hub's `run_backbone_test` for keras_vit: one helper per concern,
each driven by a family of `tests/families.py` (test_model_contract.py runs
them on every family).

- `run_model_test(family, **options)`: the model builds and runs, its config
  survives JSON, `from_config` and Keras' serialisation, a `.keras` file
  reloads it with equal outputs, it matches the independent NumPy ViT of
  `tests/reference.py` (where that covers the family), and it exports
  (`EXPORT_FORMATS`) with the outputs of `predict`.
- `run_precision_test(family, policy, how)`: the model under a dtype policy
  given as `dtype=` or as Keras' global policy.
- `run_quantization_test(family, mode)`: `model.quantize(mode)`, then
  `predict`, `.keras` files, presets and export of the quantized model.
"""

import functools
import gc
import json
import os
import tempfile
from unittest import mock

import keras
import numpy as np

import keras_vit
from families import FAMILIES, images, make_model, reference_outputs
from keras_vit import export

BACKEND = keras.backend.backend()
# The export smoke test's format on each backend: a cheap one, for float
# models and for Keras-quantized ones (`export.QUANTIZED_FORMATS`);
# tests/test_export.py runs every format.
EXPORT_FORMATS = {
    "jax": ("onnx", "tf_saved_model"),
    "tensorflow": ("tf_saved_model", "tf_saved_model"),
    "torch": ("torch", "torch"),
}
REFERENCE_ATOL = 3e-5
EXPORT_ATOL = 1e-4
# Absolute tolerances on the float32 model's softmax probabilities (10
# classes); "bfloat16" keeps its variables in bfloat16 too.
PRECISION_ATOL = {"mixed_float16": 5e-3, "mixed_bfloat16": 3e-2, "bfloat16": 5e-2}
# Relative error of the quantized model's logits; float8 (e4m3) keeps three
# mantissa bits.
QUANTIZATION_ERROR = {"int8": 0.1, "float8": 0.4}
# The layers Keras quantizes (its convolutions stay float).
QUANTIZED_TYPES = (keras.layers.Dense, keras.layers.EinsumDense)


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def outputs_of(model, x):
    """The model's outputs for `x`, as NumPy.

    One compiled call on jax, whose eager mode compiles each operation of a
    new model on its own (several times slower for these small models); an
    eager call on the other backends.
    """
    if BACKEND == "jax":
        return model.predict(x, batch_size=len(x), verbose=0)
    return _numpy(model(x))


def check_config(model):
    """`get_config()` survives JSON, `from_config` and Keras' serialisation.

    Returns:
        The model rebuilt from its config.
    """
    config = model.get_config()
    again = type(model).from_config(json.loads(json.dumps(config)))
    assert again.get_config() == config
    serialized = json.dumps(keras.saving.serialize_keras_object(model))
    restored = keras.saving.deserialize_keras_object(json.loads(serialized))
    assert type(restored) is type(model) and restored.get_config() == config
    return again


def check_keras_file(model, x, folder):
    """A `.keras` file reloads the model with bit-equal outputs.

    Returns:
        The reloaded model.
    """
    path = os.path.join(folder, f"{model.name}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(outputs_of(loaded, x), outputs_of(model, x))
    return loaded


def check_export(model, x, folder, atol=EXPORT_ATOL, quantized=False):
    """`model.export` writes an artifact whose runtime gives `predict`'s outputs.

    Returns:
        `(outputs of the artifact, outputs of predict)`.
    """
    format = EXPORT_FORMATS[BACKEND][quantized]
    path = os.path.join(folder, f"{model.name}_export{export.SUFFIXES[format]}")
    artifact = model.export(path, format=format)
    diff, outputs, expected = export.verify_export(artifact, format, model, x)
    assert outputs.shape == expected.shape
    if atol is not None:
        assert diff <= atol, diff
    return outputs, expected


def run_model_test(family, **options):
    """Build, config, `.keras` file, NumPy reference and export of a family.

    Args:
        family: a key of `tests.families.FAMILIES`.
        **options: constructor arguments over the family's (e.g.
            `include_top=False`).
    """
    model = make_model(family, **options)
    x = images()
    outputs = outputs_of(model, x)
    assert outputs.shape == (2,) + tuple(model.output.shape[1:]) and np.isfinite(outputs).all()
    check_config(model)
    if FAMILIES[family].reference:
        np.testing.assert_allclose(outputs, reference_outputs(model, x), rtol=0, atol=REFERENCE_ATOL)
    with tempfile.TemporaryDirectory() as folder:
        check_keras_file(model, x, folder)
        check_export(model, x, folder)


@functools.lru_cache(maxsize=None)
def _float32_reference(family):
    """The weights of a float32 model of `family` and its probabilities, once per process."""
    model = make_model(family, classifier_activation="softmax")
    return model.get_weights(), outputs_of(model, images())


def _build_under(family, policy, how, **options):
    if how == "argument":
        return make_model(family, seed=None, dtype=policy, **options)
    keras.config.set_dtype_policy(policy)
    try:
        return make_model(family, seed=None, **options)
    finally:
        keras.config.set_dtype_policy("float32")


def run_precision_test(family, policy, how="argument"):
    """A family under a dtype policy, given as `dtype=` or as the global policy.

    - the model's own policy is `policy` (so `compile` wraps the optimizer in
      a `LossScaleOptimizer` for mixed_float16, and only then), and so is the
      policy of every layer but one: the classifier's activation (layer
      `predictions`) computes in float32 by design, so that probabilities come
      out in float32 whatever the policy, as in keras.applications (keras-hub's
      `run_precision_test` expects every layer and output in the compute dtype);
    - the variables are in the policy's variable dtype;
    - the outputs, float32, are close to the float32 model's with the same
      weights (with `how="argument"`: the same layers either way);
    - the config rebuilds the model under the same policy whatever the global one.

    Args:
        family: a key of `tests.families.FAMILIES`.
        policy: "mixed_float16", "mixed_bfloat16" or "bfloat16".
        how: "argument" (`dtype=policy`) or "global"
            (`keras.config.set_dtype_policy(policy)` while the model is built).
    """
    model = _build_under(family, policy, how, classifier_activation="softmax")
    wanted = keras.DTypePolicy(policy)
    assert model.dtype_policy.name == policy
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if layer.name == "predictions":
            assert layer.compute_dtype == "float32"
            continue
        assert (layer.compute_dtype, layer.variable_dtype) == (wanted.compute_dtype, wanted.variable_dtype), layer.name
    for variable in model.weights:
        assert keras.backend.standardize_dtype(variable.dtype) == wanted.variable_dtype, variable.path
    if how == "argument":  # the same layers either way: their numerics once
        weights, expected = _float32_reference(family)
        model.set_weights(weights)
        outputs = outputs_of(model, images())
        assert outputs.dtype == "float32"
        np.testing.assert_allclose(outputs, expected, atol=PRECISION_ATOL[policy])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
    scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled == (policy == "mixed_float16"), type(model.optimizer).__name__
    again = type(model).from_config(model.get_config())
    assert again.dtype_policy.name == policy
    assert again.get_layer("encoderblock_0").compute_dtype == wanted.compute_dtype


def _quantized_layers(model):
    return {
        layer.path: layer.quantization_mode
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, QUANTIZED_TYPES)
    }


def _check_exported(outputs, expected):
    # The runtime's fused float ops differ from Keras' by ~1e-7 ahead of each
    # rounding to the quantized grid; where a value sits on a boundary, one
    # step flips and moves that image's logits by ~1 %.
    per_image = np.abs(outputs - expected).max(-1)
    assert (per_image > 1e-4).sum() <= 1, per_image
    assert (per_image <= 0.03 * np.abs(expected).max(-1)).all(), per_image


def quantize(model, mode):
    """`model.quantize(mode)`, without Keras' garbage collections.

    Keras runs a full collection each time a layer drops a variable; in a
    test process holding three backends' objects each takes up to a second,
    for tiny models whose memory does not matter.
    """
    with mock.patch.object(gc, "collect"):
        model.quantize(mode)


def run_quantization_test(family, mode):
    """`model.quantize(mode)`, then predict, `.keras` file, preset and export.

    - every Dense and EinsumDense layer is quantized (Keras leaves the
      convolutions of hybrids float), and the outputs move, but not far;
    - the config holds each quantized layer's policy (a `DTypePolicyMap`)
      and rebuilds the layers quantized;
    - a `.keras` file and a preset (`save_to_preset`, `keras_vit.from_preset`)
      of the reloaded model give bit-equal outputs;
    - the reloaded model exports with `predict`'s outputs.

    Args:
        family: a key of `tests.families.FAMILIES`.
        mode: "int8" or "float8".
    """
    model = make_model(family)
    x = images(3)
    reference = outputs_of(model, x)
    quantize(model, mode)
    layers = _quantized_layers(model)
    assert layers and set(layers.values()) == {mode}, layers
    others = [layer.path for layer in model._flatten_layers() if layer.quantization_mode and layer.path not in layers]
    assert not others, others
    outputs = outputs_of(model, x)
    error = np.linalg.norm(outputs - reference) / np.linalg.norm(reference)
    assert 0 < error < QUANTIZATION_ERROR[mode], error
    policy = keras.dtype_policies.deserialize(model.get_config()["dtype"])
    assert isinstance(policy, keras.dtype_policies.DTypePolicyMap) and set(policy) == set(layers)
    assert _quantized_layers(check_config(model)) == layers
    with tempfile.TemporaryDirectory() as folder:
        loaded = check_keras_file(model, x, folder)
        assert _quantized_layers(loaded) == layers
        preset = os.path.join(folder, "preset")
        loaded.save_to_preset(preset)
        again = keras_vit.from_preset(preset)
        assert _quantized_layers(again) == layers
        np.testing.assert_array_equal(outputs_of(again, x), outputs)
        _check_exported(*check_export(loaded, x, folder, atol=None, quantized=True))
