"""The independent NumPy ViT forward pass for tests (see tools/reference.py).

The implementation lives in `tools/reference.py` so that the converter
(`keras-vit-convert`) verifies against the same yardstick; it imports
neither Keras nor keras_vit. Loaded by file path, so it works however the
tests are started.
"""

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[1] / "tools" / "reference.py"
_spec = importlib.util.spec_from_file_location("keras_vit_numpy_reference", _PATH)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

POSEMB = _module.POSEMB
gelu = _module.gelu
layer_norm = _module.layer_norm
embed_patches = _module.embed_patches
self_attention = _module.self_attention
encoder_block = _module.encoder_block
forward = _module.forward
