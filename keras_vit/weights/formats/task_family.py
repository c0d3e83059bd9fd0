"""The base class of the task families: checkpoints that hold an encoder and
a head together (depth, segmentation), read and written.

A task checkpoint of transformers (`DepthAnythingForDepthEstimation`,
`EomtForUniversalSegmentation`, ...) holds an image encoder of a family
keras_vit already reads (DINOv2, DINOv3, ViT) under a prefix, and a head.
A `TaskFamily` subclass (one module per family in `keras_vit.families`)
reads the encoder through that family's own reader
(`TransformersFamily.read`, the tensors under its prefix) and the head
through its own table of rules, into one `Checkpoint` whose keys are the
canonical ones for the encoder and the task model's variable paths (as
`keras_vit.weights.mapping.checkpoint_key` names them) for the head, so
the one strict loader (`keras_vit.weights.loader`) loads both.

A subclass declares `NAME`, `MODEL_TYPES`, `TASK` (the task model class
it builds, by name) and `FIELDS` (the config keys its transformers config
class declares, which it reads or refuses; any other key is ignored, as
transformers ignores it: `undeclared_fields`), and
implements `arguments` (the encoder's and the task's arguments), `read`
and, where transformers can hold the model again, `export_class`,
`export_config` and `export_state`.
"""

import abc
import dataclasses
import logging

from keras_vit.weights import canonical as C
from keras_vit.weights.formats.transformers_family import split_ignored
from keras_vit.weights.rules import RuleTable

logger = logging.getLogger("keras_vit")

# The fields every transformers config has (`PreTrainedConfig`): they do not
# change the model's inference weights or computation.
GENERIC_FIELDS = frozenset((
    "architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "_name_or_path",
    "id2label", "label2id", "return_dict", "output_hidden_states", "output_attentions", "problem_type",
    "is_encoder_decoder", "chunk_size_feed_forward", "tie_word_embeddings", "initializer_range",
    "use_cache", "torchscript", "pruned_heads", "tf_legacy_loss", "use_bfloat16", "add_cross_attention",
    "finetuning_task", "tokenizer_class", "prefix", "bos_token_id", "pad_token_id", "eos_token_id",
    "sep_token_id", "decoder_start_token_id", "task_specific_params", "cross_attention_hidden_size",
    "tie_encoder_decoder", "is_decoder", "num_labels", "_attn_implementation_autoset",
    "output_scores", "return_dict_in_generate", "base_model_tp_plan", "base_model_pp_plan",
))


@dataclasses.dataclass
class TaskSource:
    """What a task preset directory says, before any weights are read.

    Attributes:
        layout: "transformers", "keras_hub" or "keras_vit".
        directory: the directory.
        task_class: the task model class's name ("DepthEstimator", "Segmenter").
        encoder_class: "ViT" or "ViTHybrid".
        encoder_arguments: keyword arguments of the encoder class.
        task_arguments: keyword arguments of the task class (besides `encoder`).
        read: `read(model) -> Checkpoint`, every weight in the loader's keys.
    """

    layout: str
    directory: str
    task_class: str
    encoder_class: str
    encoder_arguments: dict
    task_arguments: dict
    read: object


def undeclared_fields(config, known, what):
    """The config keys neither `known` nor `GENERIC_FIELDS` holds, set aside.

    A family's `FIELDS` hold every key its reference config class (transformers'
    `DepthAnythingConfig`, ...) declares: those it reads, and those it refuses
    where it cannot honour their value. A key the class does not declare
    changes nothing in transformers, which keeps it as an attribute no model
    reads; keras_vit ignores it alike and lists it at debug level (the
    `keras_vit` logger).

    Returns:
        The sorted list of the keys ignored.

    Example:

    >>> undeclared_fields({"model_type": "x", "hidden_size": 8}, {"hidden_size"}, "test config")
    []
    >>> undeclared_fields({"colour": "red"}, set(), "test config")
    ['colour']
    """
    unknown = sorted(k for k in config if k not in known and k not in GENERIC_FIELDS)
    if unknown:
        logger.debug(
            "%s: config.json key(s) %s ignored: its transformers config class does not declare them, so no "
            "model reads them.", what, unknown,
        )
    return unknown


def split_prefix(state, prefix):
    """`(the entries under prefix, without it; the rest)` of a state dict.

    Example:

    >>> split_prefix({"backbone.a": 1, "head.b": 2}, "backbone.")
    ({'a': 1}, {'head.b': 2})
    """
    inside = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    rest = {k: v for k, v in state.items() if not k.startswith(prefix)}
    return inside, rest


def merge(encoder, head_params, head_ignored, path):
    """One `Checkpoint` of an encoder's `Checkpoint` and a head's params."""
    params = dict(encoder.params)
    clash = sorted(set(params) & set(head_params))
    if clash:
        raise ValueError(f"{path}: the head's tensors {clash} name encoder weights.")
    params.update(head_params)
    return C.Checkpoint(path, encoder.format, params, {**encoder.ignored, **head_ignored})


def read_head(state, rules, ignored, num_heads=1):
    """A head's tensors by `rules` (a `RuleTable`): `(params, ignored)`; the
    keys no rule knows are kept under their own names (the loader reports
    them as unexpected) and those matching `ignored` are set aside."""
    kept, reasons = split_ignored(state, ignored)
    params, unknown = RuleTable(rules).to_canonical(kept, num_heads)
    params.update({k: kept[k] for k in unknown})
    return params, reasons


class TaskFamily(abc.ABC):
    """One family of task checkpoints (encoder and head), read and written."""

    NAME = "task model"
    MODEL_TYPES = ()
    TASK = None
    FIELDS = frozenset()

    def unsupported(self, message):
        """The error of a config keras_vit cannot build."""
        return ValueError(f"Cannot build this transformers {self.NAME}: {message}")

    def check_class(self, config, classes):
        """The config's class, one of `classes`."""
        hf_class = (config.get("architectures") or [classes[0]])[0]
        if hf_class not in classes:
            raise self.unsupported(f"architecture must be one of {tuple(classes)}. Received: {hf_class!r}")
        return hf_class

    @abc.abstractmethod
    def arguments(self, config):
        """`(encoder class name, encoder arguments, task arguments)` of a `config.json` dict."""

    @abc.abstractmethod
    def read(self, state, config, path):
        """A state dict as one `Checkpoint` (see the module docstring)."""

    # Writing (`save_to_preset(format="transformers")`).

    def writes(self, model):
        """Whether the family's class would hold `model` (its style and head)."""
        return False

    def check_export(self, model):
        """Raises a `ValueError` naming what transformers cannot hold; nothing is written."""

    def export_files(self, model):
        """`(config dict, state dict, preprocessor dict or None)` of `model`."""
        raise ValueError(f"keras_vit does not write {self.NAME}s as transformers directories.")

    def write(self, model, directory):
        """Writes `config.json`, `model.safetensors` and `preprocessor_config.json`."""
        import os

        import numpy as np
        from safetensors.numpy import save_file

        from keras_vit.weights.files import write_json

        config, state, processor = self.export_files(model)
        # Integer buffers (step counters) keep their dtype and shape, scalars included.
        state = {
            k: np.array(v, None if np.asarray(v).dtype.kind in "iu" else "float32", order="C")
            for k, v in state.items()
        }
        save_file(state, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
        write_json(os.path.join(directory, "config.json"), config)
        if processor is not None:
            write_json(os.path.join(directory, "preprocessor_config.json"), processor)


def refuse(reason):
    """The error of a task model a transformers directory cannot hold."""
    return ValueError(f"transformers has no class that holds this model: {reason}. Save it with format='keras_vit'.")
