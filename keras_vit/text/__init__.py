"""Text towers of the image-text models and their tokenizers.

`TextEncoder` is the text tower of CLIP, MetaCLIP 2, SigLIP and SigLIP 2 on
keras_vit's Transformer blocks; `keras_vit.text.tokenizer` reads each
checkpoint's tokenizer from its own files (HF `tokenizers`,
`sentencepiece`), `keras_vit.text.keras_hub_tokenizer` keras-hub's from a
preset's preprocessor and assets; `IMAGENET_TEMPLATES` are the CLIP paper's
prompts for ImageNet-style zero-shot classification.
`keras_vit.ImageTextModel` puts a text tower beside an image tower.

Example:

>>> from keras_vit.text import IMAGENET_TEMPLATES, prompts
>>> prompts("goldfish", IMAGENET_TEMPLATES[:2])
['a bad photo of a goldfish.', 'a photo of many goldfish.']
"""

from keras_vit.text.encoder import TextEncoder
from keras_vit.text.keras_hub_tokenizer import load_keras_hub_tokenizer
from keras_vit.text.layers import AttentionMask, TextEmbedding, TextPooling
from keras_vit.text.templates import IMAGENET_TEMPLATES, prompts
from keras_vit.text.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "AttentionMask",
    "IMAGENET_TEMPLATES",
    "TextEmbedding",
    "TextEncoder",
    "TextPooling",
    "Tokenizer",
    "load_keras_hub_tokenizer",
    "load_tokenizer",
    "prompts",
]
