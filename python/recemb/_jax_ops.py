"""recemb.keras's lookup on Keras's JAX backend (docs/keras.md, "How the layer runs"): XLA FFI
custom calls (recemb/_jax_ffi.so, python/jax_ffi/recemb_jax_ffi.cc) that reach the engine through
graph_op_abi.h, and a jax.custom_vjp whose backward pass applies the gradients of the activations
with recemb's fused optimizer. JAX has no ragged arrays: dense ids ([B], [B, N], ...) only."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Sequence

import numpy as np

_REGISTERED = False


def _register() -> None:
    """Registers the custom calls with JAX once."""
    global _REGISTERED
    if _REGISTERED:
        return
    import jax  # pylint: disable=import-outside-toplevel
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_jax_ffi.so")
    if not os.path.exists(path):
        raise ImportError(f"recemb.keras: {path} was not built: build recemb where jax imports "
                          "(scripts/keras-env, or -DRECEMB_BUILD_JAX_FFI=ON; docs/keras.md)")
    library = ctypes.cdll.LoadLibrary(path)
    jax.ffi.register_ffi_target("recemb_lookup", jax.ffi.pycapsule(library.RecembJaxLookup),
                                platform="cpu")
    jax.ffi.register_ffi_target("recemb_apply_gradients",
                                jax.ffi.pycapsule(library.RecembJaxApplyGradients),
                                platform="cpu")
    _REGISTERED = True


def lookup(api: int, layer: int, ids: Sequence[Any], weights: Sequence[Any],
           shapes: Sequence[Sequence[int]], trigger: Any, training: bool) -> list:
    """The activations of features `ids` (with `weights`, each None or float32 like its ids) of
    static `shapes`. With training, their gradients reach the trigger's custom VJP, which applies
    them (RecembJaxApplyGradients) and returns 0 for the trigger."""
    import jax  # pylint: disable=import-outside-toplevel
    import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
    _register()
    attributes = {"api": np.int64(api), "layer": np.int64(layer)}
    results = tuple(jax.ShapeDtypeStruct(tuple(shape), jnp.float32) for shape in shapes)
    results += (jax.ShapeDtypeStruct((), jnp.int32),)
    inputs = tuple(jnp.asarray(values) for values in ids) + tuple(
        jnp.zeros((0,), jnp.float32) if values is None else jnp.asarray(values, jnp.float32)
        for values in weights)

    def call(values, keep):
        return jax.ffi.ffi_call("recemb_lookup", results, has_side_effect=True)(
            *values, training=keep, **attributes)

    if not training:
        return list(call(inputs, False)[:-1])

    @jax.custom_vjp
    def training_lookup(trigger_value, values):
        return call(values, True)[:-1]

    def forward(trigger_value, values):
        *activations, batch = call(values, True)
        return tuple(activations), (batch, trigger_value, values)

    def backward(residuals, cotangents):
        batch, trigger_value, values = residuals
        done = jax.ffi.ffi_call("recemb_apply_gradients", jax.ShapeDtypeStruct((), jnp.float32),
                                has_side_effect=True)(
            batch, *[jnp.asarray(g, jnp.float32) for g in cotangents], **attributes)
        zeros = tuple(np.zeros(v.shape, dtype=jax.dtypes.float0)
                      if jnp.issubdtype(v.dtype, jnp.integer) else jnp.zeros_like(v)
                      for v in values)
        return jnp.zeros_like(trigger_value) + done, zeros

    training_lookup.defvjp(forward, backward)
    return list(training_lookup(trigger, inputs))
