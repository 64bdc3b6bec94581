"""recemb._nest: tf.nest's flattening order and packing."""

import collections

import pytest

from recemb import _nest

Pair = collections.namedtuple("Pair", ["first", "second"])


def test_flatten_sorts_dict_keys_and_keeps_sequence_order():
    structure = {"b": 1, "a": (2, [3, 4]), "c": {"z": 5, "y": 6}}
    assert _nest.flatten(structure) == [2, 3, 4, 1, 6, 5]
    paths = [path for path, _ in _nest.flatten_with_paths(structure)]
    assert paths[0] == ("a", 0) and paths[2] == ("a", 1, 1) and paths[-1] == ("c", "z")


def test_single_leaf():
    assert _nest.flatten(7) == [7]
    assert _nest.pack_sequence_as(7, ["x"]) == "x"


def test_pack_keeps_container_types_and_dict_order():
    structure = {"b": Pair(1, [2]), "a": (3,), "c": collections.OrderedDict(z=4, y=5)}
    packed = _nest.pack_sequence_as(structure, _nest.flatten(structure))
    assert packed == structure
    assert list(packed) == ["b", "a", "c"]
    assert isinstance(packed["b"], Pair) and isinstance(packed["b"].second, list)
    assert isinstance(packed["a"], tuple) and isinstance(packed["c"], collections.OrderedDict)


def test_pack_rejects_wrong_counts():
    with pytest.raises(ValueError, match="fewer"):
        _nest.pack_sequence_as([1, 2], ["x"])
    with pytest.raises(ValueError, match="more"):
        _nest.pack_sequence_as([1, 2], ["x", "y", "z"])


def test_flatten_up_to_stops_at_the_shallow_leaves():
    shallow = {"x": 0, "y": (0, 0)}
    structure = {"y": ([1, 2], None), "x": {"anything": 3}}
    assert _nest.flatten_up_to(shallow, structure, "inputs") == [{"anything": 3}, [1, 2], None]


@pytest.mark.parametrize("structure,message", [
    ({"x": 1}, r"keys do not match.*missing \['y'\]"),
    ({"x": 1, "y": (1, 2), "w": 3}, r"unexpected \['w'\]"),
    ({"x": 1, "y": (1,)}, r"at 'y'.*2 entries"),
    ([1, 2], "expected a dict"),
])
def test_flatten_up_to_names_the_mismatch(structure, message):
    with pytest.raises(ValueError, match=message):
        _nest.flatten_up_to({"x": 0, "y": (0, 0)}, structure, "inputs")
