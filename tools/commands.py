"""The console scripts' front ends: arguments parsed before anything heavy loads.

`keras-vit` and `keras-vit-convert` parse their command line here, so that
`--help` and usage errors answer at once: importing keras_vit imports Keras
and a backend (jax, tensorflow or torch), several seconds, which only a
command that runs needs. A misspelt flag is named with the closest valid one
(`keras_vit_tools.front_end.ArgumentParser`). Once the arguments are parsed,
torch's threads are set (`--threads`), the libraries are imported with their
start-up banners muted, and the command's work is run (`keras_vit.cli`,
`keras_vit_tools.convert`).

`classify` and `export` name their model the same way: a constructor or
architecture name (with `--weights`), a checkpoint or `.keras` file, a preset
folder or an `hf://org/name` handle, all resolved by `keras_vit.load_model`.
The task commands (`zero-shot`, `detect`, `masks`, `depth`, `segment`) take
their model first too (`keras-vit detect MODEL IMAGE...`), or as `--preset
MODEL` before or after the images (`ArgumentParser.model_then_images`);
`inspect` takes its image, and its model as `--model` or `--preset`.
`presets` lists the names they take (`keras_vit.list_presets`).

This module imports nothing of keras_vit: the few lists its parsers offer as
choices are copies in `keras_vit_tools.front_end`, checked against keras_vit's
own by `tests/test_commands.py`; `keras-vit-convert`'s parser is
`keras_vit_tools.convert_command`.

Example:

>>> args = keras_vit_parser().parse_args(
...     ["export", "ViTTi16", "--format", "onnx", "--output", "ti.onnx"])
>>> args.command, args.format, args.image_size, args.crop_fraction
('export', 'onnx', None, None)
>>> parse_size("224x320")
(224, 320)
"""

import sys

try:
    from keras_vit_tools.convert_command import convert_parser
    from keras_vit_tools.dense_command import dense_parsers
    from keras_vit_tools.tasks_command import detect_parser, masks_parser
    from keras_vit_tools.zero_shot_command import zero_shot_parser
except ImportError:  # run from a checkout as a script: tools/ is sys.path[0]
    from convert_command import convert_parser
    from dense_command import dense_parsers
    from tasks_command import detect_parser, masks_parser
    from zero_shot_command import zero_shot_parser

try:
    from keras_vit_tools.front_end import (
        COUNT,
        EXPORT_FORMATS,
        FRACTION,
        NON_NEGATIVE,
        GELU_FLAVOURS,
        NORMALIZATIONS,
        OPENVINO_PRECISIONS,
        PRESET_FORMATS,
        QUANTIZATIONS,
        THREADS_HELP,
        ArgumentParser,
        bounded,
        configure_threads,
        parse_size,
        quiet_imports,
    )
except ImportError:  # run from a checkout as a script: tools/ is sys.path[0]
    from front_end import (
        COUNT,
        EXPORT_FORMATS,
        FRACTION,
        NON_NEGATIVE,
        GELU_FLAVOURS,
        NORMALIZATIONS,
        OPENVINO_PRECISIONS,
        PRESET_FORMATS,
        QUANTIZATIONS,
        THREADS_HELP,
        ArgumentParser,
        bounded,
        configure_threads,
        parse_size,
        quiet_imports,
    )

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
        help="GELU flavour (default: the one the weights record; an .npz or .weights.h5 does "
        "not record it and needs --gelu: Google's .npz tanh, DeiT's erf)",
    )
    parser.add_argument(
        "--preprocessing", choices=NORMALIZATIONS, default=None,
        help="input scaling where the model has no record of its own: inception ([-1, 1], "
        "Google checkpoints) or imagenet (mean/std, timm and DeiT weights)",
    )
    parser.add_argument(
        "--class-names", default=None,
        help="the head's class names where the model records none: imagenet1k, imagenet21k "
        "(weights trained on ImageNet, such as DeiT's .npz) or a text file with one name per line",
    )
    parser.add_argument("--threads", type=COUNT, default=None, help=THREADS_HELP)
    parser.add_argument(
        "--crop-fraction", type=bounded(float, maximum=1, above=0), default=None,
        help="the centre crop, as timm's crop_pct: the shorter side is resized to the input size / "
        "FRACTION (aspect ratio kept) and the centre cut out, in (0, 1] (1 keeps the whole shorter "
        "side). With --preprocessing the default is the mode's evaluation: 0.875 for imagenet (224 "
        "from 256), a straight resize to the input size for inception; without, it changes the crop "
        "of the model's own record (default: as recorded)",
    )


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
    inspect.add_argument("--out", required=True, help="output directory")
    inspect.set_defaults(command="inspect")


def _classify_parser(commands):
    parser = commands.add_parser(
        "classify",
        help="the most probable classes of images, named",
        description=(
            "Prints the most probable classes of each image (keras_vit.classify): "
            "the images are resized, cropped and scaled as the model's checkpoint "
            "records, and named by the class names the model records (or --class-names); "
            "a model that records none gets class indices."
        ),
    )
    parser.add_argument("model", help=MODEL_HELP)
    parser.add_argument("images", nargs="+", help="image files, folders (a folder: the images in it) or http(s) URLs")
    _model_options(parser)
    parser.add_argument("--top", type=COUNT, default=5, help="classes per image (default 5)")
    parser.add_argument("--batch-size", type=COUNT, default=32, help="images per forward pass (default 32)")
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
            "input. Every artifact carries the model's class names and preprocessing; "
            "with --raw-images it takes uint8 images of any size and prepares them itself. "
            "With --quantize int8, ONNX and OpenVINO artifacts are "
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
        "--batch-size", type=COUNT, help="fixed batch size; default: dynamic where the format allows"
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
        "--raw-images", action="store_true",
        help="the artifact takes uint8 images of any size and resizes, crops and scales them "
        "itself as the model's preprocessing record says, returning keras_vit.classify's "
        "probabilities (checked against keras_vit.classify)",
    )
    parser.add_argument(
        "--images", nargs="+", help="image files or folders to check on (default: random images)"
    )
    parser.add_argument("--samples", type=COUNT, default=3, help="random test images (default 3)")
    parser.add_argument("--seed", type=bounded(int, minimum=0), default=0, help="seed of the test images (default 0)")
    parser.add_argument(
        "--tolerance", type=NON_NEGATIVE, default=1e-4,
        help="largest max |difference| accepted (default 1e-4)",
    )
    parser.add_argument(
        "--min-agreement", type=FRACTION, default=0.5,
        help="with --quantize int8 (onnx, openvino): the smallest top-1 agreement "
        "with float32 accepted (default 0.5)",
    )
    parser.set_defaults(command="export")


def _presets_parser(commands):
    parser = commands.add_parser(
        "presets",
        help="the preset names every command takes, with their task, size and licence",
        description=(
            "Lists the names of every checkpoint keras_vit loads (keras_vit.list_presets): timm's "
            "pretrained tags (vit_base_patch16_224.augreg2_in21k_ft_in1k), transformers' Hub repositories "
            "(facebook/dinov2-small), keras-hub's presets (sam_base_sa1b) and keras_vit's short names "
            "(dinov3_vits16), one line each with its task, family, parameters, image size and licence. "
            "Every command and keras_vit.from_preset take these names."
        ),
    )
    parser.add_argument(
        "patterns", nargs="*",
        help="shell-style patterns of names, regardless of case ('vit_base_*', 'facebook/*'); one "
        "without wildcards matches the names containing it; default: every name",
    )
    parser.add_argument("--task", help="only this task's (classification, features, zero-shot, depth, "
                        "segmentation, detection, promptable-masks)")
    parser.add_argument("--family", help="only this family's (dinov2, siglip2, depth_anything, eomt, ...)")
    parser.add_argument("--long", action="store_true", help="add each name's handle and model card")
    parser.add_argument("--json", action="store_true", help="every field of each name, as JSON")
    parser.set_defaults(command="presets")


def keras_vit_parser():
    """The parser of `keras-vit` (`inspect`, `classify`, `export`, `zero-shot`, `detect`, `masks`, `depth`,
    `segment`, `presets`)."""
    parser = ArgumentParser(
        prog="keras-vit", description="Vision Transformer tools for Keras 3."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _inspect_parser(commands)
    _classify_parser(commands)
    _export_parser(commands)
    for add in (zero_shot_parser, detect_parser, masks_parser):
        add(commands).add_argument("--threads", type=COUNT, default=None, help=THREADS_HELP)
    for dense in dense_parsers(commands):
        dense.add_argument("--threads", type=COUNT, default=None, help=THREADS_HELP)
    _presets_parser(commands)
    return parser


def prepare(threads=None, modules=("keras_vit",), lean=False):
    """Threads set, then the libraries imported quietly: before any command's work.

    `lean`: Keras first, without the optional libraries it would load for
    features no command uses (`lean_keras_import`).
    """
    try:
        configure_threads(threads)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    quiet_imports(*(("keras",) if lean else ()), *modules, lean_keras=lean)


def keras_vit(argv=None):
    """Entry point of `keras-vit`; returns the exit status."""
    args = keras_vit_parser().parse_args(argv)
    # Exports trace through TensorFlow on every backend (and jax2tf under jax): Keras as it comes.
    exporting = args.command == "export"
    prepare(getattr(args, "threads", None), ("tensorflow", "keras_vit") if exporting else ("keras_vit",),
            lean=not exporting)
    from keras_vit.cli import commands

    return commands.run(args)


def convert(argv=None):
    """Entry point of `keras-vit-convert`; returns the exit status."""
    args = convert_parser().parse_args(argv)
    # TensorFlow, imported along the way on every backend, starts quietly.
    prepare(args.threads, ("tensorflow", "keras_vit"))
    from keras_vit_tools import convert as tool

    return tool.run(args)


if __name__ == "__main__":
    sys.exit(keras_vit())
