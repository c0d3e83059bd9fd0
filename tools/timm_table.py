"""Writes keras_vit's table of timm's pretrained ViT-family architectures
(`keras_vit/weights/formats/timm_architectures.py`) from the installed timm.

For each architecture timm lists in the ViT families (`PATTERNS`), with
pretrained weights or without, the tool calls timm's model function with timm's model
builder (`build_model_with_cfg`) replaced by a recorder, so that nothing is
built: the recorder keeps the model class and the keyword arguments the
function passes to it (its `model_args`). It also keeps each model class's
constructor defaults and every pretrained tag's `pretrained_cfg` (input
size, crop, mean/std, interpolation, classes, Hub id). Values become Python
literals: classes and functions by name, `functools.partial(f, **kw)` as
`{"fn": name, **kw}`, the ResNet or convolution stem of a hybrid as a
description of its layers.

A new timm release means running this tool, then the tests (the
committed table is compared with the installed timm by
`tests/test_timm_zoo.py`, where timm imports).

Usage:
    python tools/timm_table.py           # rewrites the table
    python tools/timm_table.py --check   # exits 1 when the table differs from the installed timm
    python tools/timm_table.py --coverage  # how many of the architectures keras_vit builds
"""

import argparse
import contextlib
import enum
import functools
import inspect
import pathlib
import sys

if __package__:
    from .torchvision_stub import import_timm
else:  # `python tools/timm_table.py`: this file's folder is on the path
    from torchvision_stub import import_timm

ROOT = pathlib.Path(__file__).resolve().parents[1]
TABLE = ROOT / "keras_vit" / "weights" / "formats" / "timm_architectures.py"
# The model-name patterns of timm's ViT families.
PATTERNS = ("vit_*", "deit*", "eva*", "flexivit*", "samvit*", "aimv2*")
# `build_model_with_cfg`'s own arguments: how to load, not what to build.
BUILDER_ARGUMENTS = frozenset((
    "pretrained_cfg", "pretrained_cfg_overlay", "model_cfg", "feature_cfg", "pretrained_strict",
    "pretrained_filter_fn", "kwargs_filter", "cache_dir",
))
# The constructor arguments that place a model, not describe it.
PLACEMENT = frozenset(("device", "dtype", "self"))
# The `pretrained_cfg` fields the table keeps.
CFG_FIELDS = ("hf_hub_id", "num_classes", "input_size", "fixed_input_size", "crop_pct", "crop_mode",
              "interpolation", "mean", "std", "license")


class _Recorded(Exception):
    """Raised by the recorder once it holds the call: nothing gets built."""

    def __init__(self, model_class, kwargs):
        super().__init__(model_class.__name__)
        self.model_class, self.kwargs = model_class, kwargs


def _recorder(model_class, variant, pretrained=False, **kwargs):
    raise _Recorded(model_class, kwargs)


@contextlib.contextmanager
def _recording(module):
    """`module.build_model_with_cfg` replaced by the recorder."""
    original = module.build_model_with_cfg
    module.build_model_with_cfg = _recorder
    try:
        yield
    finally:
        module.build_model_with_cfg = original


def _name(value):
    return getattr(value, "__name__", type(value).__name__)


def _resnet(backbone):
    """A timm `ResNetV2` (or its stem alone) as `{"fn": "ResNetV2", ...}`."""
    stem = getattr(backbone, "stem", backbone)
    stages = getattr(backbone, "stages", ())
    conv, norm, pool = stem.conv, stem.norm, stem.pool
    return {
        "fn": "ResNetV2", "layers": [len(stage.blocks) for stage in stages], "stem_chs": conv.out_channels,
        "conv": _name(type(conv)), "conv_eps": conv.eps, "norm": _name(type(norm)), "norm_eps": norm.eps,
        "groups": norm.num_groups, "pool": _name(type(pool)),
    }


def _conv_stem(backbone):
    """timm's `ConvStem` (MobileCLIP) as `{"fn": "ConvStem", "stages": [...]}`."""
    stages = []
    for unit in backbone:
        conv, norm = unit.conv, unit.bn
        stage = dict(out=conv.out_channels, kernel=list(conv.kernel_size), stride=list(conv.stride),
                     padding=list(conv.padding), bias=conv.bias is not None)
        if hasattr(norm, "eps"):
            stage.update(norm=_name(type(norm)), norm_eps=norm.eps, act=_name(type(norm.act)))
        stages.append(stage)
    return {"fn": "ConvStem", "stages": stages}


def _backbone(module):
    kind = _name(type(module))
    if kind == "ResNetV2" or (kind == "Sequential" and hasattr(module, "conv")):
        return _resnet(module)
    if kind == "ConvStem":
        return _conv_stem(module)
    return {"fn": kind}  # named only: keras_vit refuses a backbone it has no description of


def encode(value):
    """A timm argument value as a Python literal (see the module's docstring)."""
    import torch

    if isinstance(value, enum.Enum):
        return encode(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, functools.partial):
        if value.args:
            raise TypeError(f"Positional arguments of {value!r} are not described.")
        return {"fn": _name(value.func), **{k: encode(v) for k, v in value.keywords.items()}}
    if isinstance(value, torch.nn.Module):
        return _backbone(value)
    if isinstance(value, type) or callable(value):
        return _name(value)
    raise TypeError(f"Cannot describe {value!r} ({type(value).__name__}).")


def class_defaults(model_class):
    """`{argument: default}` of a model class's constructor (and its bases')."""
    defaults = {}
    for cls in reversed(model_class.__mro__):
        if "__init__" not in vars(cls) or cls.__module__.startswith("torch"):
            continue
        for name, parameter in inspect.signature(cls.__init__).parameters.items():
            if parameter.default is not inspect.Parameter.empty and name not in PLACEMENT:
                defaults[name] = encode(parameter.default)
    return dict(sorted(defaults.items()))


def architecture(timm, name):
    """`(model class, {"module", "class", "args"})` of one model function."""
    function = timm.models.model_entrypoint(name)
    module = sys.modules[function.__module__]
    with _recording(module):
        try:
            function(pretrained=False)
        except _Recorded as recorded:
            args = {k: encode(v) for k, v in recorded.kwargs.items() if k not in BUILDER_ARGUMENTS}
            entry = dict(module=function.__module__.rsplit(".", 1)[1], cls=recorded.model_class.__name__,
                         args=dict(sorted(args.items())))
            return recorded.model_class, entry
    raise RuntimeError(f"timm's {name} built its model without `build_model_with_cfg`.")


def _cfg_fields(cfg):
    return {k: encode(getattr(cfg, k, None)) for k in CFG_FIELDS}


def tags(timm, name):
    """`{tag: pretrained_cfg fields}` of an architecture's pretrained weights."""
    return {full.split(".", 1)[1]: _cfg_fields(timm.models.get_pretrained_cfg(full))
            for full in timm.list_pretrained(name + ".*")}


def default_cfg(timm, name):
    """The `pretrained_cfg` timm builds `name` with when no tag is given
    (its first tag's, or the "untrained" one), with its `tag`."""
    cfg = timm.models.get_pretrained_cfg(name)
    return {"tag": cfg.tag, **_cfg_fields(cfg)}


def build_table(timm):
    """`(architectures, class defaults)` of the installed timm."""
    names = sorted(timm.list_models(list(PATTERNS)))
    architectures, classes = {}, {}
    for name in names:
        model_class, entry = architecture(timm, name)
        entry["default_cfg"] = default_cfg(timm, name)
        entry["tags"] = tags(timm, name)
        architectures[name] = entry
        classes.setdefault(entry["cls"], class_defaults(model_class))
    return architectures, dict(sorted(classes.items()))


HEADER = '''"""timm's pretrained ViT-family architectures, as timm {version}'s model functions define them.

Generated by `tools/timm_table.py` from the installed timm: do not edit; run
`python tools/timm_table.py` after a new timm release.

- `TIMM_VERSION`: the timm this table was read from.
- `PATTERNS`: the model-name patterns of the ViT families.
- `CLASS_DEFAULTS`: `{{model class: {{argument: default}}}}` of each timm model
  class's constructor.
- `ARCHITECTURES`: `{{name: {{"module", "cls", "args", "default_cfg", "tags"}}}}`:
  the timm module and model class of each architecture of the families
  (with pretrained weights or not), the arguments its model function passes
  to the class, the `pretrained_cfg` timm builds it with when no tag is
  named (with its `tag`; timm takes `num_classes`, `in_chans` and, with
  `fixed_input_size`, `img_size` from it where the function does not set
  them), and each pretrained tag's (`{{tag: {{field: value}}}}`). Classes and functions
  are named; `functools.partial(f, **kw)` is `{{"fn": "f", **kw}}`; a hybrid's
  backbone is described by its layers.
"""
'''


def _literal(value):
    """One line of Python for a table value (dicts in their order)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def render(architectures, classes, version):
    """The table module's source: one line per class, architecture's arguments and tag."""
    lines = [HEADER.format(version=version), f"TIMM_VERSION = {version!r}", f"PATTERNS = {PATTERNS!r}", "",
             "CLASS_DEFAULTS = {"]
    lines += [f"    {name!r}: {_literal(defaults)}," for name, defaults in classes.items()]
    lines += ["}", "", "ARCHITECTURES = {"]
    for name, entry in architectures.items():
        lines.append(f"    {name!r}: {{")
        lines.append(f"        'module': {entry['module']!r}, 'cls': {entry['cls']!r},")
        lines.append(f"        'args': {_literal(entry['args'])},")
        lines.append(f"        'default_cfg': {_literal(entry['default_cfg'])},")
        lines.append("        'tags': {")
        lines += [f"            {tag!r}: {_literal(cfg)}," for tag, cfg in entry["tags"].items()]
        lines += ["        },", "    },"]
    lines += ["}", ""]
    return "\n".join(lines)


def coverage():
    """`(built, pending, refused, listed)` of the committed table: the names
    keras_vit builds, those another branch of work will build, the others."""
    from keras_vit.families import timm_zoo

    return timm_zoo.coverage()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the table is not timm's")
    parser.add_argument("--coverage", action="store_true", help="print how many architectures load")
    args = parser.parse_args(argv)
    if args.coverage:
        built, pending, refused, listed = coverage()
        from keras_vit.weights.formats.timm_architectures import TIMM_VERSION

        print(f"timm {TIMM_VERSION}: keras_vit builds {len(built)} of {len(listed)} pretrained ViT-family "
              f"architectures ({100 * len(built) / len(listed):.1f} %); {len(pending)} pending, "
              f"{len(refused)} refused:")
        for name, reason in sorted({**pending, **refused}.items()):
            print(f"  {name}: {reason}")
        return 0
    timm = import_timm()
    source = render(*build_table(timm), timm.__version__)
    if args.check:
        same = TABLE.exists() and TABLE.read_text() == source
        print("the table is timm's" if same else f"{TABLE} differs from timm {timm.__version__}: run the tool")
        return 0 if same else 1
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text(source)
    print(f"wrote {TABLE} ({len(source.splitlines())} lines) from timm {timm.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
