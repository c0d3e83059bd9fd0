"""The EoMT family: `EomtForUniversalSegmentation` and
`EomtDinov3ForUniversalSegmentation` checkpoints <-> `Segmenter(head="eomt")`.

Facts about the transformers files (`save_pretrained`, transformers 5):

- `EomtForUniversalSegmentation` (`model_type` "eomt"): a DINOv2-style
  ViT at the root, named its own way: `embeddings.cls_token`,
  `embeddings.register_tokens`, `embeddings.patch_embeddings.projection`,
  `embeddings.position_embeddings.weight` `(patches, D)` (no class-token
  row: it is added to the patch tokens only, on a fixed grid),
  `layers.{i}.` with `norm1`, `attention.{q,k,v,out}_proj`,
  `layer_scale1.lambda1`, `norm2`, `mlp.fc1`/`mlp.fc2` (or, with
  `use_swiglu_ffn`, `mlp.gate_proj`/`up_proj`/`down_proj`),
  `layer_scale2.lambda1`, and the final `layernorm`; the config holds
  DINOv2's fields (`mlp_ratio`, `layerscale_value`, `num_register_tokens`).
  The encoder is read by the DINOv2 family (`Dinov2Family`) after a
  renaming (the class token's position row is a zero row: adding nothing,
  it keeps the same model, and is folded into the class token when
  written back).
- `EomtDinov3ForUniversalSegmentation` ("eomt_dinov3"): a DINOv3 ViT
  (rotary positions, `embeddings.patch_embeddings`, `layers.{i}.` with
  `attention.{q,k,v,o}_proj`, `mlp.up_proj`/`down_proj` or gated), its
  rotary base in `rope_parameters`, read by `Dinov3Family`.
- the head, both: `query.weight` `(num_queries, D)`, `class_predictor`
  (`num_labels + 1` outputs, the last "no object"), `mask_head.fc1..fc3`,
  `upscale_block.block.{k}.conv1` (transposed 2x2), `.conv2` (depthwise
  3x3, no bias), `.layernorm2d`; the buffer `attn_mask_probs` (one per
  block with queries: the masked-attention probability, 0 in published
  checkpoints, 1 at initialisation) and `criterion.empty_weight` (the
  loss's class weights, not a model weight).

The processor (`EomtImageProcessor`) becomes a `DenseProcessing` record;
`id2label` gives the class names.
"""

import numpy as np

from keras_vit.preprocessing.dense import from_transformers, to_transformers
from keras_vit.weights.formats.conventions import torch_linear, torch_norm
from keras_vit.weights.formats.task_family import (
    TaskFamily,
    merge,
    read_head,
    refuse,
    undeclared_fields,
)
from keras_vit.families.dinov2 import TransformersDinov2 as Dinov2Family
from keras_vit.families.dinov3 import TransformersDinov3 as Dinov3Family
from keras_vit.weights.formats.transformers_family import class_names, label_config
from keras_vit.weights.rules import RuleTable
from keras_vit.families.writers import encoder_state

IGNORED = {"criterion.empty_weight": "the loss's class weights, not a model weight"}
HEAD_PREFIXES = ("queries/", "eomt_head/")
# The loss weight of the "no object" class (transformers' default `no_object_weight`).
NO_OBJECT_WEIGHT = 0.1
MASK_PROBABILITIES = "attn_mask_probs"
# Config fields of training alone (losses, point sampling, dropout, the
# DINOv3 coordinate augmentations).
TRAINING_FIELDS = frozenset((
    "hidden_dropout_prob", "attention_dropout", "drop_path_rate", "no_object_weight", "class_weight",
    "mask_weight", "dice_weight", "train_num_points", "oversample_ratio", "importance_sample_ratio",
    "pos_embed_shift", "pos_embed_jitter", "pos_embed_rescale",
))
# keras_vit's own key in an exported config.json: the segmentation tasks a
# fine-tuning trained (`Segmenter.trained_tasks`), which transformers keeps
# as an attribute no model reads.
TRAINED_TASKS = "keras_vit_trained_tasks"
SHARED_FIELDS = frozenset((
    "hidden_size", "num_hidden_layers", "num_attention_heads", "hidden_act", "layer_norm_eps", "image_size",
    "patch_size", "num_channels", "layerscale_value", "num_upscale_blocks", "num_blocks", "num_queries",
    "num_register_tokens",
)) | TRAINING_FIELDS | {TRAINED_TASKS}


def head_rules(num_upscale_blocks):
    """The rules of EoMT's head (torch names -> the `Segmenter`'s variable keys)."""
    rules = [("query.weight", "queries/queries"), (MASK_PROBABILITIES, "eomt_head/mask_probabilities")]
    rules += torch_linear("class_predictor", "eomt_head/class_predictor/")
    for i in range(3):
        rules += torch_linear(f"mask_head.fc{i + 1}", f"eomt_head/mask_mlp_{i}/")
    for k in range(num_upscale_blocks):
        block = f"upscale_block.block.{k}."
        rules += torch_linear(block + "conv1", f"eomt_head/upscale_{k}_transposed/", "conv")
        rules.append((block + "conv2.weight", f"eomt_head/upscale_{k}_depthwise/kernel", "depthwise"))
        rules += torch_norm(block + "layernorm2d", f"eomt_head/upscale_{k}_norm/")
    return tuple(rules)


def _split(state, num_layers):
    """`(encoder tensors, head tensors)` of an EoMT state dict."""
    encoder_keys = ("embeddings.", "layernorm.")
    encoder = {k: v for k, v in state.items() if k.startswith(encoder_keys) or k.startswith("layers.")}
    head = {k: v for k, v in state.items() if k not in encoder}
    return encoder, head


class _EomtFamily(TaskFamily):
    TASK = "Segmenter"
    CLASS = None

    def task_arguments(self, config, state):
        probabilities = None
        if state is not None and MASK_PROBABILITIES in state:
            probabilities = [float(p) for p in np.asarray(state[MASK_PROBABILITIES]).reshape(-1)]
        names = class_names(config)
        classes = len(config.get("id2label") or {}) or config.get("num_labels", 2)
        return dict(
            classes=classes, class_names=names, head="eomt", num_queries=config.get("num_queries", 200),
            num_blocks=config.get("num_blocks", 4), num_upscale_blocks=config.get("num_upscale_blocks", 2),
            mask_probabilities=probabilities, trained_tasks=config.get(TRAINED_TASKS),
        )

    def arguments(self, config, state=None):
        undeclared_fields(config, self.FIELDS, self.NAME)
        self.check_class(config, (self.CLASS,))
        family, backbone = self.backbone(config)
        args = dict(family.model_arguments(backbone), include_top=False, pooling=None, classifier="token")
        return "ViT", args, self.task_arguments(config, state)

    def preprocessing(self, processor):
        return from_transformers(processor)

    # Writing.

    def writes(self, model):
        return getattr(model, "head", None) == "eomt" and self._shaped(model)

    def check_export(self, model):
        if not self.writes(model):
            raise refuse(f"{self.CLASS} holds {self.ENCODER} encoders")
        family, hf_class = self.BACKBONE
        flat, _, _ = encoder_state(model, HEAD_PREFIXES)
        family.refuse_options(dict(flat, position_interpolation=self.EXPORTED_INTERPOLATION), hf_class)

    def export_files(self, model):
        family, hf_class = self.BACKBONE
        flat, encoder, head = encoder_state(model, HEAD_PREFIXES)
        pooled = dict(flat, include_top=False, pooling="token")
        fields = family.export_config(pooled, hf_class)
        config = {k: v for k, v in fields.items() if k in self.FIELDS}
        config.update(
            architectures=[self.CLASS], model_type=self.MODEL_TYPES[0], num_queries=model.num_queries,
            num_blocks=model.num_blocks, num_upscale_blocks=model.num_upscale_blocks, dtype="float32",
            **label_config(model.class_names, model.classes), **self.extra_config(fields),
        )
        if model.trained_tasks is not None:
            config[TRAINED_TASKS] = list(model.trained_tasks)
        state = self.unrename(family.export_state(encoder, hf_class, pooled))
        state.update(RuleTable(head_rules(model.num_upscale_blocks)).from_canonical(head))
        state["criterion.empty_weight"] = np.array([1.0] * model.classes + [NO_OBJECT_WEIGHT], "float32")
        processor = None if model.preprocessing is None else to_transformers(model.preprocessing, "EomtImageProcessor")
        return config, state, processor

    def extra_config(self, fields):
        return {}

    def read(self, state, config, path):
        family, backbone = self.backbone(config)
        encoder_state, head = _split(state, config["num_hidden_layers"])
        encoder = family.read(self.rename(encoder_state), backbone, path)
        params, ignored = read_head(head, head_rules(config.get("num_upscale_blocks", 2)), IGNORED)
        return merge(encoder, params, ignored, path)


class TransformersEomt(_EomtFamily):
    """transformers' EoMT on a DINOv2-style ViT.

    Example:

    >>> _, encoder, task = TransformersEomt().arguments({"model_type": "eomt", "hidden_size": 16,
    ...     "num_hidden_layers": 4, "num_attention_heads": 2, "image_size": 32, "patch_size": 8,
    ...     "num_queries": 5, "num_blocks": 2, "num_register_tokens": 2, "id2label": {"0": "a", "1": "b"}})
    >>> encoder["num_register_tokens"], task["classes"], task["class_names"], task["num_queries"]
    (2, 2, ['a', 'b'], 5)
    """

    NAME = "EoMT model"
    MODEL_TYPES = ("eomt",)
    CLASS = "EomtForUniversalSegmentation"
    FIELDS = SHARED_FIELDS | {"mlp_ratio", "use_swiglu_ffn"}
    DEFAULTS = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, hidden_act="gelu",
                    layer_norm_eps=1e-6, image_size=640, patch_size=16, num_channels=3, mlp_ratio=4,
                    layerscale_value=1.0, use_swiglu_ffn=False, num_register_tokens=4)

    def backbone(self, config):
        merged = {**self.DEFAULTS, **{k: v for k, v in config.items() if k in self.DEFAULTS}}
        registers = merged["num_register_tokens"]
        kind = "dinov2_with_registers" if registers else "dinov2"
        hf_class = "Dinov2WithRegistersModel" if registers else "Dinov2Model"
        return Dinov2Family(), dict(merged, model_type=kind, architectures=[hf_class], qkv_bias=True)

    ENCODER = "DINOv2-style (LayerScale, learned positions, class token)"
    BACKBONE = (Dinov2Family(), "Dinov2Model")
    EXPORTED_INTERPOLATION = "dinov2"

    def _shaped(self, model):
        from keras_vit.families.writers import _flat_config

        flat = _flat_config(model.encoder)
        return (flat.get("layer_scale_init") is not None and flat.get("position_embedding", "learned") == "learned"
                and flat.get("rope") is None and model.encoder.has_class_token
                and type(model.encoder).__name__ == "ViT")

    def extra_config(self, fields):
        return {"mlp_ratio": fields["mlp_ratio"], "layerscale_value": fields["layerscale_value"],
                "use_swiglu_ffn": fields["use_swiglu_ffn"]}

    @staticmethod
    def unrename(state):
        """DINOv2's names back to EoMT's: the class token's position row
        folded into the token, the mask token dropped."""
        out = {}
        names = {"attention.query": "q_proj", "attention.key": "k_proj", "attention.value": "v_proj",
                 "output.dense": "out_proj"}
        for key, value in state.items():
            if key == "embeddings.mask_token":
                continue
            if key == "embeddings.position_embeddings":
                out["embeddings.position_embeddings.weight"] = value[0, 1:]
                continue
            if not key.startswith("encoder.layer."):
                out[key] = value
                continue
            index, rest = key[len("encoder.layer."):].split(".", 1)
            part, _, leaf = rest.rpartition(".")
            prefix = f"layers.{index}."
            inner = part.split(".", 1)[1] if part.startswith("attention.") else None
            if inner in names:
                out[f"{prefix}attention.{names[inner]}.{leaf}"] = value
            elif part == "mlp.weights_in":
                gate, up = np.split(value, 2)
                out[f"{prefix}mlp.gate_proj.{leaf}"], out[f"{prefix}mlp.up_proj.{leaf}"] = gate, up
            elif part == "mlp.weights_out":
                out[f"{prefix}mlp.down_proj.{leaf}"] = value
            else:
                out[prefix + rest] = value
        if "embeddings.position_embeddings" in state:
            out["embeddings.cls_token"] = state["embeddings.cls_token"] + state["embeddings.position_embeddings"][:, :1]
        return out

    @staticmethod
    def rename(state):
        """EoMT's encoder tensors under DINOv2's names (see the module docstring)."""
        out = {}
        names = {"q_proj": "attention.query", "k_proj": "attention.key", "v_proj": "attention.value",
                 "out_proj": "output.dense"}
        gates = {}
        for key, value in state.items():
            if key == "embeddings.position_embeddings.weight":
                zero = np.zeros((1, value.shape[-1]), value.dtype)
                out["embeddings.position_embeddings"] = np.concatenate([zero, value])[None]
                continue
            if not key.startswith("layers."):
                out[key] = value
                continue
            _, index, rest = key.split(".", 2)
            prefix = f"encoder.layer.{index}."
            part, _, leaf = rest.rpartition(".")
            if part.startswith("attention.") and part.split(".", 1)[1] in names:
                out[f"{prefix}attention.{names[part.split('.', 1)[1]]}.{leaf}"] = value
            elif part in ("mlp.gate_proj", "mlp.up_proj"):
                gates.setdefault((prefix, leaf), {})[part] = value
            elif part == "mlp.down_proj":
                out[f"{prefix}mlp.weights_out.{leaf}"] = value
            else:
                out[prefix + rest] = value
        for (prefix, leaf), pair in gates.items():
            if len(pair) == 2:
                out[f"{prefix}mlp.weights_in.{leaf}"] = np.concatenate([pair["mlp.gate_proj"], pair["mlp.up_proj"]])
            else:  # one half alone: kept under its name, reported as unexpected
                out.update({f"{prefix}{k}.{leaf}": v for k, v in pair.items()})
        return out


class TransformersEomtDinov3(_EomtFamily):
    """transformers' EoMT on a DINOv3 ViT.

    Example:

    >>> _, encoder, task = TransformersEomtDinov3().arguments({"model_type": "eomt_dinov3",
    ...     "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2,
    ...     "image_size": 32, "patch_size": 8, "num_queries": 5, "num_blocks": 2,
    ...     "rope_parameters": {"rope_theta": 100.0, "rope_type": "default"}})
    >>> encoder["rope"], encoder["qkv_bias"], task["num_blocks"]
    ('dinov3', (True, False, True), 2)
    """

    NAME = "EoMT-DINOv3 model"
    MODEL_TYPES = ("eomt_dinov3",)
    CLASS = "EomtDinov3ForUniversalSegmentation"
    FIELDS = SHARED_FIELDS | {"intermediate_size", "rope_parameters", "query_bias", "key_bias", "value_bias",
                              "proj_bias", "mlp_bias", "use_gated_mlp", "rope_theta"}
    DEFAULTS = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                    hidden_act="gelu", layer_norm_eps=1e-6, image_size=640, patch_size=16, num_channels=3,
                    layerscale_value=1.0, num_register_tokens=4, query_bias=True, key_bias=False, value_bias=True,
                    proj_bias=True, mlp_bias=True, use_gated_mlp=False)

    def backbone(self, config):
        merged = {**self.DEFAULTS, **{k: v for k, v in config.items() if k in self.DEFAULTS}}
        rope = config.get("rope_parameters") or {"rope_theta": config.get("rope_theta", 100.0), "rope_type": "default"}
        if rope.get("rope_type", "default") != "default" or set(rope) - {"rope_theta", "rope_type"}:
            raise self.unsupported(f"rope_parameters must be the default rotary embedding. Received: {rope!r}")
        return Dinov3Family(), dict(merged, model_type="dinov3_vit", architectures=["DINOv3ViTModel"],
                                    rope_theta=float(rope.get("rope_theta", 100.0)))

    ENCODER = "DINOv3 (rotary positions)"
    BACKBONE = (Dinov3Family(), "DINOv3ViTModel")
    EXPORTED_INTERPOLATION = "dinov2"

    def _shaped(self, model):
        from keras_vit.families.writers import _flat_config

        return _flat_config(model.encoder).get("rope") == "dinov3" and type(model.encoder).__name__ == "ViT"

    def extra_config(self, fields):
        keys = ("intermediate_size", "query_bias", "key_bias", "value_bias", "proj_bias", "mlp_bias",
                "layerscale_value", "use_gated_mlp", "num_register_tokens")
        out = {k: fields[k] for k in keys if k in fields}
        out["rope_parameters"] = {"rope_theta": fields.get("rope_theta", 100.0), "rope_type": "default"}
        return out

    @staticmethod
    def unrename(state):
        """DINOv3's names back to EoMT-DINOv3's (the mask token dropped)."""
        out = {}
        for key, value in state.items():
            if key == "embeddings.mask_token":
                continue
            if key.startswith("layer."):
                key = "layers." + key[len("layer."):]
            elif key.startswith("norm."):
                key = "layernorm." + key[len("norm."):]
            out[key] = value
        return out

    @staticmethod
    def rename(state):
        """EoMT-DINOv3's encoder tensors under DINOv3's names."""
        out = {}
        for key, value in state.items():
            if key.startswith("layers."):
                key = "layer." + key[len("layers."):]
            elif key.startswith("layernorm."):
                key = "norm." + key[len("layernorm."):]
            out[key] = value
        return out


TRANSFORMERS_EOMT_FAMILIES = (TransformersEomt(), TransformersEomtDinov3())
