"""Segment Anything checkpoints as transformers and keras-hub write them, made
at random in small configs: transformers' `SamModel` saved with
`save_pretrained` (with its Pillow image processor, the reference of the
resize), keras-hub's `SAMBackbone` saved with `save_to_preset`, and timm
Hub directories of `samvit_*` image encoders whose tensors are the
transformers encoder's renamed by `timm_state` (written here from timm's
module names, independently of keras_vit's tables).

Each builder runs once per process (a cache).
"""

import atexit
import functools
import json
import os
import shutil
import tempfile

import numpy as np

from hub_dirs import randomise_torch

IMAGE_SIZE, PATCH, WIDTH = 64, 8, 16
VISION = dict(hidden_size=16, num_hidden_layers=3, num_attention_heads=2, image_size=IMAGE_SIZE, patch_size=PATCH,
              output_channels=WIDTH, window_size=3, global_attn_indexes=[1], num_pos_feats=WIDTH // 2, mlp_dim=32)
PROMPT = dict(hidden_size=WIDTH, image_size=IMAGE_SIZE, patch_size=PATCH, mask_input_channels=8)
DECODER = dict(hidden_size=WIDTH, mlp_dim=24, num_hidden_layers=2, num_attention_heads=2, iou_head_hidden_dim=12)


def _folder(prefix):
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@functools.lru_cache(maxsize=None)
def sam_dir():
    """`(folder, torch SamModel in eval mode, SamProcessor)` of a random SAM."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.SamConfig(vision_config=VISION, prompt_encoder_config=PROMPT, mask_decoder_config=DECODER)
    model = randomise_torch(transformers.SamModel(config), 0, scale=0.3)
    with torch.no_grad():
        # Predicted IoUs around SAM's thresholds (0.88), so that filtering shows.
        model.mask_decoder.iou_prediction_head.proj_out.bias.add_(0.9)
    folder = _folder("keras_vit_sam_")
    model.save_pretrained(folder)
    image_processor = transformers.SamImageProcessorPil(
        size={"longest_edge": IMAGE_SIZE}, pad_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        mask_size={"longest_edge": IMAGE_SIZE // 2}, mask_pad_size={"height": IMAGE_SIZE // 2, "width": IMAGE_SIZE // 2},
    )
    image_processor.save_pretrained(folder)
    return folder, model, transformers.SamProcessor(image_processor)


@functools.lru_cache(maxsize=None)
def keras_hub_sam_dir():
    """`(folder, keras-hub SAMImageSegmenter)` of a random keras-hub SAM."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    encoder = keras_hub.models.ViTDetBackbone(
        hidden_size=16, num_layers=3, intermediate_dim=32, num_heads=2, global_attention_layer_indices=[1],
        patch_size=PATCH, num_output_channels=WIDTH, window_size=3, image_shape=(IMAGE_SIZE, IMAGE_SIZE, 3))
    prompt = keras_hub.layers.SAMPromptEncoder(hidden_size=WIDTH, image_embedding_size=(8, 8),
                                               input_image_size=(IMAGE_SIZE, IMAGE_SIZE), mask_in_channels=8)
    decoder = keras_hub.layers.SAMMaskDecoder(num_layers=2, hidden_size=WIDTH, intermediate_dim=24, num_heads=2,
                                              embedding_dim=WIDTH, iou_head_hidden_dim=12)
    backbone = keras_hub.models.SAMBackbone(image_encoder=encoder, prompt_encoder=prompt, mask_decoder=decoder)
    segmenter = keras_hub.models.SAMImageSegmenter(backbone=backbone)
    rng = np.random.default_rng(0)
    for variable in segmenter.weights:
        variable.assign(keras.ops.convert_to_numpy(variable) + 0.3 * rng.normal(size=variable.shape))
    folder = _folder("keras_vit_keras_hub_sam_")
    backbone.save_to_preset(folder)
    return folder, segmenter


def timm_state(transformers_state):
    """The image encoder of a transformers `SamModel` state dict under timm's
    `VisionTransformerSAM` names (its head-less `neck`)."""
    names = {"neck.conv1.": "neck.0.", "neck.layer_norm1.": "neck.1.", "neck.conv2.": "neck.2.",
             "neck.layer_norm2.": "neck.3.", "patch_embed.projection.": "patch_embed.proj.", "layer_norm1.": "norm1.",
             "layer_norm2.": "norm2.", "mlp.lin1.": "mlp.fc1.", "mlp.lin2.": "mlp.fc2."}
    out = {}
    for key, value in transformers_state.items():
        if not key.startswith("vision_encoder."):
            continue
        key = key[len("vision_encoder."):].replace("layers.", "blocks.", 1)
        for old, new in names.items():
            key = key.replace(old, new)
        out[key] = value.detach().numpy().copy()
    return out


def write_timm_samvit(folder, state, global_pool="avg", num_classes=0):
    """A timm Hub directory of a small `samvit_base_patch16` (its size in `model_args`)."""
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    save_file(state, os.path.join(folder, "model.safetensors"))
    config = {
        "architecture": "samvit_base_patch16", "num_classes": num_classes, "global_pool": global_pool,
        "model_args": dict(img_size=IMAGE_SIZE, patch_size=PATCH, embed_dim=16, depth=3, num_heads=2, mlp_ratio=2.0,
                           window_size=3, global_attn_indexes=[1], neck_chans=WIDTH),
        "pretrained_cfg": {"input_size": [3, IMAGE_SIZE, IMAGE_SIZE], "crop_pct": 1.0, "interpolation": "bicubic",
                           "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return folder
