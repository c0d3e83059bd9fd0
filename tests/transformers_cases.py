"""transformers vision models as test data: one `Case` per class keras_vit reads.

A case says how to make the class tiny and at random, and which of its
outputs a keras_vit model built by `from_preset` must reproduce: the pooled
output (`pooler_output`, `image_embeds`, or none) and `last_hidden_state`
(keras_vit's `forward_features`, or the tokens after the final norm where
transformers returns those). A new transformers family is tested by adding
its cases to a test module's table; `make`, `reference` and `keras_outputs`
do the rest.
"""

import dataclasses
from typing import Callable, Optional

import keras
import numpy as np

from conftest import inference
from hub_dirs import randomise_torch


@dataclasses.dataclass(frozen=True)
class Case:
    """A transformers class made tiny, and how its outputs compare with keras_vit's.

    Attributes:
        config: `() -> config`, the transformers config of a tiny model.
        pooled: the output field the keras_vit model's output equals
            ("pooler_output", "image_embeds"), or None (the model returns
            the tokens).
        tokens: where keras_vit holds `last_hidden_state`: "features"
            (`forward_features`) or "final_norm" (the `encoder_norm` layer's
            output, for classes whose last hidden state is after it).
        prepare: `(torch model) -> restore`, run before the weights are
            randomised, for a tensor that is not a learned weight: it fills
            the tensor and returns a function that puts it back after.
        inputs: `(x) -> {keyword: tensor}`, more inputs of the forward pass.
        attributes: `{attribute: value}` the keras_vit model must have.
    """

    config: Callable
    pooled: Optional[str] = "pooler_output"
    tokens: str = "features"
    prepare: Optional[Callable] = None
    inputs: Optional[Callable] = None
    attributes: dict = dataclasses.field(default_factory=dict)


def make(transformers, name, case, seed):
    """The class `name` of `case`, every tensor moved off its initial value, in eval mode."""
    model = getattr(transformers, name)(case.config())
    kept = case.prepare(model) if case.prepare else None
    randomise_torch(model, seed)
    if kept is not None:
        kept()
    return model.eval()


def reference(model, case, x, **kwargs):
    """`(pooled output or None, last_hidden_state)` of a transformers model for NHWC `x`."""
    import torch

    extra = case.inputs(x) if case.inputs else {}
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), **extra, **kwargs)
    pooled = None if case.pooled is None else getattr(out, case.pooled).numpy()
    return pooled, out.last_hidden_state.numpy()


def keras_outputs(model, case, x):
    """`(pooled output or None, tokens)` of a keras_vit model, as `reference` gives them."""
    def call(x):
        if case.tokens == "final_norm":
            tokens = keras.Model(model.input, model.get_layer("encoder_norm").output)(x)
        else:
            tokens = model.forward_features(x) if case.pooled is not None else model(x)
        return tokens if case.pooled is None else (model(x), tokens)

    out = inference(call, x)
    return (None, out) if case.pooled is None else out


def assert_outputs_equal(ours, theirs, atol=1e-4):
    """Both `(pooled, tokens)` pairs equal within `atol` (pooled None on both sides or neither)."""
    assert (ours[0] is None) == (theirs[0] is None)
    if ours[0] is not None:
        np.testing.assert_allclose(ours[0], theirs[0], rtol=0, atol=atol)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=0, atol=atol)


def keep_mae_table(model):
    """Fills ViTMAE's fixed sin-cos table (a model built on the CPU may skip
    transformers' initialisation, leaving zeros) and returns what puts it
    back after the weights are randomised."""
    import torch

    model.embeddings.patch_embeddings.projection._is_hf_initialized = False
    model.embeddings.initialize_weights()
    table = model.embeddings.position_embeddings.detach().clone()
    assert float(table[0, 1:].abs().max()) > 0.5  # the sin-cos table, not zeros

    def restore():
        with torch.no_grad():
            model.embeddings.position_embeddings.copy_(table)

    return restore


def mae_noise(x):
    """Ascending noise: ViTMAE keeps every patch in order (with `mask_ratio=0`)."""
    import torch

    patches = 16  # the tiny cases' 4x4 grid
    return {"noise": torch.arange(patches, dtype=torch.float32).expand(len(x), patches)}
