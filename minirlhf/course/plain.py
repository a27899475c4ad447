"""The wire format between the learner's kernel and the grader: :func:`to_plain` turns a
returned value into JSON-ready plain data, :func:`from_plain` checks that data and builds the
value again.

This module is a security boundary. A returned value crosses from the learner's kernel to the
grader as JSON: numbers, strings, None, lists, and objects with one tag (tuple, dict, complex, a
non-finite float, a NumPy scalar or array, a torch tensor, or an opaque stand-in). Nothing is
unpickled, so no code of the learner's runs in the grader, and an object cannot rebuild itself as
something else. The encoder looks at ``type(x)`` only and reads containers with the base types'
own methods, so no method of the learner's classes runs while a value is encoded either.

Whatever is not plain data (an object of the learner's own class, a float subclass, a value
bigger than :data:`RETURN_CAP`) arrives as an :class:`Opaque` and "cannot be graded". The check
cell sends every value through the same round trip (:func:`round_trip`), so it gives the same
verdict as the grader.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from ..safe_text import shorten

__all__ = ["Opaque", "to_plain", "from_plain", "round_trip", "RETURN_CAP", "class_name", "class_module"]

RETURN_CAP = 10_000  # numbers (and characters of text) a returned value may hold; no answer needs more
_MAX_DEPTH = 32  # levels of nesting of a returned value


class Opaque:
    """A returned value that is not plain data and so cannot be graded: its type's name, why,
    and a short text for the report. Made from the type alone: no method of the value runs."""

    def __init__(self, type_name: str, module: str = "", why: str = "", text: str = ""):
        self.type_name, self.module = shorten(str(type_name), 80), shorten(str(module), 80)
        self.why = shorten(str(why), 200)
        self.text = shorten(str(text), 90) or f"<{self.type_name}>"

    def problem(self) -> str:
        return f"returned a {self.type_name}, which cannot be graded" + (f" ({self.why})" if self.why else "")

    def __eq__(self, other) -> bool:
        return isinstance(other, Opaque) and vars(self) == vars(other)

    def __repr__(self) -> str:
        return f"Opaque({self.type_name!r}, why={self.why!r})"


_PLAIN_WHY = "the grader takes numbers, strings, None, lists, tuples, dicts, NumPy arrays and torch tensors"
_NUMPY_DTYPES = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
}
_TORCH_DTYPES = {
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
}
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class _TooBig(Exception):
    pass


class_name = type.__dict__["__name__"].__get__  # a class's own name and module, read without
_class_module = type.__dict__["__module__"].__get__  # running anything a metaclass defines


def class_module(kind: type) -> str:
    """The module a class says it comes from, or "?" when it has none (a class made by
    ``type()`` in code run without a ``__name__``)."""
    try:
        return _class_module(kind)
    except AttributeError:
        return "?"


_NUMPY_SCALARS = {np.dtype(name).type for name in _NUMPY_DTYPES}


class _Encoder:
    """Turns a value into plain data, counting numbers and characters against ``cap``.

    It looks at ``type(x)`` only (an object cannot pretend to be another type) and reads
    containers with the base types' own methods, so no method of the learner's classes runs.
    """

    def __init__(self, cap: int):
        self.cap, self.used = cap, 0

    def spend(self, n: int) -> None:
        self.used += n
        if self.used > self.cap:
            raise _TooBig

    @staticmethod
    def number(x):
        if type(x) in (bool, int):
            return x
        if type(x) is float:
            return x if math.isfinite(x) else repr(x)
        if type(x) is complex:
            return [_Encoder.number(x.real), _Encoder.number(x.imag)]
        raise TypeError(class_name(type(x)))

    def encode(self, x, depth: int = 0):
        kind = type(x)
        if depth > _MAX_DEPTH:
            return _opaque_plain(x, f"nested more than {_MAX_DEPTH} levels deep")
        if x is None or kind is bool:
            self.spend(1)
            return x
        if kind is int:
            self.spend(1)
            return x if x.bit_length() <= 1024 else _opaque_plain(x, "an int too large for a float")
        if kind is float:
            self.spend(1)
            return x if math.isfinite(x) else {"float": repr(x)}
        if kind is complex:
            self.spend(2)
            return {"complex": self.number(x)}
        if kind is str:
            self.spend(len(x))
            return x
        if kind in _NUMPY_SCALARS:
            self.spend(1)
            return {"numpy": np.dtype(kind).name, "value": self.number(x.item())}
        if kind is np.ndarray:
            return self.array(x)
        if issubclass(kind, list):
            self.spend(1)
            return [self.encode(v, depth + 1) for v in list(list.__iter__(x))]
        if issubclass(kind, tuple):  # a tuple, or a named tuple, torch.Size, ...
            self.spend(1)
            return {"tuple": [self.encode(v, depth + 1) for v in list(tuple.__iter__(x))]}
        if issubclass(kind, dict):  # a dict, or an OrderedDict, a defaultdict, ...
            self.spend(1)
            pairs = []
            for k, v in list(dict.items(x)):
                if type(k) not in (str, int, float, bool, type(None)):
                    return _opaque_plain(x, f"a dict with a key of type {class_name(type(k))}")
                pairs.append([self.encode(k, depth + 1), self.encode(v, depth + 1)])
            return {"dict": pairs}
        if issubclass(kind, float) and not issubclass(kind, np.generic):
            return _opaque_plain(
                x, "a subclass of float; the contract asks for a plain Python float: float(...)", text=float.__repr__(x)
            )
        if issubclass(kind, (int, str, complex)):
            base = next(b for b in (int, str, complex) if issubclass(kind, b))
            return _opaque_plain(x, f"a subclass of {base.__name__}; return a plain {base.__name__}")
        if issubclass(kind, np.generic):
            return _opaque_plain(
                x, f"a NumPy scalar of dtype {np.dtype(kind).name}" if class_module(kind) == "numpy" else _PLAIN_WHY
            )
        torch = sys.modules.get("torch")
        if torch is not None and kind in (torch.Tensor, torch.nn.Parameter):
            return self.tensor(x, torch)
        return _opaque_plain(x, _PLAIN_WHY)

    def array(self, x):
        dtype = x.dtype.name
        if dtype not in _NUMPY_DTYPES:
            return _opaque_plain(x, f"a NumPy array of dtype {dtype}")
        self.spend(x.size * (2 if x.dtype.kind == "c" else 1))
        return {"ndarray": dtype, "shape": list(x.shape), "data": [self.number(v) for v in x.ravel().tolist()]}

    def tensor(self, x, torch):
        dtype = str(x.dtype).removeprefix("torch.")
        if dtype not in _TORCH_DTYPES or x.layout != torch.strided or x.is_meta:
            return _opaque_plain(
                x, f"a torch tensor of dtype {dtype}, layout {str(x.layout).removeprefix('torch.')}, device {x.device}"
            )
        self.spend(x.numel() * (2 if x.is_complex() else 1))
        flat = x.detach().cpu().reshape(-1).tolist()
        return {
            "tensor": dtype,
            "shape": list(x.shape),
            "data": [self.number(v) for v in flat],
            "requires_grad": bool(x.requires_grad),
        }


def _opaque_plain(x, why: str, text: str = "") -> dict:
    kind = type(x)
    name, module = class_name(kind), class_module(kind)
    return {"opaque": name, "module": module if type(module) is str else "", "why": why, "text": text or f"<{name}>"}


def to_plain(value, cap: int = RETURN_CAP):
    """Return ``value`` as JSON-ready plain data (see :func:`from_plain`); never raises.

    Only the types named in :data:`_PLAIN_WHY` are carried, read with the base types' own
    methods, so no method of the learner's runs. Anything else, and any value holding more than
    ``cap`` numbers or characters, becomes an opaque stand-in that says why.
    """
    try:
        return _Encoder(cap).encode(value)
    except _TooBig:
        return _opaque_plain(
            value, f"it holds more than {cap:,} numbers or characters; the grader takes at most {cap:,}"
        )
    except RecursionError:
        return _opaque_plain(value, f"nested more than {_MAX_DEPTH} levels deep")
    except BaseException as exc:  # a broken array or tensor
        return _opaque_plain(value, f"it could not be read ({type(exc).__name__})")


def _plain_number(item, kind: str):
    """Check one element of an array's data against the array's kind ("b", "i", "f" or "c")."""
    if kind == "b":
        if type(item) is not bool:
            raise ValueError("a bool array holds a non-bool")
        return item
    if kind == "i":
        if type(item) is not int:
            raise ValueError("an int array holds a non-int")
        return item
    if kind == "c":
        if type(item) is not list or len(item) != 2:
            raise ValueError("a complex element is not a [real, imag] pair")
        return complex(_plain_number(item[0], "f"), _plain_number(item[1], "f"))
    if type(item) is str and item in _NONFINITE:
        return _NONFINITE[item]
    if type(item) not in (int, float) or (type(item) is float and not math.isfinite(item)):
        raise ValueError("a float element is not a number")
    return float(item)


class _Decoder:
    def __init__(self, cap: int):
        self.cap, self.used = cap, 0

    def spend(self, n: int) -> None:
        self.used += n
        if self.used > self.cap:
            raise ValueError(f"more than {self.cap} numbers or characters")

    def decode(self, node, depth: int = 0):
        if depth > _MAX_DEPTH + 2:
            raise ValueError("nested too deep")
        kind = type(node)
        if node is None or kind is bool or kind is int:
            self.spend(1)
            return node
        if kind is float:
            if not math.isfinite(node):
                raise ValueError("a non-finite float not in its tagged form")
            self.spend(1)
            return node
        if kind is str:
            self.spend(len(node))
            return node
        if kind is list:
            self.spend(1)
            return [self.decode(v, depth + 1) for v in node]
        if kind is not dict or len(node) == 0:
            raise ValueError(f"unexpected {kind.__name__}")
        tag = next(iter(node))
        fields = set(node)
        if tag == "float" and fields == {"float"}:
            if node["float"] not in _NONFINITE:
                raise ValueError("a bad non-finite float")
            self.spend(1)
            return _NONFINITE[node["float"]]
        if tag == "complex" and fields == {"complex"}:
            self.spend(2)
            return _plain_number(node["complex"], "c")
        if tag == "tuple" and fields == {"tuple"} and type(node["tuple"]) is list:
            self.spend(1)
            return tuple(self.decode(v, depth + 1) for v in node["tuple"])
        if tag == "dict" and fields == {"dict"} and type(node["dict"]) is list:
            self.spend(1)
            out = {}
            for pair in node["dict"]:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("a dict entry is not a [key, value] pair")
                key = self.decode(pair[0], depth + 1)
                if type(key) not in (str, int, float, bool, type(None)):
                    raise ValueError("a dict key that is not a string or a number")
                out[key] = self.decode(pair[1], depth + 1)
            return out
        if tag == "numpy" and fields == {"numpy", "value"} and node["numpy"] in _NUMPY_DTYPES:
            dtype = np.dtype(node["numpy"])
            self.spend(1)
            return dtype.type(_plain_number(node["value"], _kind_of(dtype.kind)))
        if tag == "ndarray" and fields == {"ndarray", "shape", "data"} and node["ndarray"] in _NUMPY_DTYPES:
            dtype = np.dtype(node["ndarray"])
            data = self.elements(node, _kind_of(dtype.kind))
            return np.array(data, dtype=dtype).reshape(node["shape"])
        if (
            tag == "tensor"
            and fields == {"tensor", "shape", "data", "requires_grad"}
            and node["tensor"] in _TORCH_DTYPES
            and type(node["requires_grad"]) is bool
        ):
            import torch

            dtype = getattr(torch, node["tensor"])
            probe = torch.empty((), dtype=dtype)
            kind = (
                "b" if dtype == torch.bool else "c" if probe.is_complex() else "f" if probe.is_floating_point() else "i"
            )
            data = self.elements(node, kind)
            tensor = torch.tensor(data, dtype=dtype).reshape(node["shape"])
            return tensor.requires_grad_(True) if node["requires_grad"] and kind in "fc" else tensor
        if (
            tag == "opaque"
            and fields == {"opaque", "module", "why", "text"}
            and all(type(node[k]) is str for k in fields)
        ):
            return Opaque(node["opaque"], node["module"], node["why"], node["text"])
        raise ValueError(f"an unknown or malformed tag {shorten(str(tag), 20)!r}")

    def elements(self, node, kind: str) -> list:
        shape, data = node["shape"], node["data"]
        if type(shape) is not list or len(shape) > 32 or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError("a bad shape")
        if type(data) is not list or len(data) != math.prod(shape):
            raise ValueError("the data do not fill the shape")
        self.spend(len(data) * (2 if kind == "c" else 1))
        return [_plain_number(v, kind) for v in data]


def _kind_of(numpy_kind: str) -> str:
    return {"b": "b", "i": "i", "u": "i", "f": "f", "c": "c"}[numpy_kind]


def from_plain(data, cap: int = RETURN_CAP):
    """Return the value that :func:`to_plain` turned into ``data``; raise ValueError if
    ``data`` is not exactly what :func:`to_plain` makes (any tag, type, size or shape out of
    place), so that what arrives from a kernel is checked before anything uses it."""
    try:
        return _Decoder(cap * 2 + 16).decode(data)
    except RecursionError:
        raise ValueError("nested too deep") from None
    except (TypeError, OverflowError, KeyError, RuntimeError) as exc:
        raise ValueError(f"malformed ({type(exc).__name__}: {shorten(str(exc), 80)})") from None


def round_trip(value):
    """Return ``value`` as the grader would receive it from a kernel (see :func:`to_plain`)."""
    try:
        return from_plain(to_plain(value))
    except ValueError as exc:  # cannot happen for what to_plain makes; say so rather than crash
        return Opaque(type(value).__name__, "", f"it could not be carried ({exc})")
