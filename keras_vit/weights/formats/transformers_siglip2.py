"""transformers SigLIP2 vision towers (`Siglip2VisionModel`, NaFlex) <->
the canonical layout, read and written.

Facts about the files (`save_pretrained`; `model_type`
"siglip2_vision_model"):

- `config.json`: SigLIP's keys (`hidden_size`, `intermediate_size`,
  `num_hidden_layers`, `num_attention_heads`, `hidden_act`,
  `layer_norm_eps`, `patch_size` (an int), `num_channels`,
  `vision_use_head`), no `image_size`, and `num_patches` (default 256): the
  rows of the position table, a square `sqrt(num_patches)` grid;
- tensors: SigLIP's (`transformers_siglip`: CLIP's block names,
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
"""

import dataclasses

from keras_vit.weights import canonical as C
from keras_vit.validation import pair
from keras_vit.weights.formats.transformers_family import TransformersClass, refuse, square
from keras_vit.weights.formats.transformers_siglip import ENCODER, POSITIONS, PREFIX, SiglipFamily
from keras_vit.weights.posemb import square_grid
from keras_vit.weights.record import Preprocessing


class Siglip2Family(SiglipFamily):
    """transformers' SigLIP2 vision towers: SigLIP's tower with a flattened
    patch embedding and a patch count for a size, taking images of any
    grid and NaFlex patch dicts.

    Example:

    >>> args = Siglip2Family().model_arguments({"model_type": "siglip2_vision_model", "hidden_size": 768,
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
    DEFAULTS = dict(SiglipFamily.DEFAULTS, num_patches=256)
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
    EXPORTED_OPTIONS = dict(SiglipFamily.EXPORTED_OPTIONS, position_interpolation=("siglip2",))

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

        >>> Siglip2Family().export_class({"classifier": "map", "include_top": False, "pooling": "map",
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
