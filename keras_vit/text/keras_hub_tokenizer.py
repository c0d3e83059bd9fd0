"""Tokenizers of keras-hub's CLIP and SigLIP presets, read from the preset's
own files, giving the token ids and padding mask keras-hub's preprocessor
gives.

A preset saved with its preprocessor holds `preprocessor.json` (the
`CLIPPreprocessor` or `SigLIPPreprocessor`: `sequence_length`,
`add_start_token`, `add_end_token`, SigLIP's `canonicalize_text`, and the
tokenizer's config) and the vocabulary under `assets/tokenizer/`:

- CLIP (`CLIPTokenizer`): `vocabulary.json` and `merges.txt`, a byte-level
  BPE with CLIP's rules (NFC, whitespace runs collapsed, lowercase; words
  split by CLIP's pattern; `</w>` ending each word). HF `tokenizers` runs it,
  as keras-hub itself does outside `tf.data`. Texts are wrapped in
  `<|startoftext|>` and `<|endoftext|>` and padded with id 0 (or the
  end-of-text id with the tokenizer's `pad_with_end_token`).
- SigLIP (`SigLIPTokenizer`): `vocabulary.spm`, a SentencePiece model run by
  `sentencepiece`. With `canonicalize_text` (the default), the text is
  first canonicalised as `SigLIPPreprocessor` does it in TensorFlow: ASCII
  letters lowercased, ASCII punctuation removed, runs of ASCII whitespace
  made one space, the ends stripped. `</s>` ends each text and pads it.

Every text is padded to `sequence_length` (keras-hub's packer), truncated
to fit with its start and end tokens kept.
"""

import os
import re
import string

from keras_vit.text.tokenizer import JsonTokenizer, SentencePieceFiles, read_sentencepiece
from keras_vit.validation import check_positive_int

ASSETS = os.path.join("assets", "tokenizer")
PREPROCESSORS = ("keras_hub>CLIPPreprocessor", "keras_hub>SigLIPPreprocessor")
# keras-hub's CLIP tokenizer: its special tokens and its word pattern.
START, END = "<|startoftext|>", "<|endoftext|>"
CLIP_PATTERN = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
_ASCII_WHITESPACE = re.compile(r"[\t\n\f\r ]+")
_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def canonicalize(text):
    """`SigLIPPreprocessor`'s text rule (TensorFlow string ops, ASCII only).

    Example:

    >>> canonicalize("  A Photo, of the CAT!\\n Über  ")
    'a photo of the cat Über'
    """
    text = _ASCII_WHITESPACE.sub(" ", text.translate(_LOWER).translate(_NO_PUNCTUATION))
    return text.strip(" \t\n\v\f\r")


class SentencePieceTokenizer(SentencePieceFiles):
    """A SentencePiece model run as keras-hub's `SigLIPPreprocessor` runs it.

    Args:
        processor: a `sentencepiece.SentencePieceProcessor`.
        end_id: int, the id ending every text.
        pad_id: int, the id padding holds.
        max_length: int, the most tokens of a text.
        canonicalize_text: bool, default True (see `canonicalize`).
        padding: "max_length" (default: keras-hub's packer) or "longest".
        padding_side: "right" (default) or "left".
    """

    FILE = "vocabulary.spm"

    def __init__(self, processor, end_id, pad_id, max_length, canonicalize_text=True, padding="max_length",
                 padding_side="right"):
        super().__init__(pad_id, max_length, padding, padding_side)
        self.processor = processor
        self.end_id = int(end_id)
        self.canonicalize_text = bool(canonicalize_text)

    def get_config(self):
        return dict(super().get_config(), end_id=self.end_id, canonicalize_text=self.canonicalize_text)

    def encode(self, text):
        if self.canonicalize_text:
            text = canonicalize(text)
        return list(self.processor.encode(text))[: self.max_length - 1] + [self.end_id]


def _preprocessor(directory):
    from keras_vit.weights.files import read_json

    path = os.path.join(directory, "preprocessor.json")
    if not os.path.isfile(path):
        raise ValueError(
            f"{directory!r} has no preprocessor.json: the text tower of a keras-hub preset needs the "
            "preprocessor saved with it (`preprocessor.save_to_preset(directory)`)."
        )
    spec = read_json(path)
    if spec.get("registered_name") not in PREPROCESSORS:
        raise ValueError(
            f"{path!r} must describe one of {PREPROCESSORS}. "
            f"Received: registered_name={spec.get('registered_name')!r}"
        )
    return spec


def _asset(directory, name):
    path = os.path.join(directory, ASSETS, name)
    if not os.path.isfile(path):
        raise ValueError(f"{directory!r} has no {os.path.join(ASSETS, name)}: the tokenizer's vocabulary.")
    return path


def _clip_tokenizer(directory, config, tokenizer_config, length):
    import tokenizers
    from tokenizers import normalizers, pre_tokenizers, processors

    from keras_vit.weights.files import read_json

    vocabulary = read_json(_asset(directory, "vocabulary.json"))
    with open(_asset(directory, "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.split(" ")) for line in f.read().splitlines() if line and not line.startswith("#version")]
    for token in (START, END):
        if token not in vocabulary:
            raise ValueError(f"{directory!r}: the vocabulary has no {token!r}.")
    bpe = tokenizers.models.BPE(vocab=vocabulary, merges=merges, continuing_subword_prefix="",
                                end_of_word_suffix="</w>", fuse_unk=False, unk_token=END)
    raw = tokenizers.Tokenizer(bpe)
    raw.add_special_tokens([START, END])
    raw.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(tokenizers.Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    raw.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(CLIP_PATTERN), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=bool(tokenizer_config.get("add_prefix_space", False))),
    ])
    single = [START] * config.get("add_start_token", True) + ["$A"] + [END] * config.get("add_end_token", True)
    raw.post_processor = processors.TemplateProcessing(
        single=" ".join(single), special_tokens=[(t, vocabulary[t]) for t in (START, END)]
    )
    pad_id = vocabulary[END] if tokenizer_config.get("pad_with_end_token") else 0
    return JsonTokenizer(raw, pad_id, length, padding="max_length")


def _siglip_tokenizer(directory, config, length):
    processor = read_sentencepiece(_asset(directory, "vocabulary.spm"))
    end = processor.piece_to_id("</s>")
    if processor.id_to_piece(end) != "</s>":
        raise ValueError(f"{directory!r}: the SentencePiece model has no '</s>' (SigLIP's end and pad token).")
    if config.get("add_start_token", False) or not config.get("add_end_token", True):
        raise ValueError(
            "keras_vit reads SigLIP preprocessors that end each text with '</s>' and start it with "
            f"nothing. Received: add_start_token={config.get('add_start_token')!r}, "
            f"add_end_token={config.get('add_end_token')!r}"
        )
    return SentencePieceTokenizer(processor, end, end, length, config.get("canonicalize_text", True))


def load_keras_hub_tokenizer(directory, max_length=None):
    """The tokenizer of a keras-hub CLIP or SigLIP preset (see the module docstring).

    Args:
        directory: the preset folder, with `preprocessor.json` and
            `assets/tokenizer/`.
        max_length: None (default: the preprocessor's `sequence_length`) or
            an int: the length texts are padded to.

    Returns:
        A `keras_vit.text.tokenizer.Tokenizer` that pads to the length.

    Raises:
        ValueError: when the preset has no preprocessor or vocabulary, or
            its preprocessor is not CLIP's or SigLIP's.
    """
    spec = _preprocessor(directory)
    config = spec.get("config", {})
    length = check_positive_int(max_length or config.get("sequence_length"), "sequence_length")
    tokenizer_config = config.get("tokenizer", {}).get("config", {})
    if spec["registered_name"] == "keras_hub>CLIPPreprocessor":
        return _clip_tokenizer(directory, config, tokenizer_config, length)
    return _siglip_tokenizer(directory, config, length)
