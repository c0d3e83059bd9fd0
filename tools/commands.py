"""The console scripts' front ends: arguments parsed before anything heavy loads.

`keras-vit` and `keras-vit-convert` parse their command line here, so that
`--help` and usage errors answer at once: importing keras_vit imports Keras
and a backend (jax, tensorflow or torch), several seconds, which only a
command that runs needs. A misspelt flag is named with the closest valid one
(`keras_vit_tools.front_end.ArgumentParser`). Once the arguments are parsed,
torch's threads are set (`--threads`), the libraries are imported with their
start-up banners muted, and the command's work is run (`keras_vit.cli`,
`keras_vit_tools.convert`).

Every command names its model the same way: a constructor or architecture
name (with `--weights`), a checkpoint or `.keras` file, a preset folder or an
`hf://org/name` handle, all resolved by `keras_vit.load_model`.

This module imports nothing of keras_vit: the few lists its parsers offer as
choices are written here and checked against keras_vit's own by
`tests/test_commands.py`.

Example:

>>> args = keras_vit_parser().parse_args(
...     ["export", "ViTTi16", "--format", "onnx", "--output", "ti.onnx"])
>>> args.command, args.format, args.image_size
('export', 'onnx', None)
>>> parse_size("224x320")
(224, 320)
"""

import argparse
import ast
import json
import os
import sys

from keras_vit_tools.zero_shot_command import zero_shot_parser

try:
    from keras_vit_tools.front_end import THREADS_HELP, ArgumentParser, configure_threads, quiet_imports
except ImportError:  # run from a checkout as a script: tools/ is sys.path[0]
    from front_end import THREADS_HELP, ArgumentParser, configure_threads, quiet_imports

# Copies of keras_vit's lists (see the module docstring).
GELU_FLAVOURS = ("tanh", "erf")  # keras_vit.architectures.GELU_FLAVOURS
NORMALIZATIONS = ("inception", "imagenet")  # keras_vit.preprocessing.MODES
EXPORT_FORMATS = ("tf_saved_model", "onnx", "openvino", "litert", "torch")  # keras_vit.export.EXPORT_FORMATS
PRESET_FORMATS = ("keras_vit", "transformers")  # keras_vit.presets.PRESET_FORMATS
QUANTIZATIONS = ("int8", "float8")
OPENVINO_PRECISIONS = ("f32", "bf16", "f16")  # keras_vit.serving.OPENVINO_PRECISIONS


def parse_size(text):
    """`N` or `HxW` (also `H,W`) as an image size: an int or a pair of ints."""
    parts = text.lower().replace("x", ",").split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or HxW, got {text!r}") from None
    if len(values) not in (1, 2) or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected N or HxW, got {text!r}")
    return values[0] if len(values) == 1 else values


MODEL_HELP = (
    "the model: a constructor (ViTTi16, ViTB16, ...) or architecture (Ti/16) name, with "
    "--weights; a checkpoint file (.npz, .safetensors, .pth, .weights.h5: its architecture "
    "is read from it); a .keras file; a preset folder (keras_vit, transformers, timm, "
    "keras-hub, e.g. the one examples/finetune.py writes) or an hf://org/name or "
    "kaggle://owner/model/framework/variation handle"
)


def _model_options(parser):
    """The options every command's model takes besides its name."""
    parser.add_argument("--weights", help="registered weights name or checkpoint path, with a constructor name")
    parser.add_argument(
        "--gelu", choices=GELU_FLAVOURS, default=None,
        help="GELU flavour (default: the one the weights were trained with; a file that "
        "does not record it, such as DeiT's .npz, needs erf)",
    )
    parser.add_argument(
        "--preprocessing", choices=NORMALIZATIONS, default=None,
        help="input scaling where the model has no record of its own: inception ([-1, 1], "
        "Google checkpoints) or imagenet (mean/std, timm and DeiT weights)",
    )
    parser.add_argument("--threads", type=int, default=None, help=THREADS_HELP)


def _inspect_parser(commands):
    inspect = commands.add_parser(
        "inspect",
        help="attention rollout, attention distance and embedding plots",
        description=(
            "Plots the analyses of the ViT paper (Fig. 6-7) for one image: "
            "attention rollout, mean attention distance per head, position "
            "embedding similarity and the embedding filters' principal "
            "components, with a text summary."
        ),
    )
    inspect.add_argument("image", help="path of the image to inspect")
    inspect.add_argument(
        "--model",
        help=MODEL_HELP + "; default: the architecture the --weights checkpoint file holds",
    )
    inspect.add_argument(
        "--preset",
        help="a preset folder or hf://org/name handle (the same as --model for one); its "
        "preprocessing and class names apply",
    )
    _model_options(inspect)
    inspect.add_argument(
        "--crop-fraction", type=float, default=0.875,
        help="centre-crop fraction after resizing, for a model without a preprocessing "
        "record (default 0.875)",
    )
    inspect.add_argument("--out", required=True, help="output directory")
    inspect.set_defaults(command="inspect")


def _classify_parser(commands):
    parser = commands.add_parser(
        "classify",
        help="the most probable classes of images, named",
        description=(
            "Prints the most probable classes of each image (keras_vit.classify): "
            "the images are resized, cropped and scaled as the model's checkpoint "
            "records, and named by the model's class names (ImageNet's for 1000 "
            "or 21843 classes)."
        ),
    )
    parser.add_argument("model", help=MODEL_HELP)
    parser.add_argument("images", nargs="+", help="image files")
    _model_options(parser)
    parser.add_argument("--top", type=int, default=5, help="classes per image (default 5)")
    parser.add_argument("--batch-size", type=int, default=32, help="images per forward pass (default 32)")
    parser.set_defaults(command="classify")


def _export_parser(commands):
    parser = commands.add_parser(
        "export",
        help="export to a serving runtime and check it against the model",
        description=(
            "Exports MODEL to a serving format (SavedModel, ONNX, OpenVINO, "
            "LiteRT, torch.export) from the current KERAS_BACKEND, runs the "
            "artifact in its own runtime (OpenVINO in float32 unless --precision) "
            "on random images (or --images) and prints the largest difference "
            "from model.predict; exit status 1 above --tolerance, 2 on unusable "
            "input. With --quantize int8, ONNX and OpenVINO artifacts are "
            "quantized by the runtime's own tool and the top-1 agreement with "
            "float32 is printed (exit status 1 below --min-agreement)."
        ),
    )
    parser.add_argument("model", help=MODEL_HELP)
    parser.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="export format")
    parser.add_argument(
        "--output", required=True,
        help="artifact path: .onnx, .xml (OpenVINO), .tflite, .pt2, or a folder (SavedModel)",
    )
    _model_options(parser)
    parser.add_argument("--image-size", type=parse_size, help="N or HxW; default: the model's")
    parser.add_argument(
        "--batch-size", type=int, help="fixed batch size; default: dynamic where the format allows"
    )
    parser.add_argument(
        "--quantize", choices=QUANTIZATIONS,
        help="int8 for onnx/openvino: the runtime's own quantizer on the float graph "
        "(fast); otherwise Keras' model.quantize before exporting",
    )
    parser.add_argument(
        "--precision", choices=OPENVINO_PRECISIONS, default=None,
        help="OpenVINO inference precision of the check (default f32; OpenVINO's own "
        "CPU default is bf16 where the CPU has it)",
    )
    parser.add_argument(
        "--images", nargs="+", help="image files to check on (default: random images)"
    )
    parser.add_argument("--samples", type=int, default=3, help="random test images (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the test images (default 0)")
    parser.add_argument(
        "--tolerance", type=float, default=1e-4,
        help="largest max |difference| accepted (default 1e-4)",
    )
    parser.add_argument(
        "--min-agreement", type=float, default=0.5,
        help="with --quantize int8 (onnx, openvino): the smallest top-1 agreement "
        "with float32 accepted (default 0.5)",
    )
    parser.set_defaults(command="export")


def keras_vit_parser():
    """The parser of `keras-vit` (`inspect`, `classify`, `export`, `zero-shot`)."""
    parser = ArgumentParser(
        prog="keras-vit", description="Vision Transformer tools for Keras 3."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _inspect_parser(commands)
    _classify_parser(commands)
    _export_parser(commands)
    zero_shot_parser(commands).add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    return parser


def prepare(threads=None, modules=("keras_vit",)):
    """Threads set, then the libraries imported quietly: before any command's work."""
    try:
        configure_threads(threads)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    quiet_imports(*modules)


def keras_vit(argv=None):
    """Entry point of `keras-vit`; returns the exit status."""
    args = keras_vit_parser().parse_args(argv)
    # Exports trace through TensorFlow on every backend.
    prepare(args.threads, ("tensorflow", "keras_vit") if args.command == "export" else ("keras_vit",))
    from keras_vit import cli

    return cli.run(args)


def _convert_docstring():
    # Read from the file, not imported: importing the tool imports keras_vit.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "convert.py")
    with open(path, encoding="utf-8") as handle:
        return ast.get_docstring(ast.parse(handle.read()), clean=False)


def convert_parser():
    """The parser of `keras-vit-convert` (`tools/convert.py`)."""
    doc = _convert_docstring()
    parser = ArgumentParser(
        prog="keras-vit-convert",
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--variant",
        help='architecture ("Ti/16", "B/16", "R50+B/16") or constructor name ("ViTTi16"); '
        "default with --weights FILE: the architecture the file holds",
    )
    parser.add_argument(
        "--config", type=json.loads, default={},
        help="JSON object of extra keras_vit.ViT keyword arguments, overriding the variant's "
        'row (e.g. \'{"hidden_size": 16, "num_layers": 2}\'); without --variant it must give '
        "patch_size, hidden_size, num_layers, num_heads and mlp_dim",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--weights", help="registered weights name (with --variant), checkpoint path, or a preset as --preset takes"
    )
    source.add_argument(
        "--preset", help="preset directory (keras_vit, transformers, timm Hub, keras-hub, e.g. the one "
        "examples/finetune.py writes) or hf://org/name[@revision] or kaggle://owner/model/framework/variation handle"
    )
    parser.add_argument(
        "--output", required=True, help="file ending with .weights.h5 (--format weights) or a preset directory"
    )
    parser.add_argument(
        "--format", choices=("weights",) + PRESET_FORMATS,
        help="what --output is; default: weights for a file name, keras_vit for a name without suffix",
    )
    parser.add_argument("--image-size", type=parse_size, help="N or HxW; default: the checkpoint's resolution")
    parser.add_argument(
        "--classes", type=int, help="head size; default: the checkpoint's; 0 writes the model without a head"
    )
    parser.add_argument(
        "--representation-size", type=int,
        help="pre-logits width; default: the checkpoint's (kept when present); 0 drops them",
    )
    parser.add_argument(
        "--gelu", choices=GELU_FLAVOURS,
        help="GELU flavour; default: the weights' (Google .npz: tanh, timm: erf, registry: recorded)",
    )
    parser.add_argument(
        "--preprocessing",
        help="input scaling written to a preset (imagenet: ImageNet mean/std, inception: [-1, 1]); "
        "default: the source's. A transformers preset needs one",
    )
    parser.add_argument(
        "--class-names",
        help="class names written to a preset: imagenet1k, imagenet21k or a text file with one name "
        "per line; default: the source's. A transformers preset needs them",
    )
    parser.add_argument("--keras", action="store_true", help="also write a whole .keras model beside --output")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest max |difference| accepted (default 1e-4)")
    parser.add_argument("--batch-size", type=int, default=2, help="images in the random test batch (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random test batch (default 0)")
    parser.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    return parser


def convert(argv=None):
    """Entry point of `keras-vit-convert`; returns the exit status."""
    args = convert_parser().parse_args(argv)
    # TensorFlow, imported along the way on every backend, starts quietly.
    prepare(args.threads, ("tensorflow", "keras_vit"))
    from keras_vit_tools import convert as tool

    return tool.run(args)


if __name__ == "__main__":
    sys.exit(keras_vit())
