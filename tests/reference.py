"""The independent NumPy ViT forward pass for tests (`tools/reference.py`).

It lives in the tools so that the converter (`keras-vit-convert`) verifies
against the same yardstick; it imports neither Keras nor keras_vit.
"""

from keras_vit_tools.reference import (  # noqa: F401
    POSEMB,
    activation,
    embed_patches,
    encoder_block,
    forward,
    gelu,
    layer_norm,
    self_attention,
)
