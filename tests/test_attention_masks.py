"""Attention masks: `kernels.attention(..., mask=...)` on every attention path
and in export mode, and the layers' `attention_mask`, against NumPy (values
and gradients)."""

import contextlib

import keras
import numpy as np
import pytest

from conftest import inference, to_numpy
from kernel_helpers import BACKEND, only, value_and_grads
from keras_vit import kernels
from keras_vit.kernels import registry
from keras_vit.layers import MultiHeadSelfAttention, TransformerBlock


def np_masked_attention(q, k, v, scale, mask=None):
    """`(out, probs)` of softmax attention over `(b, tokens, h, d)` arrays in
    float64; `mask` broadcasts to `(b, h, q, t)`; a row with no allowed key is zero."""
    logits = np.einsum("bqhd,bthd->bhqt", q, k) * scale
    allowed = np.ones(logits.shape, bool) if mask is None else np.broadcast_to(mask, logits.shape)
    logits = np.where(allowed, logits, -np.inf)
    top = np.max(logits, -1, keepdims=True)
    probs = np.where(allowed, np.exp(logits - np.where(np.isfinite(top), top, 0)), 0.0)
    total = probs.sum(-1, keepdims=True)
    probs = np.divide(probs, total, out=np.zeros_like(probs), where=total > 0)
    return np.einsum("bhqt,bthd->bqhd", probs, v), probs


def np_attention_grads(q, k, v, scale, mask, weights):
    """Gradients of `sum(attention(q, k, v) * weights)` with respect to q, k, v."""
    _, probs = np_masked_attention(q, k, v, scale, mask)
    grad_v = np.einsum("bhqt,bqhd->bthd", probs, weights)
    grad_probs = np.einsum("bqhd,bthd->bhqt", weights, v)
    grad_logits = probs * (grad_probs - (probs * grad_probs).sum(-1, keepdims=True))
    grad_q = scale * np.einsum("bhqt,bthd->bqhd", grad_logits, k)
    grad_k = scale * np.einsum("bhqt,bqhd->bthd", grad_logits, q)
    return grad_q, grad_k, grad_v


def causal(tokens):
    return np.tril(np.ones((tokens, tokens), bool))


def padding(lengths, tokens):
    """`(batch, 1, 1, tokens)`: the first `length` keys of each sample."""
    return (np.arange(tokens)[None] < np.asarray(lengths)[:, None])[:, None, None, :]


def _masks(batch, heads, tokens, rng):
    per_head = rng.random((batch, heads, tokens, tokens)) < 0.6
    per_head[..., 0] = True
    no_key = causal(tokens)[None, None].repeat(batch, 0).copy()
    no_key[0, 0, 2] = False  # one query of the first sample may attend to nothing
    return {
        "causal": causal(tokens),
        "padding": padding([tokens, 3], tokens),
        "per_head": per_head,
        "a query with no key": no_key,
    }


MASK_NAMES = ["causal", "padding", "per_head", "a query with no key"]


@pytest.fixture(params=[o.name for o in registry.registered("attention", BACKEND)] + ["portable", "export"])
def attention_path(request):
    """Each implementation of `kernels.attention` on the backend: its fast
    paths, the portable form and the exporters' form."""
    with kernels.export_mode() if request.param == "export" else only(request.param):
        yield request.param


@pytest.mark.parametrize("name", MASK_NAMES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_masked_attention_matches_numpy(rng, attention_path, name, dtype):
    q, k, v = (rng.normal(size=(2, 6, 3, 8)).astype("float32") for _ in range(3))
    mask = _masks(2, 3, 6, rng)[name]
    cast = lambda a: keras.ops.cast(a, dtype)  # noqa: E731
    out = kernels.attention(cast(q), cast(k), cast(v), scale=0.3, mask=mask)
    assert keras.backend.standardize_dtype(out.dtype) == dtype
    rounded = [to_numpy(keras.ops.cast(cast(a), "float32")).astype("float64") for a in (q, k, v)]
    expected, _ = np_masked_attention(*rounded, 0.3, mask)
    got = to_numpy(keras.ops.cast(out, "float32"))
    np.testing.assert_allclose(got, expected, atol=3e-2 if dtype == "bfloat16" else 2e-5)
    if name == "a query with no key":
        assert not got[0, 2, 0].any()


@pytest.mark.parametrize("name", MASK_NAMES)
def test_masked_attention_gradients_match_numpy(rng, attention_path, name):
    q, k, v = (rng.normal(size=(2, 5, 2, 4)).astype("float32") for _ in range(3))
    mask = _masks(2, 2, 5, rng)[name]
    weights = rng.normal(size=q.shape).astype("float32")
    got, grads = value_and_grads(
        lambda q, k, v: kernels.attention(q, k, v, scale=0.4, mask=mask), [q, k, v], weights
    )
    f64 = [a.astype("float64") for a in (q, k, v)]
    np.testing.assert_allclose(got, np_masked_attention(*f64, 0.4, mask)[0], atol=2e-5)
    for g, e in zip(grads, np_attention_grads(*f64, 0.4, mask, weights)):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, e, atol=5e-5, rtol=1e-4)


def test_attention_probs_take_the_mask(rng):
    q, k = (rng.normal(size=(2, 5, 2, 4)).astype("float32") for _ in range(2))
    mask = padding([5, 2], 5)
    got = to_numpy(kernels.attention_probs(q, k, scale=0.5, mask=mask))
    _, expected = np_masked_attention(q.astype("float64"), k, k, 0.5, mask)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("mask", [np.ones((2, 5), "float32"), np.ones((1, 1, 1, 2, 5), bool)],
                         ids=["float", "rank 5"])
def test_a_mask_of_the_wrong_kind_is_refused(rng, mask):
    q = rng.normal(size=(2, 5, 2, 4)).astype("float32")
    with pytest.raises(ValueError, match="mask"):
        kernels.attention(q, q, q, mask=mask)


def _layer_reference(layer, x, mask4, query_tokens=None):
    """`MultiHeadSelfAttention` in NumPy from its weights; `mask4` `(b, 1|h, q, t)`."""
    w = {v.path.split("/")[-2] + "/" + v.name: to_numpy(v).astype("float64") for v in layer.weights}
    x = x.astype("float64")
    queries = x if query_tokens is None else x[:, :query_tokens]
    q = np.einsum("btd,dhk->bthk", queries, w["query/kernel"]) + w["query/bias"]
    k = np.einsum("btd,dhk->bthk", x, w["key/kernel"]) + w["key/bias"]
    v = np.einsum("btd,dhk->bthk", x, w["value/kernel"]) + w["value/bias"]
    if mask4 is not None and query_tokens is not None:
        mask4 = mask4[:, :, :query_tokens]
    context, _ = np_masked_attention(q, k, v, 1 / np.sqrt(layer.head_dim), mask4)
    return np.einsum("bthk,hkd->btd", context, w["out/kernel"]) + w["out/bias"]


@pytest.mark.parametrize("form", ["padding (batch, tokens)", "causal (batch, tokens, tokens)",
                                  "per head (batch, heads, tokens, tokens)", "integer 0/1"])
@pytest.mark.parametrize("query_tokens", [None, 2])
def test_self_attention_layer_takes_each_mask_form(rng, form, query_tokens):
    layer = MultiHeadSelfAttention(num_heads=2, head_dim=4)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    layer.build(x.shape)
    for variable in layer.weights:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype("float32"))
    if form.startswith("padding"):
        given = np.arange(6)[None] < np.array([[6], [4]])
        mask4 = given[:, None, None, :]
    elif form.startswith("causal"):
        given = np.broadcast_to(causal(6), (2, 6, 6))
        mask4 = given[:, None]
    elif form.startswith("per head"):
        given = rng.random((2, 2, 6, 6)) < 0.5
        given[..., 1] = True
        mask4 = given
    else:
        given = (np.arange(6)[None] < np.array([[6], [3]])).astype("int32")
        mask4 = given.astype(bool)[:, None, None, :]
    got = to_numpy(layer(x, query_tokens=query_tokens, attention_mask=given))
    expected = _layer_reference(layer, x, mask4, query_tokens)
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)
    probs = to_numpy(layer.attention_probs(x, attention_mask=given))
    assert np.allclose(probs.sum(-1), 1, atol=1e-5) and not probs[np.broadcast_to(~mask4.astype(bool), probs.shape)].any()


def test_attention_mask_of_the_wrong_kind_names_the_argument(rng):
    layer = MultiHeadSelfAttention(num_heads=2, head_dim=4)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    with pytest.raises(ValueError, match="attention_mask.*float32"):
        layer(x, attention_mask=np.ones((2, 6), "float32"))
    with pytest.raises(ValueError, match="attention_mask.*shape=\\(6,\\)"):
        layer(x, attention_mask=np.ones((6,), bool))


def _block(rng, **kwargs):
    block = TransformerBlock(num_heads=2, mlp_dim=16, **kwargs)
    block.build((None, None, 8))
    for variable in block.weights:
        variable.assign(rng.normal(scale=0.4, size=variable.shape).astype("float32"))
    return block


@pytest.mark.parametrize("export", [False, True])
def test_block_padding_mask_hides_the_padded_tokens(rng, export):
    """With a key-padding mask, the real tokens' outputs do not depend on what
    the padded positions hold, and equal the block run on the real tokens alone."""
    block = _block(rng)
    x = rng.normal(size=(2, 7, 8)).astype("float32")
    mask = np.arange(7)[None] < np.array([[7], [4]])
    other = x.copy()
    other[1, 4:] = rng.normal(size=(3, 8))
    with kernels.export_mode() if export else contextlib.nullcontext():  # (jax traces inside it)
        a, b, alone = inference(
            lambda x, other: (block(x, attention_mask=mask), block(other, attention_mask=mask), block(x[1:, :4])),
            x, other,
        )
    np.testing.assert_allclose(a[1, :4], b[1, :4], atol=1e-5)
    np.testing.assert_allclose(a[1, :4], alone[0], atol=1e-5)
    np.testing.assert_array_equal(a[0], b[0])


@pytest.mark.parametrize("export", [False, True])
def test_block_causal_mask_makes_each_token_blind_to_later_ones(rng, export):
    """Token i's output under a causal mask equals the block's output on the
    first i + 1 tokens alone, for every i, and with `output_tokens`."""
    block = _block(rng)
    x = rng.normal(size=(2, 6, 8)).astype("float32")
    mask = causal(6)[None].repeat(2, 0)
    with kernels.export_mode() if export else contextlib.nullcontext():  # (jax traces inside it)
        # One compiled call on jax for the six prefixes' shapes.
        full, prefixes, first = inference(lambda x: (
            block(x, attention_mask=mask),
            [block(x[:, : i + 1])[:, i] for i in range(6)],
            block(x, output_tokens=2, attention_mask=mask),
        ), x)
    np.testing.assert_allclose(full, np.stack(prefixes, 1), atol=1e-5)
    np.testing.assert_allclose(first, full[:, :2], atol=1e-5)


def test_block_gradients_with_a_mask_that_hides_a_whole_row(rng):
    """Gradients through a masked block are finite, and none reaches a padded
    token from the real ones' loss."""
    block = _block(rng)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.ones((2, 5, 5), bool)
    mask[1, 2] = False  # token 2 of sample 1 attends to nothing
    mask[1, :, 3:] = False  # and nobody attends to tokens 3, 4 of sample 1
    weights = np.zeros((2, 5, 8), "float32")
    weights[1, :3] = rng.normal(size=(3, 8))
    _, (grad,) = value_and_grads(lambda x: block(x, attention_mask=mask), [x], weights)
    assert np.isfinite(grad).all()
    assert np.abs(grad[1, :3]).max() > 1e-4
    # Tokens 3, 4 of sample 1 feed no loss term: no key, no residual path to it.
    np.testing.assert_allclose(grad[1, 3:], 0, atol=1e-7)


def test_a_functional_model_passes_a_mask_input(rng):
    tokens = keras.Input((None, 8))
    mask = keras.Input((None,), dtype="bool")
    block = _block(rng)
    model = keras.Model([tokens, mask], block(tokens, attention_mask=mask))
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    m = np.arange(5)[None] < np.array([[5], [3]])
    np.testing.assert_allclose(to_numpy(model([x, m])), to_numpy(block(x, attention_mask=m)), atol=1e-6)
