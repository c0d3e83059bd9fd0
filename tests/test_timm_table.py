"""The committed table of timm's ViT-family architectures
(`keras_vit/weights/formats/timm_architectures.py`) is what `tools/timm_table.py`
reads from the installed timm: a new timm release shows here, and running
the tool updates it. The reading itself (a recorder in place of timm's
model builder) is checked on a model function it must see through."""

import functools

import keras
import pytest
from timm_models import import_timm

from keras_vit.weights.formats import timm_architectures as table
from keras_vit_tools import timm_table
from conftest import runs_once

pytestmark = runs_once("torch", "the table is data read from timm's source")

timm = import_timm()


@pytest.mark.skipif(keras.backend.backend() != "torch",
                    reason="reads timm's model functions, whatever the Keras backend: once, in the torch run")
def test_the_committed_table_is_the_installed_timms():
    assert table.TIMM_VERSION == timm.__version__, "run `python tools/timm_table.py` for this timm"
    architectures, classes = timm_table.build_table(timm)
    assert timm_table.render(architectures, classes, timm.__version__) == timm_table.TABLE.read_text(), (
        "the table differs from the installed timm's model functions: run `python tools/timm_table.py`")


def test_the_table_holds_what_the_model_function_passes():
    """DINOv2-giant's function passes `partial(GluMlp, act_layer=SiLU, gate_last=False)`;
    the table names it; the class defaults are the constructor's."""
    cls, entry = timm_table.architecture(timm, "vit_giant_patch14_reg4_dinov2")
    assert cls.__name__ == "VisionTransformer" == entry["cls"]
    assert entry["args"]["mlp_layer"] == {"fn": "GluMlp", "act_layer": "SiLU", "gate_last": False}
    assert entry == {k: v for k, v in table.ARCHITECTURES["vit_giant_patch14_reg4_dinov2"].items()
                     if k in entry}
    assert timm_table.encode(functools.partial(dict, eps=1e-5)) == {"fn": "dict", "eps": 1e-5}
    assert table.CLASS_DEFAULTS["VisionTransformer"]["global_pool"] == "token"
    # Every pretrained tag of the families, and no other.
    tagged = {f"{name}.{tag}" for name, entry in table.ARCHITECTURES.items() for tag in entry["tags"]}
    assert tagged == set(timm.list_pretrained(list(table.PATTERNS)))
