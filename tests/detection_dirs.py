"""OWL-ViT and OWLv2 detection checkpoints as transformers writes them, built
offline: a tiny detector made at random by transformers
(`OwlViTForObjectDetection`, `Owlv2ForObjectDetection`), a CLIP tokenizer
trained here on the tests' words, and the family's image processor (the
Pillow / SciPy one: the reference implementation of the resize), saved with
`save_pretrained` into one folder.

`detection_dir(family)` builds each folder once per process (a cache).
"""

import atexit
import functools
import json
import os
import shutil
import tempfile

from hub_dirs import randomise_torch

FAMILIES = ("owlvit", "owlv2")
CORPUS = [
    "a photo of a cat.", "a photo of a dog.", "a cup of coffee.", "an astronaut.", "a rocket.",
    "a remote control.", "a cat", "the sofa", "a person", "a helmet", "a flag",
] * 3
VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=8)
# A text width other than the image's, so that a swap shows (the class head
# compares the text embeddings with embeddings of the text tower's width: the
# projection keeps it).
TEXT = dict(hidden_size=24, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
            max_position_embeddings=16)
IMAGE_SIZE = 48
CLASSES = {"owlvit": ("OwlViTConfig", "OwlViTForObjectDetection", "OwlViTImageProcessorPil", "OwlViTProcessor"),
           "owlv2": ("Owlv2Config", "Owlv2ForObjectDetection", "Owlv2ImageProcessorPil", "Owlv2Processor")}


def _tokenizer(transformers, folder):
    """A CLIP tokenizer laid out as OpenAI's: "!" (OWL-ViT's pad token) has
    id 0 and the start and end tokens the last two ids (the detectors treat
    a query whose first id is 0 as padding, and pool the largest id)."""
    trained = transformers.CLIPTokenizer().train_new_from_iterator(CORPUS, vocab_size=300)
    state = json.loads(trained.backend_tokenizer.to_str())["model"]
    special = ["<|startoftext|>", "<|endoftext|>"]
    order = sorted((t for t in state["vocab"] if t not in special), key=lambda t: (t != "!", state["vocab"][t]))
    files = [os.path.join(folder, name) for name in ("source_vocab.json", "source_merges.txt")]
    with open(files[0], "w") as f:
        json.dump({token: i for i, token in enumerate(order + special)}, f)
    with open(files[1], "w") as f:
        f.write("#version: 0.2\n" + "".join(" ".join(m) + "\n" for m in state["merges"]))
    tokenizer = transformers.CLIPTokenizer(*files, pad_token="!")
    for path in files:
        os.remove(path)
    return tokenizer


def build(family, folder, seed):
    """Writes a random `family` detector to `folder`; returns the torch model
    (eval mode), its tokenizer and image processor."""
    import torch
    import transformers

    config_class, model_class, processor_class, _ = CLASSES[family]
    torch.manual_seed(seed)
    tokenizer = _tokenizer(transformers, folder)
    ids = dict(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    config = getattr(transformers, config_class)(
        text_config=dict(TEXT, **ids), vision_config=dict(VISION, image_size=IMAGE_SIZE), projection_dim=TEXT["hidden_size"]
    )
    model = randomise_torch(getattr(transformers, model_class)(config), seed, scale=0.3)
    with torch.no_grad():
        # Scores and boxes in the ranges a trained detector gives: sigmoid
        # scores spread around 0.5, boxes near their patches.
        model.class_head.logit_scale.weight.mul_(0.05)
        model.class_head.logit_scale.bias.fill_(0.5)
        model.class_head.logit_shift.weight.mul_(0.05)
        model.box_head.dense2.weight.mul_(0.1)
        model.box_head.dense2.bias.mul_(0.1)
        if hasattr(model, "objectness_head"):
            model.objectness_head.dense2.weight.mul_(0.1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    processor = getattr(transformers, processor_class)(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor.save_pretrained(folder)
    return model, tokenizer, processor


@functools.lru_cache(maxsize=None)
def detection_dir(family):
    """`(folder, torch model, tokenizer, image processor)` of `family`, built once."""
    folder = tempfile.mkdtemp(prefix=f"keras_vit_{family}_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return (folder,) + build(family, folder, FAMILIES.index(family))
