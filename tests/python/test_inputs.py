"""recemb.inputs: the conversion of ids and weights to the engine's views, without copies."""

import numpy as np
import pytest

import recemb
from recemb.inputs import feature_input


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_contiguous_ids_and_float32_weights_are_not_copied(dtype):
    big = np.arange(60, dtype=dtype).reshape(12, 5)
    weights = np.ones((12, 5), np.float32)
    view = feature_input("f", big[2:6], weights[2:6])
    assert view.ids.dtype == dtype and np.shares_memory(view.ids, big)
    assert np.shares_memory(view.weights, weights) and view.shape == [4, 5]
    ragged = feature_input("f", recemb.Ragged(big[0], np.array([0, 2, 5], dtype)), None)
    assert np.shares_memory(ragged.values, big) and ragged.row_splits.dtype == dtype
    indices = np.array([[0, 0], [1, 3]], np.int64)
    sparse = feature_input("f", recemb.Sparse(indices, big[0, :2], (2, 4)),
                           recemb.Sparse(indices, weights[0, :2], (2, 4)))
    assert np.shares_memory(sparse.indices, indices) and np.shares_memory(sparse.values, big)
    assert sparse.dense_shape == [2, 4]


def test_other_layouts_and_types_are_converted_once():
    big = np.arange(60, dtype=np.int64).reshape(12, 5)
    columns = feature_input("f", big[:, ::2], None)
    assert not np.shares_memory(columns.ids, big) and columns.ids.flags.c_contiguous
    np.testing.assert_array_equal(columns.ids.reshape(columns.shape), big[:, ::2])
    assert feature_input("f", np.array([1, 2], np.uint16), None).ids.dtype == np.int64
    assert feature_input("f", [[1, 2], [3, 4]], None).shape == [2, 2]
    weights = feature_input("f", np.array([1, 2]), np.array([0.5, 2.0])).weights
    assert weights.dtype == np.float32 and list(weights) == [0.5, 2.0]
    empty = feature_input("f", recemb.Ragged(np.array([]), np.array([0, 0])), None)
    assert empty.values.dtype == np.int64 and empty.values.size == 0


def test_views_are_read_only_and_keep_their_arrays_alive():
    view = feature_input("f", np.arange(4, dtype=np.int64), None)
    assert not view.ids.flags.writeable
    ids = view.ids
    del view
    np.testing.assert_array_equal(ids, [0, 1, 2, 3])


@pytest.mark.parametrize("ids,weights,message", [
    (np.array([1.0, 2.0]), None, "ids must be integers, got dtype float64"),
    (np.array([True]), None, "ids must be integers"),
    (None, None, "no ids"),
    (recemb.Ragged(np.array([1, 2]), np.array([0, 2])),
     recemb.Ragged(np.array([1.0, 2.0]), np.array([0, 1, 2])), "row_splits differ"),
    (recemb.Sparse(np.array([[0, 0]]), np.array([1]), (1, 2)),
     recemb.Sparse(np.array([[0, 1]]), np.array([1.0]), (1, 2)), "indices differ"),
    (np.array([1, 2]), recemb.Ragged(np.array([1.0]), np.array([0, 1])), "weights are Ragged"),
    (np.array([1, 2]), np.array([1.0, 2.0, 3.0]), r"weights of shape \(3,\)"),
    # Reported as passed, not as the int64 they wrap to (-1, -9223372036854775807).
    (np.array([3, 2**64 - 1], dtype=np.uint64), None,
     r"ids: 18446744073709551615 at index \(1,\) is out of range \(beyond int64"),
    (recemb.Ragged(np.array([1, 2**63 + 1], dtype=np.uint64), np.array([0, 2])), None,
     r"values: 9223372036854775809 at index \(1,\) is out of range"),
    # Arrays of the wrong rank are not flattened.
    (recemb.Ragged(np.array([1, 2, 3]), np.array([[0, 1, 3]])), None,
     r"row_splits must be a 1-D array, got shape \(1, 3\)"),
    (recemb.Ragged(np.array([[1, 2, 3]]), np.array([0, 1, 3])), None,
     r"values must be a 1-D array, got shape \(1, 3\)"),
    (recemb.Sparse(np.array([0, 1]), np.array([1, 2]), (1, 2)), None,
     r"indices must be a 2-D array, got shape \(2,\)"),
    (recemb.Sparse(np.array([[0, 0], [0, 1]]), np.array([[1, 2]]), (1, 2)), None,
     r"values must be a 1-D array, got shape \(1, 2\)"),
    (recemb.Ragged(np.array([1, 2]), np.array([0, 2])), np.array([[1.0, 2.0]]),
     r"the weights of ragged ids must be a 1-D array \(one per value\), got shape \(1, 2\)"),
    (recemb.Sparse(np.array([[0, 0]]), np.array([5]), [2**64, 3]), None,
     r"dense_shape \[18446744073709551616, 3\]: each entry must be a 64-bit int"),
    (recemb.Sparse(np.array([[0, 0]]), np.array([5]), [2.0, 3]), None,
     r"dense_shape must be a list of ints, got \[2.0, 3\]"),
    (np.array([1, 2]), ["x", "y"], r"weights must be real numbers, got dtype <U1"),
    (np.array([1, 2]), np.array([1 + 1j, 2]), r"weights must be real numbers, got dtype complex"),
    ([[1, 2], [3]], None, r"ids: not a rectangular array .*recemb.Ragged"),
])
def test_bad_inputs_name_the_feature(ids, weights, message):
    with pytest.raises(ValueError, match="feature 'watched'.*" + message):
        feature_input("watched", ids, weights)


def test_ragged_helpers():
    ragged = recemb.Ragged.from_lists([[1, 2], [], [3]])
    assert list(ragged.values) == [1, 2, 3] and list(ragged.row_splits) == [0, 2, 2, 3]
    assert "Ragged(" in repr(ragged) and "Sparse(" in repr(recemb.Sparse([[0, 0]], [1], (1, 1)))


@pytest.mark.parametrize("dense_shape", [(2**40, 3), (2**62, 2**62)])
def test_an_activation_larger_than_memory_raises_naming_the_feature(dense_shape):
    """Not numpy's MemoryError or 'array is too big' when allocating it."""
    layer = recemb.Embedding({"watched": recemb.FeatureConfig(recemb.TableConfig(10, 4))})
    ids = recemb.Sparse(np.array([[0, 0]]), np.array([5]), dense_shape)
    with pytest.raises(ValueError, match=r"feature 'watched': the activation would have shape "
                                         r"\(%d, 4\) .* more than this machine's memory"
                                         % dense_shape[0]):
        layer({"watched": ids})


def test_empty_sparse_and_ragged_arrays_of_any_rank_are_accepted():
    layer = recemb.Embedding({"watched": recemb.FeatureConfig(recemb.TableConfig(10, 4))})
    for ids in (recemb.Sparse(np.array([]), np.array([]), (2, 3)),
                recemb.Sparse(np.zeros((0, 2), np.int64), np.zeros((0, 1), np.int64), (2, 3)),
                recemb.Ragged(np.zeros((0, 1), np.int64), np.array([0, 0, 0]))):
        activations = layer({"watched": ids}, training=False)["watched"]
        np.testing.assert_array_equal(activations, np.zeros((2, 4), np.float32))
