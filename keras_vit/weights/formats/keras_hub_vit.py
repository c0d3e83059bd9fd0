"""keras-hub ViT presets (`keras_hub>ViTBackbone`, `keras_hub>ViTImageClassifier`)
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
from keras_vit.weights.formats.keras_hub_family import KerasHubFamily
from keras_vit.weights.rules import RuleTable

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


class ViTFamily(KerasHubFamily):
    """keras-hub's ViT backbone and image classifier.

    Example:

    >>> args = ViTFamily().model_arguments(
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

        >>> ViTFamily().source_name("vi_t_backbone/vit_encoder/ln/gamma")
        'vit_encoder/ln/gamma'
        """
        for root in _ROOTS:
            if root in name:
                name = name[name.index(root):]
        return name
