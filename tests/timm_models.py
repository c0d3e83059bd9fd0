"""timm itself as the reference of the timm tests: tiny random models made
by `timm.create_model` from timm's own model functions, written as timm Hub
directories by timm's `save_for_hf`, and their outputs
(`keras_vit_tools.timm_parity`, which also runs every architecture).

timm imports through `keras_vit_tools.torchvision_stub` (this torch has no
working torchvision); where timm is not installed, `import_timm` skips the
calling test module, saying so.
"""

import pytest

from keras_vit_tools.timm_parity import IMAGE_SIZE, images, make, outputs, tiny_arguments  # noqa: F401


def import_timm():
    """timm, or a skip of the calling module where it is not installed."""
    from keras_vit_tools.torchvision_stub import import_timm as load

    try:
        return load()
    except ImportError as error:
        pytest.skip(f"timm is the reference here and does not import: {error}", allow_module_level=True)
