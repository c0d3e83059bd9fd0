"""The model-level contract every test family passes, on the backend of the suite.

keras-hub's `run_backbone_test` for keras_vit: `run_model_test(family,
**options)` runs every check below on one family of `tests/families.py`
(test_model_contract.py runs it on every family), sharing the model and its
outputs across them; each check is also a function of its own.

- Basics: the model builds and runs, its config survives JSON,
  `from_config` and Keras' serialisation (`check_config`), a `.keras` file
  reloads it with bit-equal outputs (`check_keras_file`), it matches the
  independent NumPy ViT of `tests/reference.py` where that covers the
  family, it builds and gives the same outputs under a channels-first Keras
  (`check_channels_first`), and it exports with the outputs of `predict`
  (`check_export`).
- Precision (`check_precision`): every policy of `PRECISION_POLICIES`, given
  as `dtype=` and as Keras' global policy.
- Quantization (`check_quantization`): `model.quantize(mode)` for each mode of
  `QUANTIZATION_ERROR`, then `predict`, the config, a `.keras` file, a preset
  and (for the family of `QUANTIZED_EXPORT[mode]`) the export of the
  quantized model. `run_model_test` runs the modes of `CONTRACT_MODES`;
  `run_quantization_test(family, mode)` runs one mode on its own (the other
  modes, test_model_contract.py).

On jax every new model's first call compiles (`outputs_of`), which is most
of the contract's time: the checks compile once per model they must run.
"""

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
# The export smoke test's format on each backend, for float models and for
# Keras-quantized ones (`export.QUANTIZED_FORMATS`): the cheapest one;
# tests/test_export.py runs every format.
EXPORT_FORMATS = {
    "jax": ("tf_saved_model", "tf_saved_model"),
    "tensorflow": ("tf_saved_model", "tf_saved_model"),
    "torch": ("torch", "torch"),
}
REFERENCE_ATOL = 3e-5
EXPORT_ATOL = 1e-4
PRECISION_POLICIES = ("mixed_float16", "mixed_bfloat16", "bfloat16")
# The policies under which the model's outputs are compared with float32's,
# and the absolute tolerance on its softmax probabilities (10 classes): the
# largest difference over the families and weight seeds 0-3 on tensorflow,
# 0-1 on torch, 0 on jax, was 0.4 of it. The layer contract
# (tests/harness.py) compares every layer's outputs under mixed_float16 and
# mixed_bfloat16; bfloat16 computes as mixed_bfloat16 and also stores the
# variables in bfloat16.
PRECISION_ATOL = {"mixed_float16": 2e-3, "bfloat16": 2e-2}
# The bound on the relative error of the quantized model's logits; over the
# same families and seeds it was 0.005-0.026 for int8 and 0.03-0.19 for
# float8 (e4m3: three mantissa bits).
QUANTIZATION_ERROR = {"int8": 0.08, "float8": 0.4}
# The layers Keras quantizes (its convolutions and norms stay float).
QUANTIZED_TYPES = (keras.layers.Dense, keras.layers.EinsumDense)
# The family whose quantized model is exported, per mode. The export of a
# quantized model depends on the family only through which layers are
# quantized: these hold the most kinds (the MAP head's probe attention
# beside the blocks' projections; the distillation head). An exported
# family's case of its mode runs in every backend's job
# (tests/test_model_contract.py): the export routes are the backends'.
# float8 is exported from DeiT: one e4m3 step is an eighth of a value, and
# SigLIP's float8 logits sit close enough to the grid's boundaries that the
# runtime's last bits (beside XLA's unfused emitters in the jax job) move
# them by a step.
QUANTIZED_EXPORT = {"int8": "siglip", "float8": "deit"}
# The modes `run_model_test` checks on every family. float8's difference
# from int8 is Keras' own (its layers' float8 kernels and scales, held on
# every backend by `QUANTIZED_EXPORT["float8"]`'s case); which layers a
# family quantizes, and how their variables save, are the family's whatever
# the backend.
CONTRACT_MODES = ("int8",)


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


def assert_same_variables(model, other):
    """Every variable of `other` bit-equal to `model`'s, path by path (a layer
    quantized in place and one built quantized order theirs differently)."""
    mine = {v.path: v for v in model.variables}
    theirs = {v.path: v for v in other.variables}
    assert sorted(theirs) == sorted(mine)
    for path, variable in mine.items():
        np.testing.assert_array_equal(_numpy(theirs[path]), _numpy(variable), err_msg=path)


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


def check_keras_file(model, x, outputs, folder):
    """A `.keras` file (`safe_mode` on) reloads the model with the same config
    and, for `x`, bit-equal `outputs` (or, with `outputs=None`, bit-equal
    variables: the same config and variables give the same outputs).

    Returns:
        The reloaded model.
    """
    path = os.path.join(folder, f"{model.name}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model) and loaded.get_config() == model.get_config()
    if outputs is None:
        assert_same_variables(model, loaded)
    else:
        np.testing.assert_array_equal(outputs_of(loaded, x), outputs)
    return loaded


def check_channels_first(family, model, x, outputs, **options):
    """With Keras' global image format channels-first, the family builds and
    gives the same outputs for the same NHWC images and weights: keras_vit's
    models are channels-last whatever the global setting (keras-hub's
    backbones instead take a `data_format` that follows it)."""
    keras.config.set_image_data_format("channels_first")
    try:
        other = make_model(family, seed=None, **options)
    finally:
        keras.config.set_image_data_format("channels_last")
    other.set_weights(model.get_weights())
    np.testing.assert_allclose(outputs_of(other, x), outputs, rtol=1e-6, atol=1e-6)


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


def _build_under(family, policy, how, **options):
    if how == "argument":
        return make_model(family, seed=None, dtype=policy, **options)
    keras.config.set_dtype_policy(policy)
    try:
        return make_model(family, seed=None, **options)
    finally:
        keras.config.set_dtype_policy("float32")


def _check_policies(model, policy):
    wanted = keras.DTypePolicy(policy)
    assert model.dtype_policy.name == policy, model.dtype_policy.name
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, keras.layers.InputLayer):
            continue
        if layer.name == "predictions":
            assert layer.compute_dtype == "float32"
            continue
        assert (layer.compute_dtype, layer.variable_dtype) == (wanted.compute_dtype, wanted.variable_dtype), layer.name
    for variable in model.weights:
        assert keras.backend.standardize_dtype(variable.dtype) == wanted.variable_dtype, variable.path


def _softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def check_precision(family, weights, x, logits, **options):
    """The family under each policy of `PRECISION_POLICIES`, as `dtype=` and as the global policy.

    - the model's own policy is the policy (so `compile` wraps the optimizer
      in a `LossScaleOptimizer` for mixed_float16, and only then), and so is
      the policy of every layer but one: the classifier's activation (layer
      `predictions`) computes in float32 by design, so that probabilities
      come out in float32 whatever the policy, as in keras.applications
      (keras-hub's `run_precision_test` expects every layer and output in
      the compute dtype);
    - the variables are in the policy's variable dtype;
    - the config rebuilds the model under the same policy whatever the
      global one;
    - under the policies of `PRECISION_ATOL`, the probabilities, float32,
      are close to the softmax of the float32 model's `logits` with the
      same `weights` (`dtype=` and the global policy build the same layers:
      once), for a model with its classifier.

    Args:
        family: a key of `tests.families.FAMILIES`.
        weights: the float32 model's weights (`get_weights()`).
        x: images; `logits`: the float32 model's outputs for them.
        **options: constructor arguments over the family's.
    """
    head = options.get("include_top", True)
    if head:
        options = dict(options, classifier_activation="softmax")
    for policy in PRECISION_POLICIES:
        for how in ("global", "argument"):
            model = _build_under(family, policy, how, **options)
            _check_policies(model, policy)
            model.compile(optimizer=keras.optimizers.SGD(0.01), loss="sparse_categorical_crossentropy")
            scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
            assert scaled == (policy == "mixed_float16"), (how, type(model.optimizer).__name__)
            if how == "global":  # rebuilt under float32: the config holds the policy
                again = type(model).from_config(model.get_config())
                assert again.dtype_policy.name == policy, (how, again.dtype_policy.name)
                assert again.get_layer("encoderblock_0").compute_dtype == keras.DTypePolicy(policy).compute_dtype
        if policy in PRECISION_ATOL and head:
            model.set_weights(weights)
            outputs = outputs_of(model, x)
            assert outputs.dtype == "float32"
            np.testing.assert_allclose(outputs, _softmax(logits), atol=PRECISION_ATOL[policy], err_msg=policy)


def quantized_layers(model):
    """`{layer path: quantization mode}` of the layers Keras quantizes."""
    return {
        layer.path: layer.quantization_mode
        for layer in model._flatten_layers(include_self=False)
        if isinstance(layer, QUANTIZED_TYPES)
    }


def _check_exported(outputs, expected):
    # The runtime's fused float ops differ from Keras' by ~1e-7 ahead of each
    # rounding to the quantized grid; where a value sits on a boundary, one
    # step flips and moves that image's logits by ~1 %. Where XLA compiles
    # with its older element-wise emitters (the jax test job's choice,
    # tools/run_tests.py), its last bits differ from the runtime's often
    # enough that any image may take a step.
    per_image = np.abs(outputs - expected).max(-1)
    assert (per_image <= 0.03 * np.abs(expected).max(-1)).all(), per_image
    if "xla_cpu_use_fusion_emitters=false" not in os.environ.get("XLA_FLAGS", ""):
        assert (per_image > 1e-4).sum() <= 1, per_image


def quantize(model, mode):
    """`model.quantize(mode)`, without Keras' garbage collections.

    Keras runs a full collection each time a layer drops a variable; in a
    test process holding many models each takes up to a second, for tiny
    models whose memory does not matter.
    """
    with mock.patch.object(gc, "collect"):
        model.quantize(mode)


def check_quantization(family, model, mode, x, logits, folder):
    """`model.quantize(mode)` in place, then predict, config, `.keras` file, preset and export.

    - every Dense and EinsumDense layer is quantized and nothing else (Keras
      leaves the convolutions of hybrids and the norms float), and the
      outputs move, but not far;
    - a `.keras` file reloads the quantized model (bit-equal outputs for
      int8, bit-equal variables for float8);
    - the config holds each quantized layer's policy (a `DTypePolicyMap`)
      and rebuilds the layers quantized;
    - a preset (`save_to_preset`, `keras_vit.from_preset`) reloads it with
      bit-equal variables;
    - for the family of `QUANTIZED_EXPORT[mode]`, the quantized model
      exports with `predict`'s outputs.

    Args:
        family: the key of `tests.families.FAMILIES` the float32 `model` is of.
        mode: "int8" or "float8".
        x: images; `logits`: the float32 model's outputs for them.
        folder: where to write the files.
    """
    quantize(model, mode)
    layers = quantized_layers(model)
    assert layers and set(layers.values()) == {mode}, layers
    others = [layer.path for layer in model._flatten_layers() if layer.quantization_mode and layer.path not in layers]
    assert not others, others
    outputs = outputs_of(model, x)
    error = np.linalg.norm(outputs - logits) / np.linalg.norm(logits)
    assert 0 < error < QUANTIZATION_ERROR[mode], (mode, error)
    loaded = check_keras_file(model, x, outputs if mode == "int8" else None, folder)
    assert quantized_layers(loaded) == layers
    policy = keras.dtype_policies.deserialize(model.get_config()["dtype"])
    assert isinstance(policy, keras.dtype_policies.DTypePolicyMap) and set(policy) == set(layers), policy
    assert quantized_layers(check_config(model)) == layers
    preset = os.path.join(folder, f"preset_{mode}")
    model.save_to_preset(preset)
    again = keras_vit.from_preset(preset)
    assert again.get_config() == model.get_config() and quantized_layers(again) == layers
    assert_same_variables(model, again)
    if QUANTIZED_EXPORT[mode] == family:
        _check_exported(*check_export(model, x, folder, atol=None, quantized=True))


def run_model_test(family, **options):
    """Every check of the contract on one family, sharing its model and outputs.

    Args:
        family: a key of `tests.families.FAMILIES`.
        **options: constructor arguments over the family's (e.g.
            `include_top=False`).
    """
    model = make_model(family, **options)
    x = images(3)
    logits = outputs_of(model, x)
    assert logits.shape == (len(x),) + tuple(model.output.shape[1:]) and np.isfinite(logits).all()
    check_config(model)
    if FAMILIES[family].reference:
        np.testing.assert_allclose(logits, reference_outputs(model, x), rtol=0, atol=REFERENCE_ATOL)
    check_channels_first(family, model, x, logits, **options)
    weights = model.get_weights()
    with tempfile.TemporaryDirectory() as folder:
        check_keras_file(model, x, logits, folder)
        check_export(model, x, folder)
        check_precision(family, weights, x, logits, **options)
        for i, mode in enumerate(CONTRACT_MODES):
            if i:  # a float model again, with the same weights
                model = make_model(family, seed=None, **options)
                model.set_weights(weights)
            check_quantization(family, model, mode, x, logits, folder)


def run_quantization_test(family, mode, **options):
    """`check_quantization` of one family in one mode, on a model of its own.

    Args:
        family: a key of `tests.families.FAMILIES`.
        mode: a key of `QUANTIZATION_ERROR`.
        **options: constructor arguments over the family's.
    """
    model = make_model(family, **options)
    x = images(3)
    logits = outputs_of(model, x)
    with tempfile.TemporaryDirectory() as folder:
        check_quantization(family, model, mode, x, logits, folder)
