"""The table of a config's settings that chapter 5 prints: one row per field, with the default
written in the class and the first words of the field's docstring, read from the source."""

import ast
import dataclasses
import inspect

import pytest

from minirlhf.course.settings import settings_table
from minirlhf.dpo import DPOConfig
from minirlhf.ppo import PPOConfig

NAME_W, DEFAULT_W = 18, 10  # the table's first two columns, as chapter 5 prints it


def _docstrings(cls) -> dict:
    """Return {field: its docstring} as the class's source has them (the string under each)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body
    return {
        stmt.target.id: after.value.value
        for stmt, after in zip(body, body[1:])
        if isinstance(stmt, ast.AnnAssign) and isinstance(after, ast.Expr)
    }


@dataclasses.dataclass
class Documented:
    """A config of two settings.

    Defined in chapter 0.
    """

    steps: int = 3
    """How many ``steps`` to take."""
    name: str = "x"
    """What it is called."""


@dataclasses.dataclass
class Undocumented:
    """A config whose second setting says nothing."""

    steps: int = 3
    """How many steps to take."""
    lr: float = 1e-3


@dataclasses.dataclass
class Derived(Documented):
    """A config that inherits its settings."""

    extra: int = 0
    """One more."""


@pytest.mark.parametrize("cls", [PPOConfig, DPOConfig], ids=lambda c: c.__name__)
def test_every_field_has_a_row_with_its_default_and_its_docstring(cls):
    table = settings_table(cls)
    lines = table.splitlines()
    rows = {line[:NAME_W].strip(): line for line in lines if line[:1].strip() and line[:NAME_W].strip()}
    docs = _docstrings(cls)
    for field in dataclasses.fields(cls):
        row = rows.get(field.name)
        assert row is not None, f"{cls.__name__}.{field.name} has no row"
        default = row[NAME_W : NAME_W + DEFAULT_W].strip()
        assert ast.literal_eval(default) == field.default, (field.name, default)
        first_words = " ".join(docs[field.name].replace("``", "`").split()[:2])
        assert row[NAME_W + DEFAULT_W :].startswith(first_words), (field.name, row)
    assert all(len(line) <= 77 for line in lines)
    assert "Defined in chapter" not in table
    assert lines.index(next(line for line in lines if line.startswith("setting"))) > 0  # the docstring comes first


def test_the_table_reads_the_class_as_written():
    assert settings_table(Documented) == (
        "A config of two settings.\n"
        "\n"
        "setting           default   what it does; TRL's counterpart\n"
        "----------------- --------- -------------------------------------------------\n"
        "steps             3         How many `steps` to take.\n"
        "\n"
        'name              "x"       What it is called.'
    )


def test_a_field_without_a_docstring_is_named():
    with pytest.raises(ValueError, match=r"^Undocumented\.lr has no docstring"):
        settings_table(Undocumented)


def test_inherited_fields_and_other_classes_are_refused():
    with pytest.raises(ValueError, match="inherited.*steps, name"):
        settings_table(Derived)
    with pytest.raises(ValueError, match="must be a dataclass"):
        settings_table(dict)
    with pytest.raises(ValueError, match="columns do not fit"):
        settings_table(PPOConfig, width=40)
