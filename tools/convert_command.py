"""The parser of `keras-vit-convert` (the work is `tools/convert.py`): standard library only.

Imports nothing of keras_vit, as `keras_vit_tools.commands` (see there).

Example:

>>> args = convert_parser().parse_args(["--weights", "vit.npz", "--output", "vit.weights.h5"])
>>> args.weights, args.format, args.tolerance
('vit.npz', None, 0.0001)
"""

import argparse
import ast
import json
import os

try:
    from keras_vit_tools.front_end import (COUNT, GELU_FLAVOURS, NON_NEGATIVE, PRESET_FORMATS, THREADS_HELP,
                                           ArgumentParser, bounded, parse_size)
except ImportError:  # run from a checkout as a script: tools/ is sys.path[0]
    from front_end import (COUNT, GELU_FLAVOURS, NON_NEGATIVE, PRESET_FORMATS, THREADS_HELP, ArgumentParser, bounded,
                           parse_size)


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
        "--classes", type=bounded(int, minimum=0),
        help="head size; default: the checkpoint's; 0 writes the model without a head",
    )
    parser.add_argument(
        "--representation-size", type=bounded(int, minimum=0),
        help="pre-logits width; default: the checkpoint's (kept when present); 0 drops them",
    )
    parser.add_argument(
        "--gelu", choices=GELU_FLAVOURS,
        help="GELU flavour; default: the one the weights record (registry: recorded, timm: erf); "
        "an .npz or .weights.h5 does not record it and needs --gelu (Google's .npz: tanh, DeiT's: erf)",
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
    parser.add_argument("--tolerance", type=NON_NEGATIVE, default=1e-4,
                        help="largest max |difference| accepted (default 1e-4)")
    parser.add_argument("--batch-size", type=COUNT, default=2, help="images in the random test batch (default 2)")
    parser.add_argument("--seed", type=bounded(int, minimum=0), default=0,
                        help="seed of the random test batch (default 0)")
    parser.add_argument("--threads", type=COUNT, default=None, help=THREADS_HELP)
    return parser
