"""The C++ engine (recemb._recemb.Embedding) of a resolved feature config and the layer's options,
and the checks of the options that are plain numbers (the engine checks the rest)."""

from __future__ import annotations

import numbers

from recemb import _recemb


def _build_engine(resolved, optimizer, options, zero_tables=False):
    """The C++ Embedding of a resolved config, its tables initialized (zeros if zero_tables).
    options: num_threads (an int, or "openmp": the OpenMP executor), seed, and optionally
    non_finite_gradients and pipeline_staleness (C++ enumerators), placement (a Placement) and
    communicator (a C++ Communicator); the C++ defaults otherwise. The engine validates the
    configs (before any initializer callable is called)."""
    placement = options.get("placement")
    openmp = options["num_threads"] == "openmp"
    cpp_options = _recemb.EmbeddingOptions(
        optimizer=None if optimizer is None else optimizer._to_cpp(),
        num_threads=0 if openmp else options["num_threads"],
        executor=_recemb.openmp_executor(_recemb.openmp_max_threads()) if openmp else None,
        seed=options["seed"],
        placement=None if placement is None else placement._to_cpp(resolved),
        communicator=options.get("communicator"))
    for name in ("non_finite_gradients", "pipeline_staleness"):
        if name in options:
            setattr(cpp_options, name, options[name])
    engine = _recemb.Embedding(resolved.cpp_tables(zero_tables),
                               resolved.cpp_features(), cpp_options)
    for name, values in ([] if zero_tables else resolved.initial_values()):
        engine.write_variable(name, "parameters", values)  # validates: finite values
    return engine


def _int_setting(name, value, largest):
    """`value` as an int in [0, largest] (the range of its C++ type; the engine checks the rest),
    or ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}={value!r}: must be an int")
    if not 0 <= value <= largest:
        raise ValueError(f"{name}={value!r}: must be >= 0 and <= {largest}")
    return int(value)


def _num_threads_setting(value):
    """The layer's num_threads: "openmp", or an int in the range of the C++ field."""
    if isinstance(value, str):
        if value != "openmp":
            raise ValueError(f'num_threads={value!r}: must be an int or "openmp"')
        return value
    return _int_setting("num_threads", value, 2**31 - 1)
