"""ViT and DeiT: the family's checkpoints in every layout keras_vit reads (transformers, keras-hub).

transformers ViT and DeiT directories <-> the canonical layout, read and written.

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

keras-hub ViT presets (`keras_hub>ViTBackbone`, `keras_hub>ViTImageClassifier`)
-> the canonical layout.

Facts about the files (`save_to_preset` of `keras_hub.models.ViTBackbone`
or `ViTImageClassifier`):

- `config.json`: `image_shape`, `patch_size`, `num_layers`, `num_heads`,
  `hidden_dim`, `mlp_dim`, `layer_norm_epsilon`, `use_class_token`,
  `use_mha_bias`, `use_mlp_bias`, `use_patch_bias`;
- a classifier's `task.json` ("keras_hub>ViTImageClassifier"):
  `num_classes`, `pooling` "token"/"gap", `intermediate_dim` (a Dense+tanh
  pre-logits layer), `activation`;
- variables: `vit_patching_and_embedding/` (class token, HWIO patch
  convolution, position table), `vit_encoder/transformer_block_{i}/`
  numbered from 1 (`ln_1`, a Keras `MultiHeadAttention` `mha`, `ln_2`,
  `mlp/dense_1`, `mlp/dense_2`), `vit_encoder/ln`, and the task's
  `pre_logits` and `predictions`. keras-hub's kernels already have
  keras_vit's layouts; its MLP uses Keras' "gelu", the exact erf GELU.
"""

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.conventions import keras_block, keras_dense, keras_norm
from keras_vit.weights.formats.conventions import torch_block, torch_linear, torch_norm
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.formats.transformers_family import (
    VIT_FIELDS,
    TransformersClass,
    TransformersFamily,
    check_structure,
)
from keras_vit.weights.rules import RuleTable

# --- transformers ------------------------------------------------------------

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


class TransformersViT(TransformersFamily):
    """transformers' ViT and DeiT: the family a model no other recognises is written as.

    Example:

    >>> args = TransformersViT().model_arguments({
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

        >>> TransformersViT().export_class({"distillation_token": True})
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


# --- keras-hub ---------------------------------------------------------------

_EMBED = "vit_patching_and_embedding/"
# The roots of the encoder's variables, whatever keras-hub puts before them.
_ROOTS = (_EMBED, "vit_encoder/")
RULES = (
    (_EMBED + "class_token", C.CLS),
    *keras_dense(_EMBED + "patch_embedding", C.EMBEDDING),
    (_EMBED + "position_embedding/embeddings", C.POSEMB, "batch"),
    *keras_block("vit_encoder/transformer_block_{i}/", "ln_1", "mha", "ln_2", "mlp/dense_1", "mlp/dense_2"),
    *keras_norm("vit_encoder/ln", C.ENCODER_NORM),
    *keras_dense("pre_logits", C.PRE_LOGITS),
    *keras_dense("predictions", C.HEAD),
)


class KerasHubViT(KerasHubFamily):
    """keras-hub's ViT backbone and image classifier.

    Example:

    >>> args = KerasHubViT().model_arguments(
    ...     {"registered_name": "keras_hub>ViTBackbone", "config": {"image_shape": [32, 32, 3],
    ...      "patch_size": 8, "num_layers": 1, "num_heads": 2, "hidden_dim": 16, "mlp_dim": 32}},
    ...     {"registered_name": "keras_hub>ViTImageClassifier", "config": {"num_classes": 3}})
    >>> args["input_shape"], args["classifier"], args["classes"]
    ((32, 32, 3), 'token', 3)
    """

    NAME = "preset"
    REGISTERED = ("keras_hub>ViTBackbone",)
    TASKS = ("keras_hub>ViTImageClassifier",)
    # keras-hub numbers its blocks from 1.
    TABLE = RuleTable(RULES, index_offset=1)

    def encoder_arguments(self, config, shape):
        for flag in ("use_mha_bias", "use_mlp_bias"):
            if not config.get(flag, True):
                raise self.unsupported(f"keras_vit layers always have these biases. Received: {flag}=False")
        return dict(
            self.backbone_arguments(config, shape),
            mlp_dim=config["mlp_dim"],
            layer_norm_epsilon=config.get("layer_norm_epsilon", 1e-6),
            mlp_activation="gelu",
            classifier="token" if config.get("use_class_token", True) else "gap",
            dropout_rate=config.get("dropout_rate", 0.0),
            attention_dropout_rate=config.get("attention_dropout", 0.0),
            patch_bias=bool(config.get("use_patch_bias", True)),
        )

    def task_arguments(self, task, args):
        pooling = task.get("pooling", "token")
        if pooling == "gap" and args["classifier"] == "token":
            raise self.unsupported(
                "pooling='gap' averages the class token with the patches, which "
                "no keras_vit classifier does."
            )
        if pooling not in ("token", "gap"):
            raise self.unsupported(f"pooling must be 'token' or 'gap'. Received: pooling={pooling!r}")
        return dict(
            include_top=True,
            classes=task["num_classes"],
            representation_size=task.get("intermediate_dim"),
            classifier_activation=task.get("activation"),
        )

    def variable_prefixes(self, backbone):
        return {"": None}

    def source_name(self, name):
        """A variable's path from the first of its encoder roots on (a task's
        head keeps its path).

        Example:

        >>> KerasHubViT().source_name("vi_t_backbone/vit_encoder/ln/gamma")
        'vit_encoder/ln/gamma'
        """
        for root in _ROOTS:
            if root in name:
                name = name[name.index(root):]
        return name
