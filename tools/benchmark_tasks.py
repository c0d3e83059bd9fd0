"""The task workloads of `tools/benchmark.py`: OWLv2 and SAM, keras_vit on
each backend beside transformers' models built from the same config.

- `OWLv2-B/16` (960 px): one text query; keras_vit's detector of fixed
  queries (`with_queries`: the query embedded once), transformers'
  `Owlv2ForObjectDetection` with the query's token ids (its text tower runs
  on 16 tokens, a small share of the 3,600-patch image tower).
- `SAM-B` (1024 px): the image encoder, keras_vit's `image_embedder`,
  transformers' `SamModel.get_image_embeddings`.
- `SAM-decoder`: the prompt decoder on one click (and SAM's padding point)
  over a given image embedding: per prompt, as SAM serves clicks.

Each model is random, built from one transformers config (`CONFIGS`): the
transformers model from it, keras_vit's from the directory it is saved to
(as `keras_vit.from_preset` reads a checkpoint). Speeds are prompts per
second for the decoder, images per second otherwise. The `tiny` variants
are for `--smoke`.
"""

import os
import tempfile

import numpy as np

# Architecture name -> (task, transformers config arguments).
_OWL_TEXT = dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8)
_SAM_B = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, global_attn_indexes=[2, 5, 8, 11])
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
}
CONFIGS["SAM-decoder-tiny"] = ("sam_decoder", CONFIGS["SAM-tiny"][1])
TASK_ARCHS = tuple(CONFIGS)


def _transformers_model(arch, image):
    """transformers' model of `arch` for `image`-pixel inputs, random, in eval mode."""
    import transformers

    task, arguments = CONFIGS[arch]
    arguments = {k: dict(v) if isinstance(v, dict) else v for k, v in arguments.items()}
    arguments["vision_config"]["image_size"] = image
    if task == "owlv2":
        return transformers.Owlv2ForObjectDetection(transformers.Owlv2Config(**arguments)).eval()
    arguments.setdefault("prompt_encoder_config", {})["image_size"] = image
    return transformers.SamModel(transformers.SamConfig(**arguments)).eval()


def _query_ids(model):
    """One query's token ids as a CLIP tokenizer pads them (16 positions)."""
    import torch

    config = model.config.text_config
    ids = np.zeros((1, config.max_position_embeddings), "int64")
    ids[0, :4] = [config.vocab_size - 2, 5, 6, config.vocab_size - 1]  # start, two words, end
    return torch.from_numpy(ids), torch.from_numpy((ids > 0).astype("int64"))


def _hf_step(arch, model, x):
    import torch

    task = CONFIGS[arch][0]
    pixels = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
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
    step = _hf_step(spec["arch"], model, x)
    build = time.perf_counter() - start
    with torch.inference_mode():
        first, times = timed(step, spec["warmup"], spec["reps"])
    info = {"transformers": transformers.__version__, "attn": impl, "torch": torch.__version__}
    return build, first, times, info, step


def _keras_step(arch, model, x):
    task = CONFIGS[arch][0]
    if task == "owlv2":
        fixed = model.with_queries(np.eye(1, model.heads.query_dim, dtype="float32"), names=["query"])
        return lambda: fixed.predict_on_batch(x)
    if task == "sam":
        return lambda: model.image_embedder.predict_on_batch(x)
    embedding = model.image_embedder.predict_on_batch(x)
    points = np.array([[[x.shape[2] / 3, x.shape[1] / 2], [0.0, 0.0]]], "float32")
    inputs = model.decoder_inputs(embedding, points, np.array([[1, -1]], "int32"))
    return lambda: model.prompt_decoder.predict_on_batch(inputs)


def run_keras_task(spec, x):
    """A task case of keras_vit on the current backend: the model read from a
    saved random transformers model of the same config."""
    import time

    import keras

    import keras_vit

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        _transformers_model(spec["arch"], spec["image"]).save_pretrained(folder)
        model = keras_vit.from_preset(folder)
    step = _keras_step(spec["arch"], model, x)
    build = time.perf_counter() - start
    return build, step, {"keras": keras.__version__, "backend": keras.backend.backend(),
                         "threads": os.environ.get("OMP_NUM_THREADS")}
