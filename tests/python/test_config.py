"""recemb.config: TF's configs, their validation and their resolution into C++ configs."""

import numpy as np
import pytest

import recemb
from recemb import _recemb
from recemb.config import Resolved


def test_table_config_fields_and_validation():
    table = recemb.TableConfig(10, 4)
    assert (table.vocabulary_size, table.dim, table.initializer, table.optimizer, table.combiner,
            table.name, table.quantization_config) == (10, 4, None, None, "mean", None, None)
    assert isinstance(recemb.TableConfig(10, 4, optimizer="adam").optimizer,
                      recemb.optimizers.Adam)
    for bad in (2.5, True, "10"):
        with pytest.raises(ValueError, match="vocabulary_size must be an int"):
            recemb.TableConfig(bad, 4)
        with pytest.raises(ValueError, match="dim must be an int"):
            recemb.TableConfig(10, bad)
    with pytest.raises(ValueError, match="initializer names"):
        recemb.TableConfig(10, 4, initializer="glorot")
    with pytest.raises(ValueError, match="initializer must be"):
        recemb.TableConfig(10, 4, initializer=object())
    with pytest.raises(ValueError, match="quantization_config"):
        recemb.TableConfig(10, 4, quantization_config=(2, 0, 1))
    assert "array of shape (10, 4)" in repr(recemb.TableConfig(10, 4,
                                                               initializer=np.zeros((10, 4))))
    for bad in (2**63, -2**63 - 1):  # not the bindings' signature dump at Embedding()
        with pytest.raises(ValueError, match=rf"TableConfig 't': vocabulary_size={bad}: outside "
                                             r"the 64-bit integers \[-2\*\*63, 2\*\*63\)"):
            recemb.TableConfig(bad, 4, name="t")
    for bad, shown in ((None, "None"), ("max", "'max'")):
        with pytest.raises(ValueError, match=rf"TableConfig: combiner={shown}: unknown combiner "
                                             r".*expected one of 'sum', 'mean', 'sqrtn'"):
            recemb.TableConfig(10, 4, combiner=bad)


def test_truncated_normal_by_name_is_the_default_initializer():
    def tables(initializer):
        table = recemb.TableConfig(50, 8, initializer=initializer, name="t")
        return recemb.Embedding(recemb.FeatureConfig(table), seed=9).embedding_tables["t"]

    by_name = tables("truncated_normal")
    np.testing.assert_array_equal(by_name, tables(None))
    np.testing.assert_array_equal(by_name, tables(recemb.initializers.TruncatedNormal()))
    assert 0.2 < by_name.std() < 0.4 and np.abs(by_name).max() <= 2 / np.sqrt(8)


def test_feature_config_repr_shows_its_table():
    unnamed = recemb.TableConfig(10, 4)
    assert repr(recemb.FeatureConfig(unnamed, name="f")) == (
        "FeatureConfig(table=TableConfig(vocabulary_size=10, dim=4, initializer=None, "
        "optimizer=None, combiner='mean', name=None, quantization_config=None), "
        "max_sequence_length=0, validate_weights_and_indices=True, output_shape=None, "
        "name='f')")


def test_feature_config_fields_and_validation():
    table = recemb.TableConfig(10, 4)
    feature = recemb.FeatureConfig(table, output_shape=(2, 3))
    assert feature.output_shape == [2, 3] and feature.max_sequence_length == 0
    with pytest.raises(ValueError, match="max_sequence_length must be an int"):
        recemb.FeatureConfig(table, max_sequence_length=1.5)
    with pytest.raises(ValueError, match="validate_weights_and_indices"):
        recemb.FeatureConfig(table, validate_weights_and_indices=1)


# As TF's TableConfig / FeatureConfig / QuantizationConfig, the constructors refuse a bad argument
# (ValueError naming the field, with TF's "must be an int and must be >= 1"), not the layer later.
_T = recemb.TableConfig(10, 4, name="t")
BAD_CONFIGS = [
    (lambda: recemb.TableConfig(0, 4), "TableConfig: vocabulary_size must be an int and must be "
                                       ">= 1, got 0"),
    (lambda: recemb.TableConfig(-7, 4, name="t"), "TableConfig 't': vocabulary_size must be an "
                                                  "int and must be >= 1, got -7"),
    (lambda: recemb.TableConfig(10.0, 4), "vocabulary_size must be an int and must be >= 1, "
                                          "got 10.0"),
    (lambda: recemb.TableConfig(10, 0, name="t"), "TableConfig 't': dim must be an int and must "
                                                  "be >= 1, got 0"),
    (lambda: recemb.TableConfig(10, -1), "dim must be an int and must be >= 1, got -1"),
    (lambda: recemb.TableConfig(10, True), "dim must be an int and must be >= 1, got True"),
    (lambda: recemb.TableConfig(2**62, 4, name="t"), r"TableConfig 't': vocabulary_size \* dim "
                                                     r"= 4611686018427387904 \* 4 overflows"),
    (lambda: recemb.TableConfig(10, 4, combiner="max"), "combiner='max': unknown combiner"),
    (lambda: recemb.TableConfig(10, 4, initializer=object()), "initializer must be None, a "
                                                              "name, a float"),
    (lambda: recemb.TableConfig(10, 4, name=""), "name must be None or a non-empty str, got ''"),
    (lambda: recemb.TableConfig(10, 4, name=5), "name must be None or a non-empty str, got 5"),
    (lambda: recemb.QuantizationConfig(1, 0.0, 1.0), "QuantizationConfig: num_buckets must be an "
                                                     "int and must be >= 2, got 1"),
    (lambda: recemb.QuantizationConfig(4, 1.0, 1.0), "QuantizationConfig: needs finite lower < "
                                                     "upper, got lower 1.0, upper 1.0"),
    (lambda: recemb.QuantizationConfig(4, float("nan"), 1.0), "needs finite lower < upper"),
    (lambda: recemb.QuantizationConfig(4, "0", 1.0), "lower must be a float, got '0'"),
    (lambda: recemb.FeatureConfig(_T, max_sequence_length=-1), "FeatureConfig: "
     "max_sequence_length must be an int and must be >= 0, got -1"),
    (lambda: recemb.FeatureConfig(_T, max_sequence_length=1.5, name="f"), "FeatureConfig 'f': "
     "max_sequence_length must be an int and must be >= 0, got 1.5"),
    (lambda: recemb.FeatureConfig(_T, output_shape=[0]), "output_shape entries must be an int "
                                                         "and must be >= 1, got 0"),
    (lambda: recemb.FeatureConfig(_T, output_shape=(4, -1)), "output_shape entries must be an "
                                                             "int and must be >= 1, got -1"),
    (lambda: recemb.FeatureConfig(_T, output_shape=4), "output_shape must be None or a sequence "
                                                       "of ints, got 4"),
    (lambda: recemb.FeatureConfig(_T, output_shape="4"), "output_shape must be None or a "
                                                         "sequence of ints, got '4'"),
    (lambda: recemb.FeatureConfig(_T, validate_weights_and_indices=None), "FeatureConfig: "
     "validate_weights_and_indices must be a bool, got None"),
    (lambda: recemb.FeatureConfig("t"), "table must be a TableConfig, got str"),
    (lambda: recemb.FeatureConfig(_T, name=""), "name must be None or a non-empty str"),
]


@pytest.mark.parametrize("make, message", BAD_CONFIGS,
                         ids=[message[:40] for _, message in BAD_CONFIGS])
def test_constructors_refuse_each_bad_argument(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_constructors_take_the_edge_values():
    smallest = recemb.TableConfig(np.int64(1), 1, name="smallest",
                                  quantization_config=recemb.QuantizationConfig(2, -1e-30, 1e-30))
    features = {"one": recemb.FeatureConfig(smallest, max_sequence_length=0),
                "sequence": recemb.FeatureConfig(smallest, max_sequence_length=1),
                "shaped": recemb.FeatureConfig(smallest, output_shape=[1])}
    assert (smallest.vocabulary_size, smallest.dim) == (1, 1)
    assert type(smallest.vocabulary_size) is int
    layer = recemb.Embedding(features)
    activations = layer({"one": np.array([0]), "sequence": recemb.Ragged(np.array([0]), [0, 1]),
                         "shaped": np.array([0])}, training=False)
    assert {name: a.shape for name, a in activations.items()} == {
        "one": (1, 1), "sequence": (1, 1, 1), "shaped": (1, 1)}
    recemb.TableConfig(2**61 - 1, 4)  # vocabulary_size * dim = 2**63 - 4: within int64
    recemb.TableConfig(None, 1, vocabulary=recemb.DynamicVocabulary(capacity=1))


def test_the_layer_keeps_its_own_checks_of_configs_changed_after_construction():
    table = recemb.TableConfig(10, 4, name="t")
    feature = recemb.FeatureConfig(table, name="f")
    table.vocabulary_size = 0
    with pytest.raises(ValueError, match="table 't': vocabulary_size must be >= 1, got 0"):
        recemb.Embedding(feature)
    table.vocabulary_size, table.dim = 10, 0
    with pytest.raises(ValueError, match="table 't': dim must be >= 1, got 0"):
        recemb.Embedding(feature)
    table.dim = 4
    feature.max_sequence_length = -1
    with pytest.raises(ValueError, match="feature 'f': max_sequence_length must be >= 0, got -1"):
        recemb.Embedding(feature)
    feature.max_sequence_length, feature.output_shape = 0, [0]
    with pytest.raises(ValueError, match="feature 'f': output_shape entries must be >= 1, got 0"):
        recemb.Embedding(feature)


def test_resolution_into_cpp_configs():
    shared = recemb.TableConfig(10, 4, combiner="sqrtn", optimizer=recemb.optimizers.SGD(0.5),
                                quantization_config=recemb.QuantizationConfig(4, -1.0, 1.0))
    named = recemb.TableConfig(6, 2, name="named", initializer=1.5)
    resolved = Resolved({"z": recemb.FeatureConfig(shared),
                         "a": [recemb.FeatureConfig(named, max_sequence_length=3),
                               recemb.FeatureConfig(shared, name="explicit")]})
    assert resolved.feature_names == ["a/0", "explicit", "z"]
    assert resolved.table_names == ["named", "table_1"]
    assert resolved.table_name(shared) == "table_1" and resolved.table_name("named") == "named"
    with pytest.raises(ValueError, match="not a table"):
        resolved.table_name(recemb.TableConfig(1, 1))
    tables = resolved.cpp_tables()
    assert [t.name for t in tables] == ["named", "table_1"]
    assert isinstance(tables[0].initializer, _recemb.Constant)
    assert tables[0].initializer.value == 1.5 and tables[0].optimizer is None
    assert tables[1].combiner == _recemb.Combiner.kSqrtn
    assert isinstance(tables[1].optimizer, _recemb.Sgd)
    assert tables[1].quantization_config.num_buckets == 4
    assert isinstance(tables[1].initializer, _recemb.TruncatedNormal)
    features = resolved.cpp_features()
    assert [(f.name, f.table, f.max_sequence_length) for f in features] == [
        ("a/0", "named", 3), ("explicit", "table_1", 0), ("z", "table_1", 0)]
    assert Resolved(recemb.FeatureConfig(shared)).feature_names == ["feature_0"]


def test_quantization_is_applied():
    table = recemb.TableConfig(3, 2, initializer=0.3, combiner="sum",
                               quantization_config=recemb.QuantizationConfig(3, -1.0, 1.0))
    layer = recemb.Embedding([recemb.FeatureConfig(table)])
    np.testing.assert_array_equal(layer.lookup([np.array([[0, 1]])])[0], [[0.0, 0.0]])


def test_resource_bounds_and_non_finite_parameters_are_refused_when_the_layer_is_built():
    feature = recemb.FeatureConfig(recemb.TableConfig(10, 4, name="t"))
    with pytest.raises(ValueError, match=r"num_threads must be in \[0, 1024\] \(0 = one per core; "
                                         r"this machine has \d+\), got 5000"):
        recemb.Embedding(feature, num_threads=5000)
    with pytest.raises(ValueError, match=r"PlacementOptions.num_shards must be in \[1, 65536\], "
                                         r"got 70000"):
        recemb.Embedding(feature, placement=recemb.Placement(num_shards=70000))
    for value in (float("inf"), float("-inf"), float("nan")):
        for initializer in (value, recemb.initializers.Constant(value)):
            with pytest.raises(ValueError, match="table 't': Constant initializer value must be "
                                                 "finite"):
                recemb.Embedding(recemb.FeatureConfig(recemb.TableConfig(
                    10, 4, name="t", initializer=initializer)))
        with pytest.raises(ValueError, match="table 't': TruncatedNormal needs a finite mean"):
            recemb.Embedding(recemb.FeatureConfig(recemb.TableConfig(
                10, 4, name="t", initializer=recemb.initializers.TruncatedNormal(mean=value))))
    for momentum in (-1.0, 1.0):
        with pytest.raises(ValueError, match=r"AdagradMomentum.momentum must be in \[0, 1\)"):
            recemb.Embedding(feature, recemb.optimizers.AdagradMomentum(momentum=momentum))


def test_a_table_too_large_for_memory_is_a_memory_error_naming_it():
    # 10^13 rows of 16 floats and as many Adagrad accumulators: 1.28 PB, beyond any address space.
    huge = recemb.FeatureConfig(recemb.TableConfig(10**13, 16, name="huge"))
    with pytest.raises(MemoryError, match=r"table 'huge': cannot allocate 1280000000000000 bytes "
                                          r"\(.* GiB\) for 10000000000000 rows of 32 values") as error:
        recemb.Embedding(huge, "adagrad")
    assert isinstance(error.value, _recemb.ResourceExhausted)
