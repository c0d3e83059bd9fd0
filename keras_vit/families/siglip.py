"""SigLIP and SigLIP 2 (vision tower): the family's checkpoints in every layout keras_vit reads (transformers, keras-hub).

transformers SigLIP vision towers (`SiglipVisionModel`) -> the canonical layout.

Facts about the files (`save_pretrained`; `model_type` "siglip_vision_model"):

- `config.json`: `hidden_size`, `intermediate_size`, `num_hidden_layers`,
  `num_attention_heads`, `hidden_act` ("gelu_pytorch_tanh"),
  `layer_norm_eps`, `image_size`, `patch_size`, `num_channels`,
  `vision_use_head` (the attention-pool head; default true);
- tensors, at the root or under `vision_model.`: a patch convolution with
  bias, `embeddings.position_embedding.weight` `(N, D)` (no class token, no
  prefix row), CLIP's block names, `post_layernorm` on every token (the
  final norm: `last_hidden_state` is after it) and the MAP head `head.`:
  `probe` `(1, 1, D)`, one fused `attention.in_proj_weight` `(3D, D)` with
  its bias, `attention.out_proj`, `layernorm`, `mlp.fc1`/`mlp.fc2` (the
  blocks' width and activation). `pooler_output` is the head's output:
  keras_vit's `pooling="map"` (`MapHead`).
- A two-tower `SiglipModel` directory (`model_type` "siglip") holds the
  vision config under `vision_config` and the same vision tensors under
  `vision_model.`, beside the text tower (`text_model.`, `logit_scale`,
  `logit_bias`), which is ignored by name; `get_image_features` is the
  vision tower's `pooler_output` (SigLIP has no image projection).

Written back (`save_to_preset(format="transformers")`): a model that ends
in a MAP head without a class token, as `SiglipVisionModel` (with SigLIP2's
position resize, `TransformersSiglip2` writes it).

transformers SigLIP2 vision towers (`Siglip2VisionModel`, NaFlex) <->
the canonical layout, read and written.

Facts about the files (`save_pretrained`; `model_type`
"siglip2_vision_model"):

- `config.json`: SigLIP's keys (`hidden_size`, `intermediate_size`,
  `num_hidden_layers`, `num_attention_heads`, `hidden_act`,
  `layer_norm_eps`, `patch_size` (an int), `num_channels`,
  `vision_use_head`), no `image_size`, and `num_patches` (default 256): the
  rows of the position table, a square `sqrt(num_patches)` grid;
- tensors: SigLIP's (`TransformersSiglip`: CLIP's block names,
  `post_layernorm`, the MAP head `head.`), except the patch embedding: a
  `Linear` `(D, patch * patch * C)` over patches the processor flattens row,
  then column, then channel (`(p, p, C)` order), which is keras_vit's
  `(p, p, C, D)` convolution kernel reshaped; the position embedding
  `(num_patches, D)` has no prefix row;
- the model takes `pixel_values` `(B, N, C * p * p)`, `pixel_attention_mask`
  `(B, N)` and `spatial_shapes` `(B, 2)` (each image's patch grid), and
  resizes the square position table to each image's grid with
  `interpolate(mode="bilinear", antialias=True, align_corners=False)` in
  float32; the identity at the table's own grid.

keras_vit builds a model of `sqrt(num_patches) * patch_size` pixels a side,
`pooling="map"` (the output is `pooler_output`) and
`position_interpolation="siglip2"`. It takes NHWC images of any grid,
non-square included, as transformers does for that `spatial_shapes` (every
patch kept; `for_inference(image_size=...)` resizes the table once), and
NaFlex patch dicts (`keras_vit.preprocessing.naflex_inputs`, timm's form;
`keras_vit.models.patch_inputs`): transformers' padded batches, each image
on its own grid, `pixel_attention_mask` as `patch_valid`, its
`spatial_shapes` one more than each image's largest `patch_coords`.

Preprocessing: `Siglip2ImageProcessor` resizes each image, aspect ratio
kept, to the largest multiple of the patch size within `max_num_patches`
patches (bilinear), then scales to `(x / 255 - 0.5) / 0.5`; `naflex_inputs`
does the same for the patch dict. For NHWC images keras_vit records the
statistics and the filter: from `preprocessor_config.json` when there is
one (its `image_mean`/`image_std`/`resample`), otherwise mean and std 0.5,
bilinear.
The record holds the model's image size without a file, or when the file's
`max_num_patches` and `patch_size` are the model's grid (a square image
then fills that grid); with another patch budget, no size.
The patch channels are not in the tensor's shape, so only 3-channel towers
load.

A two-tower `Siglip2Model` directory (`model_type` "siglip2") holds the
vision config under `vision_config` and the same vision tensors under
`vision_model.`; its text tower, logit scale and bias are ignored here
(`transformers_image_text` reads them).

Written back (`save_to_preset(format="transformers")`): a model that ends in
a MAP head without a class token, with `position_interpolation="siglip2"`
(what tells it from a SigLIP one), a square grid and 3 channels, as
`Siglip2VisionModel` (`num_patches` the grid's patch count); its processor
file is `Siglip2ImageProcessor`'s with `max_num_patches` that count, so a
square image is resized to the model's size (another aspect ratio goes to
another grid within that many patches, as transformers' model takes it).
The record's statistics and filter travel; a resize before a centre crop
does not (the processor has neither).

keras-hub SigLIP presets (`keras_hub>SigLIPBackbone`, `keras_hub>SigLIPVisionEncoder`)
-> the canonical layout of the vision tower.

Facts about the files (`save_to_preset`):

- `config.json` of a `SigLIPBackbone`: `vision_encoder` and `text_encoder`,
  each a serialised layer (`registered_name` "keras_hub>SigLIPVisionEncoder"
  / "keras_hub>SigLIPTextEncoder") with its own `config`; a
  `SigLIPVisionEncoder` preset holds the vision one alone. Its keys:
  `patch_size`, `hidden_dim`, `num_layers`, `num_heads`,
  `intermediate_dim`, `intermediate_activation` ("gelu_approximate", the
  tanh GELU, or a Keras activation name), `layer_norm_epsilon` (the blocks'
  and the head's; the final norm's is always 1e-6), `image_shape` (fixed:
  keras-hub does not resize the position table).
- vision variables, under `<vision name>_`: `embedding/patch_embedding`
  (HWIO, with bias), `embedding/position_embedding/embeddings` `(N, D)` (no
  class token), the integer `embedding/position_ids`;
  `encoder_block_{i}/` with `layer_norm1`, `self_attn` (a Keras
  `MultiHeadAttention`), `layer_norm2`, `mlp/fc1`, `mlp/fc2`;
  `post_layer_norm` on every token; the attention-pool head `head/`: the
  probe (an unnamed weight: `variable`, or `variable_<n>` when Keras has
  made other unnamed ones in the session), `attention` (a Keras
  `MultiHeadAttention` with separate query/key/value), `layernorm`,
  `mlp/fc1`, `mlp/fc2`.
- in a `SigLIPBackbone`, the text tower under `<text name>_` and the loss's
  `siglip_head/logit_scale`, `siglip_head/logit_bias`: not part of an image
  model, listed as ignored.

The vision encoder's output, the image embedding `SigLIPBackbone` compares
with the text, is the head's output: keras_vit's `pooling="map"`.
"""

import dataclasses
import re

from keras_vit.families.clip import BLOCKS, PREFIX
from keras_vit.validation import pair
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import (
    KERAS_HUB_TEXT_EMBEDDINGS,
    keras_block,
    keras_dense,
    keras_map_head,
    keras_norm,
)
from keras_vit.weights.formats.conventions import torch_linear, torch_map_head_tail, torch_norm
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.formats.transformers_family import (
    CLIP_FIELDS,
    TowerFamily,
    TransformersClass,
    check_structure,
    refuse,
    square,
)
from keras_vit.weights.posemb import square_grid
from keras_vit.weights.record import Preprocessing
from keras_vit.weights.rules import RuleTable

# --- transformers ------------------------------------------------------------

_H = "head."
# The blocks, the final norm and the MAP head of SigLIP and SigLIP2.
ENCODER = (
    *BLOCKS,
    *torch_norm("post_layernorm", C.ENCODER_NORM),
    (_H + "probe", C.MAP_HEAD + "probe"),
    (_H + "attention.in_proj_weight", C.MAP_ATTENTION + "{part}/kernel", "qkv_kernel"),
    (_H + "attention.in_proj_bias", C.MAP_ATTENTION + "{part}/bias", "qkv_bias"),
    *torch_linear(_H + "attention.out_proj", C.MAP_ATTENTION + "out/", "heads_out"),
    *torch_map_head_tail(_H + "layernorm", _H + "mlp.fc1", _H + "mlp.fc2"),
)
POSITIONS = ("embeddings.position_embedding.weight", C.POSEMB, "batch")

class TransformersSiglip(TowerFamily):
    """transformers' SigLIP vision towers, and the vision side of `SiglipModel`.

    Example:

    >>> args = TransformersSiglip().model_arguments({"model_type": "siglip_vision_model", "hidden_size": 768,
    ...     "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    ...     "image_size": 224, "patch_size": 16})
    >>> args["classifier"], args["pooling"], args["mlp_activation"]
    ('map', 'map', 'gelu_tanh')
    """

    NAME = "SigLIP vision model"
    MODEL_TYPES = ("siglip_vision_model", "siglip")
    TRANSFORMERS_CLASSES = {
        "SiglipVisionModel": TransformersClass("siglip_vision_model", PREFIX),
        # The two-tower model, read for its vision tower.
        "SiglipModel": TransformersClass("siglip", PREFIX),
    }
    # SiglipVisionConfig's defaults.
    DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                    image_size=224, patch_size=16, num_channels=3, hidden_act="gelu_pytorch_tanh",
                    layer_norm_eps=1e-6, attention_dropout=0.0, vision_use_head=True)
    FIELDS = CLIP_FIELDS
    BODY = (POSITIONS, *torch_linear("embeddings.patch_embedding", C.EMBEDDING, "conv"), *ENCODER)
    IGNORED = {
        "embeddings.position_ids": "the position indices buffer, not a weight",
        "text_model.": "the text tower of a SiglipModel",
        "logit_scale": "the image-text logit scale of a SiglipModel",
        "logit_bias": "the image-text logit bias of a SiglipModel",
    }
    STRUCTURE = dict(
        TowerFamily.STRUCTURE,
        include_top=(False, "has no classifier after its MAP head: build it with include_top=False, pooling='map'"),
        class_token=(False, "has no class token"),
        pooled_norm=(False, "normalises every token before its MAP head (post_layernorm), not the pooled features"),
    )
    EXPORTED_OPTIONS = dict(
        TowerFamily.EXPORTED_OPTIONS,
        class_token=(None, False),
        # transformers resizes the position table its own way (bicubic) at
        # other sizes, whatever keras_vit held.
        position_interpolation=("official", "timm", "siglip"),
    )

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a SigLIP vision (or two-tower) `config.json` dict."""
        self.transformers_class(config)
        return self.tower_arguments(self.vision_config(config))

    def tower_arguments(self, config):
        """The arguments of a vision config (its defaults filled in): no class
        token, the output is the MAP head's (`pooler_output`)."""
        if not config["vision_use_head"]:
            raise self.unsupported("a tower without its attention-pool head (vision_use_head=False) "
                                   "has no pooled output. Received: vision_use_head=False")
        return dict(
            self.encoder_arguments(config),
            position_interpolation="siglip",
            classifier="map",
            include_top=False,
            pooling="map",
        )

    def export_class(self, config):
        """"SiglipVisionModel" for a model config that ends in a MAP head
        (`pooling="map"`, or `classifier="map"` with a head), else None; a
        SigLIP2 one (`position_interpolation="siglip2"`) is SigLIP2's to write.

        Raises:
            ValueError: for a MAP-pooled model SigLIP cannot hold (a class token,
                a classifier after the MAP head, a norm after pooling).

        Example:

        >>> TransformersSiglip().export_class({"classifier": "map", "include_top": False, "pooling": "map"})
        'SiglipVisionModel'
        """
        if config.get("position_interpolation") == "siglip2":
            return None
        return self.map_tower(config, "SiglipVisionModel")

    def map_tower(self, config, hf_class):
        """`hf_class` when a model config ends in a MAP head, else None.

        Raises:
            ValueError: for a MAP-pooled model a SigLIP tower cannot hold.
        """
        include_top = config.get("include_top", True)
        if (config.get("classifier", "token") if include_top else config.get("pooling")) != "map":
            return None
        check_structure(config, hf_class, self.STRUCTURE)
        return hf_class

    def export_config(self, config, hf_class, class_names=None):
        """The shared fields; the attention-pool head is always there."""
        return dict(super().export_config(config, hf_class, class_names), vision_use_head=True)


# --- transformers, SigLIP 2 --------------------------------------------------

class TransformersSiglip2(TransformersSiglip):
    """transformers' SigLIP2 vision towers: SigLIP's tower with a flattened
    patch embedding and a patch count for a size, taking images of any
    grid and NaFlex patch dicts.

    Example:

    >>> args = TransformersSiglip2().model_arguments({"model_type": "siglip2_vision_model", "hidden_size": 768,
    ...     "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
    ...     "num_patches": 256, "patch_size": 16})
    >>> args["image_size"], args["pooling"], args["position_interpolation"]
    ((256, 256), 'map', 'siglip2')
    """

    NAME = "SigLIP2 vision model"
    MODEL_TYPES = ("siglip2_vision_model", "siglip2")
    TRANSFORMERS_CLASSES = {
        "Siglip2VisionModel": TransformersClass("siglip2_vision_model", PREFIX),
        # The two-tower model, read for its vision tower (its `vision_config`).
        "Siglip2Model": TransformersClass("siglip2", PREFIX),
    }
    DEFAULTS = dict(TransformersSiglip.DEFAULTS, num_patches=256)
    BODY = (
        POSITIONS,
        ("embeddings.patch_embedding.weight", C.EMBEDDING + "kernel", "patch_linear"),
        ("embeddings.patch_embedding.bias", C.EMBEDDING + "bias"),
        *ENCODER,
    )
    # The rest of a two-tower model.
    IGNORED = {
        "text_model.": "the text tower of a Siglip2Model",
        "logit_scale": "the image-text logit scale of a Siglip2Model",
        "logit_bias": "the image-text logit bias of a Siglip2Model",
    }
    # SigLIP's options, with SigLIP2's own position-table resize.
    EXPORTED_OPTIONS = dict(TransformersSiglip.EXPORTED_OPTIONS, position_interpolation=("siglip2",))

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a SigLIP2 vision `config.json` dict.

        The image is the square grid of the position table: `sqrt(num_patches)`
        patches a side.

        Raises:
            ValueError: for another architecture, a `num_patches` that is not a
                square, non-square patches, other than 3 channels, or what
                SigLIP refuses (no attention-pool head, another activation).
        """
        self.transformers_class(config)
        config = self.vision_config(config)
        if config["num_channels"] != 3:
            raise self.unsupported(
                "the flattened patch embedding is read for 3 channels only. "
                f"Received: num_channels={config['num_channels']!r}"
            )
        num_patches = config["num_patches"]
        side = square_grid(num_patches) if isinstance(num_patches, int) else None
        if side is None:
            raise self.unsupported(
                f"`num_patches` must be a square (the position table's grid). Received: num_patches={num_patches!r}"
            )
        patch, other = pair(config["patch_size"], "patch_size")
        if patch != other:
            raise self.unsupported(f"`patch_size` must be square. Received: patch_size={config['patch_size']!r}")
        size = side * patch
        args = self.tower_arguments(dict(config, image_size=size, patch_size=patch))
        args["position_interpolation"] = "siglip2"
        args["preprocessing"] = Preprocessing(image_size=size, interpolation="bilinear").get_config()
        return args

    def preprocessing(self, file, args):
        """The record of a `Siglip2ImageProcessor` file for a model of `args`:
        at the model's image size when the file's patch budget and patch are
        the model's (a square image then fills the model's grid)."""
        record = super().preprocessing(file, args)
        height, width = args["image_size"]
        patch = args["patch_size"][0]
        if file.get("patch_size", 16) == patch and file.get("max_num_patches", 256) == (height // patch) * (width // patch):
            return dataclasses.replace(record, image_size=(height, width))
        return record

    def export_class(self, config):
        """"Siglip2VisionModel" for a model config that ends in a MAP head and
        resizes its position table as SigLIP2 does, else None.

        Raises:
            ValueError: for such a model a SigLIP2 tower cannot hold (what SigLIP
                refuses, a non-square grid, other than 3 channels).

        Example:

        >>> TransformersSiglip2().export_class({"classifier": "map", "include_top": False, "pooling": "map",
        ...     "position_interpolation": "siglip2", "image_size": (28, 28), "patch_size": (7, 7)})
        'Siglip2VisionModel'
        """
        if config.get("position_interpolation") != "siglip2":
            return None
        hf_class = self.map_tower(config, "Siglip2VisionModel")
        if hf_class is None:
            return None
        square(config, hf_class)
        channels = tuple(config.get("input_shape") or (3,))[-1]
        if channels != 3:
            raise refuse(f"{hf_class} flattens 3-channel patches only. Received: input_shape={config['input_shape']!r}")
        return hf_class

    def export_config(self, config, hf_class, class_names=None):
        """SigLIP's fields, with the patch count of the square grid instead of an image size."""
        out = super().export_config(config, hf_class, class_names)
        size = out.pop("image_size")
        out["num_patches"] = (size // out["patch_size"]) ** 2
        return out

    def export_preprocessor(self, record, config):
        """`Siglip2ImageProcessor`'s file, which resizes to a patch budget, not
        a size: `max_num_patches` is the model's patch count, so that a square
        image goes to the model's grid."""
        size, patch = square(config, "Siglip2VisionModel")
        out = super().export_preprocessor(record, config)
        out = {k: v for k, v in out.items() if k not in ("size", "crop_size", "do_center_crop")}
        return dict(out, image_processor_type="Siglip2ImageProcessor", patch_size=patch,
                    max_num_patches=(size // patch) ** 2)


# The text tower of the two-tower classes (`SiglipModel`, `Siglip2Model`):
# the fields of `keras_vit.families.transformers_image_text.TextTower`.
# `defaults`: `SiglipTextConfig`'s.
SIGLIP_TEXT_DEFAULTS = dict(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                            num_attention_heads=12, max_position_embeddings=64, hidden_act="gelu_pytorch_tanh",
                            layer_norm_eps=1e-6, eos_token_id=49407, attention_dropout=0.0, projection_size=None)
_SIGLIP_TEXT = dict(causal=False, pooling="last", legacy_eos=False, projection="head", padding="max_length",
                    max_length=64, activation="sigmoid", defaults=SIGLIP_TEXT_DEFAULTS)
TRANSFORMERS_TEXT_TOWERS = {
    "SiglipModel": dict(_SIGLIP_TEXT, lowercase=False),
    "Siglip2Model": dict(_SIGLIP_TEXT, lowercase=True),
}


# --- keras-hub ---------------------------------------------------------------

VISION_ENCODER = "keras_hub>SigLIPVisionEncoder"
RULES = (
    *keras_dense("embedding/patch_embedding", C.EMBEDDING),
    ("embedding/position_embedding/embeddings", C.POSEMB, "batch"),
    *keras_block("encoder_block_{i}/", "layer_norm1", "self_attn", "layer_norm2", "mlp/fc1", "mlp/fc2"),
    *keras_norm("post_layer_norm", C.ENCODER_NORM),
    *keras_map_head("head"),
)
# keras-hub's `intermediate_activation` -> keras_vit's `mlp_activation`.
ACTIVATIONS = {"gelu_approximate": "gelu_tanh", "gelu": "gelu"}
_PROBE = re.compile(r"head/variable(_\d+)?")


class KerasHubSiglip(KerasHubFamily):
    """keras-hub's SigLIP vision encoder, alone or in a `SigLIPBackbone`.

    Example:

    >>> args = KerasHubSiglip().encoder_arguments({"patch_size": 16, "hidden_dim": 768, "num_layers": 12,
    ...     "num_heads": 12, "intermediate_dim": 3072}, (224, 224, 3))
    >>> args["classifier"], args["pooling"], args["mlp_activation"]
    ('map', 'map', 'gelu_tanh')
    """

    NAME = "SigLIP preset"
    REGISTERED = ("keras_hub>SigLIPBackbone", VISION_ENCODER)
    VISION = VISION_ENCODER
    TABLE = RuleTable(RULES)
    IGNORED = {"embedding/position_ids": "the position indices 0..N-1, not a weight"}
    # The epsilon of the final norm, whatever `layer_norm_epsilon` says.
    POST_NORM_EPSILON = 1e-6

    def source_name(self, name):
        """A variable's name in `RULES`: the head's unnamed probe is `head/probe`.

        Example:

        >>> family = KerasHubSiglip()
        >>> family.source_name("head/variable_3"), family.source_name("head/layernorm/gamma")
        ('head/probe', 'head/layernorm/gamma')
        """
        return "head/probe" if _PROBE.fullmatch(name) else name

    def encoder_arguments(self, config, shape):
        activation = self.mlp_activation(config, "gelu_approximate", ACTIVATIONS)
        epsilon = float(config.get("layer_norm_epsilon", 1e-6))
        if epsilon != self.POST_NORM_EPSILON:
            raise self.unsupported(
                "keras_vit gives its final norm the blocks' epsilon, keras-hub's is always "
                f"{self.POST_NORM_EPSILON}. Received: layer_norm_epsilon={epsilon}"
            )
        return dict(
            self.backbone_arguments(config, shape),
            mlp_dim=config["intermediate_dim"],
            layer_norm_epsilon=epsilon,
            mlp_activation=activation,
            # keras-hub keeps the size it was built at; other sizes resize as
            # transformers' SigLIP does.
            position_interpolation="siglip",
            classifier="map",
            pooling="map",
            classifier_activation=None,
        )

    def variable_prefixes(self, backbone):
        """The vision encoder's prefix, and in a `SigLIPBackbone` the text
        tower's and the loss's, ignored."""
        out = super().variable_prefixes(backbone)
        if backbone.get("registered_name") != VISION_ENCODER:
            text = backbone["config"].get("text_encoder", {}).get("config", {}).get("name")
            out[f"{text}_"] = "the text tower of the SigLIP backbone (an image model has none)"
            out["siglip_head/"] = "the logit scale and bias of the image-text loss"
        return out


# The text tower of `keras_hub>SigLIPBackbone`: the fields of
# `keras_vit.families.keras_hub_image_text.KerasHubTextTower`.
KERAS_HUB_TEXT_TOWERS = {
    "keras_hub>SigLIPBackbone": dict(
        text_encoder="keras_hub>SigLIPTextEncoder",
        rules=(*KERAS_HUB_TEXT_EMBEDDINGS,
               *keras_block("encoder_block_{i}/", "layer_norm1", "self_attn", "layer_norm2", "mlp/fc1", "mlp/fc2"),
               *keras_norm("post_layer_norm", C.ENCODER_NORM),
               *keras_dense("head", "projection/")),
        projection=(),
        head="siglip_head/", activation="sigmoid", causal=False, pooling="last",
    ),
}
