"""The wire format (minirlhf.course.plain), the security boundary between a learner's kernel and
the grader: every accepted type comes back as it went in, whatever is not plain data becomes an
Opaque that says why, and data that is not exactly what to_plain makes is refused without running
any code."""

import json
import sys

import numpy as np
import pytest
import torch

from minirlhf.course import plain
from minirlhf.course.plain import RETURN_CAP, Opaque, from_plain, round_trip, to_plain


class Agreeable(float):
    """A float that claims to equal everything: fools a comparison that trusts the object."""

    def __eq__(self, other):
        return True

    def __sub__(self, other):
        return 0.0

    __rsub__ = __sub__


def over_json(value):
    """``value`` as the grader receives it: encoded, sent as strict JSON, decoded."""
    return from_plain(json.loads(json.dumps(to_plain(value), allow_nan=False)))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        0.05,
        float("nan"),
        -float("inf"),
        1 + 2j,
        "text",
        [1, [2.5, None]],
        (1, "a"),
        {"objective": 1.0, 2: [3]},
        np.float64(0.05),
        np.int32(-4),
        np.bool_(False),
        np.array([[1.0, np.nan], [np.inf, 4.0]], dtype=np.float32),
        np.arange(6).reshape(2, 3),
        np.zeros((0, 3)),
        np.array([1 + 1j]),
        torch.tensor([[1.0, 2.0]]),
        torch.tensor(3),
        torch.zeros(2, 0),
        torch.tensor([True, False]),
        torch.tensor([1.5], dtype=torch.bfloat16),
    ],
)
def test_plain_data_round_trip_keeps_type_dtype_shape_and_values(value):
    import json

    back = from_plain(json.loads(json.dumps(to_plain(value), allow_nan=False)))
    assert type(back) is type(value)
    if isinstance(value, (np.ndarray, torch.Tensor)):
        assert back.dtype == value.dtype and back.shape == value.shape
        assert np.array_equal(
            np.asarray(back.float() if value.dtype == torch.bfloat16 else back),
            np.asarray(value.float() if value.dtype == torch.bfloat16 else value),
            equal_nan=True,
        )
    elif isinstance(value, float) and value != value:
        assert back != back
    else:
        assert back == value


def test_a_tensor_with_a_gradient_comes_back_requiring_grad():
    value = torch.tensor([1.0, 2.0], requires_grad=True) * 3
    back = from_plain(to_plain(value))
    assert back.requires_grad and back.grad_fn is None and back.tolist() == [3.0, 6.0]


@pytest.mark.parametrize(
    "value, words",
    [
        (object(), "the grader takes numbers, strings, None, lists"),
        (Agreeable(1.0), "a subclass of float"),
        (np.zeros(RETURN_CAP + 1), f"more than {RETURN_CAP:,} numbers"),
        ("x" * (RETURN_CAP + 1), f"more than {RETURN_CAP:,} numbers or characters"),
        (np.array(["a"]), "a NumPy array of dtype str32"),
        (lambda: 0, "the grader takes numbers"),
        (10**400, "an int too large"),
        ({(1, 2): 3.0}, "a dict with a key of type tuple"),
    ],
)
def test_what_is_not_plain_data_becomes_an_opaque_value_that_says_why(value, words):
    back = from_plain(to_plain(value))
    assert isinstance(back, Opaque) and words in back.problem(), back.problem()


def test_plain_data_is_read_with_the_base_types_methods_only():
    class Sneaky(list):
        def __iter__(self):
            raise RuntimeError("ran the learner's code")

    class Dict(dict):
        def items(self):
            raise RuntimeError("ran the learner's code")

    assert from_plain(to_plain(Sneaky([1.0, 2.0]))) == [1.0, 2.0]
    assert from_plain(to_plain(Dict(objective=1.0))) == {"objective": 1.0}
    nested = []
    nested.append(nested)  # a list that holds itself
    assert isinstance(from_plain(to_plain(nested)), list)


@pytest.mark.parametrize(
    "data",
    [
        {"pickle": "gASV"},
        {"float": "1.5"},
        {"tensor": "float32", "shape": [2], "data": [1.0], "requires_grad": False},
        {"ndarray": "object", "shape": [1], "data": [1]},
        {"ndarray": "int8", "shape": [1], "data": [1000]},
        {"ndarray": "float64", "shape": [-1], "data": []},
        {"dict": [[[1], 2]]},
        {"numpy": "float64", "value": "1"},
        {"tuple": [1], "extra": 2},
        float("inf"),
        ["x" * (3 * RETURN_CAP)],
    ],
)
def test_malformed_plain_data_is_refused(data):
    with pytest.raises(ValueError):
        from_plain(data)


# ---- every accepted type, every dtype


@pytest.mark.parametrize("dtype", sorted(plain._NUMPY_DTYPES))
def test_every_numpy_dtype_comes_back_as_an_array_and_a_scalar_of_that_dtype(dtype):
    values = {
        "b": [True, False, True],
        "i": [0, 1, 7],
        "u": [0, 1, 255],
        "f": [0.5, -1.25, np.inf],
        "c": [1 + 2j, -0.5j, 3],
    }[np.dtype(dtype).kind]
    array = np.array(values, dtype=dtype).reshape(3, 1)
    back = over_json(array)
    assert type(back) is np.ndarray and back.dtype == array.dtype and back.shape == (3, 1)
    assert np.array_equal(back, array)
    scalar = array[1, 0]
    back = over_json(scalar)
    assert type(back) is type(scalar) and back == scalar


@pytest.mark.parametrize("dtype", sorted(plain._TORCH_DTYPES))
def test_every_torch_dtype_comes_back_as_a_tensor_of_that_dtype(dtype):
    dtype = getattr(torch, dtype)
    tensor = torch.tensor([[1, 0], [1, 1]]).to(dtype)
    back = over_json(tensor)
    assert type(back) is torch.Tensor and back.dtype == dtype and back.shape == (2, 2)
    assert torch.equal(back, tensor) and not back.requires_grad


@pytest.mark.parametrize(
    "value",
    [
        float("inf"),
        -0.0,
        2**60,
        -(2**1000),
        "",
        [],
        (),
        {},
        {None: 1, True: 2, 1.5: 3, "k": 4},
        ((1, 2), [3, (4,)]),
        {"a": {"b": [np.float32(1.5), torch.tensor(2.0)]}},
        np.zeros((2, 0, 3)),
    ],
)
def test_edge_values_and_nested_containers_round_trip(value):
    back = over_json(value)
    assert type(back) is type(value) and repr(back) == repr(value)


def test_subclasses_of_containers_come_back_as_the_base_type():
    from collections import OrderedDict, namedtuple

    Pair = namedtuple("Pair", "a b")
    assert over_json(Pair(1.0, 2.0)) == (1.0, 2.0) and type(over_json(Pair(1.0, 2.0))) is tuple
    assert type(over_json(OrderedDict(a=1.0))) is dict
    assert type(over_json(torch.Size([2, 3]))) is tuple
    assert type(over_json(torch.nn.Parameter(torch.ones(2)))) is torch.Tensor


def test_round_trip_is_what_the_check_cell_judges():
    assert round_trip(np.float64(0.25)) == np.float64(0.25)
    assert isinstance(round_trip(Agreeable(1.0)), Opaque)


# ---- refused: too big, too deep, unknown types


def test_a_value_over_the_cap_becomes_opaque_whatever_holds_the_numbers():
    for value in (
        [0.0] * (RETURN_CAP + 1),
        {"k": torch.zeros(RETURN_CAP + 1)},
        ("x" * RETURN_CAP, 1.0),
        [[0.0] * (RETURN_CAP // 2 + 1)] * 2,
    ):
        back = from_plain(to_plain(value))
        assert isinstance(back, Opaque) and f"more than {RETURN_CAP:,}" in back.problem()
    assert not isinstance(from_plain(to_plain([0.0] * (RETURN_CAP - 1))), Opaque)  # one under the cap: kept
    assert isinstance(from_plain(to_plain([0.0] * 11, cap=10)), Opaque)  # the cap is a parameter


def test_a_value_nested_too_deep_is_opaque_below_the_limit_and_refused_on_arrival():
    deep = 0.0
    for _ in range(plain._MAX_DEPTH + 5):
        deep = [deep]
    node = from_plain(to_plain(deep))
    for _ in range(plain._MAX_DEPTH + 1):
        node = node[0]
    assert isinstance(node, Opaque) and "nested more than" in node.problem()
    data = 0.0
    for _ in range(plain._MAX_DEPTH + 5):
        data = [data]
    with pytest.raises(ValueError, match="nested too deep"):
        from_plain(data)
    data = 0.0
    for _ in range(100_000):  # far deeper than Python's recursion limit
        data = [data]
    with pytest.raises(ValueError, match="nested too deep"):
        from_plain(data)


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        b"bytes",
        bytearray(b"x"),
        range(3),
        print,
        type,
        np.array([object()]),
        np.datetime64("2024-01-01"),
        torch.zeros(2, device="meta"),
        torch.zeros(2).to_sparse(),
        iter([1.0]),
        Ellipsis,
    ],
)
def test_values_of_other_types_become_opaque(value):
    back = from_plain(to_plain(value))
    assert isinstance(back, Opaque) and "cannot be graded" in back.problem()


@pytest.mark.parametrize(
    "data",
    [
        {1, 2},
        b"[]",
        (1, 2),
        object(),
        np.float64(1.0),
        torch.tensor(1.0),
        {},
        {"tuple": (1,)},
        {"float": "nan", "extra": 1},
        {"complex": [1.0]},
        {"complex": [1.0, "2"]},
        {"numpy": "object", "value": 1},
        {"ndarray": "float64", "shape": [2], "data": [1.0]},
        {"ndarray": "float64", "shape": "2", "data": [1.0, 2.0]},
        {"ndarray": "bool", "shape": [1], "data": [1]},
        {"ndarray": "int64", "shape": [1], "data": [1.5]},
        {"tensor": "float32", "shape": [1], "data": [1.0], "requires_grad": 1},
        {"tensor": "__class__", "shape": [1], "data": [1.0], "requires_grad": False},
        {"opaque": "X", "module": "m", "why": "", "text": 3},
        {"dict": [[{"tuple": []}, 1]]},
        {"ndarray": "float64", "shape": [RETURN_CAP * 3], "data": [0.0] * (RETURN_CAP * 3)},
    ],
)
def test_data_that_to_plain_does_not_make_is_refused(data):
    with pytest.raises(ValueError):
        from_plain(data)


# ---- no code runs: neither the learner's on encoding nor any on decoding


def test_encoding_runs_no_method_of_the_learners_classes():
    ran = []

    class Meta(type):
        def __getattribute__(cls, name):
            ran.append(name)
            return super().__getattribute__(name)

    class Trap(metaclass=Meta):
        def __reduce__(self):
            ran.append("__reduce__")
            return (print, ("pickled",))

        def __repr__(self):
            ran.append("__repr__")
            return "Trap()"

        def __hash__(self):
            ran.append("__hash__")
            return 0

    trap = Trap()
    ran.clear()
    back = from_plain(to_plain([trap, {"k": trap}]))
    assert isinstance(back[0], Opaque) and back[0].type_name == "Trap" and back[1]["k"] == back[0]
    assert ran == []
    keyed = {}
    dict.__setitem__(keyed, trap, 1.0)
    ran.clear()
    assert "a dict with a key of type Trap" in from_plain(to_plain(keyed)).problem() and ran == []


def test_decoding_imports_nothing_and_calls_nothing_it_is_named():
    before = set(sys.modules)
    hostile = [
        {"opaque": "system", "module": "os", "why": "", "text": "rm -rf"},
        {"opaque": "Popen", "module": "subprocess_not_imported_here", "why": "", "text": ""},
    ]
    back = from_plain(hostile)
    assert [type(v) for v in back] == [Opaque, Opaque] and back[0].text == "rm -rf"
    assert set(sys.modules) == before  # no module it names was imported
    for data in (
        {"pickle": "gASVEAAAAAAAAACMAm9zlIwGc3lzdGVtlJOULg=="},
        {"__reduce__": ["os.system", ["x"]]},
        {"module": "os", "opaque": "system"},
    ):
        with pytest.raises(ValueError):
            from_plain(data)


def test_decoded_values_hold_only_plain_types():
    allowed = (
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        list,
        tuple,
        dict,
        np.ndarray,
        np.generic,
        torch.Tensor,
        Opaque,
    )

    def walk(value):
        assert isinstance(value, allowed), type(value)
        if isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)

    walk(over_json([1, 2.5, "a", (None, True), {"k": [np.int8(3)]}, np.ones(2), torch.ones(2), object(), 1j]))
