"""Depth and segmentation checkpoints made at random by transformers' and
keras-hub's own classes, in tiny configs, saved as those libraries save them.

Each `*_config()` is a transformers config small enough for milliseconds;
`save_random(model_class, config, folder)` moves every tensor of a fresh
model off its initial value (`hub_dirs.randomise_torch`), saves it with
`save_pretrained` and returns the torch model in eval mode, so a test
compares keras_vit's model loaded from the folder with transformers' forward
pass on the same pixels. `keras_hub_depth_anything(folder)` writes a
keras-hub Depth Anything preset the same way.
"""

import numpy as np

from hub_dirs import randomise_torch

ENCODER = dict(hidden_size=16, num_hidden_layers=4, num_attention_heads=2)
EOMT_CLASSES = {"0": "sky", "1": "tree", "2": "road"}


def depth_anything_config(transformers, kind="relative"):
    backbone = transformers.Dinov2Config(**ENCODER, image_size=28, patch_size=7, out_indices=[1, 2, 3, 4],
                                         reshape_hidden_states=False)
    return transformers.DepthAnythingConfig(
        backbone_config=backbone, patch_size=7, reassemble_hidden_size=16, neck_hidden_sizes=[8, 8, 16, 16],
        fusion_hidden_size=8, head_hidden_size=4, depth_estimation_type=kind, max_depth=20 if kind == "metric" else 1,
    )


def dpt_config(transformers, hybrid=False):
    common = dict(ENCODER, intermediate_size=32, backbone_out_indices=[0, 1, 2, 3], fusion_hidden_size=8)
    if not hybrid:
        return transformers.DPTConfig(**common, image_size=32, patch_size=8, neck_hidden_sizes=[8, 8, 16, 16],
                                      use_batch_norm_in_fusion_residual=True)
    # The BiT stem at half width (32 GroupNorm groups need 32 channels).
    bit = dict(global_padding="same", layer_type="bottleneck", depths=[1, 1, 1], hidden_sizes=[128, 256, 512],
               embedding_size=32, out_features=["stage1", "stage2", "stage3"], embedding_dynamic_padding=True)
    return transformers.DPTConfig(**common, image_size=64, patch_size=16, is_hybrid=True, backbone_config=bit,
                                  neck_hidden_sizes=[128, 256, 16, 16], backbone_featmap_shape=[1, 512, 4, 4])


def chmv2_config(transformers):
    backbone = dict(model_type="dinov3_vit", **ENCODER, intermediate_size=32, num_register_tokens=2, key_bias=True,
                    out_indices=[1, 2, 3, 4], reshape_hidden_states=True, apply_layernorm=True,
                    return_class_token=True, patch_size=8, image_size=32)
    return transformers.CHMv2Config(backbone_config=backbone, patch_size=8, post_process_channels=[8, 8, 16, 16],
                                    fusion_hidden_size=8, head_hidden_size=8, number_output_channels=6)


def eomt_config(transformers, dinov3=False, **overrides):
    common = dict(ENCODER, image_size=32, patch_size=8, num_queries=5, num_blocks=2, num_register_tokens=2,
                  id2label=EOMT_CLASSES, **overrides)
    if dinov3:
        return transformers.EomtDinov3Config(**common, intermediate_size=32)
    return transformers.EomtConfig(**common)


def save_random(model_class, config, folder, seed=0, mask_probability=None, depth_bias=None):
    """A random `model_class(config)`, saved to `folder` (eval mode)."""
    import torch

    torch.manual_seed(seed)  # transformers' own initialisation, then the offsets
    model = randomise_torch(model_class(config), seed)
    with torch.no_grad():
        if mask_probability is not None:
            model.attn_mask_probs.fill_(mask_probability)
        if depth_bias is not None:
            # CHMv2's bins normalisation is ill-conditioned where the bin
            # logits are near zero (ReLU, then a division by their sum): a
            # positive bias keeps the comparison about the computation.
            model.head.conv_depth.head[4].bias += depth_bias
    model.save_pretrained(folder)
    return model


def torch_outputs(model, images):
    """transformers' outputs on NHWC `images`, as NumPy, keyed by name."""
    import torch

    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2))))
    return {k: v.numpy() for k, v in out.items() if hasattr(v, "numpy") and k != "last_hidden_state"}


def keras_hub_depth_anything(keras_hub, keras, folder, seed=0, kind="relative"):
    """A random keras-hub Depth Anything preset (task, preprocessor) in `folder`;
    returns the keras-hub task."""
    encoder = keras_hub.models.DINOV2Backbone(
        patch_size=7, num_layers=4, hidden_dim=16, num_heads=2, intermediate_dim=64, image_shape=(56, 56, 3),
        position_embedding_shape=(56, 56), apply_layernorm=True,
    )
    backbone = keras_hub.models.DepthAnythingBackbone(
        image_encoder=encoder, reassemble_factors=[4, 2, 1, 0.5], neck_hidden_dims=[8, 8, 16, 16],
        fusion_hidden_dim=8, head_hidden_dim=4, head_in_index=-1,
        feature_keys=["stage1", "stage2", "stage3", "stage4"],
    )
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    converter = keras_hub.layers.DepthAnythingImageConverter(
        image_size=(56, 56), scale=[1 / (255 * s) for s in std], offset=[-m / s for m, s in zip(mean, std)],
        interpolation="bicubic",
    )
    preprocessor = keras_hub.models.DepthAnythingDepthEstimatorPreprocessor(image_converter=converter)
    extra = dict(max_depth=20.0) if kind == "metric" else {}
    task = keras_hub.models.DepthEstimator(backbone=backbone, depth_estimation_type=kind, preprocessor=preprocessor,
                                           **extra)
    rng = np.random.default_rng(seed)
    for variable in task.weights:
        value = keras.ops.convert_to_numpy(variable)
        variable.assign(value + 0.05 * rng.standard_normal(value.shape).astype("float32"))
    task.save_to_preset(folder)
    return task
