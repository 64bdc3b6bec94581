"""The input of one feature for one step, and its conversion to the C++ id views.

A feature's ids are one of
  - an array (numpy, or anything np.asarray accepts): dense ids, [B] (one id per example) or
    [..., N] (the last axis is a bag of N ids);
  - Ragged(values, row_splits): example b holds values[row_splits[b]:row_splits[b + 1]];
  - Sparse(indices, values, dense_shape): TF's SparseTensor, entries in canonical order.
Ids are int32 or int64 (other integer types are converted). The ids of a dynamic table
(TableConfig(vocabulary=...)) are any int64 value, or strings: str or bytes (in a numpy object, U
or S array, or a list), each mapped to the int64 key recemb.string_key gives (XXH3-64 of its
UTF-8 bytes or its bytes). Weights are None or, per feature,
the same layout holding floats: an array of the ids' shape for dense ids, a Ragged or Sparse with
the same row_splits or indices (or just the array of one weight per value).

Zero copy: an int32 or int64 array that is C-contiguous (a slice of rows of a larger array is)
is handed to the engine as is; so are float32 weights. Anything else is converted (copied) once;
string ids are hashed into a new int64 array.
The engine reads the arrays only during the lookup call.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence

import numpy as np
from numpy.typing import ArrayLike

from recemb import _recemb

_ID_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_FLOAT32 = np.dtype(np.float32)
_INT64_MAX = np.uint64(np.iinfo(np.int64).max)


class Ragged:
    """A ragged batch of rank 2 (TF's RaggedTensor): example b holds
    values[row_splits[b]:row_splits[b + 1]]; row_splits has batch size + 1 entries."""

    __slots__ = ("values", "row_splits")

    def __init__(self, values: ArrayLike, row_splits: ArrayLike) -> None:
        self.values = values
        self.row_splits = row_splits

    @classmethod
    def from_row_lengths(cls, values: ArrayLike, row_lengths: Sequence[int]) -> Ragged:
        splits = np.zeros(len(row_lengths) + 1, dtype=np.int64)
        np.cumsum(row_lengths, out=splits[1:])
        return cls(values, splits)

    @classmethod
    def from_lists(cls, rows: Sequence[Sequence[Any]], dtype: Any = np.int64) -> Ragged:
        """From a list of lists, for example [[1, 2], [], [3]]; rows holding str or bytes ids
        (of a dynamic table: [["ann", "bob"], [], ["cy"]]) give an object array of values."""
        lengths = [len(row) for row in rows]
        flat = [value for row in rows for value in row]
        if any(isinstance(value, (str, bytes)) for value in flat):
            values = np.empty(len(flat), dtype=object)
            values[:] = flat
        else:
            values = np.fromiter(flat, dtype=dtype, count=len(flat))
        return cls.from_row_lengths(values, lengths)

    def __repr__(self):
        return f"Ragged(values={self.values!r}, row_splits={self.row_splits!r})"


class Sparse:
    """A sparse batch (TF's SparseTensor): indices [nnz, rank] in canonical row-major order,
    values [nnz], dense_shape of that rank; indices[:, :-1] name the bag."""

    __slots__ = ("indices", "values", "dense_shape")

    def __init__(self, indices: ArrayLike, values: ArrayLike,
                 dense_shape: Sequence[int]) -> None:
        self.indices = indices
        self.values = values
        self.dense_shape = dense_shape

    def __repr__(self):
        return (f"Sparse(indices={self.indices!r}, values={self.values!r}, "
                f"dense_shape={self.dense_shape!r})")


def _contiguous(array):
    if array.flags.c_contiguous and array.flags.aligned:
        return array
    return array.copy(order="C")


def _array(owner, value):
    """np.asarray(value), or ValueError naming `owner` for nested lists of different lengths."""
    try:
        return np.asarray(value)
    except ValueError as error:
        raise ValueError(f"{owner}: not a rectangular array ({error}); for rows of different "
                         "lengths pass a recemb.Ragged (Ragged.from_lists(rows))") from None


_STRING_KINDS = "OUS"  # numpy object, str and bytes arrays


def _string_keys(owner, value, array, dynamic_table):
    """The int64 keys of the string ids `array` (np.asarray(value), of a kind in _STRING_KINDS)
    of a dynamic table; ValueError starting with `owner` for the ids of a static table
    (dynamic_table None), or an id that is not a str or bytes."""
    if dynamic_table is None:
        raise ValueError(f"{owner} are strings (dtype {array.dtype}), but only the ids of a "
                         "dynamic table (TableConfig(vocabulary=recemb.DynamicVocabulary(...))) "
                         "may be strings")
    if not isinstance(value, np.ndarray) and array.dtype.kind != "O":
        # A list: keep each element's own type (np.asarray turns [1, "a"] into ["1", "a"]).
        array = np.empty(array.shape, dtype=object)
        array[...] = value
    try:
        return _recemb.string_keys(array)
    except ValueError as error:
        _check_int64(owner, array)
        raise ValueError(f"{owner} of dynamic table '{dynamic_table}': {error}") from None


def _check_int64(owner, array):
    """ValueError starting with `owner` naming the first int of the object array `array` outside
    the int64 range (numpy keeps such ints of a list as objects), if it holds one."""
    if array.dtype.kind != "O":
        return
    for index, item in enumerate(array.flat):
        if (isinstance(item, numbers.Integral) and not isinstance(item, bool) and
                not -2**63 <= item < 2**63):
            where = tuple(int(i) for i in np.unravel_index(index, array.shape))
            raise ValueError(f"{owner}: {item} at index {where} is outside the 64-bit integers "
                             "[-2**63, 2**63), so beyond any vocabulary or key")


def _ids(feature, value, what, ndim=None, dynamic_table=None):
    """The int32 or int64 C-contiguous array of ids (or row_splits, indices: `what`) `value`;
    ValueError naming the feature for anything else, as id_array."""
    return id_array(f"feature '{feature}': {what}", value, ndim, dynamic_table)


def id_array(owner: str, value: Any, ndim: Optional[int] = None,
             dynamic_table: Optional[str] = None) -> np.ndarray:
    """The int32 or int64 C-contiguous array of ids `value`; ValueError starting with `owner`
    (what the ids are) for anything else: other than integers (or strings, for the ids of a
    dynamic table: named by dynamic_table), not empty and of another rank than `ndim`, or
    unsigned ids beyond the int64 range (reported as given, not as their wrapped value)."""
    array = _array(owner, value)
    if ndim is not None and array.ndim != ndim and array.size != 0:
        raise ValueError(f"{owner} must be a {ndim}-D array, got shape {array.shape}")
    # Strings (or, for a dynamic table, objects: str / bytes ones), not empty.
    if array.size != 0 and array.dtype.kind in (_STRING_KINDS if dynamic_table else "US"):
        return _string_keys(owner, value, array, dynamic_table)
    if array.dtype not in _ID_DTYPES:
        if array.dtype.kind not in "iu" and array.size != 0:
            _check_int64(owner, array)
            raise ValueError(f"{owner} must be integers, got dtype {array.dtype}")
        beyond = array > _INT64_MAX if array.dtype.kind == "u" else None  # exact, in uint64
        if beyond is not None and beyond.any():
            index = np.unravel_index(int(np.argmax(beyond)), array.shape)
            raise ValueError(f"{owner}: {array[index]} at index {tuple(int(i) for i in index)} "
                             "is out of range (beyond int64, so beyond any vocabulary or key)")
        array = array.astype(np.int64)
    return _contiguous(array)


def float32_array(value: ArrayLike, owner: str = "values") -> np.ndarray:
    """`value` as a C-contiguous float32 array, without copying when it already is one;
    ValueError starting with `owner` (what the values are) for values that are not real numbers
    (strings, complex numbers: whose imaginary part would be dropped)."""
    array = _array(owner, value)
    if array.dtype != _FLOAT32:
        if array.dtype.kind not in "biuf":
            raise ValueError(f"{owner} must be real numbers, got dtype {array.dtype}")
        array = array.astype(np.float32)
    return _contiguous(array)


def _weights(feature, weights, ids, kind):
    if weights is None:
        return None
    if isinstance(weights, (Ragged, Sparse)):
        if not isinstance(ids, type(weights)):
            raise ValueError(f"feature '{feature}': weights are {type(weights).__name__} but the "
                             f"ids are {kind}")
        what = "row_splits" if isinstance(weights, Ragged) else "indices"
        mine, theirs = getattr(weights, what), getattr(ids, what)
        if mine is not theirs and not np.array_equal(mine, theirs):
            raise ValueError(f"feature '{feature}': the weights' {what} differ from the ids'")
        weights = weights.values
    array = float32_array(weights, f"feature '{feature}': weights")
    if kind != "dense" and array.ndim != 1:
        raise ValueError(f"feature '{feature}': the weights of {kind} ids must be a 1-D array "
                         f"(one per value), got shape {array.shape}")
    if kind == "dense" and array.shape != np.shape(ids):
        raise ValueError(f"feature '{feature}': weights of shape {array.shape} for ids of shape "
                         f"{np.shape(ids)}")
    return array


def _dense_shape(feature, dense_shape):
    """A Sparse's dense_shape as a list of int64 values, or ValueError naming the feature (the
    engine checks their range)."""
    shape = _array(f"feature '{feature}': dense_shape", dense_shape)
    if shape.ndim != 1 or (shape.size and shape.dtype.kind not in "iuO"):
        raise ValueError(f"feature '{feature}': dense_shape must be a list of ints, got "
                         f"{dense_shape!r}")
    result = []
    for d in shape.tolist():
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or not -2**63 <= d < 2**63:
            raise ValueError(f"feature '{feature}': dense_shape {list(shape.tolist())}: each "
                             "entry must be a 64-bit int")
        result.append(int(d))
    return result


def feature_input(feature: str, ids: Any, weights: Optional[Any],
                  dynamic_table: Optional[str] = None) -> Any:
    """The C++ view (DenseIds, RaggedIds or SparseIds) of one feature's ids and weights.
    dynamic_table: the name of the feature's table if it is dynamic (its ids may be strings)."""
    if isinstance(ids, Ragged):
        return _recemb.RaggedIds(values=_ids(feature, ids.values, "values", ndim=1,
                                             dynamic_table=dynamic_table),
                                 row_splits=_ids(feature, ids.row_splits, "row_splits", ndim=1),
                                 weights=_weights(feature, weights, ids, "ragged"))
    if isinstance(ids, Sparse):
        indices = _ids(feature, ids.indices, "indices", ndim=2)
        if indices.dtype != np.int64:
            indices = indices.astype(np.int64)
        return _recemb.SparseIds(indices=indices,
                                 values=_ids(feature, ids.values, "values", ndim=1,
                                             dynamic_table=dynamic_table),
                                 dense_shape=_dense_shape(feature, ids.dense_shape),
                                 weights=_weights(feature, weights, ids, "sparse"))
    if ids is None:
        raise ValueError(f"feature '{feature}': no ids (None)")
    array = _ids(feature, ids, "ids", dynamic_table=dynamic_table)
    return _recemb.DenseIds(ids=array, shape=list(array.shape),
                            weights=_weights(feature, weights, array, "dense"))
