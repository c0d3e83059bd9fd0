"""The rule engine every checkpoint format is a table on.

A `Rule` pairs a source key template with a canonical key template (the
official vit_jax `.npz` names, `keras_vit.weights.canonical`) and names the
`Transform` that brings a tensor from one layout to the other. A
`RuleTable` applies its rules in order, first match wins, in both
directions: `to_canonical` reads a checkpoint, `from_canonical` writes one,
so a format's reader and its writer cannot drift apart.

Templates are key names with fields in braces:

- `{i}`: a block index (digits); a table's `index_offset` is added when
  writing the source name (keras-hub counts blocks from 1);
- `{path}`: any non-empty rest of a key; `{dir}`: zero or more leading
  `segment/` parts; any other `{name}`: one segment without `/` or `.`;
- `{part}`: reserved for a transform with `parts`, where one source tensor
  holds several canonical ones (timm's fused `qkv` and `kv`): the canonical
  template names each part, and matches only those names.

A field must appear on both sides of a rule (except `{part}`).
"""

import math
import re
from typing import Callable, NamedTuple, Optional

import numpy as np

from keras_vit.weights.files import LazyTensor

_FIELD = re.compile(r"\{(\w+)\}")
_FIELD_PATTERNS = {"i": r"\d+", "path": r".+", "dir": r"(?:[^/]+/)*"}
_DEFAULT_FIELD = r"[^/.]+"


class Transform(NamedTuple):
    """How a tensor's layout changes between a source format and the canonical one.

    Attributes:
        read: `read(array, num_heads)` -> the canonical array, or for a
            transform with `parts` one array per part, in that order.
        write: `write(array)` -> the source array (for `parts`, `write`
            takes the tuple of part arrays); None where no inverse exists.
        parts: names filled into the canonical template's `{part}`.
    """

    read: Callable
    write: Optional[Callable]
    parts: tuple = ()


def check_heads(array, num_heads, axis=0, fused=1):
    """Raises a ValueError unless `array`'s `axis` splits into `fused * num_heads` parts."""
    ndim = 1 if axis is None else 2
    size = array.shape[0] if axis is None else array.shape[axis] if array.ndim == 2 else 0
    if array.ndim != ndim or not num_heads or size % (fused * num_heads):
        raise ValueError(
            f"a tensor of shape {array.shape} does not split into {num_heads} attention heads"
        )


def _heads_in(array, num_heads):
    # PyTorch Linear (heads * head_dim, D) -> (D, heads, head_dim).
    check_heads(array, num_heads, 0)
    return array.T.reshape(array.shape[1], num_heads, -1)


def _heads_out(array, num_heads):
    # PyTorch Linear (D, heads * head_dim) -> (heads, head_dim, D).
    check_heads(array, num_heads, 1)
    return array.T.reshape(num_heads, -1, array.shape[0])


def _dense_heads_in(array, num_heads):
    # Keras Dense (D, heads * head_dim) -> (D, heads, head_dim).
    check_heads(array, num_heads, 1)
    return array.reshape(array.shape[0], num_heads, -1)


def _dense_heads_out(array, num_heads):
    # Keras Dense (heads * head_dim, D) -> (heads, head_dim, D).
    check_heads(array, num_heads, 0)
    return array.reshape(num_heads, -1, array.shape[1])


def _heads_bias(array, num_heads):
    check_heads(array, num_heads, None)
    return array.reshape(num_heads, -1)


def _fused_kernel(count):
    # (count * heads * head_dim, D) PyTorch Linear -> count x (D, heads, head_dim).
    def read(array, num_heads):
        check_heads(array, num_heads, 0, fused=count)
        parts = array.T.reshape(array.shape[1], count, num_heads, -1)
        return tuple(parts[:, n] for n in range(count))

    return read


def _fused_bias(count):
    def read(array, num_heads):
        check_heads(array, num_heads, None, fused=count)
        return tuple(array.reshape(count, num_heads, -1))

    return read


def _write_kernels(parts):
    return np.concatenate([p.reshape(p.shape[0], -1).T for p in parts])


def _write_biases(parts):
    return np.concatenate([p.reshape(-1) for p in parts])


def _patch_linear(array, num_heads):
    # A Linear over flattened RGB patches (D, ph * pw * 3), each patch
    # flattened row by row, then column, then channel (SigLIP2's processor),
    # -> the (ph, pw, 3, D) convolution kernel: the C-order flattening of
    # its first three axes is that same order. Square patches; the channel
    # count is not in the tensor, so it is taken as 3.
    size = array.shape[-1] if array.ndim == 2 else 0
    side = math.isqrt(size // 3)
    if side * side * 3 != size:
        raise ValueError(
            f"a patch embedding of shape {array.shape} is not a Linear over flattened "
            "square RGB patches (D, patch * patch * 3)"
        )
    return array.T.reshape(side, side, 3, array.shape[0])


_QKV = ("query", "key", "value")
_KV = ("key", "value")


def _gate_up_kernel(array, num_heads):
    # (2 * hidden, D) PyTorch Linear, gate rows first -> 2 x (D, hidden).
    if array.ndim != 2 or array.shape[0] % 2:
        raise ValueError(f"a tensor of shape {array.shape} does not split into a gate and an up projection")
    return tuple(np.split(array.T, 2, axis=1))


def _gate_up_bias(array, num_heads):
    if array.ndim != 1 or array.shape[0] % 2:
        raise ValueError(f"a tensor of shape {array.shape} does not split into a gate and an up bias")
    return tuple(np.split(array, 2))


_GATE_UP = ("gate", "up")

TRANSFORMS = {
    None: Transform(lambda a, h: a, lambda a: a),
    # PyTorch OIHW convolution <-> (ph, pw, C, D); a transposed
    # convolution's (in, out, kh, kw) <-> Keras' (kh, kw, out, in) alike.
    "conv": Transform(lambda a, h: a.transpose(2, 3, 1, 0), lambda a: a.transpose(3, 2, 0, 1)),
    # A PyTorch Conv3d (D, C, t, ph, pw) (video tubelets) <-> (t, ph, pw, C, D).
    "conv3d": Transform(lambda a, h: a.transpose(2, 3, 4, 1, 0), lambda a: a.transpose(4, 3, 0, 1, 2)),
    # A PyTorch depthwise convolution (C, 1, kh, kw) <-> Keras' (kh, kw, C, 1).
    "depthwise": Transform(lambda a, h: a.transpose(2, 3, 0, 1), lambda a: a.transpose(2, 3, 0, 1)),
    # A Linear over flattened (ph, pw, 3) patches <-> (ph, pw, 3, D).
    "patch_linear": Transform(_patch_linear, lambda a: a.reshape(-1, a.shape[-1]).T),
    # PyTorch Linear (out, in) <-> Keras Dense (in, out).
    "linear": Transform(lambda a, h: a.T, lambda a: a.T),
    "heads_in": Transform(_heads_in, lambda a: a.reshape(a.shape[0], -1).T),
    "heads_bias": Transform(_heads_bias, lambda a: a.reshape(-1)),
    # A Keras Dense over `heads * head_dim` (D, heads * head_dim) <->
    # (D, heads, head_dim), and (heads * head_dim, D) <-> (heads, head_dim, D).
    "dense_heads_in": Transform(_dense_heads_in, lambda a: a.reshape(a.shape[0], -1)),
    "dense_heads_out": Transform(_dense_heads_out, lambda a: a.reshape(-1, a.shape[-1])),
    "heads_out": Transform(_heads_out, lambda a: a.reshape(-1, a.shape[-1]).T),
    # (tokens, D) embedding table <-> (1, tokens, D).
    "batch": Transform(lambda a, h: a[None], lambda a: a[0]),
    # One (D,) token <-> (1, 1, D).
    "token": Transform(lambda a, h: a.reshape(1, 1, -1), lambda a: a.reshape(-1)),
    # GroupNorm parameters stored (1, 1, 1, C) by some files <-> (C,);
    # written back as (C,), as Keras holds them.
    "flatten": Transform(lambda a, h: a.reshape(-1), lambda a: a),
    # One fused query/key/value Linear <-> three (D, heads, head_dim) kernels.
    "qkv_kernel": Transform(_fused_kernel(3), _write_kernels, _QKV),
    "qkv_bias": Transform(_fused_bias(3), _write_biases, _QKV),
    # One fused key/value Linear (timm's attention pool `kv`) <-> two kernels.
    "kv_kernel": Transform(_fused_kernel(2), _write_kernels, _KV),
    "kv_bias": Transform(_fused_bias(2), _write_biases, _KV),
    # One Linear holding a gated MLP's gate and up projections (in that
    # order: transformers' DINOv2 `weights_in`) <-> two (D, hidden) kernels.
    "gate_up_kernel": Transform(_gate_up_kernel, lambda parts: np.concatenate([p.T for p in parts]), _GATE_UP),
    "gate_up_bias": Transform(_gate_up_bias, lambda parts: np.concatenate(parts), _GATE_UP),
    # A position table on its grid (1, h, w, D) (SAM's) <-> (1, h * w, D);
    # written back on a square grid.
    "grid": Transform(lambda a, h: a.reshape(1, -1, a.shape[-1]),
                      lambda a: a.reshape(1, math.isqrt(a.shape[1]), -1, a.shape[-1])),
    # A 2 x 2 stride-2 transposed convolution (in, out, 2, 2) <-> the Dense
    # (in, 2 * 2 * out) that computes it per input cell, and its bias.
    "up2x2_kernel": Transform(lambda a, h: a.transpose(0, 2, 3, 1).reshape(a.shape[0], -1),
                              lambda a: a.reshape(a.shape[0], 2, 2, -1).transpose(0, 3, 1, 2)),
    "up2x2_bias": Transform(lambda a, h: np.tile(a, 4), lambda a: a[: a.shape[0] // 4]),
    # A Keras Dense kernel (D, 2H) or bias (2H,) holding a SwiGLU MLP's gate
    # and up projections side by side (keras-hub's `weights_in`) <-> both.
    "gate_up": Transform(
        lambda a, h: tuple(np.split(a, 2, axis=-1)), lambda parts: np.concatenate(parts, axis=-1), ("gate", "up")
    ),
}


def _lazy_read(tensor, transform, num_heads):
    """`transform.read` of a `LazyTensor`, as lazy views of it (one per part)."""
    if not transform.parts:
        return tensor.view(lambda a: transform.read(a, num_heads))
    return tuple(tensor.view(lambda a, n=n: transform.read(a, num_heads)[n]) for n in range(len(transform.parts)))


class Rule(NamedTuple):
    """`source` key template <-> `canonical` key template, with a `TRANSFORMS` name."""

    source: str
    canonical: str
    transform: Optional[str] = None


def _compile(template, parts=()):
    pattern, end = "", 0
    for match in _FIELD.finditer(template):
        name = match.group(1)
        if name == "part":
            field = "|".join(re.escape(p) for p in parts)
        else:
            field = _FIELD_PATTERNS.get(name, _DEFAULT_FIELD)
        pattern += re.escape(template[end : match.start()]) + f"(?P<{name}>{field})"
        end = match.end()
    return re.compile(pattern + re.escape(template[end:]) + "$")


def _fill(template, fields):
    return _FIELD.sub(lambda m: str(fields[m.group(1)]), template)


def _shifted(fields, offset):
    if "i" in fields and offset:
        fields = dict(fields, i=int(fields["i"]) + offset)
    return fields


class RuleTable:
    """Renames and reshapes tensors between a source layout and the canonical one.

    Args:
        rules: sequence of `Rule`s (or `(source, canonical, transform)`
            tuples); the first that matches a key applies.
        index_offset: int, default 0: source block index minus canonical
            block index (1 where the source counts blocks from 1).

    Example:

    >>> import numpy as np
    >>> table = RuleTable([("blocks.{i}.fc.weight",
    ...                     "Transformer/encoderblock_{i}/MlpBlock_3/Dense_0/kernel",
    ...                     "linear")])
    >>> params, unknown = table.to_canonical({"blocks.3.fc.weight": np.zeros((8, 4))}, 2)
    >>> params["Transformer/encoderblock_3/MlpBlock_3/Dense_0/kernel"].shape
    (4, 8)
    >>> sorted(table.from_canonical(params))
    ['blocks.3.fc.weight']
    """

    def __init__(self, rules, index_offset=0):
        self.rules = tuple(Rule(*rule) for rule in rules)
        for rule in self.rules:
            _check_rule(rule)
        self.index_offset = index_offset
        self._source = tuple(_compile(r.source) for r in self.rules)
        self._canonical = tuple(
            _compile(r.canonical, TRANSFORMS[r.transform].parts) for r in self.rules
        )

    def __add__(self, other):
        if self.index_offset != other.index_offset:
            raise ValueError("Tables with different `index_offset`s cannot be joined.")
        return RuleTable(self.rules + other.rules, self.index_offset)

    def prefixed(self, prefix):
        """The same table with `prefix` before every source template."""
        return RuleTable([r._replace(source=prefix + r.source) for r in self.rules], self.index_offset)

    def _match_source(self, key):
        for rule, pattern in zip(self.rules, self._source):
            match = pattern.match(key)
            if match:
                return rule, _shifted(match.groupdict(), -self.index_offset)
        return None, None

    def canonical_key(self, key):
        """The canonical key of source `key` (a fused tensor's first part), or None."""
        rule, fields = self._match_source(key)
        if rule is None:
            return None
        parts = TRANSFORMS[rule.transform].parts
        return _fill(rule.canonical, dict(fields, part=parts[0]) if parts else fields)

    def source_key(self, key):
        """The source key that holds canonical `key`, or None.

        Example:

        >>> RuleTable([("blocks.{i}.norm.weight", "Transformer/encoderblock_{i}/LayerNorm_0/scale")],
        ...           index_offset=1).source_key("Transformer/encoderblock_0/LayerNorm_0/scale")
        'blocks.1.norm.weight'
        """
        for rule, pattern in zip(self.rules, self._canonical):
            match = pattern.match(key)
            if match:
                return _fill(rule.source, _shifted(match.groupdict(), self.index_offset))
        return None

    def to_canonical(self, state, num_heads=None):
        """`(params, unknown)`: canonical arrays, and the source keys no rule knows.

        Args:
            state: `{source key: array}`.
            num_heads: int, the attention heads (for the transforms that
                split heads); None where the table has none.
        """
        params, unknown = {}, []
        for key, array in state.items():
            rule, fields = self._match_source(key)
            if rule is None:
                unknown.append(key)
                continue
            transform = TRANSFORMS[rule.transform]
            if isinstance(array, LazyTensor):
                # Not read yet: the canonical tensors are views of it, read
                # when they are assigned (the transforms only take views).
                value = _lazy_read(array, transform, num_heads)
            else:
                value = transform.read(np.asarray(array), num_heads)
            if not transform.parts:
                params[_fill(rule.canonical, fields)] = value
                continue
            for part, piece in zip(transform.parts, value):
                params[_fill(rule.canonical, dict(fields, part=part))] = piece
        return params, unknown

    def from_canonical(self, params):
        """The source-layout dict of canonical `params`.

        Raises:
            ValueError: listing canonical keys no rule can write (also the
                parts of a fused tensor whose other parts are missing).
        """
        out, fused, left = {}, {}, []
        for key, array in params.items():
            for rule, pattern in zip(self.rules, self._canonical):
                match = pattern.match(key)
                if match:
                    break
            else:
                left.append(key)
                continue
            fields = match.groupdict()
            part = fields.pop("part", None)
            target = _fill(rule.source, _shifted(fields, self.index_offset))
            transform = TRANSFORMS[rule.transform]
            if transform.parts:
                fused.setdefault((target, rule.transform), {})[part] = (key, np.asarray(array))
            else:
                out[target] = np.ascontiguousarray(transform.write(np.asarray(array)))
        for (target, name), found in fused.items():
            parts = TRANSFORMS[name].parts
            if set(found) != set(parts):
                left.extend(key for key, _ in found.values())
                continue
            out[target] = np.ascontiguousarray(TRANSFORMS[name].write(tuple(found[p][1] for p in parts)))
        if left:
            raise ValueError(
                "These weights have no place in the target layout: " + ", ".join(sorted(left))
            )
        return out


def _check_rule(rule):
    if rule.transform not in TRANSFORMS:
        raise ValueError(
            f"`transform` must be one of {sorted(t for t in TRANSFORMS if t)} "
            f"or None. Received: transform={rule.transform!r}"
        )
    source = set(_FIELD.findall(rule.source))
    canonical = set(_FIELD.findall(rule.canonical))
    parts = bool(TRANSFORMS[rule.transform].parts)
    if source != canonical - {"part"} or ("part" in canonical) != parts or "part" in source:
        raise ValueError(
            f"Rule {rule.source!r} -> {rule.canonical!r} must name the same fields on "
            f"both sides, with `{{part}}` only on the canonical side of a fused transform "
            f"({rule.transform!r})."
        )
