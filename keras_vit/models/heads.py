"""The head of a `keras_vit.ViT`: its pooling layer, image-text
projection, pre-logits layer, classifier(s) and activation, made from the model's arguments.

`keras_vit.models.forward.build_stages` calls `head_layers` while the model
is built; `forward.head` runs them.

Example:

>>> import keras_vit
>>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1, num_heads=2,
...                       mlp_dim=8, classifier="attention_pool", classes=3)
>>> layers = head_layers(model, None)
>>> sorted(layers), type(layers["pool"]).__name__
(['head', 'pool', 'predictions'], 'AttentionPoolHead')
"""

import keras

from keras_vit.layers import TokenPooling
from keras_vit.layers.attention_pool import AttentionPoolHead
from keras_vit.layers.config import qkv_biases
from keras_vit.layers.map_head import MapHead


def _pool(model, mode, dtype):
    if mode == "attention_pool":  # AIMv2's: a learned query, no norm or MLP
        _, key, value = qkv_biases(model.block_config.qkv_bias)
        if key != value:
            raise ValueError(
                f"The attention-pool head has the blocks' key and value biases, which must agree. "
                f"Received: pooling={mode!r}, qkv_bias={model.block_config.qkv_bias!r}"
            )
        return AttentionPoolHead(model.num_heads, qkv_bias=key, name="pool", dtype=dtype)
    if mode == "map":  # SigLIP's attention pooling, with the blocks' activation
        encoder = model.encoder_config
        return MapHead(
            encoder.map_num_heads or model.num_heads, encoder.map_mlp_dim or model.mlp_dim,
            model.layer_norm_epsilon,
            model.block_config.mlp_activation, norm_kind=model.block_config.norm_kind,
            name="pool", dtype=dtype,
        )
    return TokenPooling(mode, model.num_prefix_tokens, name="pool", dtype=dtype)


def _embedding_layers(model, dtype):
    """The projection and unit-length scaling of the pooled features (image-text models)."""
    layers = {}
    if model.projection_dim is not None:
        layers["projection"] = keras.layers.Dense(
            model.projection_dim, use_bias=False, name="projection", dtype=dtype
        )
    if model.l2_normalize:
        layers["l2_normalize"] = keras.layers.UnitNormalization(name="l2_normalize", dtype=dtype)
    return layers


def head_layers(model, dtype):
    """`{name: layer}` of the head of `model` (a `ViT` being constructed):
    pooling, image-text projection, pre-logits, classifier(s) and activation,
    as its arguments say."""
    layers = {}
    if not model.include_top:
        if model.pooling is not None:
            layers["pool"] = _pool(model, model.pooling, dtype)
            layers.update(_embedding_layers(model, dtype))
        return layers
    # "gap" is the "avg" pooling; the other classifiers pool as they are named.
    layers["pool"] = _pool(model, {"gap": "avg"}.get(model.classifier, model.classifier), dtype)
    layers.update(_embedding_layers(model, dtype))
    if model.representation_size is not None:
        layers["pre_logits"] = keras.layers.Dense(
            model.representation_size, activation="tanh", name="pre_logits", dtype=dtype
        )
    # The official head is zero-initialised (also for fine-tuning).
    dense = dict(kernel_initializer="zeros", dtype=dtype)
    layers["head"] = keras.layers.Dense(model.classes, name="head", **dense)
    if model.distillation_head:
        layers["pool_dist"] = TokenPooling(
            "distillation", model.num_prefix_tokens, name="pool_dist", dtype=dtype
        )
        layers["head_dist"] = keras.layers.Dense(model.classes, name="head_dist", **dense)
        layers["head_average"] = keras.layers.Average(name="head_average", dtype=dtype)
    if model.classifier_activation is not None:
        layers["predictions"] = keras.layers.Activation(
            model.classifier_activation, name="predictions", dtype="float32"
        )
    return layers
