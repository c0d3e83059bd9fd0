"""VideoMAE: the family's checkpoints in every layout keras_vit reads (transformers).

transformers VideoMAE video encoders and classifiers (`VideoMAEModel`,
`VideoMAEForVideoClassification`) -> the canonical layout, read only.

Facts about the files (`save_pretrained`; `model_type` "videomae"):

- `config.json`: ViT's fields (`hidden_size`, `num_hidden_layers`,
  `num_attention_heads`, `intermediate_size`, `hidden_act`,
  `layer_norm_eps`, `image_size`, `patch_size`, `num_channels`) and
  `num_frames`, `tubelet_size` (frames per token), `qv_bias` (biases on
  the query and value projections, none on the key: older files call it
  `qkv_bias`), `use_mean_pooling`, `id2label`; the pre-training decoder's
  fields (`decoder_*`, `norm_pix_loss`) are not read.
- tensors: ViT's block names at the root (`encoder.layer.{i}.attention.
  attention.query`, ...), except the biases: `attention.attention.q_bias`
  and `v_bias` (transformers 5 holds them as the Linears' `bias` in memory
  and writes the original names), and no key bias; the tubelet embedding
  `embeddings.patch_embeddings.projection` a `Conv3d` `(D, C, t, ph, pw)`
  over `(batch, C, frames, H, W)`, whose tokens run in (time, row, column)
  order; no class token. The position table is not stored: the 1D sinusoid
  table of the token index, which keras_vit computes
  (`position_embedding="sincos_1d"`).
- `use_mean_pooling` (every published checkpoint): no norm after the
  blocks: `VideoMAEModel`'s `last_hidden_state` is the last block's output;
  the classifier averages every token and normalises the mean with
  `fc_norm` (PyTorch's default epsilon, 1e-5, not `layer_norm_eps`), then
  `classifier`: keras_vit's "gap" pooling with `pooled_norm`. Without it a
  final `layernorm` follows the blocks, and the classifier reads the first
  token (a patch token): not built.
- the classifier holds the body under `videomae.`.
- `preprocessor_config.json`: an image processor's fields, applied to each
  frame; the frame count is the model's `num_frames` (the processor
  samples none).

Not read: `VideoMAEForPreTraining` (its decoder and mask token).
"""

import dataclasses

from keras_vit.families.vit import BLOCKS, FINAL_NORM
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import torch_linear, torch_norm
from keras_vit.weights.formats.transformers_family import TransformersClass, TransformersFamily

_ATTENTION = "encoder.layer.{i}.attention.attention."
BODY = (
    *torch_linear("embeddings.patch_embeddings.projection", C.EMBEDDING, "conv3d"),
    # `save_pretrained` writes the query and value biases as parameters of
    # their own (the original code's names); in memory they are the Linears'.
    (_ATTENTION + "q_bias", C.ATTENTION + "query/bias", "heads_bias"),
    (_ATTENTION + "v_bias", C.ATTENTION + "value/bias", "heads_bias"),
    *BLOCKS,
    *FINAL_NORM,
)
HEAD = (*torch_norm("fc_norm", C.POOLED_NORM), *torch_linear("classifier", C.HEAD))
# PyTorch's LayerNorm default, which `fc_norm` keeps.
FC_NORM_EPSILON = 1e-5
FIELDS = {
    "layer_norm_eps": ("layer_norm_epsilon", float),
    "hidden_dropout_prob": ("dropout_rate", float),
    "attention_probs_dropout_prob": ("attention_dropout_rate", float),
}


class TransformersVideoMAE(TransformersFamily):
    """transformers' VideoMAE encoder and video classifier.

    Example:

    >>> args = TransformersVideoMAE().model_arguments({"model_type": "videomae",
    ...     "architectures": ["VideoMAEForVideoClassification"], "hidden_size": 768,
    ...     "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
    ...     "num_frames": 16, "tubelet_size": 2, "id2label": {"0": "a", "1": "b"}})
    >>> args["num_frames"], args["tubelet_size"], args["classifier"], args["qkv_bias"]
    (16, 2, 'gap', (True, False, True))
    """

    NAME = "VideoMAE model"
    MODEL_TYPES = ("videomae",)
    TRANSFORMERS_CLASSES = {
        "VideoMAEModel": TransformersClass("videomae"),
        "VideoMAEForVideoClassification": TransformersClass("videomae", "videomae.", HEAD, True),
    }
    DEFAULTS = dict(image_size=224, patch_size=16, num_channels=3, num_frames=16, tubelet_size=2, hidden_act="gelu",
                    layer_norm_eps=1e-12, qv_bias=True, use_mean_pooling=True, hidden_dropout_prob=0.0,
                    attention_probs_dropout_prob=0.0)
    FIELDS = FIELDS
    BODY = BODY

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a VideoMAE `config.json` dict."""
        hf_class = self.transformers_class(config)
        config = self.vision_config(config)
        qv_bias = bool(config.get("qkv_bias", config["qv_bias"]))
        args = dict(
            self.encoder_arguments(config),
            num_frames=int(config["num_frames"]),
            tubelet_size=int(config["tubelet_size"]),
            position_embedding="sincos_1d",
            class_token=False,
            qkv_bias=(True, False, True) if qv_bias else False,
        )
        mean_pooling = bool(config["use_mean_pooling"])
        if hf_class == "VideoMAEModel":
            # The tokens, after the final norm only without mean pooling.
            return dict(args, classifier="gap", include_top=False, pooling=None, final_norm=not mean_pooling)
        if not mean_pooling:
            raise self.unsupported(
                "its classifier without mean pooling reads the first patch token after the final norm, which "
                "keras_vit does not build. Received: use_mean_pooling=False"
            )
        return dict(args, classifier="gap", pooled_norm=True, pooled_norm_epsilon=FC_NORM_EPSILON,
                    **self.label_arguments(config))

    def preprocessing(self, file, args):
        """The image processor's record, with the model's frame count."""
        return dataclasses.replace(super().preprocessing(file, args), num_frames=args["num_frames"])

    def export_class(self, config):
        """None: keras_vit writes no VideoMAE directory (a video model is
        refused by the image families' options)."""
        return None
