"""Converts a ViT checkpoint to Keras weights and verifies it numerically.

Reads any checkpoint keras_vit loads (a registered weights name, an official
or big_vision `.npz`, a timm `.safetensors`/`.pth`, a keras_vit
`.weights.h5`), builds the named variant from it, writes `--output`
(`.weights.h5`, and a `.keras` model with `--keras`), then checks on a fixed
random batch that

1. a fresh model loading the written file gives the same outputs as the
   model built from the source, and
2. the model built from the source agrees with an independent NumPy forward
   pass (float64, `tools/reference.py`) on the source's tensors;

and exits with status 1 when a maximum absolute difference exceeds
`--tolerance` (2 on unusable input).

Examples:
  keras-vit-convert --variant B/16 --weights imagenet21k+imagenet2012 \\
      --output vit_b16_384.weights.h5 --keras
  python tools/convert.py --variant ViTTi16 --gelu erf \\
      --weights deit_tiny_patch16_224.npz --output deit_tiny.weights.h5
"""

import argparse
import json
import os
import sys

import keras
import numpy as np

from keras_vit import architectures
from keras_vit.architectures import GELU_FLAVOURS
from keras_vit.models import ViT, ViTHybrid
from keras_vit.validation import pair
from keras_vit.weights import describe_weights, loader, sources
from keras_vit.weights.mapping import model_state
from keras_vit_tools import reference

SUFFIX = ".weights.h5"


def _size(text):
    """`N` or `HxW` (also `H,W`) as an image size."""
    try:
        values = tuple(int(p) for p in text.lower().replace("x", ",").split(","))
        size = pair(values[0] if len(values) == 1 else values, "size")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or HxW, got {text!r}") from None
    return size[0] if len(values) == 1 else size


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-vit-convert",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--variant", help='architecture ("Ti/16", "B/16", "R50+B/16") or constructor name ("ViTTi16")')
    parser.add_argument(
        "--config",
        type=json.loads,
        default={},
        help="JSON object of extra keras_vit.ViT keyword arguments, overriding the variant's "
        'row (e.g. \'{"hidden_size": 16, "num_layers": 2}\'); without --variant it must give '
        "patch_size, hidden_size, num_layers, num_heads and mlp_dim",
    )
    parser.add_argument("--weights", required=True, help="registered weights name or checkpoint path")
    parser.add_argument("--output", required=True, help=f"file to write, ending with {SUFFIX}")
    parser.add_argument("--image-size", type=_size, help="N or HxW; default: the checkpoint's resolution")
    parser.add_argument(
        "--classes", type=int, help="head size; default: the checkpoint's; 0 writes the model without a head"
    )
    parser.add_argument(
        "--representation-size",
        type=int,
        help="pre-logits width; default: the checkpoint's (kept when present); 0 drops them",
    )
    parser.add_argument(
        "--gelu",
        choices=tuple(GELU_FLAVOURS),
        help="GELU flavour; default: the weights' (Google .npz: tanh, timm: erf, registry: recorded)",
    )
    parser.add_argument("--keras", action="store_true", help="also write a whole .keras model beside --output")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest max |difference| accepted (default 1e-4)")
    parser.add_argument("--batch-size", type=int, default=2, help="images in the random test batch (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random test batch (default 0)")
    return parser


def _architecture(args):
    config = {}
    if args.variant is not None:
        try:
            variant = architectures.get_variant(args.variant)
        except ValueError as error:
            raise ValueError(str(error).replace("`name`", "--variant")) from None
        # The model name of the named constructor, e.g. "vitti16".
        config = dict(variant.config, name=variant.constructor.lower())
    config.update(args.config)
    missing = [k for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim") if k not in config]
    if missing:
        raise ValueError(f"Give --variant, or --config with {missing}.")
    return config


def _model_class(config):
    return ViTHybrid if "resnet_layers" in config else ViT


def _outputs(model, x):
    if model.include_top and model.classifier_activation is not None:
        model = keras.Model(model.input, model.get_layer("head").output)
    return keras.ops.convert_to_numpy(model(x, training=False))


def convert(args):
    """Writes the converted files; returns `{check: max |difference|}`."""
    if not args.output.endswith(SUFFIX):
        raise ValueError(f"--output must end with {SUFFIX!r}. Received: {args.output!r}")
    config = _architecture(args)
    info = describe_weights(args.weights, config)
    path = loader.fetch_weights(args.weights, architectures.architecture_name(config))
    classes = args.classes if args.classes is not None else info.classes
    representation = args.representation_size
    if representation is None:
        representation = info.representation_size
    gelu = info.gelu_approximate if args.gelu is None else GELU_FLAVOURS[args.gelu]
    build = dict(
        config,
        image_size=args.image_size or info.image_size,
        include_top=bool(classes),
        classes=classes or None,
        representation_size=representation or None,
        gelu_approximate=True if gelu is None else gelu,
    )
    cls = _model_class(config)
    model = cls(weights=path, **build)
    print(
        f"source: {path}\nmodel: {model.name}, image {model.image_size}, "
        f"classes {model.classes if model.include_top else 'none (no head)'}, "
        f"GELU {'tanh' if model.gelu_approximate else 'erf'}, {model.count_params():,} parameters"
    )
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    model.save_weights(args.output)
    print(f"wrote {args.output}")
    x = np.random.default_rng(args.seed).uniform(-1, 1, (args.batch_size, *model.image_size, 3))
    x = x.astype("float32")
    expected = _outputs(model, x)
    diffs = {}
    reloaded = cls(weights=args.output, **build)
    diffs[f"reloaded {SUFFIX}"] = np.abs(_outputs(reloaded, x) - expected).max()
    if args.keras:
        keras_path = args.output[: -len(SUFFIX)] + ".keras"
        model.save(keras_path)
        print(f"wrote {keras_path}")
        diffs["reloaded .keras"] = np.abs(_outputs(keras.saving.load_model(keras_path), x) - expected).max()
    if "resnet_layers" in config:
        print("NumPy reference: not available for ResNet stems; skipped")
    else:
        params = sources.read_checkpoint(path, model).params
        state = model_state(model)
        same = set(params) == set(state) and all(params[k].shape == state[k].shape for k in state)
        if not same:
            print("NumPy reference: runs on the adapted weights (resized, new head or dropped layers)")
            params = state
        numpy_outputs = reference.forward(params, x, model.gelu_approximate, model.layer_norm_epsilon)
        diffs["NumPy reference (float64)"] = np.abs(numpy_outputs - expected).max()
    return diffs


def main(argv=None):
    """Command-line entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
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
