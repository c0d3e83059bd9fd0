"""The DPT family: Depth Anything, DPT and CHMv2 checkpoints <-> `DepthEstimator`.

Facts about the transformers files (`save_pretrained`, transformers 5):

- `DepthAnythingForDepthEstimation` (`model_type` "depth_anything"): a DINOv2
  backbone under `backbone.` (DINOv2's own names, `backbone_config` a DINOv2
  config whose `out_indices` count the embeddings as stage 0, so stage `k` is
  block `k - 1`; `apply_layernorm` puts the final norm on the features),
  `neck.reassemble_stage.layers.{i}.projection` (1x1) and `.resize`
  (transposed convolution of the factor, or a strided 3x3 one),
  `neck.convs.{i}` (3x3, no bias), `neck.fusion_stage.layers.{i}` with
  `residual_layer1`/`residual_layer2` (`convolution1`, `convolution2`) and
  `projection` (the first block's `residual_layer1` is never used), and
  `head.conv1`/`conv2`/`conv3`. The class token is dropped (only the first
  token: no register tokens); the fusion resizes to the next level's size;
  the head resizes to the patch grid times the patch size; ReLU
  ("relative") or sigmoid ("metric"), times `max_depth`.
- `DPTForDepthEstimation` ("dpt"): a ViT under `dpt.` (ViT's names, no
  pooler) whose raw block outputs `backbone_out_indices` are read (no final
  norm), or a DINOv2 backbone under `backbone.` (`backbone_config`);
  `neck.reassemble_stage.readout_projects.{i}.0` (the class token
  concatenated and projected, `readout_type="project"`); every fusion block
  doubles its map; `head.head.0`/`.2`/`.4` (widths `F/2`, 32, 1), an
  optional `head.projection`; batch norm in the fusion units where
  `use_batch_norm_in_fusion_residual`. Position embeddings are resized
  bilinearly (`position_interpolation="dpt"`).
- `CHMv2ForDepthEstimation` ("chmv2"): a DINOv3 backbone under `backbone.`
  (features after its norm, with their class tokens), the neck under
  `head.` (`reassemble_stage`, `convs`, `fusion_layers.{i}`: the first
  without `residual_layer1`), `head.conv_depth.head.0`/`.2`/`.4` to
  `number_output_channels` bin logits, turned into depth by `DepthBins`.

The processors (`preprocessor_config.json`, `DPTImageProcessor`,
`CHMv2ImageProcessor`) become `DenseProcessing` records
(`keras_vit.preprocessing.dense`). Written back
(`DepthEstimator.save_to_preset(format="transformers")`): Depth Anything
and CHMv2 models, and DPT on a plain ViT.
"""

import numpy as np

from keras_vit.preprocessing.dense import from_transformers, to_transformers
from keras_vit.weights.formats.conventions import torch_linear
from keras_vit.weights.formats.task_family import (
    TaskFamily,
    merge,
    read_head,
    refuse,
    split_prefix,
    undeclared_fields,
)
from keras_vit.weights.rules import RuleTable
from keras_vit.families.bit import BIT_DEFAULTS, bit_rules
from keras_vit.families.writers import encoder_state
from keras_vit.families.dinov2 import TransformersDinov2 as Dinov2Family
from keras_vit.families.dinov3 import TransformersDinov3 as Dinov3Family
from keras_vit.families.vit import TransformersViT as ViTFamily

# What the neck's and head's tensors are called in each family's state dict:
# the neck's prefix, its fusion blocks, the head's convolutions in order.
LAYOUTS = {
    "depth_anything": dict(neck="neck.", fusion="fusion_stage.layers", head=("head.conv1", "head.conv2", "head.conv3")),
    "dpt": dict(neck="neck.", fusion="fusion_stage.layers", head=("head.head.0", "head.head.2", "head.head.4")),
    "chmv2": dict(neck="head.", fusion="fusion_layers",
                  head=("head.conv_depth.head.0", "head.conv_depth.head.2", "head.conv_depth.head.4")),
}
IGNORED = {"num_batches_tracked": "a batch-norm step counter, not a weight"}
# The top-level names of a `DepthEstimator`'s own layers (the rest is the encoder's).
HEAD_PREFIXES = ("neck/", "depth_head/")


def _batch_norm(source, target):
    return (
        (f"{source}.weight", target + "scale"), (f"{source}.bias", target + "bias"),
        (f"{source}.running_mean", target + "moving_mean"), (f"{source}.running_var", target + "moving_variance"),
    )


def neck_rules(style, factors, skip_levels=0, readout="ignore", batch_norm=False, projection=False):
    """The rules of a DPT neck and depth head's tensors (torch names ->
    the `DepthEstimator`'s variable keys), for `len(factors)` levels."""
    layout = LAYOUTS[style]
    neck, fusion = layout["neck"], layout["neck"] + layout["fusion"]
    rules = []
    for i, factor in enumerate(factors):
        if i >= skip_levels:
            stage = f"{neck}reassemble_stage."
            rules += torch_linear(f"{stage}layers.{i}.projection", f"neck/projection_{i}/", "conv")
            if factor != 1:
                target = f"neck/resize_{i}/" + ("conv/" if factor < 1 else "")
                rules += torch_linear(f"{stage}layers.{i}.resize", target, "conv")
            if readout == "project":
                rules += torch_linear(f"{stage}readout_projects.{i}.0", f"neck/readout_{i}/")
        rules.append((f"{neck}convs.{i}.weight", f"neck/conv_{i}/kernel", "conv"))
    for i in range(len(factors)):
        for unit in (1, 2):
            if unit == 1 and i == 0 and style == "chmv2":
                continue
            source, target = f"{fusion}.{i}.residual_layer{unit}", f"neck/fusion_{i}_unit_{unit}/"
            for conv in (1, 2):
                rules += torch_linear(f"{source}.convolution{conv}", f"{target}conv_{conv}/", "conv")
                if batch_norm:
                    rules += _batch_norm(f"{source}.batch_norm{conv}", f"{target}norm_{conv}/")
        rules += torch_linear(f"{fusion}.{i}.projection", f"neck/fusion_{i}_projection/", "conv")
    for i, name in enumerate(layout["head"]):
        rules += torch_linear(name, f"depth_head/conv_{i + 1}/", "conv")
    if projection:
        rules += torch_linear("head.projection", "depth_head/projection/", "conv")
    return tuple(rules)


def stage_blocks(config, family):
    """The blocks a transformers backbone config's `out_indices` (or
    `out_features`) names: stage `k` is the output of block `k - 1`."""
    indices = config.get("out_indices")
    if indices is None and config.get("out_features"):
        indices = [int(name.replace("stage", "")) for name in config["out_features"]]
    if indices is None:
        indices = [config["num_hidden_layers"]]
    if not all(isinstance(k, int) and 1 <= k <= config["num_hidden_layers"] for k in indices):
        raise family.unsupported(
            f"`out_indices` must name blocks' stages, 1..{config['num_hidden_layers']} (stage 0, the "
            f"embeddings, has no block). Received: out_indices={indices!r}"
        )
    return [k - 1 for k in indices]


def _encoder_only(args):
    """A backbone family's `ViT` arguments as a task's encoder: every token out."""
    return dict(args, include_top=False, pooling=None, classifier="token")


class DptTaskFamily(TaskFamily):
    """What the three transformers DPT families share."""

    TASK = "DepthEstimator"
    STYLE = None
    BACKBONE_PREFIX = "backbone."

    def read(self, state, config, path):
        encoder_family, backbone, prefix = self.backbone(config)
        inside, head = split_prefix(state, prefix)
        encoder = encoder_family.read(inside, backbone, path)
        _, _, task = self.arguments(config)
        rules = neck_rules(
            self.STYLE, task["reassemble_factors"], len(task["neck_channels"]) - len(task["feature_blocks"]),
            task["readout"], task.get("fusion_batch_norm", False), task.get("head_projection", False),
        )
        params, ignored = read_head(head, rules, IGNORED)
        return merge(encoder, params, ignored, path)

    def preprocessing(self, processor):
        """The `DenseProcessing` record of a `preprocessor_config.json` dict."""
        return from_transformers(processor)

    def backbone(self, config):
        """`(its TransformersFamily, its config with a class, its prefix)` of the encoder."""
        backbone = dict(config["backbone_config"])
        kind = backbone.get("model_type")
        families = {"dinov2": (Dinov2Family(), "Dinov2Backbone"), "dinov3_vit": (Dinov3Family(), "DINOv3ViTBackbone")}
        if kind not in families:
            raise self.unsupported(
                f"the backbone must be one of {sorted(families)}. Received: backbone_config.model_type={kind!r}"
            )
        family, hf_class = families[kind]
        return family, dict(backbone, architectures=[hf_class]), self.BACKBONE_PREFIX

    def backbone_arguments(self, config):
        family, backbone, _ = self.backbone(config)
        return "ViT", _encoder_only(family.model_arguments(backbone)), backbone

    # Writing.

    HF_CLASS = None
    BACKBONE = None  # (family, its transformers class) of the written backbone

    def writes(self, model):
        return getattr(model, "style", None) == self.STYLE and hasattr(model, "depth_head")

    def _check_common(self, model, depths):
        if model.depth not in depths:
            raise refuse(f"{self.HF_CLASS} predicts {' or '.join(depths)} depth. Received: depth={model.depth!r}")
        if model.skip_levels or type(model.encoder).__name__ != "ViT":
            raise refuse(f"{self.HF_CLASS} is written on a plain ViT (hybrids are read, not written)")

    def _check_backbone(self, model):
        family, hf_class = self.BACKBONE
        flat, _, _ = encoder_state(model, HEAD_PREFIXES)
        if family.export_class(dict(flat, include_top=False, pooling="token")) != hf_class:
            raise refuse(f"the encoder is not shaped like {hf_class}")
        family.refuse_options(flat, hf_class)
        return flat

    def _head_state(self, model, head):
        rules = neck_rules(self.STYLE, model.neck.reassemble_factors, model.skip_levels, model.readout,
                           model.neck.fusion_batch_norm, model.head_projection)
        state = RuleTable(rules).from_canonical(head)
        for key in [k for k in state if k.endswith(".running_mean")]:
            # PyTorch's batch-norm step counter, which keras_vit does not keep.
            state[key.replace(".running_mean", ".num_batches_tracked")] = np.zeros((), "int64")
        return state

    def _backbone_files(self, model):
        """`(backbone_config, backbone state under backbone.)`."""
        family, hf_class = self.BACKBONE
        flat, encoder, head = encoder_state(model, HEAD_PREFIXES)
        pooled = dict(flat, include_top=False, pooling="token")
        backbone = family.export_config(pooled, hf_class)
        backbone.pop("architectures", None)
        backbone.update(out_indices=[b + 1 for b in model.feature_blocks], apply_layernorm=model.feature_norm)
        state = {f"backbone.{k}": v for k, v in family.export_state(encoder, hf_class, pooled).items()}
        state.update(self._head_state(model, head))
        return backbone, state

    @staticmethod
    def _factors(model):
        # transformers sizes its convolutions from these: ints where whole.
        return [int(f) if f == int(f) else f for f in model.neck.reassemble_factors]

    def _processor(self, model):
        return None if model.preprocessing is None else to_transformers(model.preprocessing, PROCESSORS[self.STYLE])


class TransformersDepthAnything(DptTaskFamily):
    """transformers' Depth Anything (V1 and V2, relative and metric).

    Example:

    >>> family = TransformersDepthAnything()
    >>> _, encoder, task = family.arguments({"model_type": "depth_anything", "backbone_config": {
    ...     "model_type": "dinov2", "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2,
    ...     "out_indices": [3, 4], "reshape_hidden_states": False}, "reassemble_hidden_size": 16,
    ...     "neck_hidden_sizes": [8, 16], "reassemble_factors": [2, 0.5], "fusion_hidden_size": 8})
    >>> task["feature_blocks"], task["style"], encoder["num_layers"]
    ([2, 3], 'depth_anything', 4)
    """

    NAME = "Depth Anything model"
    MODEL_TYPES = ("depth_anything",)
    STYLE = "depth_anything"
    FIELDS = frozenset((
        "backbone_config", "patch_size", "reassemble_hidden_size", "reassemble_factors", "neck_hidden_sizes",
        "fusion_hidden_size", "head_in_index", "head_hidden_size", "depth_estimation_type", "max_depth",
        "backbone", "use_pretrained_backbone", "use_timm_backbone", "backbone_kwargs",
    ))

    def arguments(self, config, state=None):
        undeclared_fields(config, self.FIELDS, self.NAME)
        self.check_class(config, ("DepthAnythingForDepthEstimation",))
        if config.get("backbone") or config.get("use_timm_backbone"):
            raise self.unsupported("the backbone must be given by `backbone_config`, not by name.")
        encoder_class, encoder, backbone = self.backbone_arguments(config)
        if backbone.get("reshape_hidden_states", True) or encoder.get("num_register_tokens"):
            raise self.unsupported(
                "Depth Anything drops one prefix token from token sequences: the backbone must return "
                "tokens (reshape_hidden_states=False) and have no register tokens."
            )
        if config.get("head_in_index", -1) != -1:
            raise self.unsupported(f"head_in_index must be -1. Received: {config['head_in_index']!r}")
        if config.get("reassemble_hidden_size", encoder["hidden_size"]) != encoder["hidden_size"]:
            raise self.unsupported("reassemble_hidden_size must be the backbone's hidden_size.")
        kind = config.get("depth_estimation_type", "relative")
        task = dict(
            feature_blocks=stage_blocks(backbone, self), neck_channels=list(config.get("neck_hidden_sizes", (48, 96, 192, 384))),
            reassemble_factors=list(config.get("reassemble_factors", (4, 2, 1, 0.5))),
            fusion_size=config.get("fusion_hidden_size", 64), style=self.STYLE, readout="ignore",
            feature_norm=bool(backbone.get("apply_layernorm", True)), head_size=config.get("head_hidden_size", 32),
            depth=kind, max_depth=float(config.get("max_depth") or 1),
        )
        return encoder_class, encoder, task

    HF_CLASS = "DepthAnythingForDepthEstimation"
    BACKBONE = (Dinov2Family(), "Dinov2Model")

    def check_export(self, model):
        self._check_common(model, ("relative", "metric"))
        flat = self._check_backbone(model)
        if model.readout != "ignore" or flat.get("num_register_tokens", 0) or model.head_projection:
            raise refuse(f"{self.HF_CLASS} drops the class token, has no register tokens and no head projection")
        if model.neck.fusion_batch_norm:
            raise refuse(f"{self.HF_CLASS} has no batch norm in its fusion blocks")
        if model.max_depth != int(model.max_depth):
            raise refuse(f"{self.HF_CLASS}'s config holds max_depth as an int. Received: {model.max_depth}")

    def export_files(self, model):
        backbone, state = self._backbone_files(model)
        backbone["reshape_hidden_states"] = False
        config = {
            "architectures": [self.HF_CLASS], "model_type": "depth_anything", "backbone_config": backbone,
            "patch_size": model.encoder.patch_size[0], "reassemble_hidden_size": model.encoder.hidden_size,
            "reassemble_factors": self._factors(model),
            "neck_hidden_sizes": list(model.neck.neck_channels), "fusion_hidden_size": model.neck.fusion_size,
            "head_in_index": -1, "head_hidden_size": model.head_size, "depth_estimation_type": model.depth,
            "max_depth": int(model.max_depth), "dtype": "float32",
        }
        return config, state, self._processor(model)


class TransformersDpt(DptTaskFamily):
    """transformers' DPT for depth, on a ViT (or a DINOv2 backbone).

    Example:

    >>> _, encoder, task = TransformersDpt().arguments({"model_type": "dpt", "hidden_size": 16,
    ...     "num_hidden_layers": 4, "num_attention_heads": 2, "intermediate_size": 32,
    ...     "image_size": 32, "patch_size": 8, "neck_hidden_sizes": [8, 8, 16, 16]})
    >>> task["readout"], task["feature_blocks"], encoder["position_interpolation"]
    ('project', [2, 5, 8, 11], 'dpt')
    """

    NAME = "DPT model"
    MODEL_TYPES = ("dpt",)
    STYLE = "dpt"
    FIELDS = frozenset((
        "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
        "hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps", "image_size", "patch_size",
        "num_channels", "is_hybrid", "qkv_bias", "backbone_out_indices", "readout_type", "reassemble_factors",
        "neck_hidden_sizes", "fusion_hidden_size", "head_in_index", "use_batch_norm_in_fusion_residual",
        "use_bias_in_fusion_residual", "add_projection", "use_auxiliary_head", "auxiliary_loss_weight",
        "semantic_loss_ignore_index", "semantic_classifier_dropout", "backbone_featmap_shape",
        "neck_ignore_stages", "backbone_config", "pooler_output_size", "pooler_act", "backbone",
        "use_pretrained_backbone", "use_timm_backbone", "backbone_kwargs",
    ))
    VIT_DEFAULTS = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                        hidden_act="gelu", layer_norm_eps=1e-12, image_size=384, patch_size=16, num_channels=3,
                        qkv_bias=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

    def _vit_config(self, config):
        vit = {k: config.get(k, v) if config.get(k) is not None else v for k, v in self.VIT_DEFAULTS.items()}
        return dict(vit, model_type="vit", architectures=["ViTModel"])

    def backbone(self, config):
        if config.get("backbone_config") and not config.get("is_hybrid"):
            return super().backbone(config)
        return ViTFamily(), self._vit_config(config), "dpt."

    def read(self, state, config, path):
        if not config.get("is_hybrid"):
            return super().read(state, config, path)
        # The BiT stem to the canonical ResNet keys; the rest is a ViT's,
        # its patch embedding the 1x1 projection of the stem's map.
        stem, rest = split_prefix(state, "dpt.embeddings.backbone.bit.")
        params, _ = read_head(stem, bit_rules(config["backbone_config"]["depths"]), {})
        renamed = {k.replace("dpt.embeddings.projection.", "dpt.embeddings.patch_embeddings.projection."): v
                   for k, v in rest.items()}
        checkpoint = super().read(renamed, config, path)
        return merge(checkpoint, params, {}, path)

    def _hybrid_arguments(self, config):
        """`ViTHybrid` arguments of a DPT-Hybrid config (a BiT stem of three stages)."""
        bit = dict(BIT_DEFAULTS, **(config.get("backbone_config") or {}))
        width = bit["embedding_size"] / 64
        expected = [int(64 * width) * 4 * 2**s for s in range(len(bit["depths"]))]
        checks = {
            "layer_type": (bit["layer_type"], "bottleneck"), "global_padding": (str(bit["global_padding"]).upper(), "SAME"),
            "embedding_dynamic_padding": (bit["embedding_dynamic_padding"], True), "num_groups": (bit["num_groups"], 32),
            "hidden_sizes": (list(bit["hidden_sizes"]), expected), "hidden_act": (bit["hidden_act"], "relu"),
        }
        for field, (value, wanted) in checks.items():
            if value != wanted:
                raise self.unsupported(f"the BiT stem must have {field}={wanted!r} (keras_vit's ResNet). "
                                       f"Received: backbone_config.{field}={value!r}")
        args = _encoder_only(ViTFamily().model_arguments(self._vit_config(config)))
        stride = 4 * 2 ** (len(bit["depths"]) - 1)
        patch = config.get("patch_size", 16)
        if patch % stride:
            raise self.unsupported(f"patch_size must be a multiple of the stem's stride {stride}. Received: {patch}")
        args.update(resnet_layers=list(bit["depths"]), resnet_width=width, patch_size=patch // stride,
                    resnet_numerics="timm", position_interpolation="dpt")
        return args

    def arguments(self, config, state=None):
        undeclared_fields(config, self.FIELDS, self.NAME)
        self.check_class(config, ("DPTForDepthEstimation",))
        if config.get("backbone") or config.get("use_timm_backbone"):
            raise self.unsupported("the backbone must be given by `backbone_config`, not by name.")
        if config.get("head_in_index", -1) != -1:
            raise self.unsupported(f"head_in_index must be -1. Received: {config['head_in_index']!r}")
        if config.get("is_hybrid"):
            encoder_class, encoder = "ViTHybrid", self._hybrid_arguments(config)
            indices = list(config.get("backbone_out_indices") or (2, 5, 8, 11))
            blocks, norm = indices[2:], False
            if config.get("readout_type", "project") != "project" or list(config.get("neck_ignore_stages", [0, 1])) != [0, 1]:
                raise self.unsupported("DPT-Hybrid reads out by projection and skips the first two levels.")
        elif config.get("backbone_config"):
            encoder_class, encoder, backbone = self.backbone_arguments(config)
            blocks, norm = stage_blocks(backbone, self), bool(backbone.get("apply_layernorm", True))
            if backbone.get("reshape_hidden_states", True):
                raise self.unsupported("the backbone must return tokens (reshape_hidden_states=False).")
        else:
            encoder_class = "ViT"
            encoder = _encoder_only(ViTFamily().model_arguments(self._vit_config(config)))
            encoder["position_interpolation"] = "dpt"
            blocks, norm = list(config.get("backbone_out_indices") or (2, 5, 8, 11)), False
        batch_norm = bool(config.get("use_batch_norm_in_fusion_residual", False))
        if config.get("use_bias_in_fusion_residual") not in (None, not batch_norm):
            raise self.unsupported("use_bias_in_fusion_residual must be None or the opposite of batch norm.")
        task = dict(
            feature_blocks=blocks, neck_channels=list(config.get("neck_hidden_sizes", (96, 192, 384, 768))),
            reassemble_factors=list(config.get("reassemble_factors", (4, 2, 1, 0.5))),
            fusion_size=config.get("fusion_hidden_size", 256), style=self.STYLE,
            readout=config.get("readout_type", "project"), feature_norm=norm, head_size=32,
            head_projection=bool(config.get("add_projection", False)), depth="relative",
            fusion_batch_norm=batch_norm,
        )
        return encoder_class, encoder, task

    HF_CLASS = "DPTForDepthEstimation"

    def check_export(self, model):
        from keras_vit.families.writers import _flat_config

        self._check_common(model, ("relative",))
        flat = _flat_config(model.encoder)
        if model.feature_norm or model.head_size != 32 or flat.get("position_interpolation") != "dpt":
            raise refuse(f"{self.HF_CLASS} on a ViT reads raw block outputs (feature_norm=False), has a 32-wide "
                         "head and resizes positions bilinearly (position_interpolation='dpt')")
        if flat.get("layer_scale_init") is not None or flat.get("num_register_tokens", 0):
            raise refuse(f"{self.HF_CLASS}'s ViT has no LayerScale and no register tokens")
        ViTFamily().refuse_options(dict(flat, position_interpolation="official"), "ViTModel")
        if model.head_projection and model.neck.fusion_size != 256:
            raise refuse(f"{self.HF_CLASS}'s head projection is 256 wide. Received: fusion_size={model.neck.fusion_size}")

    def export_files(self, model):
        flat, encoder, head = encoder_state(model, HEAD_PREFIXES)
        family = ViTFamily()
        vit = family.export_config(dict(flat, include_top=False), "ViTModel")
        for key in ("architectures", "model_type", "encoder_stride"):
            vit.pop(key, None)
        config = dict(
            vit, architectures=[self.HF_CLASS], model_type="dpt", is_hybrid=False,
            backbone_out_indices=list(model.feature_blocks), readout_type=model.readout,
            reassemble_factors=self._factors(model), neck_hidden_sizes=list(model.neck.neck_channels),
            fusion_hidden_size=model.neck.fusion_size, head_in_index=-1,
            use_batch_norm_in_fusion_residual=model.neck.fusion_batch_norm, add_projection=model.head_projection,
        )
        state = {f"dpt.{k}": v for k, v in family.rule_table("ViTModel").from_canonical(encoder).items()}
        state.update(self._head_state(model, head))
        return config, state, self._processor(model)


# CHMv2, DPT on DINOv3, is `families.chmv2`; `families.task_source` lists it after these.
TRANSFORMERS_DPT_FAMILIES = (TransformersDepthAnything(), TransformersDpt())
# The processor class each family's directory holds.
PROCESSORS = {"depth_anything": "DPTImageProcessor", "dpt": "DPTImageProcessor", "chmv2": "CHMv2ImageProcessor"}



def _keras_hub_rules(factors):
    """keras-hub's Depth Anything neck and head variables -> the `DepthEstimator`'s
    (both Keras layouts: renames only)."""
    rules = []
    for i, factor in enumerate(factors):
        stage = f"neck/reassemble_stage_{i}/"
        for leaf in ("kernel", "bias"):
            rules.append((f"{stage}projection/{leaf}", f"neck/projection_{i}/{leaf}"))
            if factor != 1:
                rules.append((f"{stage}resize/{leaf}", f"neck/resize_{i}/" + ("conv/" if factor < 1 else "") + leaf))
        rules.append((f"neck/convs_{i}/kernel", f"neck/conv_{i}/kernel"))
        fusion = f"neck/fusion_stage_{i}/"
        for leaf in ("kernel", "bias"):
            for unit in (1, 2):
                for conv in (1, 2):
                    rules.append((f"{fusion}residual_layer{unit}/convolution{conv}/{leaf}",
                                  f"neck/fusion_{i}_unit_{unit}/conv_{conv}/{leaf}"))
            rules.append((f"{fusion}projection/{leaf}", f"neck/fusion_{i}_projection/{leaf}"))
    for conv in (1, 2, 3):
        for leaf in ("kernel", "bias"):
            rules.append((f"head/conv{conv}/{leaf}", f"depth_head/conv_{conv}/{leaf}"))
    return tuple(rules)


class KerasHubDepthAnything:
    """keras-hub's Depth Anything presets (`keras_hub>DepthEstimator` on a
    `keras_hub>DepthAnythingBackbone` with a `DINOV2Backbone` image encoder).

    The image encoder is read by keras_vit's keras-hub DINOv2 family
    (`families.dinov2`); the neck and head are keras-hub's
    port of transformers' (`DepthAnythingNeck`, the fusion resizing to the
    next level's size) under `neck/` and `head/`; `feature_keys` name
    the image encoder's `stageK` outputs (block `K - 1`), after its final
    norm where `apply_layernorm`; the task adds ReLU ("relative") or
    sigmoid times `max_depth` ("metric"); a preset without `task.json` (the
    published ones: the backbone alone) is read as the relative-depth model
    it was converted from. The image converter resizes to a
    fixed size (no crop here: the depth map covers the whole image).
    """

    NAME = "keras-hub Depth Anything preset"
    TASK = "DepthEstimator"
    REGISTERED = "keras_hub>DepthAnythingBackbone"
    TASKS = ("keras_hub>DepthEstimator", "keras_hub>DepthAnythingDepthEstimator")

    def unsupported(self, message):
        return ValueError(f"Cannot build this {self.NAME}: {message}")

    def _configs(self, directory):
        from keras_vit.weights.formats.keras_hub_family import read_json

        backbone, task = read_json(directory, "config.json"), read_json(directory, "task.json")
        if task is None:
            # keras-hub's published presets are the backbone alone, converted
            # from the relative-depth checkpoints.
            return backbone["config"], {"depth_estimation_type": "relative"}
        if task.get("registered_name") not in self.TASKS:
            raise self.unsupported(f"task.json must describe one of {self.TASKS}. Received: "
                                   f"{task.get('registered_name')!r}")
        return backbone["config"], task["config"]

    def arguments(self, directory, state=None):
        from keras_vit.families.dinov2 import KerasHubDinov2
        from keras_vit.weights.formats.keras_hub_family import input_shape

        config, task = self._configs(directory)
        encoder = config["image_encoder"]
        if encoder.get("registered_name") != "keras_hub>DINOV2Backbone":
            raise self.unsupported(f"the image encoder must be a DINOV2Backbone. Received: {encoder.get('registered_name')!r}")
        encoder_config = encoder["config"]
        args = dict(KerasHubDinov2().encoder_arguments(encoder_config, input_shape(encoder_config)),
                    include_top=False, pooling=None)
        keys = config.get("feature_keys") or [f"stage{k + 1}" for k in range(encoder_config["num_layers"])]
        if not all(str(k).startswith("stage") and str(k)[5:].isdigit() and int(str(k)[5:]) >= 1 for k in keys):
            raise self.unsupported(f"feature_keys must name encoder blocks (stage1, stage2, ...). Received: {keys!r}")
        if config.get("head_in_index", -1) != -1 or config.get("data_format", "channels_last") != "channels_last":
            raise self.unsupported("head_in_index must be -1 and data_format channels_last.")
        kind = task.get("depth_estimation_type", "relative")
        task_args = dict(
            feature_blocks=[int(str(k)[5:]) - 1 for k in keys], neck_channels=list(config["neck_hidden_dims"]),
            reassemble_factors=list(config["reassemble_factors"]), fusion_size=config["fusion_hidden_dim"],
            style="depth_anything", readout="ignore", feature_norm=bool(encoder_config.get("apply_layernorm", False)),
            head_size=config["head_hidden_dim"], depth=kind,
            max_depth=float(task["max_depth"]) if kind == "metric" else 1.0,
        )
        prep = _keras_hub_processing(directory)
        if prep is not None:
            task_args["preprocessing"] = prep.get_config()
        else:
            from keras_vit.weights.formats.keras_hub_family import warn_unknown_preprocessing

            warn_unknown_preprocessing(directory, "Give it before estimating depth: `preprocessing="
                                       "keras_vit.DenseProcessing(...)` to keras_vit.estimate_depth, or set "
                                       "`model.preprocessing`.")
        return "ViT", args, task_args

    def read(self, directory, num_heads):
        """The preset's variables (loaded by keras-hub itself) as one `Checkpoint`."""
        import keras

        from keras_vit.weights import canonical as C
        from keras_vit.families.dinov2 import KerasHubDinov2
        from keras_vit.weights.formats.keras_hub_family import WEIGHTS_FILE

        try:
            import keras_hub
        except ImportError:
            raise ImportError(f"Reading the keras-hub preset {directory!r} needs keras-hub (`pip install keras-hub`).") from None
        config, task_config = self._configs(directory)
        # keras-hub rebuilds the task from its preset given the task's own
        # settings; a preset without an image converter (a backbone saved
        # alone) has no preprocessor to load, so the task is built around
        # its backbone.
        settings = {k: task_config[k] for k in ("depth_estimation_type", "max_depth", "min_depth") if k in task_config}
        if _keras_hub_processing(directory) is None:
            backbone = keras_hub.models.Backbone.from_preset(directory)
            task = keras_hub.models.DepthEstimator(backbone=backbone, preprocessor=None, **settings)
        else:
            task = keras_hub.models.DepthEstimator.from_preset(directory, **settings)
        variables = {v.path: keras.ops.convert_to_numpy(v) for v in task.weights}
        path = f"{directory}/{WEIGHTS_FILE}"
        head = {k: v for k, v in variables.items() if k.startswith(("neck/", "head/"))}
        encoder_vars = {k: v for k, v in variables.items() if k not in head}
        encoder = KerasHubDinov2().read(encoder_vars, config["image_encoder"], num_heads, path)
        params, ignored = read_head(head, _keras_hub_rules(config["reassemble_factors"]), {})
        return merge(C.Checkpoint(path, "keras_hub", encoder.params, encoder.ignored), params, ignored, path)


def _keras_hub_processing(directory):
    """A keras-hub preset's image converter as a `DenseProcessing` record (an
    exact resize to its size, no crop), or None."""
    from keras_vit.preprocessing.dense import DenseProcessing
    from keras_vit.weights.formats.keras_hub_family import preprocessing

    record = preprocessing(directory)
    if record is None:
        return None
    return DenseProcessing(mean=record.mean, std=record.std, size=record.image_size, resize="exact",
                           interpolation=record.interpolation)


def keras_hub_family(directory):
    """keras-hub's Depth Anything preset family for a preset directory, or None."""
    import os

    from keras_vit.weights.files import read_json

    path = os.path.join(directory, "config.json")
    config = read_json(path) if os.path.isfile(path) else {}
    return KerasHubDepthAnything() if config.get("registered_name") == KerasHubDepthAnything.REGISTERED else None
