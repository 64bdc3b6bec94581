"""16-bit tables from Python (TableConfig(dtype="bfloat16" | "float16")): the rows are the float32
table's rounded to nearest, lookups sum them as numpy does, training matches a float64 SGD step to
within one step of the 16-bit grid, the arguments are checked, and checkpoints round trip (another
dtype only with convert_dtype)."""

import numpy as np
import pytest

import recemb

ROWS, DIM = 40, 8


def to_bfloat16(values):
    """float32 values rounded to nearest (ties to even) in bfloat16, as float32: an independent
    reference (integer arithmetic on the bits)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def to_16_bits(dtype, values):
    if dtype == "bfloat16":
        return to_bfloat16(values)
    return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)


def make_layer(dtype, initializer=None, optimizer=None, rounding="stochastic"):
    table = recemb.TableConfig(ROWS, DIM, initializer=initializer, combiner="sum", name="t",
                               dtype=dtype, rounding=rounding)
    return recemb.Embedding({"f": recemb.FeatureConfig(table)},
                            optimizer or recemb.optimizers.SGD(learning_rate=0.1), seed=3)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_rows_are_rounded_and_lookups_sum_them(dtype):
    rng = np.random.default_rng(1)
    values = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    layer = make_layer(dtype, initializer=values)
    table = layer.embedding_tables["t"]
    assert table.dtype == np.float32
    np.testing.assert_array_equal(table, to_16_bits(dtype, values))
    ids = rng.integers(0, ROWS, size=(16, 5))
    activations = layer({"f": ids}, training=False)["f"]
    np.testing.assert_allclose(activations, table[ids].astype(np.float64).sum(axis=1),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sgd_step_is_the_float64_step_within_one_grid_step(dtype):
    rng = np.random.default_rng(2)
    values = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    layer = make_layer(dtype, initializer=values)
    before = layer.embedding_tables["t"].astype(np.float64)
    ids = rng.integers(0, ROWS, size=(32, 3))
    layer({"f": ids})
    gradient = rng.normal(size=(32, DIM)).astype(np.float32)
    layer.apply_gradients({"f": gradient})
    summed = np.zeros((ROWS, DIM))
    np.add.at(summed, ids.reshape(-1), np.repeat(gradient.astype(np.float64), 3, axis=0))
    expected = before - 0.1 * summed
    after = layer.embedding_tables["t"].astype(np.float64)
    # Stochastic rounding gives one of the two 16-bit neighbours of the float64 result.
    mantissa_bits = 8 if dtype == "bfloat16" else 11
    step = np.exp2(np.floor(np.log2(np.maximum(np.abs(expected), 2.0**-14))) - (mantissa_bits - 1))
    assert np.all(np.abs(after - expected) <= step * 1.0001)
    touched = np.unique(ids)
    assert not np.array_equal(after[touched], before[touched])
    untouched = np.setdiff1d(np.arange(ROWS), touched)
    np.testing.assert_array_equal(after[untouched], before[untouched])


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="dtype='int8': unknown dtype 'int8'; valid names are "
                                         "'float32', 'bfloat16', 'float16'"):
        recemb.TableConfig(4, 2, dtype="int8")
    with pytest.raises(ValueError, match="rounding='up'"):
        recemb.TableConfig(4, 2, dtype="bfloat16", rounding="up")
    with pytest.raises(ValueError, match="a dynamic float16 table needs an initializer whose "
                                         "values stay below 65520"):
        table = recemb.TableConfig(dim=2, vocabulary=recemb.DynamicVocabulary(capacity=8),
                                   dtype="float16", initializer=recemb.initializers.Constant(7e4))
        recemb.Embedding({"f": recemb.FeatureConfig(table)})
    assert "dtype='float16', rounding='nearest'" in repr(
        recemb.TableConfig(4, 2, dtype="float16", rounding="nearest"))
    # A float16 table's values must fit float16: nothing changes otherwise.
    layer = make_layer("float16", initializer=np.ones((ROWS, DIM), np.float32))
    with pytest.raises(ValueError, match="beyond float16's range"):
        layer.assign_table("t", np.full((ROWS, DIM), 1e5, np.float32))
    np.testing.assert_array_equal(layer.embedding_tables["t"], 1.0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_checkpoints_round_trip_and_another_dtype_needs_convert_dtype(dtype, tmp_path):
    rng = np.random.default_rng(4)
    layer = make_layer(dtype, initializer=rng.normal(size=(ROWS, DIM)).astype(np.float32))
    layer({"f": rng.integers(0, ROWS, size=(8, 2))})
    layer.apply_gradients({"f": rng.normal(size=(8, DIM)).astype(np.float32)})
    layer.save(tmp_path)
    restored = make_layer(dtype)
    restored.restore(tmp_path)
    np.testing.assert_array_equal(restored.embedding_tables["t"], layer.embedding_tables["t"])
    full = make_layer("float32")
    with pytest.raises(ValueError, match="set RestoreOptions::convert_dtype"):
        full.restore(tmp_path)
    full.restore(tmp_path, convert_dtype=True)
    np.testing.assert_array_equal(full.embedding_tables["t"], layer.embedding_tables["t"])


def torch_module(dtype, values, placement=None):
    torch = pytest.importorskip("torch")
    import recemb.torch
    table = recemb.TableConfig(ROWS, DIM, initializer=values, combiner="sum", name="t",
                               dtype=dtype)
    return torch, recemb.torch.Embedding({"f": recemb.FeatureConfig(table)},
                                         recemb.optimizers.SGD(learning_rate=0.1), seed=3,
                                         num_threads=1, placement=placement)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_module_holds_a_16_bit_table_in_its_own_type(dtype):
    """recemb.torch: the table and its state_dict entry are torch.bfloat16 / float16 tensors over
    the engine's 16-bit rows (torch's own conversion of them gives the float32 values); a float32
    state dict loads rounded to nearest as torch rounds; training matches recemb.Embedding fed
    the same gradients, bit for bit; a sharded table is a copy of the same type."""
    rng = np.random.default_rng(5)
    values = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    torch, module = torch_module(dtype, values)
    torch_dtype = getattr(torch, dtype)
    table = module.embedding_tables["t"]
    assert table.dtype == torch_dtype and tuple(table.shape) == (ROWS, DIM)
    np.testing.assert_array_equal(table.float().numpy(), to_16_bits(dtype, values))
    state = module.state_dict()
    assert state["t.parameters"].dtype == torch_dtype
    assert f"(40, 8, {dtype})" in repr(module)
    table[2, 3] = 1.5  # the engine's rows themselves
    np.testing.assert_array_equal(module.layer.embedding_tables["t"][2, 3], 1.5)

    # A float32 state dict: each value rounded to nearest, as torch's .to(dtype) rounds.
    new_values = torch.from_numpy(rng.normal(size=(ROWS, DIM)).astype(np.float32))
    _, other = torch_module(dtype, values)
    other.load_state_dict({"t.parameters": new_values, "step": torch.tensor(7)}, strict=False)
    assert torch.equal(other.embedding_tables["t"], new_values.to(torch_dtype))
    assert other.step == 7
    other.load_state_dict(module.state_dict())  # the 16-bit tensors as they are
    assert torch.equal(other.embedding_tables["t"], module.embedding_tables["t"])

    # Training through the module is the engine's training: the same as recemb.Embedding.
    ids = rng.integers(0, ROWS, size=(12, 3))
    gradient = rng.normal(size=(12, DIM)).astype(np.float32)
    layer = make_layer(dtype, initializer=module.layer.embedding_tables["t"])
    (module({"f": torch.from_numpy(ids)})["f"] * torch.from_numpy(gradient)).sum().backward()
    layer({"f": ids})
    layer.apply_gradients({"f": gradient})
    np.testing.assert_array_equal(module.embedding_tables["t"].float().numpy(),
                                  layer.embedding_tables["t"])

    _, sharded = torch_module(dtype, values, recemb.Placement(num_shards=2, strategy="row_wise"))
    copy = sharded.embedding_tables["t"]
    assert copy.dtype == torch_dtype
    np.testing.assert_array_equal(copy.float().numpy(), to_16_bits(dtype, values))
