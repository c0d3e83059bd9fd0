"""CHMv2 (canopy height: DPT's neck and head on DINOv3, depth from bins)
from and to transformers directories, on the DPT family's reader
(`keras_vit.families.dpt`)."""

from keras_vit.families.dinov3 import TransformersDinov3 as Dinov3Family
from keras_vit.families.dpt import DptTaskFamily, stage_blocks
from keras_vit.weights.formats.task_family import refuse, undeclared_fields


class TransformersChmv2(DptTaskFamily):
    """transformers' CHMv2 (canopy height, DPT on DINOv3, depth from bins).

    Example:

    >>> _, encoder, task = TransformersChmv2().arguments({"model_type": "chmv2", "backbone_config": {
    ...     "model_type": "dinov3_vit", "hidden_size": 16, "num_hidden_layers": 4, "num_attention_heads": 2,
    ...     "intermediate_size": 32, "out_indices": [1, 2, 3, 4], "return_class_token": True},
    ...     "post_process_channels": [8, 8, 16, 16], "fusion_hidden_size": 8, "number_output_channels": 6})
    >>> task["depth"], task["num_bins"], task["readout"], encoder["rope"]
    ('bins', 6, 'project', 'dinov3')
    """

    NAME = "CHMv2 model"
    MODEL_TYPES = ("chmv2",)
    STYLE = "chmv2"
    FIELDS = frozenset((
        "backbone_config", "patch_size", "reassemble_factors", "post_process_channels", "fusion_hidden_size",
        "head_hidden_size", "number_output_channels", "readout_type", "min_depth", "max_depth",
        "bins_strategy", "norm_strategy", "backbone", "use_pretrained_backbone", "use_timm_backbone",
        "backbone_kwargs",
    ))

    def arguments(self, config, state=None):
        undeclared_fields(config, self.FIELDS, self.NAME)
        self.check_class(config, ("CHMv2ForDepthEstimation",))
        encoder_class, encoder, backbone = self.backbone_arguments(config)
        blocks = stage_blocks(backbone, self)
        norm = bool(backbone.get("apply_layernorm", True))
        if not norm and backbone["num_hidden_layers"] - 1 in blocks:
            raise self.unsupported("apply_layernorm=False with the last block tapped (normed alone) is not read.")
        if not backbone.get("reshape_hidden_states", True):
            raise self.unsupported("the backbone must return feature maps (reshape_hidden_states=True).")
        readout = config.get("readout_type", "project") if backbone.get("return_class_token", False) else "ignore"
        task = dict(
            feature_blocks=blocks, neck_channels=list(config.get("post_process_channels") or (128, 256, 512, 1024)),
            reassemble_factors=list(config.get("reassemble_factors") or (4, 2, 1, 0.5)),
            fusion_size=config.get("fusion_hidden_size", 256), style=self.STYLE, readout=readout,
            feature_norm=norm, head_size=config.get("head_hidden_size", 128), depth="bins",
            max_depth=float(config.get("max_depth", 96.0)), min_depth=float(config.get("min_depth", 0.001)),
            num_bins=int(config.get("number_output_channels", 256)),
            bins_strategy=config.get("bins_strategy", "chmv2_mixlog"),
            bins_normalization=config.get("norm_strategy", "chmv2_mixlog"),
        )
        return encoder_class, encoder, task

    HF_CLASS = "CHMv2ForDepthEstimation"
    BACKBONE = (Dinov3Family(), "DINOv3ViTModel")

    def check_export(self, model):
        self._check_common(model, ("bins",))
        self._check_backbone(model)
        if model.head_projection or model.neck.fusion_batch_norm or not model.feature_norm:
            raise refuse(f"{self.HF_CLASS} has no head projection nor fusion batch norm, and norms its features")

    def export_files(self, model):
        backbone, state = self._backbone_files(model)
        backbone.update(reshape_hidden_states=True, return_class_token=model.readout != "ignore")
        config = {
            "architectures": [self.HF_CLASS], "model_type": "chmv2", "backbone_config": backbone,
            "patch_size": model.encoder.patch_size[0], "reassemble_factors": self._factors(model),
            "post_process_channels": list(model.neck.neck_channels), "fusion_hidden_size": model.neck.fusion_size,
            "head_hidden_size": model.head_size, "number_output_channels": model.num_bins,
            "readout_type": "project" if model.readout == "ignore" else model.readout,
            "min_depth": model.min_depth, "max_depth": model.max_depth, "bins_strategy": model.bins_strategy,
            "norm_strategy": model.bins_normalization, "dtype": "float32",
        }
        return config, state, self._processor(model)
