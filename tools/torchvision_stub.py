"""Imports timm beside a torch that has no working torchvision.

timm imports torchvision at start-up (its data transforms, a frozen
BatchNorm), though its ViT models use none of torchvision's operators. The
torch this project pins is the CPU build 2.13.0, and PyPI's torchvision for
it is built against the CUDA torch: importing it fails ("operator
torchvision::nms does not exist"). `import_timm` imports timm with the few
torchvision names it reads at start-up standing in, and takes them out of
`sys.modules` again once timm is imported, so that no other library sees a
torchvision that is not there. A torchvision that imports is used as it is.

The stand-ins are exactly what `import timm` reads (timm 1.0): the
`InterpolationMode` enum and `ToTensor` of `torchvision.transforms`,
`FrozenBatchNorm2d` of `torchvision.ops.misc`, and six dataset classes of
`torchvision.datasets`. Using any of the classes raises, naming this module.

Example:

>>> timm = import_timm()  # doctest: +SKIP
>>> timm.create_model("vit_tiny_patch16_224", pretrained=False).num_classes  # doctest: +SKIP
1000
"""

import enum
import importlib
import importlib.util
import sys
import types

_DATASETS = ("CIFAR10", "CIFAR100", "MNIST", "KMNIST", "FashionMNIST", "ImageFolder")


class _StandIn:
    """A torchvision class that timm names at import and the ViTs never use."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            f"torchvision.{type(self).__qualname__} is a stand-in of keras_vit_tools.torchvision_stub "
            "(this torch has no working torchvision); timm's data pipelines need the real one."
        )


def _stand_in(name):
    return type(name, (_StandIn,), {"__qualname__": name})


def _stub_modules():
    """`{module name: module}` of the stand-ins."""
    modes = enum.Enum("InterpolationMode", "NEAREST NEAREST_EXACT BILINEAR BICUBIC BOX HAMMING LANCZOS")
    modules = {}

    def add(name, **attributes):
        module = types.ModuleType(name, "keras_vit_tools.torchvision_stub stand-in")
        module.__dict__.update(attributes)
        modules[name] = module
        return module

    functional = add("torchvision.transforms.functional", InterpolationMode=modes)
    transforms = add("torchvision.transforms", functional=functional, ToTensor=_stand_in("ToTensor"))
    misc = add("torchvision.ops.misc", FrozenBatchNorm2d=_stand_in("FrozenBatchNorm2d"))
    ops = add("torchvision.ops", misc=misc)
    datasets = add("torchvision.datasets", **{name: _stand_in(name) for name in _DATASETS})
    add("torchvision", transforms=transforms, ops=ops, datasets=datasets, __version__="0+stub")
    return modules


def _torchvision_works():
    """Whether a real torchvision is installed and imports (a failed import is undone)."""
    if importlib.util.find_spec("torchvision") is None:
        return False
    before = set(sys.modules)
    try:
        importlib.import_module("torchvision")
        return True
    except Exception:  # a torchvision built for another torch raises RuntimeError
        for name in set(sys.modules) - before:
            if name == "torchvision" or name.startswith("torchvision."):
                del sys.modules[name]
        return False


def import_timm():
    """timm, imported with torchvision's stand-ins where torchvision does not work.

    Returns:
        The `timm` module.

    Raises:
        ImportError: timm (or torch) is not installed.
    """
    if "timm" in sys.modules:
        return sys.modules["timm"]
    if importlib.util.find_spec("timm") is None:
        raise ImportError("timm is not installed (pip install timm; see setup.cfg's test extra).")
    if _torchvision_works():
        return importlib.import_module("timm")
    stubs = _stub_modules()
    sys.modules.update(stubs)
    try:
        return importlib.import_module("timm")
    finally:
        for name, module in stubs.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]
