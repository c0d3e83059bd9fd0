"""Converts a ViT checkpoint or preset and verifies the result numerically.

Reads any checkpoint keras_vit loads, through `keras_vit.load_model`:
`--weights` (a registered weights name with `--variant`; an official or
big_vision `.npz`, a timm `.safetensors`/`.pth` or a keras_vit
`.weights.h5`, whose architecture is read from the file unless `--variant`
or `--config` gives it) or `--preset` (a keras_vit, transformers, timm Hub
or keras-hub directory, or an `hf://org/name[@revision]` or `kaggle://`
handle; `--weights` takes these too). Writes `--output` as `--format`: `weights` (a
`.weights.h5` file, and a `.keras` model with `--keras`), `keras_vit` or
`transformers` (preset directories, `model.save_to_preset`). Then checks on a
fixed random batch that

1. the written output, reloaded, gives the same outputs as the model built
   from the source (a transformers directory also in transformers itself,
   when transformers and torch are installed), and
2. the model built from the source agrees with an independent NumPy forward
   pass (float64, `tools/reference.py`) on the source's tensors;

and exits with status 1 when a maximum absolute difference exceeds
`--tolerance` (2 on unusable input).

Examples:
  keras-vit-convert --variant B/16 --weights imagenet21k+imagenet2012 \\
      --output vit_b16_384.weights.h5 --keras
  python tools/convert.py --gelu erf --weights deit_tiny_patch16_224.npz \\
      --output deit_tiny.weights.h5
  keras-vit-convert --preset hf://facebook/deit-tiny-patch16-224 \\
      --output deit_tiny_keras_vit --format keras_vit
  keras-vit-convert --preset my_keras_vit_preset --output my_vit_hf --format transformers
"""

import json
import os
import sys

import keras
import numpy as np

from keras_vit import architectures, presets
from keras_vit.architectures import GELU_FLAVOURS, gelu_activation
from keras_vit.presets.resolver import load_model
from keras_vit.weights import describe_weights, loader, readers
from keras_vit.models.arguments import check_recorded_activation
from keras_vit.weights.describe import checkpoint_constructor
from keras_vit.weights.mapping import model_state
from keras_vit_tools import reference

SUFFIX = ".weights.h5"
OUTPUT_FORMATS = ("weights",) + presets.PRESET_FORMATS
# Options that describe the architecture: a preset fixes them itself.
_ARCHITECTURE_OPTIONS = ("variant", "config", "gelu", "representation_size")


def build_parser():
    """The command line's parser (`keras_vit_tools.convert_command.convert_parser`)."""
    try:
        from keras_vit_tools.convert_command import convert_parser
    except ImportError:  # run as a script from a checkout: tools/ is sys.path[0]
        from convert_command import convert_parser

    return convert_parser()


def _architecture(args):
    config = {}
    variant = args.variant
    if variant is None and not args.config and os.path.isfile(args.weights):
        variant = checkpoint_constructor(args.weights)  # None: --variant is needed
    if variant is not None:
        try:
            variant = architectures.get_variant(variant)
        except ValueError as error:
            raise ValueError(str(error).replace("`name`", "--variant")) from None
        # The model name of the named constructor, e.g. "vitti16".
        config = dict(variant.config, name=variant.constructor.lower())
    config.update(args.config)
    missing = [k for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim") if k not in config]
    if missing:
        raise ValueError(
            f"Give --variant, or --config with {missing} (the architecture of "
            f"--weights {args.weights!r} is not one the file shows)."
        )
    return config


def _model_class(config):
    return "ViTHybrid" if "resnet_layers" in config else "ViT"


def _outputs(model, x):
    """Logits (or features): the model's output before its activation."""
    tokens = model.forward_features(x)
    return keras.ops.convert_to_numpy(model.forward_head(tokens, activation=False))


def _from_weights(args):
    """`(model, source tensors reader, source name)` for --weights."""
    config = _architecture(args)
    info = describe_weights(args.weights, config)
    path = loader.fetch_weights(args.weights, architectures.architecture_name(config))
    classes = args.classes if args.classes is not None else info.classes
    representation = args.representation_size
    if representation is None:
        representation = info.representation_size
    if args.gelu is None:
        check_recorded_activation(info)  # an .npz or .weights.h5 needs --gelu
    activation = gelu_activation(info.gelu_approximate) if args.gelu is None else GELU_FLAVOURS[args.gelu]
    build = dict(
        config,
        image_size=args.image_size or info.image_size,
        include_top=bool(classes),
        classes=classes or None,
        representation_size=representation or None,
        mlp_activation=activation or "gelu_tanh",
    )
    model = load_model(_model_class(config), weights=path, **build)
    return model, lambda: readers.read_checkpoint(path, model).params, path


def _from_preset(args):
    """`(model, source tensors reader, source name)` for --preset."""
    given = [f"--{k.replace('_', '-')}" for k in _ARCHITECTURE_OPTIONS if getattr(args, k)]
    if given:
        raise ValueError(f"A preset fixes its architecture; drop {', '.join(given)}.")
    overrides = {}
    if args.image_size:
        overrides["image_size"] = args.image_size
    if args.classes == 0:
        overrides["include_top"] = False
    elif args.classes is not None:
        overrides["classes"] = args.classes
    source = presets.describe_preset(args.preset)
    model = load_model(source.directory, **overrides)
    return model, lambda: source.read(model).params, f"{args.preset} ({source.layout} preset)"


def _write(model, args, fmt):
    if fmt == "weights":
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        model.save_weights(args.output)
    else:
        names = args.class_names
        if names and os.path.isfile(names):
            with open(names, encoding="utf-8") as f:
                names = [line.strip() for line in f if line.strip()]
        model.save_to_preset(args.output, format=fmt, preprocessing=args.preprocessing, class_names=names)
    print(f"wrote {args.output} ({fmt})")


def _reloaded(model, args, fmt, x, expected):
    """`{check: max |difference|}` of the written output, read back."""
    diffs = {}
    if fmt == "weights":
        again = type(model).from_config(model.get_config())
        loader.load_weights(again, args.output)
        diffs[f"reloaded {SUFFIX}"] = np.abs(_outputs(again, x) - expected).max()
    else:
        again = presets.from_preset(args.output)
        diffs[f"reloaded {fmt} preset"] = np.abs(_outputs(again, x) - expected).max()
    if fmt == "transformers":
        outputs = _transformers_outputs(args.output, x)
        if outputs is not None:
            diffs["transformers (torch)"] = np.abs(outputs - expected).max()
    if args.keras:
        keras_path = args.output[: -len(SUFFIX)] + ".keras"
        model.save(keras_path)
        print(f"wrote {keras_path}")
        diffs["reloaded .keras"] = np.abs(_outputs(keras.saving.load_model(keras_path), x) - expected).max()
    return diffs


def _transformers_outputs(directory, x):
    """The output of transformers' own model for the directory (the class its
    `config.json` names: logits, image embeddings, pooled output or tokens,
    as the keras_vit model gives them), or None without transformers."""
    import logging

    try:
        import torch

        # transformers loads torchao, whose missing-kernel notices and torch's
        # pytree deprecations say nothing about this check.
        for name in ("torch", "torchao"):
            logging.getLogger(name).setLevel(logging.ERROR)
        import transformers
    except ImportError:
        print("transformers check: transformers or torch is not installed; skipped")
        return None
    transformers.utils.logging.disable_progress_bar()
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    model_class = getattr(transformers, (config.get("architectures") or [""])[0], transformers.AutoModel)
    reference_model = model_class.from_pretrained(directory).eval()
    kwargs = {}
    pixels = x.transpose(0, 3, 1, 2)
    if config.get("model_type") == "vit_mae":
        # ViTMAE shuffles the patches by `noise`; increasing noise keeps their order.
        patches = (x.shape[1] // config["patch_size"]) * (x.shape[2] // config["patch_size"])
        kwargs["noise"] = torch.arange(patches, dtype=torch.float32).expand(len(x), -1)
    if config.get("model_type") == "siglip2_vision_model":
        # SigLIP2 takes each image as its grid of patches, flattened (row, column, channel).
        p = config["patch_size"]
        b, h, w, c = x.shape
        grid = (h // p, w // p)
        pixels = x.reshape(b, grid[0], p, grid[1], p, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, grid[0] * grid[1], -1)
        kwargs["pixel_attention_mask"] = torch.ones(pixels.shape[:2], dtype=torch.int32)
        kwargs["spatial_shapes"] = torch.tensor([grid] * b)
    with torch.no_grad():
        out = reference_model(pixel_values=torch.from_numpy(np.ascontiguousarray(pixels)), **kwargs)
    for name in ("logits", "image_embeds", "pooler_output", "last_hidden_state"):
        if getattr(out, name, None) is not None:
            return out[name].numpy()
    return None


def _reference_gap(model):
    """What of the model the NumPy reference does not compute, or None."""
    blocks, encoder = model.block_config, model.encoder_config
    gaps = (
        (hasattr(model, "resnet_layers"), "ResNet stems"),
        (not model.include_top and model.pooling is not None, "pooled backbone outputs"),
        (encoder.position_embedding != "learned", "fixed position tables"),
        (blocks.mlp_kind != "plain" or blocks.qk_norm, "SwiGLU MLPs and QK-norm"),
        (model.classifier not in ("token", "gap"), f"classifier={model.classifier!r}"),
    )
    return next((what for failed, what in gaps if failed), None)


def _numpy_reference(model, read_params, x, expected):
    gap = _reference_gap(model)
    if gap is not None:
        print(f"NumPy reference: not available for {gap}; skipped")
        return {}
    params = read_params()
    state = model_state(model)
    same = set(params) == set(state) and all(params[k].shape == state[k].shape for k in state)
    if not same:
        print("NumPy reference: runs on the adapted weights (resized, new head or dropped layers)")
        params = state
    numpy_outputs = reference.forward(params, x, model.mlp_activation, model.layer_norm_epsilon)
    return {"NumPy reference (float64)": np.abs(numpy_outputs - expected).max()}


def convert(args):
    """Writes the converted output; returns `{check: max |difference|}`."""
    fmt = args.format
    if fmt is None:
        # A file name means weights; a name without a suffix, a directory.
        fmt = "keras_vit" if not os.path.splitext(args.output)[1] else "weights"
    if fmt == "weights" and not args.output.endswith(SUFFIX):
        raise ValueError(
            f"--output must end with {SUFFIX!r}, or name a preset directory "
            f"(--format keras_vit or transformers). Received: {args.output!r}"
        )
    if args.keras and fmt != "weights":
        raise ValueError("--keras goes with --format weights (a preset is already a whole model).")
    if args.weights and (args.weights.startswith(presets.HANDLE_SCHEMES) or os.path.isdir(args.weights)):
        # A preset folder or handle names a whole model, whichever flag gives it.
        args.preset, args.weights = args.weights, None
    model, read_params, source = _from_preset(args) if args.preset else _from_weights(args)
    print(
        f"source: {source}\nmodel: {model.name}, image {model.image_size}, "
        f"classes {model.classes if model.include_top else 'none (no head)'}, "
        f"MLP activation {model.mlp_activation}, {model.count_params():,} parameters"
    )
    _write(model, args, fmt)
    x = np.random.default_rng(args.seed).uniform(-1, 1, (args.batch_size, *model.image_size, 3))
    x = x.astype("float32")
    expected = _outputs(model, x)
    diffs = _reloaded(model, args, fmt, x, expected)
    diffs.update(_numpy_reference(model, read_params, x, expected))
    return diffs


def main(argv=None):
    """Command-line entry point; returns the exit status."""
    return run(build_parser().parse_args(argv))


def run(args):
    """Converts and verifies as parsed `args` ask; returns the exit status."""
    try:
        diffs = convert(args)
    except (ValueError, OSError, ImportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    failed = False
    for check, diff in diffs.items():
        bad = not diff <= args.tolerance
        failed |= bad
        print(f"max |{check} - source model| = {diff:.3g}{'  > tolerance' if bad else ''}")
    print(f"{'FAILED' if failed else 'OK'} (tolerance {args.tolerance:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
