"""The registry of test model families: one tiny configuration each, one builder.

Every model-level test takes its models from `FAMILIES` through
`make_model`, and `tests/test_model_contract.py` runs the model contract,
the precision and quantization checks and keras-hub's backbone harness on
every entry: a new family is tested by adding one entry here.

Each entry is a tiny model (32 px images, width 16, 1-2 blocks) with the
options that make a checkpoint family what it is, so each check takes
milliseconds to a few seconds per backend.
"""

import dataclasses

import numpy as np

import keras_vit
import reference
import reference_resnet
from conftest import TINY
from keras_vit.weights.mapping import model_state


@dataclasses.dataclass(frozen=True)
class Family:
    """A test family.

    Attributes:
        config: the constructor arguments (over `TINY`).
        hybrid: bool, a `ViTHybrid` (else a `ViT`).
        reference: bool, whether `tests/reference.py` computes the forward
            pass (its NumPy ViT has no MAP head, SwiGLU MLP, sin-cos
            position embedding or query/key norm: those are tested against
            transformers and NumPy in their own files).
    """

    config: dict
    hybrid: bool = False
    reference: bool = True

    @property
    def model_class(self):
        return keras_vit.ViTHybrid if self.hybrid else keras_vit.ViT

    def arguments(self, **overrides):
        """The constructor arguments: `TINY`, the family's, then `overrides`."""
        base = dict(TINY, classes=10, classifier_activation=None)
        return {**base, **self.config, **overrides}


FAMILIES = {
    # The paper's ViT: class token, learned position embedding, tanh GELU.
    "vit": Family({}),
    # DeiT: a distillation token with its own head, the exact erf GELU.
    "deit": Family(dict(distillation_token=True, mlp_activation="gelu")),
    # timm's register models: no class token, the mean of the patch tokens
    # (registers excluded) normed alone, LayerScale, no q/k/v bias.
    "registers": Family(
        dict(classifier="gap", num_register_tokens=2, pooled_norm=True, layer_scale_init=0.1, qkv_bias=False)
    ),
    # Every option of the token prefix at once: class, distillation and
    # register tokens, with LayerScale and no q/k/v bias.
    "options": Family(
        dict(distillation_token=True, num_register_tokens=2, layer_scale_init=0.1, qkv_bias=False)
    ),
    # R+ViT: a one-stage ResNet (stride 4) and 2x2 patches, a 4x4 grid.
    "hybrid": Family(dict(patch_size=2, num_layers=1, resnet_layers=(1,), resnet_width=0.5), hybrid=True),
    # DINOv2: SwiGLU MLP, LayerScale, a register token, the class token and
    # the patch mean concatenated for the classifier.
    "dinov2": Family(
        dict(mlp_kind="swiglu", layer_scale_init=0.1, num_register_tokens=1, classifier="token_avg"),
        reference=False,
    ),
    # SigLIP: no class token, attention pooling by a learned probe (MAP head).
    "siglip": Family(dict(classifier="map"), reference=False),
    # OpenAI CLIP: patch embedding without bias, a LayerNorm before the
    # blocks, quick GELU.
    "clip": Family(dict(pre_norm=True, patch_bias=False, mlp_activation="quick_gelu")),
    # MAE: fixed 2D sin-cos position embedding, mean pooling normed alone.
    "mae": Family(dict(position_embedding="sincos", classifier="gap", pooled_norm=True), reference=False),
    # ViT-22B: LayerNorm of queries and keys, no q/k/v bias.
    "vit22b": Family(dict(qk_norm=True, qkv_bias=False), reference=False),
}


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


def make_model(family, seed=0, **overrides):
    """A model of `family` with random weights (`randomize(model, seed)`).

    Args:
        family: a key of `FAMILIES`.
        seed: int, the seed of the weights' noise; None keeps the
            initialisers' weights.
        **overrides: constructor arguments over the family's.
    """
    entry = FAMILIES[family]
    model = entry.model_class(**entry.arguments(**overrides))
    return model if seed is None else randomize(model, seed)


def images(batch=2, size=32, seed=1):
    """`(batch, size, size, 3)` float32 images in [-1, 1]."""
    return np.random.default_rng(seed).uniform(-1, 1, (batch, size, size, 3)).astype("float32")


def reference_outputs(model, x):
    """The outputs of `tests/reference.py`'s NumPy forward pass for `model`'s weights."""
    stem = reference_resnet.stem(model.resnet_layers) if hasattr(model, "resnet_layers") else None
    return reference.forward(
        model_state(model), x, model.mlp_activation, model.layer_norm_epsilon, stem=stem
    )
