"""Declarative, invertible key tables between a checkpoint layout and the
canonical one.

A `KeyTable` is a list of rules `(source template, canonical template,
transform)`. Templates are key names with an optional `{i}` for the block
index (`"vit.encoder.layer.{i}.layernorm_before.weight"` <->
`"Transformer/encoderblock_{i}/LayerNorm_0/scale"`). The same rules read a
checkpoint into the canonical layout (`to_canonical`) and write the
canonical layout back out (`from_canonical`), so a reader and its writer
cannot drift apart. Transforms are named pairs of array functions
(`TRANSFORMS`); each names the layout change, e.g. a PyTorch `Linear` weight
`(out, in)` against a Keras kernel `(in, out)`.
"""

import re

import numpy as np


def _heads_in(array, num_heads):
    # (heads * head_dim, D) PyTorch Linear -> (D, heads, head_dim).
    return array.T.reshape(array.shape[1], num_heads, -1)


def _heads_out(array, num_heads):
    # (D, heads * head_dim) PyTorch Linear -> (heads, head_dim, D).
    return array.T.reshape(num_heads, -1, array.shape[0])


# name -> (source -> canonical, canonical -> source). The first function
# takes `(array, num_heads)`; the inverse only the array (shapes say all).
TRANSFORMS = {
    None: (lambda a, h: a, lambda a: a),
    # PyTorch OIHW convolution <-> (ph, pw, C, D).
    "conv": (lambda a, h: a.transpose(2, 3, 1, 0), lambda a: a.transpose(3, 2, 0, 1)),
    # PyTorch Linear (out, in) <-> Keras Dense (in, out).
    "linear": (lambda a, h: a.T, lambda a: a.T),
    "heads_in": (_heads_in, lambda a: a.reshape(a.shape[0], -1).T),
    "heads_bias": (lambda a, h: a.reshape(h, -1), lambda a: a.reshape(-1)),
    "heads_out": (_heads_out, lambda a: a.reshape(-1, a.shape[-1]).T),
    # (tokens, D) embedding table <-> (1, tokens, D).
    "batch": (lambda a, h: a[None], lambda a: a[0]),
}


def _pattern(template):
    return re.compile(re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)") + "$")


class KeyTable:
    """Renames and reshapes tensors between a source layout and the canonical one.

    Args:
        rules: sequence of `(source template, canonical template, transform)`;
            `transform` is a key of `TRANSFORMS`.
        index_offset: int, default 0: source block index minus canonical
            block index (1 where the source counts blocks from 1).

    Example:

    >>> import numpy as np
    >>> table = KeyTable([("blocks.{i}.fc.weight",
    ...                    "Transformer/encoderblock_{i}/MlpBlock_3/Dense_0/kernel",
    ...                    "linear")])
    >>> params, unknown = table.to_canonical({"blocks.3.fc.weight": np.zeros((8, 4))}, 2)
    >>> params["Transformer/encoderblock_3/MlpBlock_3/Dense_0/kernel"].shape
    (4, 8)
    >>> sorted(table.from_canonical(params))
    ['blocks.3.fc.weight']
    """

    def __init__(self, rules, index_offset=0):
        for _, _, transform in rules:
            if transform not in TRANSFORMS:
                raise ValueError(
                    f"`transform` must be one of {sorted(t for t in TRANSFORMS if t)} "
                    f"or None. Received: transform={transform!r}"
                )
        self.rules = tuple(rules)
        self.index_offset = index_offset
        self._source = tuple((_pattern(s), c, t) for s, c, t in self.rules)
        self._canonical = tuple((_pattern(c), s, t) for s, c, t in self.rules)

    @staticmethod
    def _expand(template, match, offset):
        if "{i}" not in template:
            return template
        return template.replace("{i}", str(int(match.group("i")) + offset))

    def to_canonical(self, state, num_heads):
        """`(params, unknown)`: canonical arrays, and the source keys no rule knows."""
        params, unknown = {}, []
        for key, array in state.items():
            for pattern, template, transform in self._source:
                match = pattern.match(key)
                if match:
                    target = self._expand(template, match, -self.index_offset)
                    params[target] = TRANSFORMS[transform][0](np.asarray(array), num_heads)
                    break
            else:
                unknown.append(key)
        return params, unknown

    def from_canonical(self, params):
        """The source-layout dict of canonical `params`.

        Raises:
            ValueError: listing canonical keys no rule can write.
        """
        out, left = {}, []
        for key, array in params.items():
            for pattern, template, transform in self._canonical:
                match = pattern.match(key)
                if match:
                    target = self._expand(template, match, self.index_offset)
                    out[target] = np.ascontiguousarray(TRANSFORMS[transform][1](np.asarray(array)))
                    break
            else:
                left.append(key)
        if left:
            raise ValueError(
                "These weights have no place in the target layout: " + ", ".join(sorted(left))
            )
        return out
