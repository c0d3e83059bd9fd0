"""Every keras_vit layer against two layer contracts, and under a channels-first Keras.

- keras_vit's (`harness.run_layer_test`), on every case of `CASES`: outputs
  equal to `compute_output_shape`, config round trips, `.keras` saving
  inside a model, outputs close to float32's under mixed_float16 and
  mixed_bfloat16 on every backend, and a gradient reaching every weight.
  The layers of `OWN_CONTRACT` pass it in the named file.
- Keras' own harness, `keras.src.testing.TestCase.run_layer_test`, which Keras
  runs on its layers, on one case of every public layer class
  (`KERAS_CASES`): config and serialisation round trips, build with the
  expected number of weights (given explicitly below), symbolic and eager
  calls, a compiled training step, and the output and weight dtypes under
  mixed_float16 (which Keras skips on torch's CPU, where keras_vit's
  harness checks them).
- With `keras.config.set_image_data_format("channels_first")`, every layer
  class still takes and gives NHWC maps, with the same outputs: keras_vit's
  layers are channels-last whatever the global setting.

The numerics of each layer are tested against NumPy in test_layers.py and
test_resnet_layers.py.
"""

import collections
import importlib
import inspect
import pkgutil

import keras
import numpy as np
import pytest
from keras.src import testing

import keras_vit.layers
from harness import run_layer_test
from keras_vit import layers
from keras_vit.layers.depth_head import DepthBins, DepthHead
from keras_vit.layers.detection_heads import DetectionHeads, QueryLogits
from keras_vit.layers.dpt import DptNeck, ResidualConvUnit
from keras_vit.layers.eomt import EomtHead, QueryTokens
from keras_vit.layers.mask_decoder import MaskDecoder, PromptAttention, TwoWayBlock
from keras_vit.layers.neck import ConvNeck
from keras_vit.layers.prompt_encoder import PromptEncoder
from keras_vit.layers.relative_position import DecomposedRelativePosition
from keras_vit.layers.norms import RMSNorm
from keras_vit.layers.qk_norm import QKNorm
from keras_vit.layers.rotary import RotaryEmbedding

RNG = np.random.default_rng(0)


def _normal(*shape):
    return RNG.normal(size=shape).astype("float32")


# A layer factory `(**kwargs) -> layer`, its input, the expected output shape
# and the expected numbers of trainable and non-trainable weights and of
# non-trainable variables (a seed generator's state counts there).
Case = collections.namedtuple("Case", "make inputs shape weights")
CASES = {
    "Patches": Case(lambda **kw: layers.Patches((2, 4), **kw), _normal(2, 6, 8, 3), (2, 3, 2, 24), (0, 0, 0)),
    # Projection kernel and bias, class token, position embedding.
    "PatchEncoder": Case(
        lambda **kw: layers.PatchEncoder(hidden_size=6, patch_size=4, grid_size=(2, 3), **kw),
        _normal(2, 2, 3, 48), (2, 7, 6), (4, 0, 0),
    ),
    "PatchEncoder-no-class-token": Case(
        lambda **kw: layers.PatchEncoder(4, 2, 2, class_token=False, **kw),
        _normal(1, 2, 2, 12), (1, 4, 4), (3, 0, 0),
    ),
    # ... and the distillation and register tokens.
    "PatchEncoder-distillation-registers": Case(
        lambda **kw: layers.PatchEncoder(4, 2, 2, distillation_token=True, num_register_tokens=3, **kw),
        _normal(1, 2, 2, 12), (1, 9, 4), (6, 0, 0),
    ),
    # Query, key, value and output kernels and biases.
    "MultiHeadSelfAttention": Case(
        lambda **kw: layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, **kw),
        _normal(2, 5, 8), (2, 5, 8), (8, 0, 0),
    ),
    "MultiHeadSelfAttention-no-qkv-bias": Case(
        lambda **kw: layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, qkv_bias=False, **kw),
        _normal(2, 5, 8), (2, 5, 8), (5, 0, 0),
    ),
    # ... and the query and key norms' scales and offsets (`QKNorm`).
    "MultiHeadSelfAttention-qk-norm": Case(
        lambda **kw: layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, qkv_bias=False, qk_norm=1e-6, **kw),
        _normal(2, 5, 8), (2, 5, 8), (9, 0, 0),
    ),
    # Grouped-query attention: 4 query heads, 2 key/value heads.
    "MultiHeadSelfAttention-grouped": Case(
        lambda **kw: layers.MultiHeadSelfAttention(num_heads=4, head_dim=2, num_kv_heads=2, qkv_bias=False, **kw),
        _normal(2, 5, 8), (2, 5, 8), (5, 0, 0),
    ),
    "MlpBlock": Case(lambda **kw: layers.MlpBlock(mlp_dim=16, **kw), _normal(2, 5, 8), (2, 5, 8), (4, 0, 0)),
    # Gate, up and down projections, with biases.
    "SwiGluMlp": Case(lambda **kw: layers.SwiGluMlp(mlp_dim=16, **kw), _normal(2, 5, 8), (2, 5, 8), (6, 0, 0)),
    # Two LayerNorms (4), attention (8), MLP (4).
    "TransformerBlock": Case(
        lambda **kw: layers.TransformerBlock(num_heads=2, mlp_dim=16, **kw), _normal(2, 5, 8), (2, 5, 8), (16, 0, 0)
    ),
    # No q/k/v biases (-3), two LayerScale vectors (+2). No q/k/v biases: a
    # key bias shifts every logit of a query alike, so its gradient is zero up
    # to rounding, which the gradient check would flag.
    "TransformerBlock-layer-scale": Case(
        lambda **kw: layers.TransformerBlock(num_heads=2, mlp_dim=16, layer_scale_init=0.1, qkv_bias=False, **kw),
        _normal(2, 5, 8), (2, 5, 8), (15, 0, 0),
    ),
    # Norms on the branches' outputs: the same weights.
    "TransformerBlock-post-norm": Case(
        lambda **kw: layers.TransformerBlock(num_heads=2, mlp_dim=16, norm_position="post", qkv_bias=False, **kw),
        _normal(2, 5, 8), (2, 5, 8), (13, 0, 0),
    ),
    # One norm for both branches (-2), LayerScale (+2).
    "TransformerBlock-parallel": Case(
        lambda **kw: layers.TransformerBlock(num_heads=2, mlp_dim=16, parallel=True, layer_scale_init=0.1,
                                             qkv_bias=False, **kw),
        _normal(2, 5, 8), (2, 5, 8), (13, 0, 0),
    ),
    # The projections without q/k/v biases (5), four lambda vectors and the
    # heads' RMSNorm scale.
    "MultiHeadSelfAttention-differential": Case(
        lambda **kw: layers.MultiHeadSelfAttention(num_heads=2, head_dim=4, qkv_bias=False, differential=True,
                                                   block_index=1, **kw),
        _normal(2, 5, 8), (2, 5, 8), (10, 0, 0),
    ),
    "TokenPooling-token": Case(lambda **kw: layers.TokenPooling("token", 1, **kw), _normal(2, 5, 3), (2, 3), (0, 0, 0)),
    "TokenPooling-avg": Case(lambda **kw: layers.TokenPooling("avg", 1, **kw), _normal(2, 5, 3), (2, 3), (0, 0, 0)),
    "TokenPooling-max": Case(lambda **kw: layers.TokenPooling("max", 0, **kw), _normal(2, 5, 3), (2, 3), (0, 0, 0)),
    "TokenPooling-distillation": Case(
        lambda **kw: layers.TokenPooling("distillation", 2, **kw), _normal(2, 5, 3), (2, 3), (0, 0, 0)
    ),
    # At inference (the contracts' call) it is the identity; the kept tokens
    # in training are tested in test_patch_dropout.py. Its seed generator's
    # state is a non-trainable variable.
    "PatchDropout": Case(
        lambda **kw: layers.PatchDropout(0.5, num_prefix_tokens=1, seed=0, **kw), _normal(2, 5, 8), (2, 5, 8), (0, 0, 1)
    ),
    # Probe, attention without q/k/v biases (5), LayerNorm (2), MLP (4). No
    # q/k/v biases, as the TransformerBlock case (test_map_head.py checks the
    # gradients with them).
    "MapHead": Case(
        lambda **kw: layers.MapHead(num_heads=2, mlp_dim=12, qkv_bias=False, **kw), _normal(2, 5, 8), (2, 8), (12, 0, 0)
    ),
    # The learned query; key and value kernels (no biases, AIMv2's); output kernel and bias.
    "AttentionPoolHead": Case(
        lambda **kw: layers.AttentionPoolHead(num_heads=2, **kw), _normal(2, 5, 8), (2, 8), (5, 0, 0)
    ),
    # Video clips: tubelets of 2 frames; the tubelet kernel and bias, class
    # token and a learned (time, row, column) table, or VideoMAE's fixed 1D one.
    "Patches-tubelets": Case(
        lambda **kw: layers.Patches(2, tubelet_size=2, **kw), _normal(2, 4, 4, 6, 3), (2, 2, 2, 3, 24), (0, 0, 0)
    ),
    "PatchEncoder-tubelets": Case(
        lambda **kw: layers.PatchEncoder(4, 2, (2, 2, 3), tubelet_size=2, **kw),
        _normal(1, 2, 2, 3, 24), (1, 13, 4), (4, 0, 0),
    ),
    "PatchEncoder-tubelets-sincos-1d": Case(
        lambda **kw: layers.PatchEncoder(4, 2, (2, 2, 3), tubelet_size=2, class_token=False,
                                         position_embedding="sincos_1d", **kw),
        _normal(1, 3, 2, 3, 24), (1, 18, 4), (2, 0, 0),
    ),
    # Projection kernel and bias, position embedding, the patch RMSNorm's scale.
    "PatchEncoder-patch-norm": Case(
        lambda **kw: layers.PatchEncoder(4, 2, 2, class_token=False, patch_norm="rmsnorm", **kw),
        _normal(1, 2, 2, 12), (1, 4, 4), (4, 0, 0),
    ),
    "StdConv2D": Case(
        lambda **kw: layers.StdConv2D(8, 3, strides=2, epsilon=1e-4, **kw), _normal(2, 7, 7, 4), (2, 4, 4, 8), (1, 0, 0)
    ),
    "GroupNorm": Case(
        lambda **kw: layers.GroupNorm(groups=4, epsilon=1e-6, **kw), _normal(2, 3, 5, 8), (2, 3, 5, 8), (2, 0, 0)
    ),
    "MaxPool2D": Case(
        lambda **kw: layers.MaxPool2D(3, strides=2, padding="same", **kw), _normal(2, 5, 6, 3), (2, 3, 3, 3), (0, 0, 0)
    ),
    # Four convolutions (with the projection), each followed by a GroupNorm.
    "BottleneckUnit": Case(
        lambda **kw: layers.BottleneckUnit(32, strides=2, groups=16, norm_epsilon=1e-5, **kw),
        _normal(1, 5, 6, 64), (1, 3, 3, 128), (12, 0, 0),
    ),
    # Two 3x3 convolutions' kernels and biases.
    "ResidualConvUnit": Case(lambda **kw: ResidualConvUnit(4, **kw), _normal(2, 5, 6, 4), (2, 5, 6, 4), (4, 0, 0)),
    # ... and their batch norms' scales and offsets, and statistics.
    "ResidualConvUnit-batch-norm": Case(
        lambda **kw: ResidualConvUnit(4, batch_norm=True, **kw), _normal(2, 5, 6, 4), (2, 5, 6, 4), (6, 4, 4),
    ),
    # Three convolutions' kernels and biases.
    "DepthHead": Case(lambda **kw: DepthHead(8, hidden_size=4, **kw), _normal(2, 3, 5, 8), (2, 6, 10, 1), (6, 0, 0)),
    "QueryTokens": Case(lambda **kw: QueryTokens(3, **kw), _normal(2, 5, 4), (2, 8, 4), (1, 0, 0)),
    # A projecting unit (12) and one without projection (9).
    "ResNetStage": Case(
        lambda **kw: layers.ResNetStage(32, 2, strides=2, conv_epsilon=1e-6, name="block2", **kw),
        _normal(1, 8, 8, 64), (1, 4, 4, 128), (21, 0, 0),
    ),
}

# Layers whose contract keras_vit's single-tensor harness cannot drive (several
# inputs or outputs; outputs in float32 whatever the policy) or that pass it
# in the named file: Keras' harness and the channels-first check run on them
# here.
OTHER_CASES = {
    # Resize, centre crop and scaling of pixels: no weights.
    "ImagePreprocessing": Case(
        lambda **kw: layers.ImagePreprocessing(image_size=4, resize=6, **kw),
        np.random.default_rng(1).uniform(0, 255, (2, 9, 12, 3)).astype("float32"), (2, 4, 4, 3), (0, 0, 0),
    ),
    # Stride 8 to 4 and 16: a deconvolution (kernel, bias) then a max pool;
    # per level a lateral and an output convolution and their LayerNorms (6).
    "SimpleFeaturePyramid": Case(
        lambda **kw: layers.SimpleFeaturePyramid(input_stride=8, out_channels=4, strides=(4, 16), **kw),
        _normal(2, 4, 6, 8), [(2, 8, 12, 4), (2, 2, 3, 4)], (14, 0, 0),
    ),
    "TokenGrid": Case(
        lambda **kw: layers.TokenGrid(2, **kw),
        [_normal(2, 8, 3), _normal(2, 2, 3, 5)], [(2, 2, 3, 3), (2, 2, 3)], (0, 0, 0),
    ),
    # The scale and offset of the query and key norms.
    "QKNorm": Case(
        lambda **kw: QKNorm(**kw), {"query_shape": (2, 5, 2, 4), "key_shape": (2, 3, 2, 4)},
        ((2, 5, 2, 4), (2, 3, 2, 4)), (4, 0, 0),
    ),
    "RMSNorm": Case(lambda **kw: RMSNorm(epsilon=1e-5, **kw), _normal(2, 5, 8), (2, 5, 8), (1, 0, 0)),
    # Per grid, not per image: coordinates (N, N, 2) to biases (heads, N, N),
    # and the shared table's MLP (two Dense kernels and biases).
    "RelativePositionMlp": Case(
        lambda **kw: layers.RelativePositionMlp(num_heads=2, hidden_dim=8, **kw), _normal(6, 6, 2), (2, 6, 6),
        (4, 0, 0),
    ),
    "RelativePositionTable": Case(
        lambda **kw: layers.RelativePositionTable(num_heads=2, hidden_dim=8, shared=True, **kw),
        _normal(2, 2, 3, 4), (2, 6, 6), (4, 0, 0),
    ),
    # Per level a projection (2), a resize (2: the 2x one; none at 1x) and a
    # 3x3 convolution (1); per fusion block two residual units (4 each) and
    # a projection (2).
    "DptNeck": Case(
        lambda **kw: DptNeck(8, (4, 8), (2, 1), 4, **kw), [_normal(2, 3, 3, 8), _normal(2, 3, 3, 8)],
        [(2, 6, 6, 4), (2, 12, 12, 4)], (28, 0, 0),
    ),
    # Float32 depths whatever the policy.
    "DepthBins": Case(lambda **kw: DepthBins(**kw), _normal(2, 3, 4, 6), (2, 3, 4), (0, 0, 0)),
    # The class predictor, three mask layers and per upscale block a
    # transposed convolution (2), a depthwise one (1) and a norm (2).
    "EomtHead": Case(
        lambda **kw: EomtHead(3, 2, 1, num_upscale_blocks=1, **kw), [_normal(2, 3 + 1 + 6, 4), _normal(2, 2, 3, 1)],
        [(2, 3, 4, 6), (2, 3, 3)], (13, 0, 0),
    ),
    # The decomposed term's two tables; the grid from a `(batch, h, w, ...)` tensor.
    "DecomposedRelativePosition": Case(
        lambda **kw: DecomposedRelativePosition(size=2, head_dim=4, **kw),
        {"q_shape": (2, 6, 2, 4), "grid_shape": (2, 2, 3, 1)}, (2, 2, 6, 6), (2, 0, 0),
    ),
    # Two convolutions without bias, two LayerNorms.
    "ConvNeck": Case(
        lambda **kw: ConvNeck(channels=4, **kw), {"tokens_shape": (2, 6, 8), "grid_shape": (2, 2, 3, 1)},
        (2, 6, 4), (6, 0, 0),
    ),
    # LayerNorm (2), class embedding, shift and scale (6), box MLP (6), objectness MLP (6).
    "DetectionHeads": Case(
        lambda **kw: DetectionHeads(query_dim=6, patch_size=4, objectness=True, **kw),
        {"tokens_shape": (2, 7, 8), "images_shape": (2, 8, 12, 3)},
        {"class_embeddings": (2, 6, 6), "logit_shift": (2, 6, 1), "logit_scale": (2, 6, 1), "pred_boxes": (2, 6, 4),
         "objectness_logits": (2, 6)}, (20, 0, 0),
    ),
    # The fixed queries: a weight that is not trained. Its three inputs as a
    # tuple: tensorflow's datasets take a list for one tensor.
    "QueryLogits": Case(
        lambda **kw: QueryLogits(num_queries=3, query_dim=5, **kw),
        (_normal(2, 4, 5), _normal(2, 4, 1), _normal(2, 4, 1)), (2, 4, 3), (0, 1, 1),
    ),
    # The Fourier matrix, four point embeddings, not-a-point, no-mask (7);
    # three convolutions (6) and two LayerNorms (4).
    "PromptEncoder": Case(
        lambda **kw: PromptEncoder(hidden_size=8, image_size=32, grid_size=4, mask_channels=8, **kw),
        {"points_shape": (2, 3, 2), "labels_shape": (2, 3), "mask_input_shape": (2, 16, 16, 1),
         "has_mask_input_shape": (2, 1)},
        ((2, 3, 8), (2, 4, 4, 8), (1, 4, 4, 8)), (17, 0, 0),
    ),
    "PromptAttention": Case(
        lambda **kw: PromptAttention(num_heads=2, width=4, **kw),
        {"query_shape": (2, 3, 8), "key_shape": (2, 5, 8), "value_shape": (2, 5, 8)}, (2, 3, 8), (8, 0, 0),
    ),
    # Three attentions (24), an MLP (4), four LayerNorms (8).
    "TwoWayBlock": Case(
        lambda **kw: TwoWayBlock(num_heads=2, mlp_dim=12, **kw),
        {"tokens_shape": (2, 3, 8), "image_shape": (2, 16, 8), "token_positions_shape": (2, 3, 8),
         "image_positions_shape": (2, 16, 8)}, ((2, 3, 8), (2, 16, 8)), (36, 0, 0),
    ),
    # Tokens (2), one block (36), the last attention and norm (10), the
    # upscaling (6), four hypernetworks (24), the IoU head (6).
    "MaskDecoder": Case(
        lambda **kw: MaskDecoder(num_layers=1, num_heads=2, mlp_dim=12, iou_head_depth=3, iou_head_hidden_dim=6, **kw),
        {"image_shape": (2, 4, 4, 16), "image_positions_shape": (1, 4, 4, 16), "sparse_shape": (2, 3, 16)},
        ((2, 4, 16, 16), (2, 4)), (84, 0, 0),
    ),
    # The learned frequencies of the "mixed" variant; the tables are float32
    # whatever the policy.
    "RotaryEmbedding": Case(
        lambda **kw: RotaryEmbedding(head_dim=8, variant="mixed", depth=2, num_heads=2, seed=0, **kw),
        _normal(2, 2, 3, 16), (2, 2, 6, 2, 8), (1, 0, 0),
    ),
}
OWN_CONTRACT = {
    "SimpleFeaturePyramid": "test_pyramid.py",
    "TokenGrid": "test_forward.py",
    "QKNorm": "test_qk_norm.py",
    "RMSNorm": "test_norms.py",
    "RotaryEmbedding": "test_rotary.py",
    "RelativePositionMlp": "test_relative_position.py",
    "RelativePositionTable": "test_relative_position.py",
    "DptNeck": "test_dense_layers.py",
    "DepthBins": "test_dense_layers.py",
    "EomtHead": "test_dense_layers.py",
    "DecomposedRelativePosition": "test_relative_position.py",
    "ConvNeck": "test_relative_position.py",
    "DetectionHeads": "test_detection.py",
    "QueryLogits": "test_detection.py",
    "PromptEncoder": "test_prompt_masks.py",
    "PromptAttention": "test_prompt_masks.py",
    "TwoWayBlock": "test_prompt_masks.py",
    "MaskDecoder": "test_prompt_masks.py",
    "ImagePreprocessing": "test_image_preprocessing.py",
}
ALL_CASES = {**CASES, **OTHER_CASES}
# One case of each layer class for Keras' harness and the channels-first
# check: the one with the most weights.
KERAS_CASES = sorted(
    {
        "Patches", "PatchEncoder-distillation-registers", "MultiHeadSelfAttention-qk-norm", "MlpBlock",
        "SwiGluMlp", "TransformerBlock-layer-scale", "TokenPooling-token", "PatchDropout", "MapHead",
        "AttentionPoolHead",
        "StdConv2D", "GroupNorm", "MaxPool2D", "BottleneckUnit", "ResNetStage", "ResidualConvUnit-batch-norm",
        "DepthHead", "QueryTokens", *OTHER_CASES,
    }
)


def _public_layers():
    """The public `keras.layers.Layer` classes defined in `keras_vit.layers`'s modules."""
    found = set()
    for module in pkgutil.iter_modules(keras_vit.layers.__path__):
        module = importlib.import_module(f"keras_vit.layers.{module.name}")
        for name, value in vars(module).items():
            if (
                inspect.isclass(value) and issubclass(value, keras.layers.Layer)
                and value.__module__ == module.__name__ and not name.startswith("_")
            ):
                found.add(name)
    return found


def test_every_layer_has_a_case():
    classes = {case.split("-")[0] for case in KERAS_CASES}
    assert len(classes) == len(KERAS_CASES), "one case per class for Keras' harness"
    missing = _public_layers() - classes
    assert not missing, f"layers without a contract test: {sorted(missing)}"
    assert {case.split("-")[0] for case in CASES} | set(OWN_CONTRACT) == classes


# The key norm's offset shifts every logit of a query alike, as a key bias:
# its gradient is zero up to rounding, which the gradient check would flag
# (test_qk_norm.py checks QKNorm's gradients on its own outputs).
OWN_HARNESS_CASES = sorted(set(CASES) - {"MultiHeadSelfAttention-qk-norm"})


@pytest.mark.parametrize("case", OWN_HARNESS_CASES)
def test_layer_contract(case):
    make_layer, inputs, expected_shape, _ = CASES[case]
    _, outputs = run_layer_test(make_layer, inputs, expected_shape)
    assert np.all(np.isfinite(outputs))


class _KerasTestCase(testing.TestCase):
    """Keras' `TestCase`, to call its harness from pytest functions."""

    __test__ = False

    def runTest(self):
        pass


@pytest.mark.parametrize("case", KERAS_CASES)
def test_keras_layer_harness(case):
    make_layer, inputs, expected_shape, (trainable, non_trainable, variables) = ALL_CASES[case]
    data = dict(input_shape=inputs) if isinstance(inputs, dict) else dict(input_data=inputs)
    # Keras' training step calls the layer on one input (a layer of two inputs
    # is trained inside the attention: the "qk-norm" case), and on tensorflow
    # its generator of `(inputs, outputs)` refuses a list of outputs (the
    # layers' own tests train them on every backend).
    several = isinstance(inputs, dict) or (keras.backend.backend() == "tensorflow" and isinstance(expected_shape, list))
    # A case of keras_vit's own contract (`test_layer_contract` above) is
    # trained there, every trainable weight's gradient checked, and run under
    # mixed_float16 and mixed_bfloat16 against float32: Keras' training and
    # mixed-precision checks would repeat them, each with programs of its
    # own to compile on jax.
    own = case in OWN_HARNESS_CASES
    _KerasTestCase().run_layer_test(
        make_layer,
        init_kwargs={},
        expected_output_shape=expected_shape,
        expected_num_trainable_weights=trainable,
        expected_num_non_trainable_weights=non_trainable,
        expected_num_non_trainable_variables=variables,
        run_training_check=not (several or own),
        run_mixed_precision_check=not own,
        **data,
    )


def _inputs(case):
    inputs = case.inputs
    if isinstance(inputs, dict):  # QKNorm's query and key
        return [_normal(*shape) for shape in inputs.values()]
    return inputs if isinstance(inputs, list) else [inputs]


@pytest.mark.parametrize("case", KERAS_CASES)
def test_channels_first_changes_nothing(case):
    """Under a channels-first Keras the layer takes the same NHWC inputs and
    gives the same outputs (with the same weights)."""
    case = ALL_CASES[case]
    inputs = _inputs(case)
    call = (lambda layer: layer(*inputs)) if isinstance(case.inputs, dict) else (
        lambda layer: layer(inputs if len(inputs) > 1 else inputs[0]))
    layer = case.make()
    expected = [keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(call(layer))]
    keras.config.set_image_data_format("channels_first")
    try:
        other = case.make()
        call(other)
        for a, b in zip(layer.weights, other.weights):
            b.assign(a)
        outputs = [keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(call(other))]
    finally:
        keras.config.set_image_data_format("channels_last")
    assert [o.shape for o in outputs] == [e.shape for e in expected]
    for out, want in zip(outputs, expected):
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
