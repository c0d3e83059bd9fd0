"""Shared fixtures: the backend under test, tiny configs and ../shared paths."""

import os
import pathlib

import keras
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DEIT_NPZ = SHARED / "weights" / "deit_tiny_patch16_224.npz"
DEIT_SAFETENSORS = SHARED / "weights" / "deit_tiny_patch16_224.timm.safetensors"

# A ViT small enough to run forward and backward in milliseconds.
TINY = dict(
    image_size=32,
    patch_size=8,
    hidden_size=16,
    num_layers=2,
    num_heads=2,
    mlp_dim=32,
)

# The input statistics DeiT/timm-trained weights expect.
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], "float32")
IMAGENET_STD = np.array([0.229, 0.224, 0.225], "float32")


def imagenet_preprocess(image):
    """Shorter side to 256 (bicubic), centre crop 224, ImageNet mean/std."""
    from PIL import Image

    img = Image.fromarray(image)
    scale = 256 / min(img.size)
    img = img.resize((round(img.size[0] * scale), round(img.size[1] * scale)), Image.BICUBIC)
    left, top = (img.size[0] - 224) // 2, (img.size[1] - 224) // 2
    img = img.crop((left, top, left + 224, top + 224))
    return (np.asarray(img, "float32") / 255.0 - IMAGENET_MEAN) / IMAGENET_STD


requires_shared = pytest.mark.skipif(
    not DEIT_NPZ.exists(),
    reason=f"the real weights are not at {DEIT_NPZ} (../shared is absent)",
)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    keras.utils.clear_session()
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def backend():
    return keras.backend.backend()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def pytest_report_header(config):
    return f"keras backend: {keras.backend.backend()} (KERAS_BACKEND={os.environ.get('KERAS_BACKEND')})"
