"""The model's own dtype policy: mixed precision and quantization.

A functional `keras.Model` drops the `dtype` its constructor is given, so a
model built with `dtype="mixed_float16"` would keep a float32 policy of its
own while its layers compute in float16; `compile` reads the model's policy
to decide whether to wrap the optimizer in `keras.optimizers.LossScaleOptimizer`.
`set_model_policy` gives the model the policy its layers were built with.

A model quantized in place (`model.quantize("int8")`) holds layers whose
policies differ from the model's. `model_policy_config` serialises them all
as one `keras.dtype_policies.DTypePolicyMap` (keyed by layer path) for the
model's config. A model built from such a map passes it to its layers, as
keras-hub's backbones do, so that each layer looks up its own policy by
path and builds its variables quantized, ready for the saved ones (`.keras`
files and presets), without quantizing float kernels first. Once the
model is built, `set_model_policy` gives each layer its own policy in place
of the map: Keras' layers read `dtype_policy.quantization_mode` when they
save their variables and when they are quantized, which a map answers with
its default's.

Example:

>>> import keras, keras_vit
>>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
...                       num_layers=1, num_heads=2, mlp_dim=8, classes=2,
...                       dtype="mixed_bfloat16")
>>> model.dtype_policy.name
'mixed_bfloat16'
>>> model.quantize("int8")
>>> policy = model_policy_config(model)
>>> policy.default_policy.name, policy["encoderblock_0/MlpBlock_3/Dense_0"].name
('mixed_bfloat16', 'int8_from_mixed_bfloat16')
>>> again = keras_vit.ViT.from_config(model.get_config())
>>> again.get_layer("head").quantization_mode, again.dtype_policy.name
('int8', 'mixed_bfloat16')
"""

import re

import keras

DTypePolicyMap = keras.dtype_policies.DTypePolicyMap


def set_model_policy(model, dtype):
    """Sets the policy of a model built by the functional constructor.

    With a `DTypePolicyMap`, every layer that holds the map gets its own
    policy from it instead, and the model takes the map's default.

    Args:
        model: a `keras.Model` whose layers were built with `dtype`.
        dtype: None (the model keeps the global policy Keras gave it), a
            policy name, a `keras.DTypePolicy` or a `DTypePolicyMap`.

    Raises:
        ValueError: a key of the map names no layer of the model.
    """
    if dtype is None:
        return
    if isinstance(dtype, DTypePolicyMap):
        layers = list(model._flatten_layers(include_self=False))
        paths = [layer.path for layer in layers if layer.path]
        unknown = [key for key in dtype if not any(key == p or re.fullmatch(key, p) for p in paths)]
        if unknown:
            raise ValueError(
                f"The `dtype` policy map names layers that model {model.name!r} does not "
                f"have. Received: dtype with keys {unknown}"
            )
        for layer in layers:
            # Keras' public setter would write into the map the layer holds.
            if isinstance(layer._dtype_policy, DTypePolicyMap):
                layer._dtype_policy = dtype[layer.path] if layer.path else dtype.default_policy
        dtype = dtype.default_policy
    model.dtype_policy = keras.dtype_policies.get(dtype)


def model_policy_config(model):
    """The policy that rebuilds `model` as it is: its own, or a map with its quantized layers.

    Args:
        model: a `keras.Model`.

    Returns:
        `model.dtype_policy` when no layer is quantized, else a
        `DTypePolicyMap` with the model's policy as default and one entry
        per quantized layer.
    """
    policy = model.dtype_policy
    quantized = {
        layer.path: layer.dtype_policy
        for layer in model._flatten_layers(include_self=False)
        if layer.quantization_mode is not None
    }
    if not quantized:
        return policy
    return DTypePolicyMap(default_policy=policy, policy_map=quantized)


def with_policy(config):
    """A copy of a model's config whose serialised `dtype` is a policy
    again, for the model's constructor."""
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
        config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return config
