"""The comparators: how an exercise compares a returned value with the expected one.

Each exercise says how its answers are compared through an :class:`Expect` object: a Python float
rounded to 2 decimals (:class:`ExpectFloat2`), a float within a tolerance (:class:`ExpectFloat`), a
dict of such floats (:class:`ExpectDict2`), an array or tensor of a given shape
(:class:`ExpectArray`) or a loss that can be backpropagated (:class:`ExpectScalarTensor`).

A comparator's ``diagnose`` returns None when the answer is right, else (mistake, message): the
mistake is a short key of :data:`minirlhf.course.cases.MISTAKES`, the message says in plain words
what is wrong, with the numbers. The helpers that write those numbers and types
(:func:`number_text`, :func:`number_texts_apart`, :func:`type_phrase`) serve the other messages of
the course too.
"""

from __future__ import annotations

import math

import numpy as np

from .plain import Opaque

__all__ = ["Expect", "ExpectFloat2", "ExpectFloat", "ExpectDict2", "ExpectArray", "ExpectScalarTensor"]


def type_phrase(value) -> str:
    """Name the type of ``value`` as a person would: "None", "a list", "a NumPy array", ..."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return "a NumPy array"
    if isinstance(value, np.floating):
        return "a NumPy float"
    if isinstance(value, np.generic):
        return f"a NumPy scalar ({np.dtype(type(value)).name})"
    if type(value).__module__.startswith("torch"):
        return "a torch tensor"
    name = {str: "string", int: "int", float: "float", bool: "bool"}.get(type(value), type(value).__name__)
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def number_text(x: float) -> str:
    """A number as the report prints it: exact up to 12 significant digits, 0.0 not 0."""
    text = f"{x:.12g}"
    return text if any(c in text for c in ".en") else text + ".0"


def number_texts_apart(got: float, want: float, digits: int = 4) -> tuple[str, str]:
    """Two different numbers printed with as few digits (at least ``digits``) as tell them apart."""
    for d in range(digits, 13):
        a, b = f"{got:.{d}g}", f"{want:.{d}g}"
        if a != b:
            return tuple(t if any(c in t for c in ".en") else t + ".0" for t in (a, b))
    return number_text(got), number_text(want)


_MISSING_RETURN = ": is a return statement missing?"


class Expect:
    """How a returned value is compared with the expected one.

    ``diagnose`` returns None or (mistake, message); ``problem`` returns just the message.
    ``what`` names the result in messages ("the loss", "the advantages"); ``slips`` are the
    usual wrong versions of the function (see :class:`~minirlhf.course.cases.Slip`), which
    :func:`~minirlhf.course.cases.judge` tries when the numbers are wrong.
    """

    what = "the result"
    plural = False
    slips: tuple = ()
    # A loss's differentiable inputs: the checker makes them require a gradient, differentiates
    # the returned value with respect to them, and compares that with the reference's gradient.
    grad_wrt: tuple = ()
    # Why that gradient matters, said when the result has none ("the run differentiates ...").
    grad_why: str = ""

    def diagnose(self, got, expected) -> tuple[str, str] | None:  # pragma: no cover - interface
        raise NotImplementedError

    def rounding(self, got, expected) -> str | None:
        """The words that say ``got`` is the expected value rounded, where the contract asks for
        it as computed; else None. :func:`~minirlhf.course.cases.judge` asks this of a wrong
        value beside the usual slips (a rounded number may equal a slip's answer too)."""
        return None

    def problem(self, got, expected) -> str | None:
        found = self.diagnose(got, expected)
        return None if found is None else found[1]

    def _named(self, what: str | None, plural: bool | None, slips) -> None:
        if what is not None:
            self.what = what
        if plural is not None:
            self.plural = plural
        self.slips = tuple(slips)

    def _verb(self, singular: str, plural: str) -> str:
        return plural if self.plural else singular


FLOAT32 = (
    "float32, single precision, about 7 digits (a float32 tensor or array, torch.tensor of Python "
    "numbers, torch.zeros(n) with no dtype): compute in float64, as the engine does"
)


def float32_of(got: float, expected: float) -> bool:
    """True when ``got`` is a float32 number within float32's rounding of ``expected``: the
    answer computed in single precision."""
    if not (math.isfinite(got) and math.isfinite(expected)) or expected == 0:
        return False
    with np.errstate(over="ignore"):
        single = float(np.float32(got))
    return single == got and abs(got - expected) <= 2e-6 * abs(expected)


def rounded_to(got: float, expected: float) -> int | None:
    """The number of decimals (2 to 8) that ``expected`` rounded to gives ``got``, with Python's
    ``round`` or NumPy's; None when no rounding gives it. (One decimal is left out: a wrong
    answer that is a round number is far more often another mistake.)"""
    if not (math.isfinite(got) and math.isfinite(expected)):
        return None
    for k in range(2, 9):
        if got in (round(expected, k), float(np.round(expected, k))):
            return k
    return None


def _float_problem(got, expected, what: str = "the result", rounded: bool = False) -> tuple[str, str] | None:
    """The problems of a returned number that do not depend on its value; ``rounded``: the
    contract asks for it rounded (to 2 decimals), so the advice says where the rounding goes."""
    if isinstance(got, Opaque):  # inside a dict: the whole value was plain, this part is not
        why = f" ({got.why})" if got.why else ""
        return "opaque", f"{what} is a {got.type_name}, which cannot be graded{why}"
    if isinstance(got, np.generic):
        how = (
            "convert it before any rounding, round(float(x), 2) (float(round(x, 2)) keeps NumPy's rounding rule)"
            if rounded
            else "convert it with float(x)"
        )
        return "numpy-scalar", (
            f"{what} is a NumPy scalar ({type(got).__module__}.{type(got).__name__}); "
            f"the contract asks for a Python float: {how}"
        )
    if type(got).__module__.startswith("torch"):
        return "type", (f"{what} is a torch tensor; the contract asks for a Python float: use float(...) or .item()")
    if got is None:
        return "type", f"{what} is None, expected a Python float{_MISSING_RETURN}"
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        return "type", f"{what} is a {type(got).__name__}, expected a Python float"
    if isinstance(got, int):
        return "int", f"{what} is an int ({got}); the contract asks for a float: float(...)"
    if math.isnan(got):
        return "nan", f"{what} is NaN: look for a 0/0, a log of a negative number, or an empty mean"
    if math.isinf(got):
        return "inf", f"{what} is infinite: look for an exp of a large number or a division by zero"
    return None


class ExpectFloat2(Expect):
    """A Python float rounded to 2 decimals, equal to the expected one."""

    def __init__(self, what: str | None = None, slips=()):
        self._named(what, None, slips)

    def diagnose(self, got, expected, what: str | None = None) -> tuple[str, str] | None:
        what = what or self.what
        bad = _float_problem(got, expected, what, rounded=True)
        if bad:
            return bad
        if abs(got - expected) <= 1e-9:
            return None
        if round(got, 2) != got and abs(round(got, 2) - expected) <= 1e-9:
            return "not-rounded", (f"{what} is {number_text(got)}, right but not rounded: return round(value, 2)")
        if abs(got + expected) <= 1e-9 and expected != 0:
            return "sign", f"{what} has the wrong sign: {number_text(got)}, expected {number_text(expected)}"
        return "value", f"{what} is {number_text(got)}, expected {number_text(expected)}"


class ExpectFloat(Expect):
    """A Python float within an absolute tolerance of the expected one."""

    def __init__(self, atol: float = 1e-6, what: str | None = None, slips=()):
        self.atol = atol
        self._named(what, None, slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        bad = _float_problem(got, expected, self.what)
        if bad:
            return bad
        if abs(got - expected) <= self.atol:
            return None
        a, b = number_texts_apart(got, expected, 6)
        off = f"(off by {abs(got - expected):.3g})"
        if float32_of(got, expected):
            return "float32", f"{self.what} is {a}, expected {b} {off}: that is the answer in {FLOAT32}"
        if expected != 0 and abs(got + expected) <= self.atol:
            return "sign", f"{self.what} has the wrong sign: {a}, expected {b}"
        return "value", f"{self.what} is {a}, expected {b} {off}"

    def rounding(self, got, expected) -> str | None:
        if type(got) is not float or got == 0 or isinstance(expected, bool) or not isinstance(expected, (int, float)):
            return None
        k = rounded_to(got, expected)
        if k is None:
            return None
        return (
            f"that is {number_text(expected)} rounded to {k} decimals: the contract asks for the number "
            "as computed, not rounded"
        )


class ExpectDict2(Expect):
    """A dict with exactly these keys, each a Python float rounded to 2 decimals."""

    def __init__(self, keys, slips=()):
        self.keys = tuple(keys)
        self._one = ExpectFloat2()
        self._named(None, None, slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if not isinstance(got, dict):
            missing = _MISSING_RETURN if got is None else ""
            return "type", (f"the result is {type_phrase(got)}, expected a dict with keys {list(self.keys)}{missing}")
        missing = [k for k in self.keys if k not in got]
        if missing:
            return "missing-key", (f"the dict has no key {missing[0]!r} (the contract's keys: {list(self.keys)})")
        extra = [k for k in got if k not in self.keys]
        if extra:
            return "extra-key", (
                f"the dict has a key the contract does not have, {extra[0]!r} (its keys: {list(self.keys)})"
            )
        for k in self.keys:
            bad = self._one.diagnose(got[k], expected[k], what=str(k))
            if bad:
                return bad
        return None


class ExpectArray(Expect):
    """A NumPy array or torch tensor of the expected shape, close to the expected values.

    ``dtype``: None for any; "float" for a floating-point array or tensor (not bool or int);
    "float64" for float64 only, where the run computes in float64 and single precision would
    move its numbers. ``grad_why`` (torch): why the result must carry a gradient, for a result
    that a run differentiates (chapter 10's log-probs, whose cases pass inputs that require
    one): a result with none fails, in those words. ``grad_wrt``: the inputs with respect to
    which a recorded gradient (of the result, or of its sum) is compared with the reference's
    (see :func:`~minirlhf.course.cases.judge`)."""

    def __init__(
        self,
        atol: float = 1e-5,
        container: str = "any",
        what: str | None = None,
        plural: bool | None = None,
        slips=(),
        dtype: str | None = None,
        grad_wrt=(),
        grad_why: str = "",
    ):
        if dtype not in (None, "float", "float64"):
            raise ValueError(f"dtype must be None, 'float' or 'float64', got {dtype!r}")
        self.atol, self.container, self.dtype = atol, container, dtype  # container: "numpy", "torch" or "any"
        self.grad_wrt, self.grad_why = tuple(grad_wrt), grad_why
        self._named(what, plural, slips)

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        is_torch = type(got).__module__.startswith("torch")
        what, is_ = self.what, self._verb("is", "are")
        missing = _MISSING_RETURN if got is None else ""
        if self.container == "torch" and not is_torch:
            return "type", f"the result is {type_phrase(got)}; the contract asks for a torch tensor{missing}"
        if self.container == "numpy" and not isinstance(got, np.ndarray):
            fix = ": np.asarray(...)" if isinstance(got, (list, tuple, np.generic)) else missing
            return "type", f"the result is {type_phrase(got)}; the contract asks for a NumPy array{fix}"
        if not (is_torch or isinstance(got, (np.ndarray, np.generic, float, int))):
            return "type", f"the result is {type_phrase(got)}; the contract asks for an array{missing}"
        arr = np.asarray(got.detach().cpu().numpy() if is_torch else got, dtype=float)
        want = np.asarray(expected.detach().numpy() if hasattr(expected, "detach") else expected, dtype=float)
        if arr.shape != want.shape:
            return "shape", (
                f"{what} {self._verb('has', 'have')} shape {tuple(arr.shape)}, expected {tuple(want.shape)}"
            )
        bad = self._dtype_problem(got, is_torch)
        if bad:
            return bad
        if np.isnan(arr).any():
            where = index_text(np.argwhere(np.isnan(arr))[0]) if arr.ndim else ""
            return "nan", (
                f"{what} {self._verb('holds', 'hold')} NaN{' at ' + where if where else ''}: "
                "look for a 0/0, a log of 0, or an empty mean"
            )
        gap = np.abs(arr - want)
        if not (gap <= self.atol).all():
            worst = np.unravel_index(int(np.argmax(np.where(np.isnan(gap), np.inf, gap))), arr.shape)
            a, b = number_texts_apart(float(arr[worst]), float(want[worst]))
            if not arr.ndim:
                text = f"{what} {is_} {a}, expected {b}"
            else:
                off, n = int((~(gap <= self.atol)).sum()), arr.size
                text = (
                    f"{what} {self._verb('differs', 'differ')} in {off} of {n} places; the largest "
                    f"gap is at {index_text(worst)}: {a}, expected {b}"
                )
            single, double = _dtype_name(got), _dtype_name(expected)
            if single in ("float32", "float16", "bfloat16") and double == "float64":
                return "float32", (
                    f"{text}. {what[0].upper() + what[1:]} {is_} {single} where the answer is float64: "
                    f"{FLOAT32}; a float32 step keeps no digit of a small difference between large numbers"
                )
            return "value", text
        if self.grad_why and is_torch and not bool(getattr(got, "requires_grad", True)):
            return "no-grad", (
                f"{what} {self._verb('carries', 'carry')} no gradient: {self.grad_why}. Keep the inputs "
                "in the computation (no .detach(), torch.no_grad(), .item() or NumPy)"
            )
        return None

    def _dtype_problem(self, got, is_torch: bool) -> tuple[str, str] | None:
        """The result's dtype against ``self.dtype``; None when it fits (or no dtype is asked)."""
        name = _dtype_name(got)
        if self.dtype is None or name is None:
            return None
        what, is_ = self.what, self._verb("is", "are")
        thing = "tensor" if is_torch else "array"
        if not name.startswith(("float", "bfloat")):
            fix = ".float()" if is_torch else ".astype(float)"
            a = "an" if name.startswith("int") else "a"
            return "dtype", f"{what} {is_} {a} {name} {thing}; the contract asks for a float {thing}: {fix}"
        if self.dtype == "float64" and name != "float64":
            return "float32", (
                f"{what} {is_} {name}; the run computes in float64, as the whole engine does (chapter 3), "
                "and its inputs come in float64: keep their dtype (no .float(), no float32 buffer)"
            )
        return None


def _dtype_name(value) -> str | None:
    """The dtype of an array or tensor ("float32", "int64", "bool"), None for anything else."""
    dtype = getattr(value, "dtype", None)
    if dtype is None or not hasattr(value, "shape"):
        return None
    return str(dtype).removeprefix("torch.") if type(value).__module__.startswith("torch") else np.dtype(dtype).name


def index_text(index) -> str:
    return "[" + ", ".join(str(int(i)) for i in index) + "]"


class ExpectScalarTensor(ExpectArray):
    """A 0-d torch tensor (a loss that can be backpropagated) close to the expected number.

    Says in plain words what the usual slips look like: a Python float from ``.item()``, one
    value per ``per`` instead of their mean, an infinity (``why_inf`` says where it comes
    from) and, with ``sign_hint``, the objective returned in place of the loss.
    """

    def __init__(
        self,
        atol: float = 1e-4,
        per: str = "position",
        why_inf: str = "",
        sign_hint: str = "",
        what: str = "the loss",
        slips=(),
        grad_wrt=(),
    ):
        super().__init__(atol=atol, container="torch", what=what, plural=False, slips=slips, grad_wrt=grad_wrt)
        self.per, self.why_inf, self.sign_hint = per, why_inf, sign_hint

    def diagnose(self, got, expected) -> tuple[str, str] | None:
        if isinstance(got, (float, int, np.generic)) and not isinstance(got, bool):
            return "not-a-tensor", (
                f"the result is {type_phrase(got)}; return {self.what} as a torch tensor "
                "(no .item() or float(): the tensor carries the gradient that training "
                "needs)"
            )
        if not (type(got).__module__.startswith("torch") and hasattr(got, "detach")):
            return super().diagnose(got, expected)
        if tuple(got.shape) != ():
            return "not-averaged", (
                f"{self.what} has shape {tuple(got.shape)}, expected a single number "
                f"(a 0-d tensor): one value per {self.per} still has to be averaged"
            )
        value, want = float(got.detach().double()), float(expected)
        if math.isinf(value):
            return "inf", f"{self.what} is infinite" + (f": {self.why_inf}" if self.why_inf else "")
        if math.isnan(value):
            return "nan", f"{self.what} is NaN: look for a 0/0 (an empty mask?) or a log of a negative number"
        if abs(value - want) <= self.atol:
            return None
        a, b = number_texts_apart(value, want)
        if abs(value + want) <= self.atol:
            return "sign", f"{self.what} has the wrong sign: {a}, expected {b}" + (
                f"; {self.sign_hint}" if self.sign_hint else ""
            )
        return "value", f"{self.what} is {a}, expected {b} (off by {abs(value - want):.4g})"
