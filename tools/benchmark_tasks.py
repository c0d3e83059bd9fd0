"""The task workloads of `tools/benchmark.py`: OWLv2, SAM, Depth Anything and
EoMT, keras_vit on each backend beside transformers' models (and keras-hub's
Depth Anything) built from the same config.

- `OWLv2-B/16` (960 px): one text query; keras_vit's detector of fixed
  queries (`with_queries`: the query embedded once), transformers'
  `Owlv2ForObjectDetection` with the query's token ids (its text tower runs
  on 16 tokens, a small share of the 3,600-patch image tower).
- `SAM-B` (1024 px): the image encoder, keras_vit's `image_embedder`,
  transformers' `SamModel.get_image_embeddings`.
- `SAM-decoder`: the prompt decoder on one click (and SAM's padding point)
  over a given image embedding: per prompt, as SAM serves clicks.
- `DA2-S` (518 px): Depth Anything V2 Small, a DINOv2-S/14 encoder with
  the published DPT neck and head: keras_vit's `DepthEstimator`,
  transformers' `DepthAnythingForDepthEstimation` and keras-hub's
  `DepthAnythingDepthEstimator`, the depth map at the image's size.
- `EoMT-S` (640 px): EoMT on DINOv2-S (4 registers) with 16-pixel patches
  and 200 queries in its last 3 blocks, as the published COCO panoptic
  model: keras_vit's `Segmenter`, transformers'
  `EomtForUniversalSegmentation`, class and mask logits. Masked attention
  is off, as in the published checkpoints (annealed to 0 in training).

Each model is random, built from one transformers config (`CONFIGS`) with
torch seeded: the transformers model from it, keras_vit's from the
directory it is saved to (as `keras_vit.from_preset` reads a checkpoint;
in the benchmark, saved by a process of its own, so that keras_vit's peak
memory holds no torch model), so both compute with the same weights; keras-hub's Depth Anything from the
same sizes, with its own random weights. The dense cases record their
outputs' shapes and statistics (`output_summary`), which `tools/benchmark.py`
compares with transformers'. Speeds are prompts per second for the decoder,
images per second otherwise. The `tiny` variants are for `--smoke`.
"""

import os
import tempfile

import numpy as np

# Architecture name -> (task, transformers config arguments).
_OWL_TEXT = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8)
_SAM_B = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, global_attn_indexes=[2, 5, 8, 11],
              initializer_range=0.02)
# Depth-Anything-V2-Small-hf's config: a DINOv2-S/14 backbone whose stages
# 3, 6, 9 and 12 feed the neck (the sizes its config leaves out are
# Dinov2Config's defaults, written here so that keras-hub reads them too).
_DINOV2_S = dict(model_type="dinov2", hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4,
                 patch_size=14)
_DA2_S = dict(backbone_config=dict(_DINOV2_S, out_indices=[3, 6, 9, 12], reshape_hidden_states=False),
              patch_size=14, reassemble_hidden_size=384, reassemble_factors=[4, 2, 1, 0.5],
              neck_hidden_sizes=[48, 96, 192, 384], fusion_hidden_size=64, head_hidden_size=32,
              depth_estimation_type="relative")
# coco_panoptic_eomt_small_640_2x: ViT-S with 4 registers, 16-pixel
# patches (40 x 40 at 640 px), 200 queries in the last 3 blocks, COCO
# panoptic's 133 classes.
_EOMT_S = dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, mlp_ratio=4, patch_size=16,
               num_register_tokens=4, num_queries=200, num_blocks=3, num_labels=133)
CONFIGS = {
    "OWLv2-B/16": ("owlv2", dict(projection_dim=512, text_config=_OWL_TEXT, vision_config=dict(
        hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, patch_size=16))),
    "OWLv2-tiny": ("owlv2", dict(projection_dim=16, text_config=dict(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2),
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           patch_size=8))),
    "SAM-B": ("sam", dict(vision_config=_SAM_B)),
    "SAM-decoder": ("sam_decoder", dict(vision_config=_SAM_B)),
    "SAM-tiny": ("sam", dict(vision_config=dict(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, global_attn_indexes=[1], window_size=2,
        output_channels=16, num_pos_feats=8, patch_size=8),
        prompt_encoder_config=dict(hidden_size=16, patch_size=8, mask_input_channels=8),
        mask_decoder_config=dict(hidden_size=16, mlp_dim=32, num_attention_heads=2, iou_head_hidden_dim=16))),
    "DA2-S": ("depth_anything", _DA2_S),
    "DA2-tiny": ("depth_anything", dict(
        _DA2_S, backbone_config=dict(_DINOV2_S, hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
                                     patch_size=7, out_indices=[1, 2, 3, 4], reshape_hidden_states=False),
        patch_size=7, reassemble_hidden_size=16, neck_hidden_sizes=[8, 8, 16, 16], fusion_hidden_size=8,
        head_hidden_size=4)),
    "EoMT-S": ("eomt", _EOMT_S),
    "EoMT-tiny": ("eomt", dict(_EOMT_S, hidden_size=16, num_hidden_layers=4, num_attention_heads=2, patch_size=8,
                               num_register_tokens=2, num_queries=5, num_blocks=2, num_labels=3)),
}
CONFIGS["SAM-decoder-tiny"] = ("sam_decoder", CONFIGS["SAM-tiny"][1])
TASK_ARCHS = tuple(CONFIGS)
# The outputs of the dense tasks, by transformers' names (keras_vit's too).
DENSE_OUTPUTS = {"depth_anything": ("predicted_depth",), "eomt": ("class_queries_logits", "masks_queries_logits")}
# The tasks keras-hub has a model of.
KERAS_HUB_TASKS = ("depth_anything",)
SEED = 0


def _owlv2(transformers, arguments, image):
    arguments["vision_config"]["image_size"] = image
    return transformers.Owlv2ForObjectDetection(transformers.Owlv2Config(**arguments))


def _sam(transformers, arguments, image):
    arguments["vision_config"]["image_size"] = image
    arguments.setdefault("prompt_encoder_config", {})["image_size"] = image
    return transformers.SamModel(transformers.SamConfig(**arguments))


def _depth_anything(transformers, arguments, image):
    arguments["backbone_config"]["image_size"] = image
    return transformers.DepthAnythingForDepthEstimation(transformers.DepthAnythingConfig(**arguments))


def _eomt(transformers, arguments, image):
    import torch

    model = transformers.EomtForUniversalSegmentation(transformers.EomtConfig(**arguments, image_size=image))
    with torch.no_grad():
        model.attn_mask_probs.fill_(0.0)  # as published: masked attention annealed away
    return model


# Task -> builder of transformers' model from (transformers, config arguments, image size).
_BUILDERS = {"owlv2": _owlv2, "sam": _sam, "sam_decoder": _sam, "depth_anything": _depth_anything, "eomt": _eomt}


def _transformers_model(arch, image):
    """transformers' model of `arch` for `image`-pixel inputs, random (torch
    seeded with `SEED`), in eval mode."""
    import torch
    import transformers

    task, arguments = CONFIGS[arch]
    arguments = {k: dict(v) if isinstance(v, dict) else v for k, v in arguments.items()}
    torch.manual_seed(SEED)
    return _BUILDERS[task](transformers, arguments, image).eval()


def _query_ids(model):
    """One query's token ids as a CLIP tokenizer pads them (16 positions)."""
    import torch

    config = model.config.text_config
    ids = np.zeros((1, config.max_position_embeddings), "int64")
    ids[0, :4] = [config.vocab_size - 2, 5, 6, config.vocab_size - 1]  # start, two words, end
    return torch.from_numpy(ids), torch.from_numpy((ids > 0).astype("int64"))


def output_summary(outputs):
    """`{name: {"shape", "mean", "mean_abs"}}` of a dense case's outputs (a
    dict of arrays), for comparing systems without moving the arrays."""
    return {name: dict(shape=list(np.shape(value)), mean=float(np.mean(value)), mean_abs=float(np.mean(np.abs(value))))
            for name, value in outputs.items()}


def _recording(step, info):
    """`step`, putting the `output_summary` of its first call's outputs in `info["outputs"]`."""

    def recorded():
        outputs = step()
        if "outputs" not in info:
            info["outputs"] = output_summary(outputs)
        return outputs

    return recorded


def _hf_step(arch, model, x):
    import torch

    task = CONFIGS[arch][0]
    pixels = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    if task in DENSE_OUTPUTS:
        names = DENSE_OUTPUTS[task]

        def dense():
            out = model(pixel_values=pixels)
            return {name: getattr(out, name).numpy() for name in names}

        return dense
    if task == "owlv2":
        ids, mask = _query_ids(model)
        return lambda: model(input_ids=ids, attention_mask=mask, pixel_values=pixels).logits.numpy()
    if task == "sam":
        return lambda: model.get_image_embeddings(pixels).numpy()
    with torch.no_grad():
        embeddings = model.get_image_embeddings(pixels)
    points = torch.tensor([[[[x.shape[2] / 3, x.shape[1] / 2]]]], dtype=torch.float32)
    labels = torch.ones((1, 1, 1), dtype=torch.int64)
    return lambda: model(image_embeddings=embeddings, input_points=points, input_labels=labels).pred_masks.numpy()


def _keyed(step, arch, info):
    """A dense task's step recording its outputs (`_recording`); others as they are."""
    return _recording(step, info) if CONFIGS[arch][0] in DENSE_OUTPUTS else step


def run_hf(spec, x, timed):
    """A task case of transformers (`hf-sdpa`, `hf-eager`)."""
    import time

    import torch
    import transformers

    start = time.perf_counter()
    model = _transformers_model(spec["arch"], spec["image"])
    impl = spec["system"].split("-", 1)[1]
    model.config._attn_implementation = impl
    for config in (getattr(model.config, name, None) for name in ("vision_config", "text_config")):
        if config is not None:
            config._attn_implementation = impl
    info = {"transformers": transformers.__version__, "attn": impl, "torch": torch.__version__}
    keyed = _keyed(_hf_step(spec["arch"], model, x), spec["arch"], info)

    def step():  # also the step `--profile` repeats: without autograd, as timed
        with torch.inference_mode():
            return keyed()

    build = time.perf_counter() - start
    first, times = timed(step, spec["warmup"], spec["reps"])
    return build, first, times, info, step


def save_transformers_model(arch, image, folder):
    """Saves `_transformers_model(arch, image)` to `folder` from a process of
    its own: the measured process never holds transformers, nor a torch copy
    of the weights (which its peak memory would count, on every backend)."""
    import subprocess
    import sys

    subprocess.run([sys.executable, __file__, arch, str(image), str(folder)], check=True, capture_output=True)


def _keras_step(arch, model, x):
    task = CONFIGS[arch][0]
    if task in DENSE_OUTPUTS:  # `predict`'s dict holds transformers' names
        return lambda: model.predict_on_batch(x)
    if task == "owlv2":
        fixed = model.with_queries(np.eye(1, model.heads.query_dim, dtype="float32"), names=["query"])
        return lambda: fixed.predict_on_batch(x)
    if task == "sam":
        return lambda: model.image_embedder.predict_on_batch(x)
    embedding = model.image_embedder.predict_on_batch(x)
    points = np.array([[[x.shape[2] / 3, x.shape[1] / 2], [0.0, 0.0]]], "float32")
    inputs = model.decoder_inputs(embedding, points, np.array([[1, -1]], "int32"))
    return lambda: model.prompt_decoder.predict_on_batch(inputs)


def _keras_info():
    import keras

    return {"keras": keras.__version__, "backend": keras.backend.backend(),
            "threads": os.environ.get("OMP_NUM_THREADS")}


def run_keras_task(spec, x, apart=False):
    """A task case of keras_vit on the current backend: the model read from a
    saved random transformers model of the same config, saved by a process of
    its own where `apart` (the benchmark's: this process's peak memory then
    counts keras_vit alone)."""
    import time

    import keras_vit

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        if apart:
            save_transformers_model(spec["arch"], spec["image"], folder)
        else:
            _transformers_model(spec["arch"], spec["image"]).save_pretrained(folder)
        model = keras_vit.from_preset(folder)
    info = _keras_info()
    step = _keyed(_keras_step(spec["arch"], model, x), spec["arch"], info)
    build = time.perf_counter() - start
    return build, step, info


def keras_hub_depth_anything(arguments, image):
    """keras-hub's Depth Anything of the sizes of transformers' config
    `arguments`, random: a `DINOV2Backbone` (its features after the final
    norm, as transformers' `apply_layernorm`) under a `DepthAnythingBackbone`."""
    import keras_hub

    encoder = arguments["backbone_config"]
    hidden = encoder["hidden_size"]
    if arguments["reassemble_hidden_size"] != hidden:
        raise ValueError(
            f"keras-hub's Depth Anything reassembles at the encoder's width ({hidden}). Received: "
            f"reassemble_hidden_size={arguments['reassemble_hidden_size']}"
        )
    image_encoder = keras_hub.models.DINOV2Backbone(
        patch_size=encoder["patch_size"], num_layers=encoder["num_hidden_layers"], hidden_dim=hidden,
        num_heads=encoder["num_attention_heads"], intermediate_dim=hidden * encoder["mlp_ratio"],
        image_shape=(image, image, 3), position_embedding_shape=(image, image), apply_layernorm=True,
    )
    backbone = keras_hub.models.DepthAnythingBackbone(
        image_encoder=image_encoder, reassemble_factors=list(arguments["reassemble_factors"]),
        neck_hidden_dims=list(arguments["neck_hidden_sizes"]), fusion_hidden_dim=arguments["fusion_hidden_size"],
        head_hidden_dim=arguments["head_hidden_size"], head_in_index=-1,
        feature_keys=[f"stage{k}" for k in encoder["out_indices"]],
    )
    return keras_hub.models.DepthAnythingDepthEstimator(
        backbone=backbone, depth_estimation_type=arguments["depth_estimation_type"])


def run_keras_hub_task(spec, x):
    """A task case of keras-hub on the current backend (Depth Anything only:
    `KERAS_HUB_TASKS`), its own random weights."""
    import time

    import keras

    task, arguments = CONFIGS[spec["arch"]]
    if task not in KERAS_HUB_TASKS:
        raise ValueError(f"keras-hub has no model of {spec['arch']!r}; it has {list(KERAS_HUB_TASKS)}.")
    start = time.perf_counter()
    keras.utils.set_random_seed(SEED)
    model = keras_hub_depth_anything(arguments, spec["image"])
    info = _keras_info()
    # keras-hub's `depths` keeps a channel axis of 1: transformers' map without it.
    step = _recording(lambda: {"predicted_depth": model.predict_on_batch(x)["depths"][..., 0]}, info)
    build = time.perf_counter() - start
    return build, step, info


if __name__ == "__main__":  # `save_transformers_model`'s process: ARCH IMAGE FOLDER
    import sys

    _transformers_model(sys.argv[1], int(sys.argv[2])).save_pretrained(sys.argv[3])
