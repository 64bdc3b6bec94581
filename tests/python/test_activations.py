"""ActivationArrays (recemb/_activations.py) and the lookups that use it: an array is handed out
again only when nothing else refers to it, so results the caller keeps never change, and
results dropped before the next lookup are reused (the same memory, with correct values)."""

import gc
import weakref

import numpy as np
import pytest
import torch

import recemb
import reference
from recemb._activations import ActivationArrays


def address(array):
    return array.__array_interface__["data"][0]


def test_dropped_arrays_are_handed_out_again_by_shape():
    arrays = ActivationArrays()
    first = arrays.new([(4, 3), (2, 5)])
    addresses = [address(a) for a in first]
    del first
    second = arrays.new([(2, 5), (4, 3), (4, 3)])
    assert [a.shape for a in second] == [(2, 5), (4, 3), (4, 3)]
    assert all(a.dtype == np.float32 and a.flags.c_contiguous for a in second)
    assert address(second[0]) == addresses[1]
    assert address(second[1]) == addresses[0]
    assert address(second[2]) not in addresses  # one array of that shape was free


@pytest.mark.parametrize("holder", ["array", "slice", "reshape", "memoryview", "torch"])
def test_a_referenced_array_is_not_handed_out_again(holder):
    arrays = ActivationArrays()
    (array,) = arrays.new([(8, 4)])
    array[...] = np.arange(32, dtype=np.float32).reshape(8, 4)
    kept = {"array": lambda a: a, "slice": lambda a: a[2:5], "reshape": lambda a: a.reshape(-1),
            "memoryview": memoryview, "torch": torch.from_numpy}[holder](array)
    expected = np.array(kept, copy=True)
    address_of_array = address(array)
    del array
    for _ in range(3):
        (new,) = arrays.new([(8, 4)])
        assert address(new) != address_of_array
        new[...] = -1.0
    np.testing.assert_array_equal(np.asarray(kept), expected)


def test_arrays_not_reused_are_released():
    arrays = ActivationArrays()
    (old,) = arrays.new([(6, 2)])
    alive = weakref.ref(old)
    del old
    gc.collect()
    assert alive() is not None  # kept for reuse
    arrays.new([(3, 3)])  # no use for a (6, 2) array
    gc.collect()
    assert alive() is None


def test_only_the_last_two_calls_are_kept_for_reuse():
    arrays = ActivationArrays()
    held = [arrays.new([(5,)])[0] for _ in range(4)]
    alive = [weakref.ref(a) for a in held]
    del held
    gc.collect()
    # The arrays of calls 3 and 4 wait for reuse; those of calls 1 and 2 were forgotten.
    assert [ref() is not None for ref in alive] == [False, False, True, True]


def make_layer():
    video = recemb.TableConfig(500, 8, name="video", combiner="mean")
    user = recemb.TableConfig(300, 4, name="user", combiner="sum")
    features = {"watched": recemb.FeatureConfig(video, name="watched"),
                "user": recemb.FeatureConfig(user, name="user")}
    return recemb.Embedding(features, "sgd", seed=3)


def expected_activations(layer, ids):
    tables = layer.embedding_tables
    result = {}
    for name, table, combiner in (("watched", "video", "mean"), ("user", "user", "sum")):
        feature_slots, shape = reference.slots("dense", ids[name], None)
        result[name] = reference.lookup(np.asarray(tables[table], np.float64), feature_slots,
                                        shape, combiner)
    return result


def random_ids(rng):
    return {"watched": rng.integers(0, 500, size=(64, 5)), "user": rng.integers(0, 300, size=64)}


@pytest.mark.parametrize("training", [False, True])
def test_lookups_reuse_dropped_activations_and_keep_held_ones(training):
    layer = make_layer()
    rng = np.random.default_rng(11)
    look = layer if training else layer.lookup
    first_ids = random_ids(rng)
    held = look(first_ids)
    held_copy = {name: array.copy() for name, array in held.items()}
    first_addresses = {address(a) for a in held.values()}

    def apply_random_gradients():
        layer.apply_gradients({"watched": rng.uniform(-1, 1, (64, 8)).astype(np.float32),
                               "user": rng.uniform(-1, 1, (64, 4)).astype(np.float32)})

    if training:
        apply_random_gradients()
    previous = None
    for _ in range(4):
        ids = random_ids(rng)
        expected = expected_activations(layer, ids)
        got = look(ids)
        for name in got:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6)
            assert address(got[name]) not in first_addresses
        if previous is not None:  # dropped by the reassignment after the last call
            assert {address(a) for a in got.values()} == previous
        previous = {address(a) for a in got.values()}
        del got
        if training:
            apply_random_gradients()
    for name in held:
        np.testing.assert_array_equal(held[name], held_copy[name])
