"""Tokenizers of the image-text checkpoints, read from their own files.

Texts become the token ids and padding mask a text tower takes, as
transformers' tokenizer for the checkpoint gives them: the tokenization
itself runs in a tokenizer library (HF `tokenizers` for a `tokenizer.json`,
`sentencepiece` for SigLIP's `spiece.model`); this module reads the files,
applies the checkpoint's text rules and pads.

- `tokenizer.json` (CLIP, MetaCLIP 2, SigLIP 2, and any checkpoint that has
  one): normaliser, pre-tokeniser, model and post-processor (the special
  tokens around each text) come from the file; the padding and truncation
  stored in it are replaced by the tower's. `tokenizer_config.json` gives
  the pad token and the padding side (transformers' class default where
  the file leaves it out: left for the Gemma-based SigLIP 2 tokenizer,
  right otherwise); an explicit `add_bos_token`/`add_eos_token` there
  rebuilds the post-processor as transformers 5 does.
- `spiece.model` without a `tokenizer.json` (SigLIP): transformers'
  `SiglipTokenizer` rule: the text is lowercased, punctuation removed and
  whitespace collapsed (big_vision's SigLIP text canonicalisation), the
  pieces come from `sentencepiece` and the end-of-sequence token closes
  every text; special-token strings typed in a text stay special tokens.

Padding is "longest" (to the longest text of the call: CLIP's, as
transformers' zero-shot pipeline pads) or "max_length" (every text to
`max_length` tokens: SigLIP's 64). Texts longer than `max_length` are
truncated, the special tokens kept (transformers' `truncation=True`).
"""

import abc
import os
import re
import string

import numpy as np

from keras_vit.validation import check_choice, check_positive_int

PADDINGS = ("longest", "max_length")
SIDES = ("right", "left")
# transformers' tokenizer classes whose default padding side is left (a
# `padding_side` in `tokenizer_config.json` replaces it).
LEFT_PADDING_CLASSES = ("Siglip2Tokenizer", "GemmaTokenizer", "GemmaTokenizerFast")
_SPIECE_UNDERLINE = "\u2581"


class Tokenizer(abc.ABC):
    """Texts to padded token ids and a padding mask (the base of the readers).

    Args:
        pad_id: int, the id padding positions hold.
        max_length: int, the most tokens of a text (the tower's context).
        padding: "longest" (default) or "max_length".
        padding_side: "right" (default) or "left".

    Call arguments:
        texts: a string or a sequence of strings.
        sequence_length: None (default: as `padding` says) or an int, the
            length to pad to (at least the longest text's; an exported text
            tower takes a fixed length).

    Returns:
        `{"token_ids": (n, length) int32, "padding_mask": (n, length)
        int32}`, the mask 1 on tokens and 0 on padding.
    """

    def __init__(self, pad_id, max_length, padding="longest", padding_side="right"):
        self.pad_id = int(pad_id)
        self.max_length = check_positive_int(max_length, "max_length")
        self.padding = check_choice(padding, PADDINGS, "padding")
        self.padding_side = check_choice(padding_side, SIDES, "padding_side")

    # The vocabulary file a tokenizer writes beside its config (`save_files`).
    FILE = None

    @abc.abstractmethod
    def encode(self, text):
        """The token ids of one text, special tokens included, truncated."""

    def get_config(self):
        """The constructor's arguments but the tokenizer library's object
        (written to `FILE` by `save_files`)."""
        return {"pad_id": self.pad_id, "max_length": self.max_length, "padding": self.padding,
                "padding_side": self.padding_side}

    @abc.abstractmethod
    def save_files(self, directory):
        """Writes the vocabulary file `FILE` into `directory`."""

    @classmethod
    @abc.abstractmethod
    def from_files(cls, directory, config):
        """The tokenizer of `get_config()`'s dict and the `FILE` in `directory`."""

    def __call__(self, texts, sequence_length=None):
        texts = check_texts(texts)
        ids = [self.encode(text) for text in texts]
        empty = [text for text, sequence in zip(texts, ids) if not sequence]
        if empty:
            raise ValueError(
                f"Each text must give at least one token (this tokenizer adds none around a text). "
                f"Received: texts with no token: {empty[:3]!r}"
            )
        longest = max(len(i) for i in ids)
        length = self.max_length if self.padding == "max_length" else longest
        if sequence_length is not None:
            length = check_positive_int(sequence_length, "sequence_length")
            if length < longest:
                raise ValueError(
                    f"`sequence_length` must hold the longest text ({longest} tokens). "
                    f"Received: sequence_length={sequence_length}"
                )
        token_ids = np.full((len(ids), length), self.pad_id, "int32")
        mask = np.zeros((len(ids), length), "int32")
        for row, sequence in enumerate(ids):
            start = length - len(sequence) if self.padding_side == "left" else 0
            token_ids[row, start:start + len(sequence)] = sequence
            mask[row, start:start + len(sequence)] = 1
        return {"token_ids": token_ids, "padding_mask": mask}

    def __repr__(self):
        return (
            f"<{type(self).__name__} padding={self.padding!r} max_length={self.max_length} "
            f"padding_side={self.padding_side!r}>"
        )


def check_texts(texts):
    """`texts` (a string or a sequence of strings) as a non-empty list."""
    if isinstance(texts, str):
        return [texts]
    try:
        items = list(texts)
    except TypeError:
        items = None
    if not items or not all(isinstance(t, str) for t in items):
        raise ValueError(
            f"`texts` must be a string or a non-empty sequence of strings. Received: texts={texts!r}"
        )
    return items


class JsonTokenizer(Tokenizer):
    """A `tokenizer.json` run by HF `tokenizers` (see the module docstring).

    Args:
        tokenizer: a `tokenizers.Tokenizer`; its padding and truncation are
            replaced.
        pad_id, max_length, padding, padding_side: as `Tokenizer`.
    """

    FILE = "tokenizer.json"

    def __init__(self, tokenizer, pad_id, max_length, padding="longest", padding_side="right"):
        super().__init__(pad_id, max_length, padding, padding_side)
        tokenizer.no_padding()
        tokenizer.enable_truncation(self.max_length)
        self.tokenizer = tokenizer

    def encode(self, text):
        return self.tokenizer.encode(text).ids

    def save_files(self, directory):
        self.tokenizer.save(os.path.join(directory, self.FILE))

    @classmethod
    def from_files(cls, directory, config):
        import tokenizers

        return cls(tokenizers.Tokenizer.from_file(os.path.join(directory, cls.FILE)), **config)


class SentencePieceFiles(Tokenizer):
    """A tokenizer whose vocabulary is one SentencePiece model (its
    `processor`), written to `FILE`."""

    def save_files(self, directory):
        write_sentencepiece(self.processor, os.path.join(directory, self.FILE))

    @classmethod
    def from_files(cls, directory, config):
        return cls(read_sentencepiece(os.path.join(directory, cls.FILE)), **config)


class SiglipTokenizer(SentencePieceFiles):
    """SigLIP's `spiece.model`, run by `sentencepiece` with transformers'
    `SiglipTokenizer` rule (see the module docstring).

    Args:
        processor: a `sentencepiece.SentencePieceProcessor`.
        eos_id: int, the id closing every text.
        unk_token: str, the unknown token's string (the rule encodes the text
            behind it, then drops its pieces).
        special_tokens: `{string: id}` of the special tokens a text may hold.
        lowercase: bool, default True (`do_lower_case`).
        pad_id, max_length, padding, padding_side: as `Tokenizer`.
    """

    FILE = "spiece.model"

    def __init__(self, processor, eos_id, unk_token, special_tokens, pad_id, max_length,
                 padding="max_length", padding_side="right", lowercase=True):
        super().__init__(pad_id, max_length, padding, padding_side)
        self.processor = processor
        self.eos_id = int(eos_id)
        self.unk_token = unk_token
        self.special_tokens = dict(special_tokens)
        self.lowercase = bool(lowercase)
        self._unk_pieces = len(processor.encode(unk_token, out_type=str))
        names = sorted(self.special_tokens, key=len, reverse=True)
        # Special tokens strip the whitespace around them (`lstrip`/`rstrip`).
        self._split = re.compile(r"\s*(" + "|".join(re.escape(n) for n in names) + r")\s*") if names else None

    def get_config(self):
        return dict(super().get_config(), eos_id=self.eos_id, unk_token=self.unk_token,
                    special_tokens=self.special_tokens, lowercase=self.lowercase)

    def canonicalize(self, text):
        """big_vision's SigLIP text rule: lowercase, no punctuation, single spaces."""
        if self.lowercase:
            text = text.lower()
        text = text.translate(str.maketrans("", "", string.punctuation))
        return re.sub(r"\s+", " ", text).strip()

    def _pieces(self, text):
        pieces = self.processor.encode(self.unk_token + self.canonicalize(text), out_type=str)
        return pieces[self._unk_pieces:]

    def encode(self, text):
        # transformers marks the start of the text with "▁" and splits off special tokens.
        text = _SPIECE_UNDERLINE + text.replace(_SPIECE_UNDERLINE, " ")
        parts = self._split.split(text) if self._split else [text]
        ids = []
        for i, part in enumerate(parts):
            if i % 2:
                ids.append(self.special_tokens[part])
            elif part and not (i == 0 and part == _SPIECE_UNDERLINE and len(parts) > 1):
                ids.extend(self.processor.piece_to_id(p) for p in self._pieces(part))
        ids = ids[: self.max_length - 1]
        return ids if ids and ids[-1] == self.eos_id else ids + [self.eos_id]


def read_sentencepiece(path):
    """A `sentencepiece.SentencePieceProcessor` of the model file `path`."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    processor.Load(os.fspath(path))
    return processor


def write_sentencepiece(processor, path):
    """Writes a `SentencePieceProcessor`'s model to `path`."""
    with open(path, "wb") as f:
        f.write(processor.serialized_model_proto())


def _token_string(value):
    """A token of a `tokenizer_config.json` (a string or an AddedToken dict)."""
    return value.get("content") if isinstance(value, dict) else value


def _read_config(directory):
    from keras_vit.weights.files import read_json

    config = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            config.update(read_json(path))
    return config


def _padding_side(config):
    default = "left" if config.get("tokenizer_class") in LEFT_PADDING_CLASSES else "right"
    return config.get("padding_side", default)


def _json_tokenizer(path, config, max_length, padding, lowercase):
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(path)
    if lowercase:
        steps = [tokenizers.normalizers.Lowercase()]
        if tokenizer.normalizer is not None:
            steps.append(tokenizer.normalizer)
        tokenizer.normalizer = tokenizers.normalizers.Sequence(steps)
    if "add_bos_token" in config or "add_eos_token" in config:
        _template(tokenizer, config)
    # A tokenizer without a pad token pads with its end-of-sequence token.
    pad = _token_string(config.get("pad_token")) or _token_string(config.get("eos_token"))
    if pad is None:
        raise ValueError(
            f"{path!r} has no pad token: tokenizer_config.json names no pad_token or eos_token. "
            "Give `pad_token`."
        )
    pad_id = tokenizer.token_to_id(pad)
    if pad_id is None:
        raise ValueError(f"{path!r}: its pad token {pad!r} is not in the vocabulary.")
    return JsonTokenizer(tokenizer, pad_id, max_length, padding, _padding_side(config))


def _template(tokenizer, config):
    """transformers 5's post-processor for explicit `add_bos_token`/`add_eos_token`."""
    import tokenizers

    single, special = ["$A:0"], []
    for flag, key, at in (("add_bos_token", "bos_token", 0), ("add_eos_token", "eos_token", None)):
        token = _token_string(config.get(key))
        if config.get(flag) and token is not None and tokenizer.token_to_id(token) is not None:
            single.insert(0 if at == 0 else len(single), f"{token}:0")
            special.append((token, tokenizer.token_to_id(token)))
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single=" ".join(single), special_tokens=special
    )


def _sentencepiece_tokenizer(path, config, max_length, padding):
    processor = read_sentencepiece(path)
    names = {key: _token_string(config.get(key, default)) for key, default in
             (("eos_token", "</s>"), ("unk_token", "<unk>"), ("pad_token", "</s>"))}
    ids = {}
    for key, name in names.items():
        piece = processor.piece_to_id(name)
        if processor.id_to_piece(piece) != name:
            raise ValueError(f"{path!r}: its {key} {name!r} is not a piece of the model.")
        ids[key] = piece
    return SiglipTokenizer(
        processor, ids["eos_token"], names["unk_token"], {names[k]: ids[k] for k in ids},
        ids["pad_token"], max_length, padding, _padding_side(config),
        lowercase=config.get("do_lower_case", True),
    )


def load_tokenizer(directory, max_length, padding="longest", lowercase=False, pad_token=None):
    """The tokenizer of a checkpoint directory (see the module docstring).

    Args:
        directory: the folder with `tokenizer.json` or `spiece.model` and
            `tokenizer_config.json`.
        max_length: int, the text tower's context length.
        padding: "longest" (default) or "max_length".
        lowercase: bool, default False: lowercase texts before a
            `tokenizer.json`'s own normaliser (transformers' SigLIP 2
            tokenizer does).
        pad_token: None (default: `tokenizer_config.json`'s `pad_token`,
            else its `eos_token`) or the string of the pad token.

    Returns:
        A `JsonTokenizer` or `SiglipTokenizer`.

    Raises:
        ValueError: when the directory has neither file, or its special
            tokens are not in the vocabulary.

    Example:

    >>> import os, tempfile, tokenizers
    >>> folder = tempfile.mkdtemp()
    >>> model = tokenizers.models.WordLevel({"<pad>": 0, "a": 1, "cat": 2}, unk_token="<pad>")
    >>> raw = tokenizers.Tokenizer(model)
    >>> raw.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    >>> raw.save(os.path.join(folder, "tokenizer.json"))
    >>> tokenizer = load_tokenizer(folder, max_length=8, pad_token="<pad>")
    >>> tokenizer(["a cat", "cat"])["token_ids"].tolist()
    [[1, 2], [2, 0]]
    """
    max_length = check_positive_int(max_length, "max_length")
    check_choice(padding, PADDINGS, "padding")
    config = _read_config(directory)
    if pad_token is not None:
        config["pad_token"] = pad_token
    json_path = os.path.join(directory, "tokenizer.json")
    spiece_path = os.path.join(directory, "spiece.model")
    if os.path.isfile(json_path):
        return _json_tokenizer(json_path, config, max_length, padding, lowercase)
    if os.path.isfile(spiece_path):
        return _sentencepiece_tokenizer(spiece_path, config, max_length, padding)
    raise ValueError(
        f"{directory!r} has no tokenizer: a text tower needs tokenizer.json (HF tokenizers) "
        "or spiece.model (SentencePiece) beside its config.json."
    )
