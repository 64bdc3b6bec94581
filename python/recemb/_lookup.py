"""The arguments of a lookup, shaped for the engine: the flat inputs' C++ views, the activation
shapes and the float32 arrays the activations go to (new ones, or a caller's `out=` arrays, checked
to receive them in place and to share memory with no other argument); and the pure lookup that
recemb.Embedding and recemb.ServingModel share."""

import bisect
import math
import os

import numpy as np

from recemb import _nest
from recemb.inputs import Ragged, Sparse, feature_input

_FLOAT32 = np.dtype(np.float32)
try:
    from numpy.lib.array_utils import byte_bounds as _byte_bounds  # numpy >= 2
except ImportError:
    _byte_bounds = np.byte_bounds


def _memory_owner(array):
    """The id of the numpy array that allocated `array`'s memory (itself or its base), or None
    when the memory comes from elsewhere (a buffer object, foreign code), so may be anyone's."""
    while array.base is not None:
        if not isinstance(array.base, np.ndarray):
            return None
        array = array.base
    return id(array) if array.flags.owndata else None


def _arrays_of(value):
    """The numpy arrays of one feature's ids or weights: the array itself, a Ragged's values and
    row_splits, a Sparse's indices and values (other objects are copied into new arrays)."""
    if isinstance(value, np.ndarray):
        return (value,)
    if isinstance(value, Ragged):
        parts = (value.values, value.row_splits)
    elif isinstance(value, Sparse):
        parts = (value.indices, value.values)
    else:
        return ()
    return tuple(part for part in parts if isinstance(part, np.ndarray))


def _input_arrays(flat_ids, flat_weights):
    """[(array, index of the feature, "ids" or "weights")] of the numpy arrays of the inputs."""
    return [(array, f, what) for f, values in enumerate(zip(flat_ids, flat_weights))
            for value, what in zip(values, ("ids", "weights")) for array in _arrays_of(value)]


def _owners_distinct(out, flat_ids, flat_weights):
    """Whether every array (out and inputs) has a known _memory_owner of its own, so that none
    shares memory with another: the usual case, checked in O(n)."""
    owners = {_memory_owner(array) for array in out}
    count = len(out)
    for value in flat_ids + flat_weights:
        if value is not None:
            for array in _arrays_of(value):
                owners.add(_memory_owner(array))
                count += 1
    return None not in owners and len(owners) == count


def _check_disjoint(names, out, inputs):
    """Raises ValueError if an out array shares memory with another out array or an input array
    ([(array, feature index, what)]), by their byte extents as np.may_share_memory (exact for
    the out arrays, which are contiguous). Memory numpy allocated belongs to one array (its
    owner) and the views of it, so only arrays of one owner are compared, unless some array's
    memory has no known owner (then all are)."""
    groups = {}  # owner -> [(array, feature index, None for an out array else what)]
    for entry in [(array, f, None) for f, array in enumerate(out)] + inputs:
        if entry[0].size:  # empty arrays share nothing
            groups.setdefault(_memory_owner(entry[0]), []).append(entry)
    if None in groups:
        candidates = [entry for group in groups.values() for entry in group]
    else:
        candidates = [entry for group in groups.values() if len(group) > 1
                      and any(e[2] is None for e in group) for entry in group]
    spans = []  # (first byte, end, feature index) of the out arrays, sorted
    for array, f, what in candidates:
        if what is None:
            first = array.__array_interface__["data"][0]
            spans.append((first, first + array.nbytes, f))
    spans.sort()
    for before, after in zip(spans, spans[1:]):  # sorted by first byte: the out arrays are
        if after[0] < before[1]:                 # disjoint iff each ends before the next one
            raise ValueError(f"feature '{names[before[2]]}': the out array shares memory with "
                             f"the out array of feature '{names[after[2]]}'")
    firsts = [span[0] for span in spans]
    for array, f, what in candidates:
        if what is not None:
            first, end = _byte_bounds(array)
            k = bisect.bisect_left(firsts, end) - 1  # the last out array starting before `end`
            if k >= 0 and spans[k][1] > first:
                raise ValueError(f"feature '{names[spans[k][2]]}': the out array shares memory "
                                 f"with the {what} of feature '{names[f]}'")


def _bad_out(name, array, shape):
    """The ValueError for an `array` that cannot receive an activation of `shape` in place."""
    if not isinstance(array, np.ndarray):
        return ValueError(f"feature '{name}': out must be a numpy float32 array of shape {shape}, "
                          f"got {type(array).__name__}")
    if array.dtype != _FLOAT32 or array.shape != shape:
        return ValueError(f"feature '{name}': out is a {array.dtype} array of shape "
                          f"{array.shape}, expected float32 of shape {shape}")
    what = ("C-contiguous" if not array.flags.c_contiguous else
            "aligned" if not array.flags.aligned else "writeable")
    return ValueError(f"feature '{name}': the out array (shape {shape}) is not {what}")


def _out_arrays(resolved, out, shapes, flat_ids, flat_weights):
    """The flat arrays of `out` (the feature config's structure), checked to receive the
    activations of `shapes` in place: numpy float32 arrays of exactly those shapes, C-contiguous,
    aligned, writeable, sharing memory neither with each other nor with the numpy arrays of the
    inputs. Raises ValueError naming the feature otherwise."""
    names = resolved.feature_names
    flat = _nest.flatten_up_to(resolved.structure, out, "out")
    for name, array, shape in zip(names, flat, shapes):
        shape = tuple(shape)
        if not (isinstance(array, np.ndarray) and array.dtype == _FLOAT32
                and array.shape == shape and array.flags.carray):
            raise _bad_out(name, array, shape)
    if not _owners_distinct(flat, flat_ids, flat_weights):
        _check_disjoint(names, flat, _input_arrays(flat_ids, flat_weights))
    return flat


def _memory_bytes():
    """The machine's physical memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


_MEMORY_BYTES = _memory_bytes()


def _check_activation_sizes(names, shapes):
    """Raises ValueError naming the feature whose activation would not fit in the machine's
    memory (a huge Sparse dense_shape or output_shape), before numpy tries to allocate it."""
    if _MEMORY_BYTES is None:
        return
    for name, shape in zip(names, shapes):
        size = math.prod(int(d) for d in shape) * _FLOAT32.itemsize
        if size > _MEMORY_BYTES:
            raise ValueError(f"feature '{name}': the activation would have shape {tuple(shape)} "
                             f"({size / 2**30:.4g} GiB of float32), more than this machine's "
                             f"memory ({_MEMORY_BYTES / 2**30:.4g} GiB); check the input's "
                             "shape (a Sparse's dense_shape)")


def _lookup_arguments(engine, resolved, features, weights, new_arrays, out=None):
    """The engine's lookup arguments for `features` and `weights` (the feature config's
    structure): (views, shapes, activations), the C++ input view, the activation shape and the
    float32 array of each feature in flattening order. The arrays are new_arrays' (an
    ActivationArrays), or those of `out` (the feature config's structure, checked by
    _out_arrays). Raises ValueError naming the feature for inputs or `out` that fail a check made
    here (the engine checks the ids themselves when it looks them up).

    engine: a C++ Embedding, or anything with its activation_shape(feature, input) (a serving
    model)."""
    names = resolved.feature_names
    flat_ids = _nest.flatten_up_to(resolved.structure, features, "features")
    flat_weights = ([None] * len(names) if weights is None else
                    _nest.flatten_up_to(resolved.structure, weights, "weights"))
    views = [feature_input(name, ids, w, dynamic_table) for name, ids, w, dynamic_table
             in zip(names, flat_ids, flat_weights, resolved.dynamic_tables)]
    shapes = [engine.activation_shape(f, view) for f, view in enumerate(views)]
    if out is None:
        _check_activation_sizes(names, shapes)
    activations = (new_arrays.new(shapes) if out is None else
                   _out_arrays(resolved, out, shapes, flat_ids, flat_weights))
    return views, shapes, activations


def _pure_lookup(engine, resolved, features, weights, new_arrays, out=None):
    """The flat activations of a lookup that keeps nothing for training (as _lookup_arguments;
    engine: a C++ Embedding or a serving model)."""
    views, _, activations = _lookup_arguments(engine, resolved, features, weights, new_arrays,
                                              out)
    engine.lookup(views, activations)
    return activations
