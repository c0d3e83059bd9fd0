"""The base class of the transformers families: what a family declares, and
what every family does the same way.

A family is a group of transformers model classes that share their tensor
names and config fields (ViT/DeiT, DINOv2, CLIP, SigLIP, SigLIP2, ViTMAE):
one subclass of `TransformersFamily` each, in `transformers_<family>.py`,
registered in `keras_vit.families.transformers_source.TRANSFORMERS_FAMILIES`.

A subclass declares tables:

- `NAME` (in messages), `MODEL_TYPES` (the `model_type`s it reads);
- `TRANSFORMERS_CLASSES`: `{class name: TransformersClass}`, each class's
  `model_type`, the prefix of its body in a state dict, its head's rules
  and whether its head names classes (`id2label`);
- `DEFAULTS` (the transformers config class's defaults, for fields a file
  leaves out), `ACTIVATIONS` (`hidden_act` -> `mlp_activation`), `FIELDS`
  (config fields read and written as keras_vit arguments as they are);
- `BODY` (the body's rules, relative to its prefix), `IGNORED` (keys that
  are not inference weights, by their end or their start);
- `STRUCTURE`: the stem, tokens and head its classes have (`check_structure`),
  and `EXPORTED_OPTIONS`: the block and encoder options its config can hold.

and implements two methods: `model_arguments(config)` (most through
`encoder_arguments`) and `export_class(config)` (the class a keras_vit
model is written as, or None when the model is not shaped like the
family; most call `check_structure` with `STRUCTURE`). Hooks with a default
cover the rest: `complete` (weights the files leave implicit),
`preprocessing` and `export_preprocessor` (the family's own processor
class), `export_config` and `export_state` (config fields and tensors
beyond the shared ones). `TowerFamily` holds what the vision towers (CLIP,
SigLIP, ViTMAE) share.
"""

import abc
from typing import NamedTuple

from keras_vit.layers.config import RECORDS
from keras_vit.validation import pair
from keras_vit.weights import canonical as C
from keras_vit.weights.formats import transformers_processor
from keras_vit.weights.rules import RuleTable

# transformers `hidden_act` -> keras_vit `mlp_activation`.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu",
}
# keras_vit `mlp_activation` -> the `hidden_act` written.
HIDDEN_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}
# Config fields read and written as keras_vit arguments as they are:
# `{config field: (argument, type)}`. ViT, DeiT, DINOv2 and ViTMAE configs
# name them as BERT did; CLIP and SigLIP have a norm epsilon and one rate.
VIT_FIELDS = {
    "layer_norm_eps": ("layer_norm_epsilon", float),
    "qkv_bias": ("qkv_bias", bool),
    "hidden_dropout_prob": ("dropout_rate", float),
    "attention_probs_dropout_prob": ("attention_dropout_rate", float),
}
CLIP_FIELDS = {
    "layer_norm_eps": ("layer_norm_epsilon", float),
    "attention_dropout": ("attention_dropout_rate", float),
}


class TransformersClass(NamedTuple):
    """A transformers model class as a family reads and writes it.

    Attributes:
        model_type: its config's `model_type`.
        prefix: where its body sits in its state dict ("" at the root;
            a state dict without it is read from the root).
        head: rules of the tensors at the root beside the body (a
            classifier, a projection).
        classifier: whether its head's outputs are named classes (`id2label`).
    """

    model_type: str
    prefix: str = ""
    head: tuple = ()
    classifier: bool = False


def class_names(config):
    """Class names in head order from a config's `id2label`, or None when generic.

    Example:

    >>> class_names({"id2label": {"1": "dog", "0": "cat"}}), class_names({"id2label": {"0": "LABEL_0"}})
    (['cat', 'dog'], None)
    """
    id2label = config.get("id2label") or {}
    try:
        names = [id2label[k] for k in sorted(id2label, key=int)]
    except (TypeError, ValueError):
        return None
    if not names or all(n == f"LABEL_{i}" for i, n in enumerate(names)):
        return None
    return names


def label_config(names, classes):
    """The `id2label`/`label2id` entries of a config for a head of `classes`
    outputs named `names` (None: transformers' generic `LABEL_i`).

    Example:

    >>> label_config(None, 2)["id2label"]
    {'0': 'LABEL_0', '1': 'LABEL_1'}
    """
    names = list(names) if names else [f"LABEL_{i}" for i in range(classes)]
    return {
        "id2label": {str(i): n for i, n in enumerate(names)},
        "label2id": {n: i for i, n in enumerate(names)},
    }


def refuse(reason):
    """The error of a model a transformers directory cannot hold (nothing is written)."""
    return ValueError(f"transformers has no ViT that represents this model: {reason}.")


def has_class_token(config):
    """Whether a flat keras_vit model config prepends a class token.

    Example:

    >>> has_class_token({"classifier": "map"}), has_class_token({"classifier": "gap", "class_token": True})
    (False, True)
    """
    class_token = config.get("class_token")
    return config.get("classifier", "token") == "token" if class_token is None else class_token


def square(config, hf_class):
    """`(image side, patch side)` of a model config, for the transformers
    classes whose config holds one int each (their position table is a square grid).

    Raises:
        ValueError: naming the sizes when either is not square.

    Example:

    >>> square({"image_size": (28, 28), "patch_size": 7}, "SiglipVisionModel")
    (28, 7)
    """
    (height, width), (ph, pw) = pair(config["image_size"], "image_size"), pair(config["patch_size"], "patch_size")
    if height != width or ph != pw:
        raise refuse(
            f"{hf_class} takes square images and patches (one int each); "
            f"image_size={(height, width)}, patch_size={(ph, pw)}"
        )
    return height, ph


# The options a family's `STRUCTURE` may name, with their defaults in a
# flat model config; "class_token" is whether there is one (`has_class_token`).
STRUCTURE_DEFAULTS = {
    "resnet_layers": None,
    "num_register_tokens": 0,
    "distillation_token": False,
    "representation_size": None,
    "include_top": True,
    "classifier": "token",
    "pooling": None,
    "pooled_norm": False,
}


def check_structure(config, hf_class, structure):
    """Refuses a flat model config whose stem, tokens or head are not
    `structure`'s: `{option: (value, why a model of hf_class has it)}`.

    Raises:
        ValueError: naming the class, why, and the option's value.

    Example:

    >>> check_structure({"pooling": "avg"}, "ViTMAEModel", {"pooling": (None, "returns the tokens")})
    Traceback (most recent call last):
    ...
    ValueError: transformers has no ViT that represents this model: ViTMAEModel returns the tokens. Received: pooling='avg'.
    """
    for option, (value, why) in structure.items():
        if option == "class_token":
            actual = has_class_token(config)
        else:
            actual = config.get(option, STRUCTURE_DEFAULTS[option])
        if actual != value:
            raise refuse(f"{hf_class} {why}. Received: {option}={actual!r}")


def split_ignored(state, ignored):
    """`(kept, {ignored key: why})` of a state dict and `{end or start: why}`:
    a key is ignored when it ends or starts with one of `ignored`'s keys.

    Example:

    >>> split_ignored({"a.position_ids": 0, "text_model.x": 1, "w": 2},
    ...               {"position_ids": "a buffer", "text_model.": "the text tower"})[0]
    {'w': 2}
    """
    kept, reasons = {}, {}
    for key, value in state.items():
        reason = next((r for p, r in ignored.items() if key.endswith(p) or key.startswith(p)), None)
        if reason:
            reasons[key] = reason
        else:
            kept[key] = value
    return kept, reasons


class TransformersFamily(abc.ABC):
    """One family of transformers ViTs, read into and written from keras_vit.

    Subclasses fill in the class attributes (see the module docstring) and
    implement `model_arguments` and `export_class`.

    Example:

    >>> from keras_vit.families.vit_mae import TransformersViTMAE
    >>> family = TransformersViTMAE()
    >>> family.transformers_class({"model_type": "vit_mae"})
    'ViTMAEModel'
    >>> family.vision_config({"hidden_size": 8})["layer_norm_eps"]
    1e-12
    """

    NAME = "model"
    MODEL_TYPES = ()
    TRANSFORMERS_CLASSES = {}
    DEFAULTS = {}
    ACTIVATIONS = ACTIVATIONS
    FIELDS = {}
    BODY = ()
    IGNORED = {}
    STRUCTURE = {}
    EXPORTED_OPTIONS = {}

    # Reading.

    def unsupported(self, message):
        """The error of a config keras_vit cannot build."""
        return ValueError(f"Cannot build this transformers {self.NAME}: {message}")

    def transformers_class(self, config):
        """The class a config describes (`architectures[0]`; without it, the
        first class of its `model_type`).

        Raises:
            ValueError: for a class the family does not read.
        """
        model_type = config.get("model_type")
        known = tuple(
            name for name, spec in self.TRANSFORMERS_CLASSES.items()
            if model_type in (None, spec.model_type)
        )
        hf_class = (config.get("architectures") or known[:1] or [None])[0]
        if hf_class not in known:
            raise self.unsupported(
                f"architecture must be one of {known} (model_type={model_type!r}). Received: {hf_class!r}"
            )
        return hf_class

    def vision_config(self, config):
        """The image encoder's config with `DEFAULTS` filled in: the
        `vision_config` of a two-tower directory, else the config itself."""
        return {**self.DEFAULTS, **config.get("vision_config", config)}

    def activation(self, config):
        """keras_vit's `mlp_activation` for a config's `hidden_act`."""
        act = config["hidden_act"]
        if act not in self.ACTIVATIONS:
            raise self.unsupported(
                f"`hidden_act` must be one of {sorted(self.ACTIVATIONS)}. Received: hidden_act={act!r}"
            )
        return self.ACTIVATIONS[act]

    def mlp_arguments(self, config):
        """The MLP's arguments: its width, `intermediate_size`."""
        return dict(mlp_dim=config["intermediate_size"])

    def encoder_arguments(self, config):
        """The `ViT` arguments every family reads alike from a (vision)
        config with its defaults: sizes, widths, depth, MLP, activation,
        `FIELDS`, channels; the output is logits or features (no activation)."""
        return C.encoder_arguments(
            config["image_size"],
            config["patch_size"],
            config["hidden_size"],
            config["num_hidden_layers"],
            config["num_attention_heads"],
            channels=config["num_channels"],
            mlp_activation=self.activation(config),
            classifier_activation=None,
            **self.mlp_arguments(config),
            **{argument: kind(config[field]) for field, (argument, kind) in self.FIELDS.items()},
        )

    @staticmethod
    def label_arguments(config):
        """`classes` and `class_names` of a classifier's config."""
        return dict(
            classes=len(config.get("id2label") or {}) or config.get("num_labels", 2),
            class_names=class_names(config),
        )

    @abc.abstractmethod
    def model_arguments(self, config):
        """keras_vit `ViT` arguments for a `config.json` dict."""

    def rule_table(self, hf_class, prefix=None, body=None):
        """The `RuleTable` of a class's state dict: the body's rules `body`
        (default `BODY`) under `prefix` (default: the class's), then the
        head at the root."""
        spec = self.TRANSFORMERS_CLASSES[hf_class]
        body = RuleTable(self.BODY if body is None else body).prefixed(spec.prefix if prefix is None else prefix)
        return body + RuleTable(spec.head)

    def body(self, config):
        """The body's rules for a `config.json` dict: `BODY`, unless the
        family's tensor names depend on the config."""
        return self.BODY

    def split_state(self, state):
        """`(kept, ignored)`: a state dict without the `IGNORED` keys (by
        their end, a buffer under any prefix, or their start, a two-tower
        model's text tower), and `{ignored key: why}`."""
        return split_ignored(state, self.IGNORED)

    def complete(self, params, ignored, config):
        """Adds the weights the files leave implicit to `params`, or moves
        the ones keras_vit does not use to `ignored` (in place)."""

    def read(self, state, config, path):
        """A state dict as a `Checkpoint` (keys no rule knows kept, for the
        loader to report as unexpected).

        Args:
            state: `{key: NumPy array}` as `save_pretrained` wrote it (or as
                transformers names the modules in memory).
            config: the `config.json` dict.
            path: the file it came from, for messages.
        """
        kept, ignored = self.split_state(state)
        hf_class = self.transformers_class(config)
        prefix = self.TRANSFORMERS_CLASSES[hf_class].prefix
        if not any(k.startswith(prefix) for k in kept):
            prefix = ""  # the body saved on its own
        heads = self.model_arguments(config)["num_heads"]
        params, unknown = self.rule_table(hf_class, prefix, self.body(config)).to_canonical(kept, heads)
        params.update({k: kept[k] for k in unknown})
        self.complete(params, ignored, config)
        return C.Checkpoint(path, "transformers", params, ignored)

    def preprocessing(self, file, args):
        """The `Preprocessing` record of a `preprocessor_config.json` dict
        for a model of `args`."""
        return transformers_processor.preprocessing(file)

    # Writing.

    @abc.abstractmethod
    def export_class(self, config):
        """The class a flat keras_vit model config is written as, or None
        for a model not shaped like the family.

        Raises:
            ValueError: for a model shaped like the family that it cannot hold.
        """

    def refuse_options(self, config, hf_class):
        """Refuses the block and encoder options `hf_class`'s config cannot
        hold: those outside `EXPORTED_OPTIONS` away from their defaults, and
        those inside with a value it has not (None there: any value)."""
        for record in RECORDS.values():
            # Training-only fields (dropout, remat, patch dropout) leave the weights as they are.
            training = record.training_fields()
            for name, default in record.defaults().items():
                if name in training:
                    continue
                value = config.get(name, default)
                allowed = self.EXPORTED_OPTIONS[name] if name in self.EXPORTED_OPTIONS else (default,)
                if allowed is not None and value not in allowed:
                    raise refuse(f"{name}={value!r} ({hf_class} holds {name} in {list(allowed)})")

    def names_classes(self, hf_class):
        """Whether `hf_class`'s outputs are classes to name (`id2label`)."""
        return self.TRANSFORMERS_CLASSES[hf_class].classifier

    def export_sizes(self, config, hf_class):
        """The `image_size` and `patch_size` fields (one int each; square)."""
        return square(config, hf_class)

    def export_config(self, config, hf_class, class_names=None):
        """A transformers `config.json` dict for a flat keras_vit model config:
        the class, sizes, widths, activation and `FIELDS`, and a classifier's labels."""
        size, patch = self.export_sizes(config, hf_class)
        out = {
            "architectures": [hf_class],
            "model_type": self.TRANSFORMERS_CLASSES[hf_class].model_type,
            "image_size": size,
            "patch_size": patch,
            "num_channels": config["input_shape"][-1],
            "hidden_size": config["hidden_size"],
            "intermediate_size": config["mlp_dim"],
            "num_hidden_layers": config["num_layers"],
            "num_attention_heads": config["num_heads"],
            "hidden_act": HIDDEN_ACTS[config["mlp_activation"]],
            **{field: config[argument] for field, (argument, _) in self.FIELDS.items()},
            "dtype": "float32",
        }
        if self.names_classes(hf_class):
            out.update(label_config(class_names, config["classes"]))
        return out

    def export_state(self, params, hf_class, config):
        """The state dict of canonical `params` for `hf_class`."""
        return self.rule_table(hf_class).from_canonical(params)

    def export_preprocessor(self, record, config):
        """The `preprocessor_config.json` dict of a `Preprocessing` record."""
        return transformers_processor.export_preprocessor(record)


class TowerFamily(TransformersFamily):
    """A family of vision towers (CLIP, SigLIP, ViTMAE): none has a hybrid
    stem, register or distillation tokens or a pre-logits layer, and every
    config holds the norm epsilon and the activation."""

    STRUCTURE = {
        "resnet_layers": (None, "has no ResNet stem (a hybrid's resnet_layers)"),
        "num_register_tokens": (0, "has no register tokens"),
        "distillation_token": (False, "has no distillation token"),
        "representation_size": (None, "has no pre-logits layer"),
    }
    EXPORTED_OPTIONS = {"layer_norm_epsilon": None, "mlp_activation": tuple(HIDDEN_ACTS)}
