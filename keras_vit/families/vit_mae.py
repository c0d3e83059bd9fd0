"""ViT-MAE (encoder): the family's checkpoints in every layout keras_vit reads (transformers).

transformers MAE encoders (`ViTMAEModel`) -> the canonical layout.

Facts about the files (`save_pretrained`; `model_type` "vit_mae"):

- `config.json`: ViT's fields (`hidden_size`, `num_hidden_layers`,
  `num_attention_heads`, `intermediate_size`, `hidden_act`,
  `layer_norm_eps`, `image_size`, `patch_size`, `num_channels`,
  `qkv_bias`) and `mask_ratio` (random masking at every forward pass:
  keras_vit encodes every patch, as transformers does with `mask_ratio=0`
  and patches kept in order);
- tensors: ViT's names at the root; `embeddings.position_embeddings`
  `(1, 1 + N, D)` is MAE's fixed 2D sin-cos table (a zero class row first),
  not learned: keras_vit computes the same table (`position_embedding=
  "sincos"`), so the stored one is ignored. `last_hidden_state` is the
  tokens after the final `layernorm`; the model has no pooled output, so
  the keras_vit model returns those tokens.

Written back (`save_to_preset(format="transformers")`): a model with MAE's
fixed sin-cos position embedding (`position_embedding="sincos"`), a class
token and no pooling, as `ViTMAEModel`, the encoder alone:

- the table is written as transformers holds it (computed here, zero class
  row first), since transformers stores it among the weights;
- `mask_ratio` is written as 0: the written model encodes every patch, as
  keras_vit does (transformers still shuffles the patch order unless
  `noise` is given; ascending noise keeps it);
- no decoder: keras_vit holds none. `ViTMAEModel` has no decoder either, so
  it loads with no missing key; the decoder fields of the config keep
  transformers' defaults, and `ViTMAEForPreTraining` would start its decoder
  (and mask token) from a random initialisation.
"""

import numpy as np
from keras import ops

from keras_vit.families.vit import BLOCKS, CLASS_AND_PATCHES, FINAL_NORM
from keras_vit.layers.sincos import sincos_position_embedding
from keras_vit.weights.formats.transformers_family import (
    VIT_FIELDS,
    TransformersClass,
    TowerFamily,
    check_structure,
    square,
)

POSITION_KEY = "embeddings.position_embeddings"


class TransformersViTMAE(TowerFamily):
    """transformers' MAE encoder (`ViTMAEModel`).

    Example:

    >>> args = TransformersViTMAE().model_arguments({"model_type": "vit_mae", "hidden_size": 768,
    ...     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072})
    >>> args["position_embedding"], args["pooling"], args["mlp_activation"]
    ('sincos', None, 'gelu')
    """

    NAME = "ViTMAE model"
    MODEL_TYPES = ("vit_mae",)
    TRANSFORMERS_CLASSES = {"ViTMAEModel": TransformersClass("vit_mae")}
    DEFAULTS = dict(image_size=224, patch_size=16, num_channels=3, hidden_act="gelu", layer_norm_eps=1e-12,
                    qkv_bias=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    FIELDS = VIT_FIELDS
    # ViT's names; the position table is not read.
    BODY = (*CLASS_AND_PATCHES, *BLOCKS, *FINAL_NORM)
    IGNORED = {POSITION_KEY: "MAE's fixed sin-cos table, which keras_vit computes"}
    STRUCTURE = dict(
        TowerFamily.STRUCTURE,
        include_top=(False, "has no classifier head: build it with include_top=False, pooling=None"),
        pooling=(None, "returns the tokens (last_hidden_state) and has no pooled output: it needs pooling=None"),
        class_token=(True, "has a class token"),
        pooled_norm=(False, "normalises every token (layernorm)"),
    )
    EXPORTED_OPTIONS = dict(
        TowerFamily.EXPORTED_OPTIONS,
        qkv_bias=(True, False),
        position_embedding=("sincos",),
        class_token=(None, True),
        # A fixed table is computed for each grid: no interpolation applies.
        position_interpolation=None,
    )

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a ViTMAE `config.json` dict."""
        self.transformers_class(config)
        config = self.vision_config(config)
        return dict(
            self.encoder_arguments(config),
            position_embedding="sincos",
            classifier="token",
            # No pooled output: the model returns last_hidden_state.
            include_top=False,
            pooling=None,
        )

    def export_class(self, config):
        """"ViTMAEModel" for a model config with a fixed sin-cos position
        embedding, else None.

        Raises:
            ValueError: for a sin-cos model ViTMAEModel cannot hold (a head, a
                pooled output, no class token, a norm after pooling).

        Example:

        >>> TransformersViTMAE().export_class({"position_embedding": "sincos", "include_top": False})
        'ViTMAEModel'
        """
        embedding = config.get("position_embedding")
        if not (isinstance(embedding, str) and embedding.startswith("sincos")):
            return None
        hf_class = "ViTMAEModel"
        check_structure(config, hf_class, self.STRUCTURE)
        return hf_class

    def export_config(self, config, hf_class, class_names=None):
        """The shared fields, with `mask_ratio` 0: every patch encoded, as keras_vit does."""
        return dict(super().export_config(config, hf_class, class_names), mask_ratio=0.0)

    def export_state(self, params, hf_class, config):
        """The state dict, with what transformers stores and keras_vit computes:
        MAE's sin-cos table `(1, 1 + N, D)` for the model's patch grid, zero class row first."""
        state = super().export_state(params, hf_class, config)
        size, patch = square(config, hf_class)
        table = sincos_position_embedding((size // patch, size // patch), config["hidden_size"], style="mae")
        state[POSITION_KEY] = np.asarray(ops.convert_to_numpy(table), "float32")
        return state
