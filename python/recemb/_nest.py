"""Nested structures as tf.nest sees them: dicts (any Mapping; keys in sorted order), lists and
tuples (namedtuples included) are containers; everything else is a leaf."""

import collections
import collections.abc

_END = object()


def _is_container(value):
    return isinstance(value, (collections.abc.Mapping, list, tuple))


def _children(value):
    """(key, child) pairs of a container, in flattening order."""
    if isinstance(value, collections.abc.Mapping):
        try:
            keys = sorted(value)
        except TypeError as error:
            raise ValueError(f"dict keys must be sortable to fix an order: {error}") from None
        return [(key, value[key]) for key in keys]
    return list(enumerate(value))


def flatten_with_paths(structure):
    """[(path, leaf)] in tf.nest.flatten order; a path is the tuple of keys leading to the leaf."""
    result = []

    def visit(path, value):
        if _is_container(value):
            for key, child in _children(value):
                visit(path + (key,), child)
        else:
            result.append((path, value))

    visit((), structure)
    return result


def flatten(structure):
    return [leaf for _, leaf in flatten_with_paths(structure)]


def path_string(path):
    return "/".join(str(key) for key in path)


def flatten_up_to(shallow, structure, what):
    """The values of `structure` at the leaves of `shallow`, in shallow's flattening order.

    `structure` must have shallow's containers (same dict keys, same lengths) down to shallow's
    leaves; below them it may hold anything (a Ragged, a tuple, ...). Raises ValueError naming
    `what` and the path where they differ.
    """
    result = []

    def visit(path, shape, value):
        if not _is_container(shape):
            result.append(value)
            return
        where = f"{what} at '{path_string(path)}'" if path else what
        if isinstance(shape, collections.abc.Mapping):
            if not isinstance(value, collections.abc.Mapping):
                raise ValueError(f"{where}: expected a dict with keys {sorted(shape)}, "
                                 f"got {type(value).__name__}")
            missing = [key for key in shape if key not in value]
            extra = [key for key in value if key not in shape]
            if missing or extra:
                raise ValueError(f"{where}: keys do not match the feature config (missing "
                                 f"{sorted(missing, key=str)}, unexpected "
                                 f"{sorted(extra, key=str)})")
        elif not isinstance(value, (list, tuple)) or len(value) != len(shape):
            length = len(value) if isinstance(value, (list, tuple)) else None
            raise ValueError(f"{where}: expected a list or tuple of {len(shape)} entries, got "
                             f"{type(value).__name__}" + (f" of {length}" if length is not None
                                                          else ""))
        for key, child in _children(shape):
            visit(path + (key,), child, value[key])

    visit((), shallow, structure)
    return result


def pack_sequence_as(structure, flat):
    """`flat` (in flattening order) arranged as `structure`; dicts keep their own key order."""
    values = iter(flat)

    def build(value):
        if not _is_container(value):
            leaf = next(values, _END)
            if leaf is _END:
                raise ValueError("fewer values than leaves in the structure")
            return leaf
        if isinstance(value, collections.abc.Mapping):
            built = {key: build(child) for key, child in _children(value)}
            ordered = [(key, built[key]) for key in value]
            if isinstance(value, collections.OrderedDict):
                return collections.OrderedDict(ordered)
            return dict(ordered)
        items = [build(child) for _, child in _children(value)]
        if isinstance(value, list):
            return items
        if hasattr(value, "_fields"):  # a namedtuple
            return type(value)(*items)
        return tuple(items)

    result = build(structure)
    if next(values, _END) is not _END:
        raise ValueError("more values than leaves in the structure")
    return result


def map_structure(function, structure):
    return pack_sequence_as(structure, [function(leaf) for leaf in flatten(structure)])
