"""ViViT: the family's checkpoints in every layout keras_vit reads (transformers).

transformers ViViT video encoders and classifiers (`VivitModel`,
`VivitForVideoClassification`) -> the canonical layout, read only.

Facts about the files (`save_pretrained`; `model_type` "vivit"):

- `config.json`: `hidden_size`, `num_hidden_layers`, `num_attention_heads`,
  `intermediate_size`, `hidden_act` (default "gelu_fast", the tanh GELU),
  `layer_norm_eps` (1e-6), `qkv_bias`, `image_size`, `num_frames`,
  `tubelet_size` `[t, ph, pw]` (there is no `patch_size`), `num_channels`,
  `pooler_output_size`, `pooler_act`, `id2label`.
- tensors: ViT's names (`embeddings.cls_token`, `embeddings.
  position_embeddings` `(1, 1 + N, D)` learned for `num_frames // t`
  frames of tubelets, `encoder.layer.{i}....`, the final `layernorm`); the
  tubelet embedding `embeddings.patch_embeddings.projection` a `Conv3d`
  `(D, C, t, ph, pw)` whose tokens run in (time, row, column) order; the
  classifier holds the body under `vivit.` and a `classifier` Linear on the
  class token after the final norm (keras_vit's token pooling).
  `VivitModel` adds a `pooler` (Dense and activation on the class token):
  keras_vit's model of it returns `last_hidden_state`, the tokens after the
  final norm, and leaves the pooler out.
- the position table: transformers' `interpolate_pos_encoding` (ViT's,
  bicubic) reads the patch rows as one square grid, so it fails for a
  table of more than one tubelet frame; keras_vit resizes each frame's
  grid bicubically as ViT's (`position_interpolation="vit"`) and the time
  axis alike, for clips of any size and length.
- `preprocessor_config.json` (`VivitImageProcessor`): an image
  processor's fields and `offset`: with it the rescaled pixels are shifted
  by -1 (`x / 127.5 - 1`) before the normalisation, which the record's
  mean folds in. The frame count is the model's `num_frames`.
"""

import dataclasses

from keras_vit.families.vit import BLOCKS, CLASS_AND_PATCHES, FINAL_NORM, POSITIONS
from keras_vit.weights.formats.conventions import torch_linear
from keras_vit.weights.formats.transformers_family import (
    ACTIVATIONS,
    VIT_FIELDS,
    TransformersClass,
    TransformersFamily,
)
from keras_vit.weights import canonical as C

BODY = (
    CLASS_AND_PATCHES[0],
    *torch_linear("embeddings.patch_embeddings.projection", C.EMBEDDING, "conv3d"),
    POSITIONS,
    *BLOCKS,
    *FINAL_NORM,
)


class TransformersVivit(TransformersFamily):
    """transformers' ViViT encoder and video classifier.

    Example:

    >>> args = TransformersVivit().model_arguments({"model_type": "vivit",
    ...     "architectures": ["VivitForVideoClassification"], "hidden_size": 768,
    ...     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
    ...     "num_frames": 32, "tubelet_size": [2, 16, 16], "id2label": {"0": "a", "1": "b"}})
    >>> args["num_frames"], args["tubelet_size"], args["patch_size"], args["mlp_activation"]
    (32, 2, (16, 16), 'gelu_tanh')
    """

    NAME = "ViViT model"
    MODEL_TYPES = ("vivit",)
    TRANSFORMERS_CLASSES = {
        "VivitModel": TransformersClass("vivit"),
        "VivitForVideoClassification": TransformersClass("vivit", "vivit.", torch_linear("classifier", C.HEAD), True),
    }
    DEFAULTS = dict(image_size=224, num_frames=32, tubelet_size=(2, 16, 16), num_channels=3, hidden_act="gelu_fast",
                    layer_norm_eps=1e-6, qkv_bias=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    # "gelu_fast" is the tanh GELU written with its constants folded.
    ACTIVATIONS = dict(ACTIVATIONS, gelu_fast="gelu_tanh")
    FIELDS = VIT_FIELDS
    BODY = BODY
    IGNORED = {"pooler.": "VivitModel's pooler: keras_vit's model returns last_hidden_state"}

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a ViViT `config.json` dict."""
        hf_class = self.transformers_class(config)
        config = self.vision_config(config)
        tubelet = config["tubelet_size"]
        if not isinstance(tubelet, (list, tuple)) or len(tubelet) != 3:
            raise self.unsupported(f"`tubelet_size` must be [frames, height, width]. Received: {tubelet!r}")
        args = dict(
            self.encoder_arguments(dict(config, patch_size=tuple(tubelet[1:]))),
            num_frames=int(config["num_frames"]),
            tubelet_size=int(tubelet[0]),
            position_interpolation="vit",
        )
        if hf_class == "VivitModel":
            return dict(args, include_top=False, pooling=None)
        return dict(args, **self.label_arguments(config))

    def preprocessing(self, file, args):
        """The image processor's record, with its `offset` folded into the
        mean and the model's frame count."""
        record = super().preprocessing(file, args)
        if file.get("offset", True) and file.get("do_rescale", True):
            # (x * r - 1 - m) / s: in [0, 1] units the shift adds 1 / (255 r) to the mean.
            unit = 255.0 * file.get("rescale_factor", 1 / 127.5)
            record = dataclasses.replace(record, mean=tuple(m + 1.0 / unit for m in record.mean))
        return dataclasses.replace(record, num_frames=args["num_frames"])

    def export_class(self, config):
        """None: keras_vit writes no ViViT directory (a video model is
        refused by the image families' options)."""
        return None
