"""A griffe extension that reads keras_vit's Keras-style docstrings.

The docstrings stay as Keras writes them (tests/test_docstrings.py runs
their examples); the site reads two Keras habits that griffe's Google parser
does not know:

- a runnable example as an unindented "Example:" section (griffe wants an
  indented "Examples:" section, else it renders the doctest lines as prose);
- arguments documented together, `kernel_initializer, bias_initializer:
  ...` (griffe wants one name per entry, else it warns that no such
  parameter exists);
- arguments that reach the function through `**kwargs` (Keras' `name`,
  `dtype`, `trainable`), documented under their own names: griffe checks
  each documented name against the signature, and should keep doing so for
  every other name, so that a renamed argument fails the strict build.

It also gives the named constructors (`ViTB16`, ...) the docstrings
`keras_vit.models.variants` makes at import time from the variants table: the
statically read functions have none, so they are read from the imported
module.
"""

import importlib
import re

import griffe

_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")
_NAMES = re.compile(r"^    (\w+(?:,\s*\w+)+):(.*)$")


def keras_examples(text):
    """`text` with its unindented "Example:" sections indented as "Examples:".

    Example:

    >>> keras_examples("Summary.\\n\\nExample:\\n\\n>>> 1 + 1\\n2\\n")
    'Summary.\\n\\nExamples:\\n    >>> 1 + 1\\n    2\\n'
    """
    out, inside, opening = [], False, False
    for line in text.split("\n"):
        if line.rstrip() in ("Example:", "Examples:"):
            out.append("Examples:")
            inside, opening = True, True
            continue
        if inside and _SECTION.match(line):
            inside = False
        if inside:
            if opening and not line.strip():
                continue
            opening = False
            line = "    " + line if line.strip() else line
        out.append(line)
    return "\n".join(out)


def _join_name_lists(lines):
    # "    a, b,\n        c: text" -> "    a, b, c: text"
    out = []
    for line in lines:
        previous = out[-1] if out else ""
        if (previous.startswith("    ") and not previous.startswith("     ")
                and previous.rstrip().endswith(",") and ":" not in previous):
            out[-1] = previous.rstrip() + " " + line.strip()
        else:
            out.append(line)
    return out


def split_shared_arguments(text):
    """`text` with each "a, b: description" argument written once per name.

    Example:

    >>> print(split_shared_arguments("Args:\\n    a, b: sizes.\\n        More."))
    Args:
        a: sizes.
            More.
        b: sizes.
            More.
    """
    lines, out, index = _join_name_lists(text.split("\n")), [], 0
    while index < len(lines):
        match = _NAMES.match(lines[index])
        index += 1
        if not match:
            out.append(lines[index - 1])
            continue
        body = []
        while index < len(lines) and lines[index].startswith("        "):
            body.append(lines[index])
            index += 1
        for name in re.split(r",\s*", match.group(1)):
            out.extend([f"    {name}:{match.group(2)}", *body])
    return "\n".join(out)


def absorb_keyword_arguments(text, known, var_keyword):
    """`text` with Args entries absent from the signature filed under `**kwargs`.

    Example:

    >>> print(absorb_keyword_arguments("Args:\\n    x: one.\\n    trainable: bool.", {"x"}, "kwargs"))
    Args:
        x: one.
        **kwargs: `trainable`: bool.
    """
    out, inside = [], False
    for line in text.split("\n"):
        if _SECTION.match(line):
            inside = line.strip() in ("Args:", "Arguments:")
        match = re.match(r"^    (\w+):(.*)$", line) if inside else None
        if match and match.group(1) not in known:
            line = f"    **{var_keyword}: `{match.group(1)}`:{match.group(2)}"
        out.append(line)
    return "\n".join(out)


def _objects(module):
    for member in module.members.values():
        if member.is_alias:
            continue
        yield member
        if member.is_class or member.is_module:
            yield from _objects(member)


def _read_keras_style(obj):
    value = split_shared_arguments(obj.docstring.value)
    obj.docstring.value = keras_examples(value)


def _add_named_constructors(package):
    # Read from the imported module: the functions are written in the source
    # without a docstring, which `_named` gives each one from its table row
    # at import time.
    variants = package["models.variants"]
    imported = griffe.inspect("keras_vit.models.variants")
    for name in importlib.import_module("keras_vit.models.variants").CONSTRUCTORS:
        function = imported[name]
        _read_keras_style(function)
        variants.set_member(name, function)


class KerasDocstrings(griffe.Extension):
    """Reads Keras-style "Example:" sections and shared argument entries."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            _read_keras_style(obj)

    def on_package(self, *, pkg, **kwargs):
        if pkg.path == "keras_vit":
            _add_named_constructors(pkg)
        for obj in _objects(pkg):
            if obj.docstring is None or not (obj.is_function or obj.is_class):
                continue
            params = obj.parameters
            var_keyword = [p.name for p in params if p.kind is griffe.ParameterKind.var_keyword]
            if var_keyword:
                known = {p.name for p in params}
                obj.docstring.value = absorb_keyword_arguments(obj.docstring.value, known, var_keyword[0])
