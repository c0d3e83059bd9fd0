"""AIMv2 (vision tower): the family's checkpoints in every layout keras_vit reads (transformers).

transformers AIMv2 vision towers (`Aimv2VisionModel`) <-> the canonical
layout, read and written.

Facts about the files (`save_pretrained`; `model_type` "aimv2_vision_model"):

- `config.json`: `hidden_size`, `intermediate_size` (the SwiGLU MLP's
  width), `num_hidden_layers`, `num_attention_heads`, `num_channels`,
  `image_size`, `patch_size` (ints), `rms_norm_eps` (1e-5), `hidden_act`
  ("silu": the MLP's gate), `qkv_bias` (False: the attention's query, key,
  value *and* output projections, and the head's key and value),
  `mlp_bias` (False), `attention_dropout`, `use_head` (the attention-pool
  head), `is_native` (the fixed sin-cos table of the native-resolution
  checkpoints instead of a learned one);
- tensors: `embeddings.patch_embed` (an OIHW convolution with bias),
  `embeddings.rms_norm` (an RMSNorm of the patch embeddings before the
  position embedding: keras_vit's `patch_norm=True`),
  `embeddings.position_embedding.weight` `(N, D)` (no prefix row; absent
  with `is_native`); blocks `encoder.layers.{i}.` with `rms_norm1`,
  `attention.{q,k,v,out}_proj`, `rms_norm2`, `ffn.gate_proj`,
  `ffn.up_proj`, `ffn.down_proj` (SwiGLU: `down(silu(gate(x)) * up(x))`);
  the final `rms_norm`; the head `head.`: `cls_token` `(1, 1, D)` (the
  query, not projected), `k_proj`, `v_proj`, `output_proj` (with bias):
  keras_vit's `pooling="attention_pool"` (`AttentionPoolHead`).
- the outputs: `last_hidden_state` is every token after `rms_norm` (no
  class token), `pooler_output` the head's output (None without the head:
  keras_vit then returns the tokens).
- the fixed table (`is_native`) is MAE's 2D sin-cos layout, column
  frequencies first (`position_embedding="sincos"`), computed for each grid,
  so those towers run at any size as transformers does; transformers uses
  the learned table at its own grid only, and keras_vit resizes it for
  other grids as timm resizes AIMv2's (`position_interpolation="timm"`).

Written back (`save_to_preset(format="transformers")`): a model shaped as
AIMv2 (RMSNorm, the patch norm, SwiGLU, no class token, the attention-pool
head or no pooling, a learned table or the sin-cos one, query, key, value
and output biases all present or all absent) as `Aimv2VisionModel`; its
preprocessing as `CLIPImageProcessor` (AIMv2's processor).
"""

from keras_vit.families.clip import TransformersClip
from keras_vit.layers.config import qkv_biases
from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import torch_attention, torch_linear, torch_norm
from keras_vit.weights.formats.transformers_family import (
    TransformersClass,
    TransformersFamily,
    check_structure,
    refuse,
    square,
)

_L = "encoder.layers.{i}."
_H = "head."
BODY = (
    *torch_linear("embeddings.patch_embed", C.EMBEDDING, "conv"),
    *torch_norm("embeddings.rms_norm", C.EMBEDDING_NORM),
    ("embeddings.position_embedding.weight", C.POSEMB, "batch"),
    *torch_norm(_L + "rms_norm1", C.NORM_1),
    *torch_attention(*(_L + f"attention.{p}_proj" for p in ("q", "k", "v", "out"))),
    *torch_norm(_L + "rms_norm2", C.NORM_2),
    *torch_linear(_L + "ffn.gate_proj", C.MLP_GATE_UP.replace("{part}", "gate")),
    *torch_linear(_L + "ffn.up_proj", C.MLP_GATE_UP.replace("{part}", "up")),
    *torch_linear(_L + "ffn.down_proj", C.MLP_DOWN),
    *torch_norm("rms_norm", C.ENCODER_NORM),
    (_H + "cls_token", C.ATTENTION_POOL + "query"),
    *torch_linear(_H + "k_proj", C.ATTENTION_POOL + "key/", "heads_in", "heads_bias"),
    *torch_linear(_H + "v_proj", C.ATTENTION_POOL + "value/", "heads_in", "heads_bias"),
    *torch_linear(_H + "output_proj", C.ATTENTION_POOL + "out/", "heads_out"),
)


class TransformersAimv2(TransformersFamily):
    """transformers' AIMv2 vision towers.

    Example:

    >>> args = TransformersAimv2().model_arguments({"model_type": "aimv2_vision_model", "hidden_size": 64,
    ...     "num_attention_heads": 4, "is_native": True})
    >>> args["norm_kind"], args["mlp_kind"], args["patch_norm"], args["position_embedding"], args["pooling"]
    ('rmsnorm', 'swiglu', True, 'sincos', 'attention_pool')
    """

    NAME = "AIMv2 vision model"
    MODEL_TYPES = ("aimv2_vision_model",)
    TRANSFORMERS_CLASSES = {"Aimv2VisionModel": TransformersClass("aimv2_vision_model")}
    # Aimv2VisionConfig's defaults.
    DEFAULTS = dict(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=24, num_attention_heads=8, num_channels=3,
        image_size=224, patch_size=14, hidden_act="silu", attention_dropout=0.0, rms_norm_eps=1e-5,
        qkv_bias=False, mlp_bias=False, use_head=True, is_native=False,
    )
    ACTIVATIONS = {"silu": "gelu"}  # SwiGLU's gate is SiLU; `mlp_activation` is not used
    FIELDS = {
        "rms_norm_eps": ("layer_norm_epsilon", float),
        "attention_dropout": ("attention_dropout_rate", float),
        "mlp_bias": ("mlp_bias", bool),
    }
    BODY = BODY
    IGNORED = {"embeddings.position_ids": "the position indices buffer, not a weight"}
    STRUCTURE = {
        "resnet_layers": (None, "has no ResNet stem (a hybrid's resnet_layers)"),
        "num_register_tokens": (0, "has no register tokens"),
        "distillation_token": (False, "has no distillation token"),
        "representation_size": (None, "has no pre-logits layer"),
        "class_token": (False, "has no class token"),
        "include_top": (False, "has no classifier: build it with include_top=False, pooling='attention_pool'"),
        "pooled_norm": (False, "normalises every token (rms_norm), not the pooled features"),
    }
    EXPORTED_OPTIONS = {
        "layer_norm_epsilon": None,
        "norm_kind": ("rmsnorm",),
        "mlp_kind": ("swiglu",),
        # Not used by the gated MLP.
        "mlp_activation": None,
        "qkv_bias": (True, False),
        "attention_out_bias": None,
        "mlp_bias": None,
        "patch_norm": (True,),
        "attention_dropout_rate": None,
        "class_token": (None, False),
        "position_embedding": ("learned", "sincos"),
        # transformers keeps the table at its grid; other sizes are keras_vit's to resize.
        "position_interpolation": None,
    }

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for an AIMv2 vision `config.json` dict."""
        self.transformers_class(config)
        config = self.vision_config(config)
        bias = bool(config["qkv_bias"])
        return dict(
            self.encoder_arguments(config),
            norm_kind="rmsnorm",
            mlp_kind="swiglu",
            qkv_bias=bias,
            attention_out_bias=bias,
            patch_norm=True,
            position_embedding="sincos" if config["is_native"] else "learned",
            position_interpolation="timm",
            classifier="gap",
            include_top=False,
            pooling="attention_pool" if config["use_head"] else None,
        )

    # Writing.

    def export_class(self, config):
        """"Aimv2VisionModel" for a model config with AIMv2's patch norm, else None.

        Raises:
            ValueError: for such a model AIMv2 cannot hold (another norm,
                MLP or head, a class token, biases that differ).

        Example:

        >>> TransformersAimv2().export_class({"patch_norm": True, "norm_kind": "rmsnorm", "mlp_kind": "swiglu",
        ...     "classifier": "gap", "include_top": False, "pooling": "attention_pool", "qkv_bias": False,
        ...     "attention_out_bias": False, "image_size": (28, 28), "patch_size": (7, 7)})
        'Aimv2VisionModel'
        """
        if config.get("patch_norm") is not True:
            return None
        hf_class = "Aimv2VisionModel"
        check_structure(config, hf_class, self.STRUCTURE)
        if config.get("pooling") not in ("attention_pool", None):
            raise refuse(f"{hf_class} pools with its attention-pool head or not at all. "
                         f"Received: pooling={config.get('pooling')!r}")
        biases = set(qkv_biases(config.get("qkv_bias", True))) | {config.get("attention_out_bias", True)}
        if len(biases) != 1:
            raise refuse(f"{hf_class} has query, key, value and output biases together (qkv_bias) or none. "
                         f"Received: qkv_bias={config.get('qkv_bias')!r}, "
                         f"attention_out_bias={config.get('attention_out_bias')!r}")
        square(config, hf_class)
        return hf_class

    def export_config(self, config, hf_class, class_names=None):
        """The shared fields with AIMv2's norms, biases, head and table."""
        return dict(
            super().export_config(config, hf_class, class_names),
            hidden_act="silu",
            qkv_bias=qkv_biases(config.get("qkv_bias", True))[0],
            use_head=config.get("pooling") == "attention_pool",
            is_native=config.get("position_embedding", "learned") == "sincos",
        )

    def export_preprocessor(self, record, config):
        """AIMv2's processor is CLIP's (`CLIPImageProcessor`)."""
        return TransformersClip().export_preprocessor(record, config)
