"""A config class as a glossary: each setting's name, its default and what its docstring says.

Chapter 5 prints :class:`minirlhf.ppo.PPOConfig` with :func:`settings_table`, and a later
chapter may print another config (:class:`minirlhf.dpo.DPOConfig`) the same way. The table is
read from the class's source, not retyped: each field's default as written in the class, and
the docstring on the line under it, so the page cannot drift from the code. A field with no
docstring under it is an error, not a blank row: the table exists to say what each setting does.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap

__all__ = ["settings_table"]

HEADER = "what it does; TRL's counterpart"  # the third column's title


def _wrap(text: str, width: int) -> list[str]:
    # One paragraph, its whitespace made single, in lines of at most ``width``; no line break
    # inside `code` or [an interval] (their spaces are non-breaking while the text is wrapped).
    text = " ".join(text.replace("``", "`").split())
    text = re.sub(r"`[^`]*`|\[[^]]*\]", lambda m: m.group().replace(" ", "\xa0"), text)
    return [line.replace("\xa0", " ") for line in textwrap.wrap(text, width, break_on_hyphens=False)]


def _docstring_after(after) -> str | None:
    # The string statement right under a field, the field's docstring; None when there is none
    # (or it is blank).
    if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
        return after.value.value if after.value.value.strip() else None
    return None


def settings_table(cls, name_w: int = 18, default_w: int = 10, width: int = 77) -> str:
    """Return the docstring of the dataclass ``cls`` and a text table of its fields, each read
    from the class's source: the field's name, its default as written there and its docstring
    (the string under it), wrapped to ``width`` columns, ``name_w`` and ``default_w`` of them
    for the first two columns.

    The class docstring's paragraphs come first, but for the one that says where the class is
    defined in the book ("Defined in chapter ..."). A field with no default shows "required".
    Raises ValueError, naming the class and the field, when ``cls`` is not a dataclass, when a
    field has no docstring under it, or when a field is not written in the class's own body
    (one it inherits): the table would not say what that setting does.
    """
    if not (inspect.isclass(cls) and dataclasses.is_dataclass(cls)):
        raise ValueError(f"cls must be a dataclass, got {cls!r}")
    doc_w = width - name_w - default_w
    if min(name_w, default_w) < 2 or doc_w < 20:
        raise ValueError(
            f"the columns do not fit: name_w={name_w} and default_w={default_w} must be >= 2, "
            f"and leave at least 20 of width={width} for the docstrings"
        )
    source = textwrap.dedent(inspect.getsource(cls))
    node = ast.parse(source).body[0]  # the class statement (its decorators belong to it)

    lines = []
    for text in (ast.get_docstring(node) or "").split("\n\n"):
        if text and not text.startswith("Defined in chapter"):
            lines += _wrap(text, width) + [""]
    lines.append(f"{'setting':<{name_w}}{'default':<{default_w}}{HEADER}")
    lines.append(f"{'-' * (name_w - 1)} {'-' * (default_w - 1)} {'-' * doc_w}")

    names = [field.name for field in dataclasses.fields(cls)]
    found = []
    body = node.body
    for stmt, after in zip(body, body[1:] + [None]):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        if name not in names:
            continue  # a ClassVar or another annotation that is not a setting
        doc = _docstring_after(after)
        if doc is None:
            raise ValueError(
                f"{cls.__name__}.{name} has no docstring: write what the setting does in a string on the line under it"
            )
        default = "required" if stmt.value is None else ast.get_source_segment(source, stmt.value)
        doc_lines = _wrap(doc, doc_w)
        found.append(name)
        lines.append(f"{name:<{name_w}}{default:<{default_w}}{doc_lines[0]}")
        lines += [" " * (name_w + default_w) + more for more in doc_lines[1:]]
        lines.append("")
    missing = [name for name in names if name not in found]
    if missing:
        raise ValueError(
            f"{cls.__name__} has fields not written in its own body (inherited?): {', '.join(missing)}; "
            "the table reads each setting's default and docstring from the class's source"
        )
    return "\n".join(lines).rstrip()
