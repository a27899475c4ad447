"""Tables of variants that the package finds by itself: one module per entry.

The advantage estimators (:mod:`minirlhf.estimators`) and the places of the KL leash
(:mod:`minirlhf.leashes`) are each a folder with one module per entry, and each such module
defines one record (``ESTIMATOR = Estimator(...)``, ``LEASH = Leash(...)``) beside the code that
only it uses. :class:`ModuleTable` reads the table from the folder when it is first needed, so
adding an entry is adding one module, and a stored run is keyed on the modules of the entries
it uses, not on the others (:mod:`minirlhf.course.runs`). A module whose name starts with ``_``
holds helpers that several entries share, and defines no entry.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Callable

__all__ = ["ModuleTable"]


class ModuleTable:
    """The entries that the modules of the package ``package`` define as ``attr``, instances of
    ``kind``, keyed by their ``name``; ``setting`` names the config field that chooses one (for
    the error message), and ``order(entry)`` sorts them (by name when None)."""

    def __init__(self, package: str, attr: str, kind: type, setting: str, order: Callable | None = None):
        self.package, self.attr, self.kind, self.setting = package, attr, kind, setting
        self.order = order or (lambda entry: entry.name)
        self._table: dict = {}
        self._modules: dict[str, ModuleType] = {}

    def load(self) -> dict:
        """Return ``{name: entry}``, read from the package's modules on the first call."""
        if not self._table:
            found, modules = {}, {}
            path = importlib.import_module(self.package).__path__
            for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
                if info.name.startswith("_"):
                    continue  # shared helpers, no entry
                module = importlib.import_module(f"{self.package}.{info.name}")
                entry = getattr(module, self.attr, None)
                if not isinstance(entry, self.kind):
                    raise TypeError(f"{module.__name__} must define {self.attr} = {self.kind.__name__}(...)")
                if entry.name in found:
                    raise ValueError(f"two modules define the {self.setting} {entry.name!r}")
                found[entry.name], modules[entry.name] = entry, module
            self._table.update((name, found[name]) for name in sorted(found, key=lambda n: self.order(found[n])))
            self._modules.update(modules)
        return self._table

    def names(self) -> tuple[str, ...]:
        """Return the entries' names, in the table's order."""
        return tuple(self.load())

    def get(self, name: str):
        """Return the entry called ``name``; a ValueError naming the choices for any other."""
        table = self.load()
        if name not in table:
            raise ValueError(f"{self.setting} must be one of {tuple(table)}, got {name!r}")
        return table[name]

    def module_of(self, name: str) -> ModuleType:
        """Return the module that defines the entry ``name``."""
        self.get(name)
        return self._modules[name]
