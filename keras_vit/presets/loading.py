"""Presets: whole checkpoints (configuration, weights, preprocessing, class
names) in, and keras_vit or transformers directories out.

`from_preset(handle)` reads a local directory, an `hf://org/name[@revision]`
handle (downloaded by `huggingface_hub` into its cache, honouring
`HF_HUB_OFFLINE`, tokens and progress bars) or a
`kaggle://owner/model/framework/variation[/version]` handle (downloaded by
`kagglehub`, as keras-hub's presets are), recognises the layout from the
files, builds the model the checkpoint's own configuration describes and loads
the weights strictly (`keras_vit.weights.loader`):

| layout | recognised by | reader |
| --- | --- | --- |
| keras_vit | `config.json` registered as `keras_vit>...` | Keras (`model.weights.h5`) |
| transformers ViT / DeiT / DINOv2 / DINOv3 / CLIP / SigLIP / ViTMAE | `config.json` with `model_type` | `families.transformers_source` (the family's module in `families`, e.g. `families.dinov3`) |
| timm Hub | `config.json` with `architecture` | `families.timm_zoo` chooses by timm's model class: `weights.formats.timm` (`VisionTransformer`), `families.eva` (`Eva`: EVA, EVA02, PE, RoPE-ViT, DINOv3), `families.vit_relpos`, `families.vit_hybrid`, `families.sam` |
| keras-hub ViT / DINOv2 / DINOv3 / SigLIP | `config.json` registered as `keras_hub>...` | keras-hub, `families.keras_hub_source` (the family's module in `families`) |

A task checkpoint (depth, segmentation, detection, SAM) gives its task
model: `keras_vit.presets.tasks.TASK_PRESETS` lists them.

`model.save_to_preset(directory, format)` (`keras_vit.families.writers`)
writes `format="keras_vit"` (reloaded exactly by `from_preset` on every
backend) or `format="transformers"` (loaded by
`AutoModelForImageClassification`).
"""

import os

from keras_vit.execution import sharded_load
from keras_vit.families import keras_hub_source as keras_hub
from keras_vit.families import timm_zoo
from keras_vit.families import transformers_source as transformers
from keras_vit.families.writers import KERAS_WEIGHTS, PRESET_FORMATS, save_to_preset  # noqa: F401
from keras_vit.layers.config import training_fields
from keras_vit.models import ViT, ViTConvStem, ViTHybrid
from keras_vit.models.arguments import OTHER_NAMES
from keras_vit.presets import catalogue
from keras_vit.validation import check_keywords
from keras_vit.weights import loader, shards
from keras_vit.weights.canonical import PresetSource
from keras_vit.weights.files import read_json as _read_json
from keras_vit.weights.formats import keras_vit as keras_vit_format
from keras_vit.weights.formats.task_family import TaskSource
from keras_vit.weights.record import Preprocessing

HF_SCHEME = "hf://"
KAGGLE_SCHEME = "kaggle://"
# The prefixes of preset handles that name a download.
HANDLE_SCHEMES = (HF_SCHEME, KAGGLE_SCHEME)
LAYOUTS = ("keras_vit", "transformers", "timm", "keras_hub")
# What a user may change about a checkpoint's model; the loader's head and
# position-embedding rules apply (`keras_vit.weights.loader`).
OVERRIDES = (
    "classes",
    "image_size",
    "input_shape",
    "include_top",
    "pooling",
    "classifier_activation",
    "representation_size",
    *training_fields(),
    "stochastic_depth_rate",
    "dtype",
    "name",
)
# Files worth downloading from a Hub repository (not READMEs, ONNX, ...);
# `*.model` and `*.spm` are SentencePiece tokenizers (image-text models).
_HUB_FILES = ("*.json", "*.safetensors", "*.h5", "*.txt", "*.model", "*.spm")
_TORCH_FILES = ("pytorch_model.bin", "pytorch_model*.bin", "pytorch_model.bin.index.json")


class PresetDownloadError(OSError):
    """An `hf://` or `kaggle://` preset is neither downloadable nor cached.

    Attributes:
        repo_id: the repository (the Kaggle model handle).
        cache_path: the `huggingface_hub` (`kagglehub`) cache folder it was
            looked for in.
    """

    def __init__(self, message, repo_id, cache_path):
        super().__init__(message)
        self.repo_id = repo_id
        self.cache_path = cache_path


def _download(handle):
    try:
        import huggingface_hub
        from huggingface_hub.errors import LocalEntryNotFoundError
        from huggingface_hub.file_download import repo_folder_name
    except ImportError:
        raise ImportError(
            f"{handle!r} needs huggingface_hub (`pip install huggingface_hub`)."
        ) from None
    uri = huggingface_hub.parse_hf_uri(handle)
    if uri.type != "model":
        raise ValueError(
            f"`handle` must name a model repository (hf://org/name[@revision]). "
            f"Received: handle={handle!r} (a {uri.type})"
        )
    sub = uri.path_in_repo.strip("/")
    prefix = f"{sub}/" if sub else ""
    cache = os.path.join(
        huggingface_hub.constants.HF_HUB_CACHE,
        repo_folder_name(repo_id=uri.id, repo_type="model"),
    )

    def fetch(patterns):
        try:
            return huggingface_hub.snapshot_download(
                uri.id, revision=uri.revision, allow_patterns=[prefix + p for p in patterns]
            )
        except LocalEntryNotFoundError as error:
            raise PresetDownloadError(_unreachable(uri, cache), uri.id, cache) from error

    folder = os.path.join(fetch(_HUB_FILES), sub)
    if shards.weights_file(folder) is None and not os.path.isfile(os.path.join(folder, KERAS_WEIGHTS)):
        folder = os.path.join(fetch(_TORCH_FILES + _HUB_FILES), sub)
    return folder


def _download_kaggle(handle):
    try:
        import kagglehub
    except ImportError:
        raise ImportError(f"{handle!r} needs kagglehub (`pip install kagglehub`).") from None
    model = handle[len(KAGGLE_SCHEME):].strip("/")
    if len(model.split("/")) not in (4, 5):
        raise ValueError(
            "A Kaggle handle names owner/model/framework/variation[/version], e.g. "
            "'kaggle://keras/vit/keras/vit_base_patch16_224_imagenet'. "
            f"Received: handle={handle!r}"
        )
    try:
        return kagglehub.model_download(model)
    except Exception as error:  # noqa: BLE001 (kagglehub raises HTTP, network and value errors)
        cache = kagglehub.config.get_cache_folder()
        raise PresetDownloadError(
            f"Cannot get {handle!r}: kagglehub could neither download it nor find it in "
            f"its cache ({cache}): {error}. Download it once online, or give the local "
            "directory instead.",
            model,
            cache,
        ) from error


def _unreachable(uri, cache):
    """The message of an `hf://` repository neither downloaded nor cached:
    the network is the cause (no connection, or `HF_HUB_OFFLINE`), then how to
    fetch the files where the Hub is reachable (for a gated repository, with
    its licence accepted and a login first)."""
    import huggingface_hub

    cause = ("HF_HUB_OFFLINE is set, so huggingface_hub does not connect" if huggingface_hub.constants.HF_HUB_OFFLINE
             else "the Hugging Face Hub could not be reached (no network connection)")
    revision = f" --revision {uri.revision}" if uri.revision else ""
    row = next((r for r in catalogue.PRESETS.values() if r.repo_id == uri.id), None)
    gated = ""
    if row is not None and row.gated:
        gated = (f"The repository is gated, so on that machine first accept its licence on {row.card} and log in "
                 "(`hf auth login`; or set HF_TOKEN). ")
    return (
        f"Cannot get {uri.id!r} (revision {uri.revision or 'main'}): {cause}, and no complete copy is in "
        f"huggingface_hub's cache ({cache}). The network is the cause, not the repository or its access. "
        f"Fetch the files once where the Hub is reachable: {gated}`hf download {uri.id}{revision}` "
        "(huggingface_hub's command) fills that cache, which can then be copied here; or "
        f"`hf download {uri.id}{revision} --local-dir DIR` and give DIR instead of the handle."
    )


def _named_directory(row):
    # A name is its handle; when that cannot be fetched, the error says both.
    if not row.downloadable:
        raise ValueError(
            f"{row.name!r} is published at {row.handle}, a file outside the Hugging Face Hub in its authors' own "
            f"layout, not a {row.source} Hub directory, so keras_vit cannot load it by name "
            "(keras_vit.list_presets() lists it so that every published name is accounted for)."
        )
    try:
        return _download_kaggle(row.handle) if row.handle.startswith(KAGGLE_SCHEME) else _download(row.handle)
    except PresetDownloadError as error:
        raise PresetDownloadError(
            f"The preset name {row.name!r} is {row.handle} ({row.card}; licence: "
            f"{row.licence or 'none declared on its model card'}). {error}",
            error.repo_id,
            error.cache_path,
        ) from error


def preset_row(handle):
    """The catalogue's `Preset` a `from_preset` handle names, or None (a
    folder, an `hf://` or `kaggle://` handle, an existing path)."""
    if not isinstance(handle, str) or handle.startswith(HANDLE_SCHEMES) or os.path.exists(handle):
        return None
    return catalogue.find_preset(handle)


def preset_directory(handle):
    """The local directory of a preset handle (downloading `hf://` and `kaggle://` ones).

    Args:
        handle: a directory, a preset name (`keras_vit.list_presets()`:
            "dinov3_vits16" or "facebook/dinov2-small" stands for its
            `hf://` handle, "sam_base_sa1b" for its `kaggle://` one),
            `"hf://org/name[@revision][/subfolder]"` or
            `"kaggle://owner/model/framework/variation[/version]"`.

    Returns:
        The directory's path.

    Raises:
        PresetDownloadError: an `hf://` or `kaggle://` handle (or a
            name's) that can be neither downloaded nor found in its library's
            cache; the message says the network is the cause, names the
            handle and how to fetch it (`hf download`).
        ValueError: for anything else that is not a preset directory (an
            unknown name: the closest ones; a name published outside the
            Hub: where).

    Example:

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> preset_directory(folder) == folder
    True
    """
    if isinstance(handle, os.PathLike):
        handle = os.fspath(handle)
    if not isinstance(handle, str):
        raise ValueError(
            "`handle` must be a directory, an 'hf://org/name[@revision]' or a "
            f"'kaggle://owner/model/framework/variation' string. Received: handle={handle!r}"
        )
    if handle.startswith(HF_SCHEME):
        return _download(handle)
    if handle.startswith(KAGGLE_SCHEME):
        return _download_kaggle(handle)
    if os.path.isdir(handle):
        return handle
    row = preset_row(handle)
    if row is not None:
        return _named_directory(row)
    if os.path.exists(handle):
        raise ValueError(
            f"`handle` must be a preset directory; {handle!r} is a file. "
            "Checkpoint files load with the constructors' `weights=` argument."
        )
    raise ValueError(
        "`handle` must be an existing directory, a preset name, or an 'hf://org/name[@revision]' or "
        f"'kaggle://...' handle. Received: handle={handle!r} (no such directory: {os.path.abspath(handle)!r}; "
        f"no preset of that name).{catalogue.unknown_name_hint(handle)}"
    )


def detect_layout(directory):
    """The layout of a preset directory: one of `LAYOUTS`.

    Raises:
        ValueError: naming the directory when no layout matches.
    """
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise ValueError(
            f"{directory!r} is not a preset: it has no config.json (a keras_vit, "
            "transformers, timm or keras-hub preset has one)."
        )
    config = _read_json(path)
    registered = str(config.get("registered_name") or "")
    if registered.startswith("keras_vit>"):
        return "keras_vit"
    if registered.startswith("keras_hub>"):
        return "keras_hub"
    if "model_type" in config:
        return "transformers"
    if "architecture" in config:
        return "timm"
    raise ValueError(
        f"Cannot tell the layout of {path!r}: it has no `registered_name` "
        "(keras_vit, keras-hub), `model_type` (transformers) or `architecture` (timm)."
    )


def _keras_vit_source(directory):
    config = _read_json(os.path.join(directory, "config.json"))
    model_class = config.get("class_name")
    if model_class not in ("ViT", "ViTHybrid", "ViTConvStem"):
        raise ValueError(
            f"{directory!r}: config.json must describe a keras_vit ViT, ViTHybrid or ViTConvStem (an image-text "
            f"preset loads with keras_vit.ImageTextModel.from_preset). Received: class_name={model_class!r}"
        )
    args = dict(config["config"])
    args.pop("trainable", None)
    path = os.path.join(directory, KERAS_WEIGHTS)

    def read(model):
        # Keras reads its own file, walking a tiny template of the model's
        # layers (`formats.keras_vit.read`): the canonical arrays then serve
        # any overrides (new head, new image size) without a second model
        # of the checkpoint's size.
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Preset weights not found: {path!r}")
        return keras_vit_format.read(path, model)

    return PresetSource("keras_vit", directory, model_class, args, read)


_SOURCES = {
    "keras_vit": _keras_vit_source,
    "transformers": transformers.preset_source,
    "timm": timm_zoo.preset_source,
    "keras_hub": keras_hub.preset_source,
}


def _source(layout, directory, row=None):
    """The `PresetSource` of a directory of `layout`. A catalogue row whose
    timm tag is stored in another architecture's repository (the QuickGELU
    CLIPs) builds its own `architecture`, not the one config.json names."""
    if layout == "timm" and row is not None and row.architecture:
        return timm_zoo.preset_source(directory, architecture=row.architecture)
    return _SOURCES[layout](directory)


def describe_preset(handle):
    """A `PresetSource`: the layout and model arguments of a preset.

    Reads the configuration files only (an `hf://` handle is downloaded), so
    it shows what `from_preset` would build without building it. A task
    model's directory gives a `TaskSource` (its encoder's and its own
    arguments; a transformers one reads the tensors too, whose buffers
    decide part of the model).

    Example:

    >>> import keras_vit, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8, num_layers=1,
    ...               num_heads=2, mlp_dim=8, classes=3).save_to_preset(folder)
    >>> source = describe_preset(folder)
    >>> source.layout, source.model_class, source.arguments["classes"]
    ('keras_vit', 'ViT', 3)
    """
    directory = preset_directory(handle)
    layout = detect_layout(directory)
    from keras_vit.presets import tasks as task_presets

    row = task_presets.task_preset(directory, layout)
    if row is not None and row.reader is not None:
        raise ValueError(
            f"{handle!r} holds a {row.task_class}, which its class reads whole: describe_preset describes "
            "image models and the dense task models. keras_vit.from_preset builds it."
        )
    if row is not None:
        return task_presets.task_source(directory, layout)
    task_presets.check_readable(directory, layout)
    return _source(layout, directory, preset_row(handle))


def _build(model_class, args):
    return {"ViT": ViT, "ViTHybrid": ViTHybrid, "ViTConvStem": ViTConvStem}[model_class].from_config(args)


def _apply_overrides(args, overrides):
    # A name no model takes is a misspelling; a model argument outside
    # `OVERRIDES` is one the checkpoint fixes.
    known = ViTHybrid.argument_names()
    misspelt = {k: v for k, v in overrides.items() if k not in known}
    check_keywords(misspelt, OVERRIDES, "from_preset", OTHER_NAMES)
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise ValueError(
            f"`from_preset` cannot change {unknown}: the checkpoint fixes them. "
            f"It accepts {list(OVERRIDES)}. Received: {', '.join(unknown)}"
        )
    args = dict(args)
    keep_names = overrides.get("classes", args.get("classes")) == args.get("classes")
    args.update(overrides)
    if not args.get("include_top", True) or not keep_names:
        args["class_names"] = None
    size = overrides.get("image_size")
    if size is None and overrides.get("input_shape") is not None:
        size = tuple(overrides["input_shape"][:2])
    if size is not None and args.get("preprocessing"):
        prep = Preprocessing.from_config(args["preprocessing"])
        args["preprocessing"] = prep.for_image_size(size).get_config()
    if "input_shape" in overrides and "image_size" not in overrides:
        args.pop("image_size", None)
    if "image_size" in overrides and "input_shape" in args and "input_shape" not in overrides:
        args.pop("input_shape")
    return args


def build(source, **overrides):
    """The model a `PresetSource` describes, with `overrides`, its weights loaded.

    The step `from_preset` ends with, for readers that hold a source already
    (a two-tower preset's image tower, read from tensors read once). A
    `TaskSource` builds the task model it describes.
    """
    if isinstance(source, TaskSource):
        from keras_vit.presets import tasks as task_presets

        return task_presets.build_task(source, **overrides)
    args = _apply_overrides(source.arguments, overrides)
    shards.check_shards(source.directory)
    # Under a distribution on jax, no variable gets a value before the
    # checkpoint gives it, in its layout (`keras_vit.execution.sharded_load`).
    with sharded_load.deferred_variables():
        model = _build(source.model_class, args)
    if source.layout == "keras_vit" and not overrides:
        # The preset's own model: Keras reads its file straight into it.
        sharded_load.initialize_rest(model, zeros=True)
        model.load_weights(os.path.join(source.directory, KERAS_WEIGHTS))
        return model
    loader.load_checkpoint(model, source.read(model))
    return model


def from_preset(handle, **overrides):
    """Builds a keras_vit model from a whole checkpoint directory.

    The model is the one the checkpoint's configuration describes (width,
    depth, heads, MLP size, patch and image size, classes, pooling, LayerNorm
    epsilon, GELU flavour, qkv bias, distillation or register tokens), with
    its preprocessing (`model.preprocessing`) and class names
    (`model.class_names`) attached, so `keras_vit.preprocess_input(x,
    model=model)` and `keras_vit.decode_predictions(preds, model=model)` work
    as the checkpoint expects. Every tensor is loaded or deliberately ignored;
    anything else is a `ValueError` naming the file.

    Args:
        handle: a local directory, a preset name (`keras_vit.list_presets()`:
            "dinov3_vits16", "facebook/dinov2-small",
            "vit_base_patch16_224.augreg2_in21k_ft_in1k", "sam_base_sa1b"
            stand for their handles), `"hf://org/name[@revision]"`,
            downloaded through `huggingface_hub` (its cache, `HF_HUB_OFFLINE`,
            token and progress bars), or
            `"kaggle://owner/model/framework/variation[/version]"`,
            downloaded through `kagglehub` (keras-hub's presets).
        **overrides: what a user may change (`OVERRIDES`): e.g. `classes`
            (a new zero-initialised head), `image_size` (position embedding
            resized as the official fine-tuning code), `include_top`,
            `pooling`, `classifier_activation` (default: the source's; logits
            for transformers, timm and keras-hub checkpoints), `dtype`.

    Returns:
        A `keras_vit.ViT` (or `ViTHybrid`); for a checkpoint of a task
        model, the `keras_vit.tasks` model it holds
        (`keras_vit.presets.tasks.TASK_PRESETS`): a `DepthEstimator`
        (transformers' Depth Anything, DPT, CHMv2; keras-hub's Depth
        Anything), a `Segmenter` (EoMT), an `OpenVocabularyDetector`
        (OWL-ViT, OWLv2) or a `PromptableSegmenter` (transformers' and
        keras-hub's SAM). A task model takes the overrides its row lists.

    Raises:
        ValueError: unreadable or unknown layouts, architectures keras_vit
            cannot build, overrides of fixed properties, and strict-loading
            mismatches (missing, unexpected or mis-shaped tensors).
        PresetDownloadError: an `hf://` or `kaggle://` handle neither
            downloadable nor cached.

    Example:

    >>> import keras_vit, numpy as np, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=8,
    ...                       num_layers=1, num_heads=2, mlp_dim=8, classes=3,
    ...                       class_names=["cat", "dog", "fish"])
    >>> model.save_to_preset(folder)
    >>> again = keras_vit.from_preset(folder)
    >>> again.class_names
    ('cat', 'dog', 'fish')
    >>> x = np.random.default_rng(0).normal(size=(1, 16, 16, 3))
    >>> bool(np.array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0)))
    True
    """
    directory = preset_directory(handle)
    layout = detect_layout(directory)
    from keras_vit.presets import tasks as task_presets

    if task_presets.task_preset(directory, layout) is not None:
        return task_presets.load_task(directory, layout, **overrides)
    task_presets.check_readable(directory, layout)
    return build(_source(layout, directory, preset_row(handle)), **overrides)

