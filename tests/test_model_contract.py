"""Every family of tests/families.py through the model contract.

Where it runs: the family whose int8 model is exported
(`model_contract.QUANTIZED_EXPORT`) in every backend's job, the others
spread over the jobs, each once: what a family adds is a combination of
layers, each of which passes its layer contract on every backend
(test_layer_contracts.py), and the every-job family holds the contract's
backend-specific parts (export, precision policies, quantized layers).
The other modes' cases likewise: the exported family's in every job, the
others spread.

- keras_vit's contract (tests/model_contract.py, `run_model_test`): build,
  config round trips, `.keras` files, the NumPy reference, a channels-first
  Keras, export; precision under mixed_float16, mixed_bfloat16 and bfloat16,
  given as `dtype=` and as Keras' global policy; int8 quantization with
  predict, config, `.keras` files, presets and export; float8 likewise for
  each family in one backend's job (`spread`), and for the family whose
  float8 model is exported in every job.
- keras-hub's harness for its own backbones (`keras_hub.src.tests.test_case`):
  `run_vision_backbone_test` (serialisation, eager and compiled calls, a
  `tf.data` input, the model name) and `run_model_saving_test`, on the backbone
  (`include_top=False`: the token sequence, keras-hub's backbone output) of
  `KERAS_HUB_FAMILIES`.
- The MaskedPatchPrediction task takes its encoder's policy, and a policy
  map naming layers the model lacks is refused.
"""

import re
from unittest import mock

import keras
import pytest
from absl.testing import parameterized
from keras_hub.src.tests import test_case as hub_test_case

import keras_vit
from conftest import spread
from families import FAMILIES, images, make_model
from keras_vit.pretraining import MaskedPatchPrediction
from model_contract import CONTRACT_MODES, QUANTIZATION_ERROR, QUANTIZED_EXPORT, run_model_test, run_quantization_test

# keras-hub's harness repeats much of the contract at several times its
# cost: it runs on a plain model.
KERAS_HUB_FAMILIES = ("vit",)


EVERY_JOB_FAMILIES = sorted({QUANTIZED_EXPORT[mode] for mode in CONTRACT_MODES})
SPREAD_FAMILY = spread("a family is a combination of layers, each held on every backend by its layer contract; "
                       "the family whose int8 model is exported holds the rest of the contract in every job")


@pytest.mark.parametrize("family", [f if f in EVERY_JOB_FAMILIES else pytest.param(f, marks=SPREAD_FAMILY)
                                    for f in sorted(FAMILIES)])
def test_model_contract(family):
    run_model_test(family)


SPREAD_MODE = spread("which layers a family quantizes and how they save are the family's; Keras' quantized "
                     "layers and their export are held on every backend by the exported family's case")


# The modes the model contract leaves out, on every family: the exported
# family's case in every job (its export routes are the backends'), the
# others spread.
@pytest.mark.parametrize("mode, family", [
    (mode, family) if QUANTIZED_EXPORT[mode] == family else pytest.param(mode, family, marks=SPREAD_MODE)
    for mode in QUANTIZATION_ERROR if mode not in CONTRACT_MODES for family in sorted(FAMILIES)])
def test_quantization_contract(mode, family):
    run_quantization_test(family, mode)


def test_pretraining_takes_the_encoder_policy():
    encoder = make_model("vit", include_top=False, dtype="mixed_float16")
    task = MaskedPatchPrediction(encoder, seed=0)
    assert task.dtype_policy.name == "mixed_float16"
    task.compile(optimizer="sgd")
    assert isinstance(task.optimizer, keras.optimizers.LossScaleOptimizer)
    again = MaskedPatchPrediction.from_config(task.get_config())
    assert again.dtype_policy.name == again.encoder.dtype_policy.name == "mixed_float16"
    # A policy given explicitly is kept.
    assert MaskedPatchPrediction(encoder, seed=0, dtype="float32").dtype_policy.name == "float32"


def test_a_policy_map_names_existing_layers():
    policy = keras.dtype_policies.DTypePolicyMap("float32")
    policy["encoderblock_9/MlpBlock_3/Dense_0"] = "int8_from_float32"
    with pytest.raises(ValueError, match=r"names layers.*encoderblock_9/MlpBlock_3/Dense_0"):
        make_model("vit", dtype=policy)


def _keras_hub_name(cls):
    """The model name keras-hub's harness expects: the class name in snake case."""
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", cls.__name__)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


class TestKerasHubHarness(hub_test_case.TestCase):
    """keras-hub's backbone harness, where its conventions fit keras_vit.

    Three do not, and are bridged here rather than built into the models:
    - a backbone's `token_embedding` (a text model's embedding of token ids,
      which the harness calls): a ViT embeds patches, so it is None here, as
      keras-hub's image backbones have it;
    - the model name holds the class name in snake case ("vi_t" for `ViT`),
      which the harness checks: keras_vit names models "vit", so the name is
      given;
    - under a channels-first global format the harness feeds NCHW images:
      keras_vit's models take NHWC whatever the global format
      (`model_contract.check_channels_first`), so that check is off.

    Its precision and quantization checks are off: the contract above runs
    them on every family and backend (keras-hub skips them on torch's CPU)
    with keras_vit's float32 classifier activation.
    """

    test_session = None  # tf.test.TestCase's session helper, not a test

    def _backbone(self, family):
        entry = FAMILIES[family]
        kwargs = entry.arguments(include_top=False, name=_keras_hub_name(entry.model_class))
        x = keras.ops.convert_to_tensor(images())  # shapes are read from tensors only
        return entry.model_class, kwargs, x

    @parameterized.named_parameters(*[(family, family) for family in KERAS_HUB_FAMILIES])
    def test_vision_backbone(self, family):
        cls, kwargs, x = self._backbone(family)
        shape = tuple(cls(**kwargs)(x).shape)
        with mock.patch.object(keras_vit.ViT, "token_embedding", None, create=True):
            self.run_vision_backbone_test(
                cls=cls, init_kwargs=kwargs, input_data=x, expected_output_shape=shape,
                run_data_format_check=False, run_mixed_precision_check=False, run_quantization_check=False,
            )

    @parameterized.named_parameters(*[(family, family) for family in KERAS_HUB_FAMILIES])
    def test_model_saving(self, family):
        cls, kwargs, x = self._backbone(family)
        self.run_model_saving_test(cls=cls, init_kwargs=kwargs, input_data=x)
