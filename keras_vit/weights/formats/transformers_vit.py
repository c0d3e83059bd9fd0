"""transformers ViT and DeiT directories <-> the canonical layout, read and written.

Facts about the files (`save_pretrained` of transformers 4 and 5 writes the
first naming; transformers 5 names the modules the second way in memory and
renames on load, so both are read):

- `config.json`: `model_type` "vit" or "deit"; `architectures`; `image_size`,
  `patch_size`, `num_channels`, `hidden_size`, `num_hidden_layers`,
  `num_attention_heads`, `intermediate_size`, `hidden_act` ("gelu" is the
  exact erf GELU; "gelu_new", "gelu_pytorch_tanh", ... the tanh one),
  `layer_norm_eps`, `qkv_bias`, `id2label`; DeiT models always have a
  distillation token (a second prefix token with its own position row).
- Tensors: PyTorch layouts: `Linear` weights `(out, in)`, the patch
  embedding an OIHW convolution; q, k, v and the attention output are
  separate `Linear`s; the body sits under `vit.`/`deit.` in the task models
  (`ViTForImageClassification`, `DeiTForImageClassification`,
  `DeiTForImageClassificationWithTeacher`) and at the root in the base
  models (`ViTModel`/`DeiTModel`, which add a tanh `pooler`: the pre-logits
  layer of the original ImageNet-21k files).
- `preprocessor_config.json`: `keras_vit.weights.formats.transformers_processor`.

Written back (`save_to_preset(format="transformers")`): every model no other
family recognises, as `ViTForImageClassification` or, with a distillation
token, the DeiT classifiers; a model none of them can hold is refused.
"""

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import torch_block, torch_linear, torch_norm
from keras_vit.weights.formats.transformers_family import (
    VIT_FIELDS,
    TransformersClass,
    TransformersFamily,
    check_structure,
)

# The class token and patch embedding of ViT, DeiT, DINOv2 and ViTMAE.
CLASS_AND_PATCHES = (
    ("embeddings.cls_token", C.CLS),
    *torch_linear("embeddings.patch_embeddings.projection", C.EMBEDDING, "conv"),
)
# Their learned position table (ViTMAE's is fixed).
POSITIONS = ("embeddings.position_embeddings", C.POSEMB)
# The blocks as `save_pretrained` writes them (ViT, DeiT, ViTMAE).
BLOCKS = torch_block(
    "encoder.layer.{i}.", "layernorm_before",
    ("attention.attention.query", "attention.attention.key", "attention.attention.value", "attention.output.dense"),
    "layernorm_after", "intermediate.dense", "output.dense",
)
# The final norm of ViT, DeiT, DINOv2 and ViTMAE.
FINAL_NORM = torch_norm("layernorm", C.ENCODER_NORM)
# Rules for the same canonical key list the name `save_pretrained` writes
# first: writing uses the first.
BODY = (
    *CLASS_AND_PATCHES,
    ("embeddings.distillation_token", C.DIST),
    POSITIONS,
    *BLOCKS,
    *torch_block(
        "layers.{i}.", "layernorm_before",
        ("attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj"),
        "layernorm_after", "mlp.fc1", "mlp.fc2",
    ),
    *FINAL_NORM,
    *torch_linear("pooler.dense", C.PRE_LOGITS),
)
CLASSIFIER = torch_linear("classifier", C.HEAD)
TEACHER = torch_linear("cls_classifier", C.HEAD) + torch_linear("distillation_classifier", C.HEAD_DIST)


class ViTFamily(TransformersFamily):
    """transformers' ViT and DeiT: the family a model no other recognises is written as.

    Example:

    >>> args = ViTFamily().model_arguments({
    ...     "model_type": "deit", "architectures": ["DeiTForImageClassificationWithTeacher"],
    ...     "hidden_size": 192, "num_hidden_layers": 12, "num_attention_heads": 3,
    ...     "intermediate_size": 768, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
    ...     "id2label": {"0": "cat", "1": "dog"}})
    >>> args["distillation_head"], args["mlp_activation"], args["class_names"]
    (True, 'gelu', ['cat', 'dog'])
    """

    NAME = "ViT/DeiT model"
    MODEL_TYPES = ("vit", "deit")
    # Without `architectures`, the first class of the `model_type`.
    TRANSFORMERS_CLASSES = {
        "ViTModel": TransformersClass("vit"),
        "ViTForImageClassification": TransformersClass("vit", "vit.", CLASSIFIER, True),
        "ViTForMaskedImageModeling": TransformersClass("vit", "vit."),
        "DeiTModel": TransformersClass("deit"),
        "DeiTForImageClassification": TransformersClass("deit", "deit.", CLASSIFIER, True),
        "DeiTForImageClassificationWithTeacher": TransformersClass("deit", "deit.", TEACHER, True),
        "DeiTForMaskedImageModeling": TransformersClass("deit", "deit."),
    }
    DEFAULTS = dict(image_size=224, patch_size=16, num_channels=3, hidden_act="gelu", layer_norm_eps=1e-12,
                    qkv_bias=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    # The GELU flavours: "gelu_fast" and "gelu_accurate" compute the same
    # tanh formula with other constants' order.
    ACTIVATIONS = {
        "gelu": "gelu",
        "gelu_python": "gelu",
        "gelu_new": "gelu_tanh",
        "gelu_pytorch_tanh": "gelu_tanh",
        "gelu_python_tanh": "gelu_tanh",
        "gelu_fast": "gelu_tanh",
        "gelu_accurate": "gelu_tanh",
    }
    FIELDS = VIT_FIELDS
    BODY = BODY
    # Entries that are not inference weights of the encoder/classifier.
    IGNORED = {
        "embeddings.mask_token": "the mask token of masked-image-modelling pre-training",
        "decoder.": "the masked-image-modelling decoder",
    }
    STRUCTURE = {
        "resnet_layers": (None, "has no ResNet (hybrid) stem; transformers has no ViT-hybrid layout"),
        "num_register_tokens": (0, "has no register tokens"),
        "classifier": ("token", "classifies the class token"),
        "pooled_norm": (False, "has no norm after pooling"),
        "representation_size": (None, "has no pre-logits layer"),
        "include_top": (True, "needs a classifier head (AutoModelForImageClassification)"),
    }
    # The block and encoder options a ViT/DeiT config holds (None: any value).
    # Every other option must keep its default to be written, so an option
    # added to the records later is refused here until this table learns it.
    EXPORTED_OPTIONS = {
        "layer_norm_epsilon": None,
        "mlp_activation": ("gelu_tanh", "gelu"),
        "qkv_bias": (True, False),
        "dropout_rate": None,
        "attention_dropout_rate": None,
    }

    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a ViT/DeiT `config.json` dict.

        Raises:
            ValueError: for an architecture, activation or head layout
                keras_vit cannot build.
        """
        hf_class = self.transformers_class(config)
        config = self.vision_config(config)
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        if config.get("head_dim") not in (None, hidden // heads):
            raise self.unsupported(
                f"`head_dim` must be hidden_size / num_attention_heads = {hidden // heads}. "
                f"Received: head_dim={config['head_dim']!r}"
            )
        spec = self.TRANSFORMERS_CLASSES[hf_class]
        args = dict(
            self.encoder_arguments(config),
            distillation_token=spec.model_type == "deit",
            distillation_head=hf_class.endswith("WithTeacher"),
            include_top=spec.classifier,
        )
        if spec.classifier:
            args.update(self.label_arguments(config))
        return args

    def complete(self, params, ignored, config):
        """Leaves out a pooler that is not a tanh pre-logits layer."""
        if config.get("pooler_act", "tanh") != "tanh":
            for key in [k for k in params if k.startswith(C.PRE_LOGITS)]:
                params.pop(key)
                ignored[key] = f"a pooler with {config['pooler_act']!r}, not a tanh pre-logits layer"

    def export_class(self, config):
        """The ViT or DeiT classifier of a flat model config.

        Raises:
            ValueError: for a model transformers' ViT/DeiT cannot represent.

        Example:

        >>> ViTFamily().export_class({"distillation_token": True})
        'DeiTForImageClassificationWithTeacher'
        """
        hf_class = "ViTForImageClassification"
        if config.get("distillation_token", False):
            with_teacher = config.get("distillation_head", True)
            hf_class = "DeiTForImageClassificationWithTeacher" if with_teacher else "DeiTForImageClassification"
        check_structure(config, hf_class, self.STRUCTURE)
        return hf_class

    def export_sizes(self, config, hf_class):
        """An int per size where it is square, else `[height, width]`."""
        (height, width), (ph, pw) = config["image_size"], config["patch_size"]
        return (height if height == width else [height, width]), (ph if ph == pw else [ph, pw])

    def export_config(self, config, hf_class, class_names=None):
        """The shared fields, and ViT's initialisation range and masked-modelling stride."""
        out = super().export_config(config, hf_class, class_names)
        out.update(initializer_range=0.02, encoder_stride=config["patch_size"][0])
        return out
