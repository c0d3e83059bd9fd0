"""keras-hub two-tower presets built offline: a tiny `CLIPBackbone` or
`SigLIPBackbone` made at random by keras-hub on the backend under test, its
tokenizer (CLIP: a byte-level BPE trained with transformers' `CLIPTokenizer`,
its special tokens moved to the end of the vocabulary as in OpenAI's; SigLIP:
a SentencePiece model from `sentencepiece`'s trainer), image converter and
preprocessor, saved with `save_to_preset` into one folder.

`keras_hub_image_text_dir(family)` builds each folder once per process;
`keras_hub_preprocessor(family)` loads its preprocessor afresh."""

import atexit
import functools
import io
import json
import math
import shutil
import tempfile

import numpy as np

from image_text_dirs import CORPUS

FAMILIES = ("clip", "siglip")
IMAGE_SIZE = 32
VISION = dict(patch_size=8, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32,
              image_shape=(IMAGE_SIZE, IMAGE_SIZE, 3))
# A text width other than the image's, so that a swap shows.
TEXT = dict(embedding_dim=24, hidden_dim=24, num_layers=2, num_heads=2, intermediate_dim=32)


def _clip_vocabulary():
    """`(vocabulary, merges)` of a byte-level BPE trained on `CORPUS`."""
    import transformers

    trained = transformers.CLIPTokenizer().train_new_from_iterator(CORPUS, vocab_size=300)
    model = json.loads(trained.backend_tokenizer.to_str())["model"]
    specials = ["<|startoftext|>", "<|endoftext|>"]
    order = [t for t in sorted(model["vocab"], key=model["vocab"].get) if t not in specials] + specials
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    return {t: i for i, t in enumerate(order)}, merges


def _siglip_proto():
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=model, vocab_size=90, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>",
        unk_piece="<unk>", hard_vocab_limit=False, minloglevel=2,
    )
    return model.getvalue()


def _randomise(backbone, seed):
    """Moves every float weight off its initial value; the position indices
    are 0..N, as keras-hub's converted presets hold them."""
    rng = np.random.default_rng(seed)
    for variable in backbone.weights:
        if "float" in str(variable.dtype):
            variable.assign(variable + rng.normal(0, 0.2, variable.shape).astype("float32"))
        elif variable.path.endswith("position_ids"):
            variable.assign(np.arange(variable.shape[-1]).reshape(variable.shape))


def build(family, folder, seed):
    """Writes a random keras-hub two-tower `family` preset to `folder`;
    returns the backbone and the preprocessor."""
    import keras_hub

    if family == "clip":
        vocabulary, merges = _clip_vocabulary()
        tokenizer = keras_hub.models.CLIPTokenizer(vocabulary=vocabulary, merges=merges)
        converter = keras_hub.layers.CLIPImageConverter(
            image_size=(IMAGE_SIZE, IMAGE_SIZE), scale=[1 / (255 * 0.26862954)] * 3,
            offset=[-0.48145466 / 0.26862954] * 3, interpolation="bicubic")
        preprocessor = keras_hub.models.CLIPPreprocessor(tokenizer, image_converter=converter, sequence_length=24)
        vision = keras_hub.models.CLIPVisionEncoder(**VISION, name="clip_vision_encoder")
        text = keras_hub.models.CLIPTextEncoder(vocabulary_size=len(vocabulary), max_sequence_length=24, **TEXT,
                                                name="clip_text_encoder")
        backbone = keras_hub.models.CLIPBackbone(vision, text, projection_dim=12)
    else:
        tokenizer = keras_hub.models.SigLIPTokenizer(proto=_siglip_proto())
        converter = keras_hub.layers.SigLIPImageConverter(
            image_size=(IMAGE_SIZE, IMAGE_SIZE), scale=1 / 127.5, offset=-1.0, interpolation="bilinear")
        preprocessor = keras_hub.models.SigLIPPreprocessor(tokenizer, image_converter=converter, sequence_length=64)
        vision = keras_hub.models.SigLIPVisionEncoder(**VISION, name="sig_lip_vision_encoder")
        text = keras_hub.models.SigLIPTextEncoder(vocabulary_size=tokenizer.vocabulary_size(), projection_dim=16,
                                                  **TEXT, name="sig_lip_text_encoder")
        backbone = keras_hub.models.SigLIPBackbone(vision, text)
    _randomise(backbone, seed)
    # Scores that use the sigmoid's and softmax's range: neither saturated nor flat.
    head = backbone.clip_head if family == "clip" else backbone.siglip_head
    head.logit_scale.assign(math.log(8.0 + seed))
    if family == "siglip":
        head.logit_bias.assign(0.25)
    backbone.save_to_preset(folder)
    preprocessor.save_to_preset(folder)
    return backbone, preprocessor


@functools.lru_cache(maxsize=None)
def keras_hub_image_text_dir(family):
    """`(folder, keras-hub backbone, preprocessor)` of `family`, built once."""
    folder = tempfile.mkdtemp(prefix=f"keras_vit_keras_hub_{family}_")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    backbone, preprocessor = build(family, folder, 10 + FAMILIES.index(family))
    return folder, backbone, preprocessor


def keras_hub_preprocessor(family):
    """keras-hub's preprocessor of `family`, loaded from its folder.

    A fresh one for each test: on tensorflow, SigLIP's SentencePiece
    tokenizer holds a TensorFlow resource that the `clear_session` between
    tests frees, so the preprocessor built with the folder fails in a later
    test.
    """
    folder, _, built = keras_hub_image_text_dir(family)
    return type(built).from_preset(folder)
