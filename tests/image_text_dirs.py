"""Two-tower image-text checkpoints as transformers writes them, built
offline: a tiny model made at random by transformers for each family (CLIP,
MetaCLIP 2, SigLIP, SigLIP 2) with a small tokenizer trained here (a
byte-level BPE for CLIP and MetaCLIP 2 with transformers' `CLIPTokenizer`,
a SentencePiece model from `sentencepiece`'s trainer for SigLIP, a
Gemma-style BPE with transformers' `Siglip2Tokenizer` for SigLIP 2) and the
family's image processor, saved with `save_pretrained` into one folder.

`image_text_dir(family)` builds each folder once per process (a cache), so
every test module reuses them.
"""

import atexit
import functools
import io
import math
import os
import shutil
import tempfile

from hub_dirs import randomise_torch

FAMILIES = ("clip", "metaclip_2", "siglip", "siglip2")
# Texts the tokenizers are trained on: the words of the tests' prompts.
CORPUS = [
    "a photo of a cat.", "a photo of a dog.", "a bad photo of the airplane.",
    "an origami frog.", "a photo of many birds.", "itap of a car.", "a sculpture of a ship.",
    "a cartoon truck.", "a rendering of a horse.", "art of the deer.", "a photo of a coffee cup.",
    "a photo of an astronaut.", "a close-up photo of a rocket.", "a photo of the small bird.",
    "this is a photo of a cat.", "a blurry photo of a person.", "a drawing of the moon.",
] * 3
VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=8)
# A text width other than the image's, so that a swap shows.
TEXT = dict(hidden_size=24, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2)
IMAGE_SIZE = 32


def _clip_tokenizer(transformers):
    return transformers.CLIPTokenizer().train_new_from_iterator(CORPUS, vocab_size=300)


def _siglip_tokenizer(transformers, folder):
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=90, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>",
        unk_piece="<unk>", hard_vocab_limit=False, minloglevel=2,
    )
    path = os.path.join(folder, "spiece.model")
    with open(path, "wb") as f:
        f.write(model.getvalue())
    return transformers.SiglipTokenizer(path)


def _siglip2_tokenizer(transformers):
    return transformers.Siglip2Tokenizer().train_new_from_iterator(CORPUS, vocab_size=200)


def _config(transformers, family, tokenizer):
    ids = dict(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    # A tokenizer without a beginning-of-text token: the config's would be out of its vocabulary.
    ids["bos_token_id"] = ids["bos_token_id"] if ids["bos_token_id"] is not None else ids["eos_token_id"]
    vision = dict(VISION, image_size=IMAGE_SIZE)
    if family in ("clip", "metaclip_2"):
        text = dict(TEXT, max_position_embeddings=24, **ids)
        config_class = transformers.CLIPConfig if family == "clip" else transformers.MetaClip2Config
        return config_class(text_config=text, vision_config=vision, projection_dim=12)
    # SigLIP's texts are padded to 64 tokens; its text head projects to the
    # image embedding's width (the vision tower's, SigLIP has no image projection).
    text = dict(TEXT, max_position_embeddings=64, projection_size=VISION["hidden_size"], **ids)
    if family == "siglip":
        return transformers.SiglipConfig(text_config=text, vision_config=vision)
    vision.pop("image_size")
    vision["num_patches"] = (IMAGE_SIZE // VISION["patch_size"]) ** 2
    return transformers.Siglip2Config(text_config=text, vision_config=vision)


def _image_processor(transformers, family):
    if family in ("clip", "metaclip_2"):
        return transformers.CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE},
                                               crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    if family == "siglip":
        return transformers.SiglipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return transformers.Siglip2ImageProcessor(
        patch_size=VISION["patch_size"], max_num_patches=(IMAGE_SIZE // VISION["patch_size"]) ** 2
    )


MODELS = {"clip": "CLIPModel", "metaclip_2": "MetaClip2Model", "siglip": "SiglipModel",
          "siglip2": "Siglip2Model"}


def build(family, folder, seed):
    """Writes a random two-tower `family` checkpoint to `folder`; returns the
    torch model (eval mode) and its tokenizer."""
    import torch
    import transformers

    torch.manual_seed(seed)
    if family in ("clip", "metaclip_2"):
        tokenizer = _clip_tokenizer(transformers)
    elif family == "siglip":
        tokenizer = _siglip_tokenizer(transformers, folder)
    else:
        tokenizer = _siglip2_tokenizer(transformers)
    model = getattr(transformers, MODELS[family])(_config(transformers, family, tokenizer))
    model = randomise_torch(model, seed)
    with torch.no_grad():
        # Scores that use the sigmoid's and softmax's range: neither saturated nor flat.
        model.logit_scale.fill_(math.log(8.0 + seed))
        if hasattr(model, "logit_bias"):
            model.logit_bias.fill_(0.25)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    _image_processor(transformers, family).save_pretrained(folder)
    return model, tokenizer


def pipeline_pixels(processor_output, family):
    """NHWC pixels of an image processor's output (SigLIP 2's flattened
    patches put back on their grid: row by row, each patch `(p, p, C)`)."""
    if family != "siglip2":
        return processor_output["pixel_values"].transpose(0, 2, 3, 1).astype("float32")
    (height, width), p = processor_output["spatial_shapes"][0], VISION["patch_size"]
    patches = processor_output["pixel_values"][0][: height * width]
    image = patches.reshape(height, width, p, p, 3).transpose(0, 2, 1, 3, 4)
    return image.reshape(1, height * p, width * p, 3).astype("float32")


def siglip2_patches(images):
    """`(pixel_values, pixel_attention_mask, spatial_shapes)` of NHWC images
    for transformers' SigLIP 2 (every patch kept)."""
    import torch

    p = VISION["patch_size"]
    batch, height, width, channels = images.shape
    grid = (height // p, width // p)
    patches = images.reshape(batch, grid[0], p, grid[1], p, channels).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(batch, grid[0] * grid[1], p * p * channels)
    return (torch.from_numpy(patches), torch.ones(batch, grid[0] * grid[1], dtype=torch.long),
            torch.tensor([grid] * batch))


def image_inputs(images, family):
    """transformers' image keywords for NHWC `images`."""
    import torch

    if family == "siglip2":
        values, mask, shapes = siglip2_patches(images)
        return dict(pixel_values=values, pixel_attention_mask=mask, spatial_shapes=shapes)
    return dict(pixel_values=torch.from_numpy(images.transpose(0, 3, 1, 2)))


def pipeline_text_options(family):
    """The tokenizer options of transformers' zero-shot pipeline."""
    if "siglip" in family:
        return dict(padding="max_length", max_length=64, truncation=True)
    return dict(padding=True)


@functools.lru_cache(maxsize=None)
def image_text_dir(family):
    """`(folder, torch model, transformers tokenizer)` of `family`, built once."""
    folder = tempfile.mkdtemp(prefix=f"keras_vit_{family}_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    model, tokenizer = build(family, folder, FAMILIES.index(family))
    return folder, model, tokenizer
