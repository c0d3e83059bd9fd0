"""timm itself as the reference of the timm tests: tiny random models made
by `timm.create_model` from timm's own model functions, written as timm Hub
directories by timm's `save_for_hf` (`config.json` with the `model_args`,
`model.safetensors`), and their outputs.

timm imports through `keras_vit_tools.torchvision_stub` (this torch has no
working torchvision); where timm is not installed, `import_timm` skips the
calling test module, saying so.
"""

import numpy as np
import pytest

from keras_vit.families.timm_architectures import ARCHITECTURES

# The size of every tiny model: width 32 in 2 heads (16 wide, even for
# differential attention), 2 blocks, a 4 x 4 grid, 5 classes.
TINY = dict(embed_dim=32, depth=2, num_heads=2, num_classes=5)


def import_timm():
    """timm, or a skip of the calling module where it is not installed."""
    from keras_vit_tools.torchvision_stub import import_timm as load

    try:
        return load()
    except ImportError as error:
        pytest.skip(f"timm is the reference here and does not import: {error}", allow_module_level=True)


def image_size(name):
    """The tiny image size of an architecture: 32 pixels (in patches of 8,
    or, for a hybrid, on its ResNet's own downsampling)."""
    return 32


def tiny_arguments(name, **changes):
    """`timm.create_model` arguments making `name` tiny (`TINY`, 32-pixel
    images in patches of 8; a hybrid keeps its ResNet and patch size, a grid
    of 1 x 1 (ResNet-26, stride 32) or 2 x 2;
    attention pools with 8 heads get 4)."""
    args = dict(TINY, img_size=image_size(name))
    if not isinstance(ARCHITECTURES[name]["args"].get("embed_layer"), dict):
        args["patch_size"] = 8
    if ARCHITECTURES[name]["args"].get("attn_pool_num_heads"):
        args["attn_pool_num_heads"] = 4
    return {**args, **changes}


def randomise(model, seed, scale=0.2):
    """Moves every floating-point tensor off its initial value (norms,
    LayerScale, tokens, lambdas too), so that a mapping that drops or swaps
    one shows; returns the model in eval mode."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in model.state_dict().values():
            if tensor.dtype.is_floating_point:
                tensor.add_(scale * torch.randn(tensor.shape, generator=generator))
    return model.eval()


def make(timm, name, directory, seed=0, **changes):
    """A tiny random timm model of architecture `name`, written to
    `directory` by timm's `save_for_hf`; returns the model."""
    model = randomise(timm.create_model(name, pretrained=False, **tiny_arguments(name, **changes)), seed)
    timm.models.save_for_hf(model, str(directory), safe_serialization=True)
    return model


def images(size, seed=0, batch=2):
    return np.random.default_rng(seed).normal(size=(batch, size, size, 3)).astype("float32")


def outputs(model, x):
    """timm's `(model(x), forward_features(x))` for NHWC images, as NumPy."""
    import torch

    with torch.no_grad():
        tensor = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        return model(tensor).numpy(), model.forward_features(tensor).numpy()
