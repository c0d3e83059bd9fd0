"""The registry of test model families: one tiny configuration each, one builder.

Model-level tests take their models from `FAMILIES` through `make_model`,
and `tests/test_model_contract.py` runs the model contract
(`tests/model_contract.py`: build, config, `.keras` file, NumPy reference,
channels-first Keras, export; precision; quantization) on every entry. A new
family is tested by adding one entry:

    "name": Family(config, hybrid=False, reference=True),

- `config`: the constructor arguments that make the family what it is,
  over `BASE`: `TINY` (32 px images, patch 8, width 16, 2 heads) with one
  block, `classes=10` and no classifier activation;
- `hybrid`: True for a `ViTHybrid` (a ResNet stem before the patches),
  else a `ViT`;
- `reference`: whether `tests/reference.py`'s NumPy ViT computes the
  forward pass (it has no MAP or attention-pool head, SwiGLU MLP, sin-cos
  or rotary position embedding, query/key norm or RMSNorm: their numerics
  are tested against transformers, timm's layouts and NumPy in their own
  files).

Each entry is tiny, so that every check takes a fraction of a second to a
few seconds per backend.
"""

import dataclasses

import numpy as np

import keras_vit
import reference
import reference_resnet
from conftest import TINY
from keras_vit.weights.mapping import model_state

# What every family starts from. One block: what a second would add (tokens
# passed from block to block) the model tests check on `TINY` itself, and
# it costs a third of the contract's time.
BASE = dict(TINY, num_layers=1, classes=10, classifier_activation=None)


@dataclasses.dataclass(frozen=True)
class Family:
    """A test family: a tiny model of one checkpoint family.

    Attributes:
        config: dict, the constructor arguments over `BASE`.
        hybrid: bool, a `ViTHybrid` (else a `ViT`).
        reference: bool, whether `tests/reference.py` computes the forward pass.
    """

    config: dict
    hybrid: bool = False
    reference: bool = True

    @property
    def model_class(self):
        return keras_vit.ViTHybrid if self.hybrid else keras_vit.ViT

    def arguments(self, **overrides):
        """The constructor arguments: `BASE`, the family's, then `overrides`."""
        return {**BASE, **self.config, **overrides}


FAMILIES = {
    # The paper's ViT: class token, learned position embedding, tanh GELU.
    "vit": Family({}),
    # DeiT: a distillation token with its own head, the exact erf GELU.
    "deit": Family(dict(distillation_token=True, mlp_activation="gelu")),
    # R+ViT: the ResNet stem alone (stride 4; the stages' units pass the layer
    # contract), 2x2 patches: a 4x4 grid.
    "hybrid": Family(dict(patch_size=2, resnet_layers=(), resnet_width=0.5), hybrid=True),
    # DINOv2: SwiGLU MLP, LayerScale, a register token (left out of the
    # mean), the class token and the patch mean concatenated for the head.
    "dinov2": Family(
        dict(mlp_kind="swiglu", layer_scale_init=0.1, num_register_tokens=1, classifier="token_avg"),
        reference=False,
    ),
    # SigLIP: no class token, attention pooling by a learned probe (MAP head).
    "siglip": Family(dict(classifier="map"), reference=False),
    # OpenAI CLIP: patch embedding without bias, a norm before the blocks,
    # quick GELU.
    "clip": Family(dict(pre_norm=True, patch_bias=False, mlp_activation="quick_gelu")),
    # MAE: fixed 2D sin-cos position embedding, the patch mean normed alone.
    "mae": Family(dict(position_embedding="sincos", classifier="gap", pooled_norm=True), reference=False),
    # ViT-22B: a norm of the queries and keys, no q/k/v bias.
    "vit22b": Family(dict(qk_norm=True, qkv_bias=False), reference=False),
    # AIMv2: RMSNorm everywhere (the patch embeddings too), SwiGLU MLP, no
    # projection biases, sin-cos position embedding, attention-pool head.
    "aimv2": Family(
        dict(norm_kind="rmsnorm", mlp_kind="swiglu", qkv_bias=False, attention_out_bias=False, mlp_bias=False,
             patch_norm=True, position_embedding="sincos", classifier="attention_pool"),
        reference=False,
    ),
    # DINOv3: rotary position embedding and no position table, register
    # tokens, no key bias, LayerScale.
    "dinov3": Family(
        dict(rope="dinov3", position_embedding="none", num_register_tokens=2, qkv_bias=(True, False, True),
             layer_scale_init=0.1),
        reference=False,
    ),
    # EVA02: rotary position embedding beside a position table, SwiGLU MLP
    # with a norm inside, a norm before the attention's output projection,
    # mean pooling.
    "eva02": Family(
        dict(rope="eva02", rope_settings={"reference_grid": (4, 4)}, mlp_kind="swiglu", mlp_norm=True,
             attention_out_norm=True, qkv_bias=(True, False, True), classifier="gap"),
        reference=False,
    ),
    # SAM's image encoder (ViTDet): no class token, a windowed block and a
    # global one with decomposed relative positions, the convolutional neck
    # in place of the final norm, the neck's mean pooled.
    "sam": Family(
        dict(classifier="gap", num_layers=2, window_size=3, global_attention_blocks=(1,),
             relative_position="decomposed", neck_channels=8, mlp_activation="gelu"),
        reference=False,
    ),
}

# The options of later checkpoints (register tokens, LayerScale, no q/k/v
# bias), which tests that run every option of the token prefix at once add
# to "deit": `make_model("deit", **OPTIONS)`.
OPTIONS = dict(num_register_tokens=2, layer_scale_init=0.1, qkv_bias=False)


def randomize(model, seed=0, scale=0.2):
    """Adds normal noise to every weight, in place.

    The heads, tokens and LayerScale start at zero and the norms at one:
    noise on every weight makes each of them count in the outputs.

    Returns:
        The model.
    """
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        noise = rng.normal(0, scale, variable.shape)
        variable.assign((np.asarray(variable) + noise).astype(variable.dtype))
    return model


def make_model(family, seed=0, scale=0.2, **overrides):
    """A model of `family` with random weights (`randomize(model, seed, scale)`).

    Args:
        family: a key of `FAMILIES`.
        seed: int, the seed of the weights' noise; None keeps the
            initialisers' weights.
        scale: float, the standard deviation of the noise.
        **overrides: constructor arguments over the family's.
    """
    entry = FAMILIES[family]
    model = entry.model_class(**entry.arguments(**overrides))
    return model if seed is None else randomize(model, seed, scale)


def images(batch=2, size=32, seed=1):
    """`(batch, size, size, 3)` float32 images in [-1, 1]."""
    return np.random.default_rng(seed).uniform(-1, 1, (batch, size, size, 3)).astype("float32")


def reference_outputs(model, x):
    """The outputs of `tests/reference.py`'s NumPy forward pass for `model`'s weights."""
    stem = reference_resnet.stem(model.resnet_layers) if hasattr(model, "resnet_layers") else None
    return reference.forward(model_state(model), x, model.mlp_activation, model.layer_norm_epsilon, stem=stem)
