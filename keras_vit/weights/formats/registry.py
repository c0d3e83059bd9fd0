"""The registry of a checkpoint source's families (transformers, keras-hub).

A source whose files come in families (one subclass each of
`transformers_family.TransformersFamily` or `keras_hub_family.KerasHubFamily`)
keeps them in one `FamilyRegistry`: in the order they are offered a model to
write, and found for a file by the config field that names its family.
"""


class FamilyRegistry:
    """The families of one checkpoint source, in order, found by a config field.

    Args:
        source: the source's files, in messages ("transformers checkpoint").
        field: the config field that names a family ("model_type").
        families: the family objects, in the order they are offered a model.
        names: `names(family)`: the values of `field` a family reads.
        refused: `{value: why}` of values keras_vit knows and does not read.

    Example:

    >>> class Plain:
    ...     TYPES = ("plain",)
    >>> registry = FamilyRegistry("test checkpoint", "kind", (Plain(),), lambda f: f.TYPES,
    ...                           {"odd": "odd files are not read"})
    >>> type(registry.find({"kind": "plain"})).__name__
    'Plain'
    >>> registry.find({"kind": "odd"})
    Traceback (most recent call last):
    ...
    ValueError: Cannot build this test checkpoint: `kind` must be one of ['plain'] (odd files are not read). Received: kind='odd'
    """

    def __init__(self, source, field, families, names, refused=None):
        self.source = source
        self.field = field
        self.families = tuple(families)
        self.refused = dict(refused or {})
        self._by_name = {name: family for family in self.families for name in names(family)}

    def __iter__(self):
        return iter(self.families)

    def __len__(self):
        return len(self.families)

    @property
    def names(self):
        """The values of `field` some family reads, in the families' order."""
        return list(self._by_name)

    def find(self, config):
        """The family that reads a config dict, by its `field`.

        Raises:
            ValueError: for a value no family reads, with why where keras_vit knows it.
        """
        value = config.get(self.field)
        if value not in self._by_name:
            why = f" ({self.refused[value]})" if value in self.refused else ""
            raise ValueError(
                f"Cannot build this {self.source}: `{self.field}` must be one of {list(self._by_name)}{why}. "
                f"Received: {self.field}={value!r}"
            )
        return self._by_name[value]
