"""recemb.torchrec against TorchRec itself: the same configs and weights give TorchRec's pooled
and unpooled outputs, the same fused optimizer (apply_optimizer_in_backward) gives the same
tables after several steps, state dicts load both ways, DLRM trains alike, and bad input is
refused with nothing changed. Random inputs from fixed seeds."""

import copy
import pathlib
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchrec = pytest.importorskip("torchrec")
import recemb  # noqa: E402
import recemb.torchrec  # noqa: E402
from torchrec import (EmbeddingBagConfig, EmbeddingConfig, KeyedJaggedTensor,  # noqa: E402
                      PoolingType)
from torchrec.optim import apply_optimizer_in_backward as _apply_optimizer_in_backward  # noqa: E402
from torchrec.models.dlrm import DLRM  # noqa: E402
from torchrec.modules.embedding_modules import (EmbeddingBagCollectionInterface,  # noqa: E402
                                                EmbeddingCollectionInterface)
from torchrec.optim.optimizers import in_backward_optimizer_filter  # noqa: E402

# Outputs: float32 rounding of the same sums. Tables after training: the dense torch optimizer
# and recemb's fused one compute the same update from gradients summed in different orders.
OUTPUT_RTOL, OUTPUT_ATOL = 1e-6, 1e-6
TABLE_RTOL, TABLE_ATOL = 1e-5, 1e-6
BATCH = 6


def apply_optimizer_in_backward(optimizer_class, parameters, kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchRec's wrapper is deprecated
        _apply_optimizer_in_backward(optimizer_class, parameters, kwargs)


def bag_tables(pooling_b=PoolingType.MEAN):
    """Two tables; feature "a" is looked up in both ("a@t1", "a@t2"), as TorchRec names them."""
    return [EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=11,
                               feature_names=["a", "b"]),
            EmbeddingBagConfig(name="t2", embedding_dim=3, num_embeddings=7,
                               feature_names=["c", "a"], pooling=pooling_b)]


def random_kjt(rng, keys, vocabulary, dtype=torch.int64, weighted=False):
    """A KeyedJaggedTensor of BATCH examples per key, bags of 0-4 ids below `vocabulary` (small,
    so ids repeat within bags), example 1 of every key empty; weights in [0.5, 1.5)."""
    lengths = rng.integers(0, 5, size=len(keys) * BATCH)
    lengths[1::BATCH] = 0
    values = rng.integers(0, vocabulary, size=int(lengths.sum()))
    weights = rng.uniform(0.5, 1.5, size=values.size).astype(np.float32) if weighted else None
    return KeyedJaggedTensor(keys=keys, values=torch.from_numpy(values).to(dtype),
                             lengths=torch.from_numpy(lengths),
                             weights=None if weights is None else torch.from_numpy(weights))


def same_weights(tables, is_weighted=False, **options):
    """TorchRec's EmbeddingBagCollection and ours, holding TorchRec's random initial weights."""
    torch.manual_seed(0)
    reference = torchrec.EmbeddingBagCollection(tables=tables, is_weighted=is_weighted)
    ours = recemb.torchrec.EmbeddingBagCollection(tables=copy.deepcopy(tables),
                                                  is_weighted=is_weighted, **options)
    ours.load_state_dict(reference.state_dict())
    return reference, ours


def tables_of(module):
    return {key: value.detach().clone() for key, value in module.state_dict().items()}


def assert_tables_equal(expected, module):
    actual = tables_of(module)
    assert actual.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("weighted", [False, True])
def test_pooled_outputs_equal_torchrec(dtype, weighted):
    tables = bag_tables(PoolingType.SUM if weighted else PoolingType.MEAN)
    reference, ours = same_weights(tables, is_weighted=weighted)
    assert isinstance(ours, EmbeddingBagCollectionInterface)
    assert ours.embedding_bag_configs()[1].name == "t2" and ours.is_weighted() == weighted
    ours.eval()
    rng = np.random.default_rng(11)
    for _ in range(3):
        kjt = random_kjt(rng, ["a", "b", "c"], 7, dtype, weighted)
        expected, actual = reference(kjt), ours(kjt)
        assert actual.keys() == expected.keys() == ["a@t1", "b", "c", "a@t2"]
        assert actual.length_per_key() == expected.length_per_key()
        torch.testing.assert_close(actual.values(), expected.values().detach(),
                                   rtol=OUTPUT_RTOL, atol=OUTPUT_ATOL)


OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"lr": 0.1}),
    "adagrad": (torch.optim.Adagrad, {"lr": 0.1}),  # torch's initial_accumulator_value 0
    "adagrad_initial": (torch.optim.Adagrad, {"lr": 0.1, "initial_accumulator_value": 0.1}),
    "rowwise_adagrad": (torchrec.optim.RowWiseAdagrad, {"lr": 0.1}),
    "adam": (torch.optim.Adam, {"lr": 0.01}),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_fused_optimizer_equals_torchrec_training(name):
    """TorchRec's unsharded EBC on the CPU runs the torch optimizer that
    apply_optimizer_in_backward attaches on the weights' dense gradient: every row, touched or
    not (Adam moves untouched rows too; SGD and both Adagrads leave them); recemb updates the
    touched rows (every row for Adam) from their summed gradients: the same tables."""
    optimizer_class, kwargs = OPTIMIZERS[name]
    reference, ours = same_weights(bag_tables())
    apply_optimizer_in_backward(optimizer_class, reference.parameters(), kwargs)
    apply_optimizer_in_backward(optimizer_class, ours.parameters(), kwargs)
    rng = np.random.default_rng(12)
    target = torch.from_numpy(rng.normal(size=(BATCH, 14)).astype(np.float32))
    for _ in range(4):
        kjt = random_kjt(rng, ["a", "b", "c"], 7)
        for module in (reference, ours):
            ((module(kjt).values() - target) ** 2).sum().backward()
    expected = tables_of(reference)
    for key, values in tables_of(ours).items():
        torch.testing.assert_close(values, expected[key], rtol=TABLE_RTOL, atol=TABLE_ATOL)
    assert ours.recemb_embedding.step == 4
    assert all(weight.grad is None for weight in ours.parameters())


def test_constructor_optimizer_equals_apply_optimizer_in_backward():
    tables = bag_tables()
    _, attached = same_weights(tables)
    _, given = same_weights(tables, optimizer=torch.optim.SGD([torch.zeros(1)], lr=0.1))
    apply_optimizer_in_backward(torch.optim.SGD, attached.parameters(), {"lr": 0.1})
    rng = np.random.default_rng(13)
    for _ in range(2):
        kjt = random_kjt(rng, ["a", "b", "c"], 7)
        for module in (attached, given):
            (module(kjt).values() ** 2).sum().backward()
    assert_tables_equal(tables_of(attached), given)


def test_embedding_collection_equals_torchrec():
    tables = [EmbeddingConfig(name="t1", embedding_dim=4, num_embeddings=9,
                              feature_names=["a", "b"]),
              EmbeddingConfig(name="t2", embedding_dim=4, num_embeddings=5, feature_names=["a"])]
    torch.manual_seed(1)
    reference = torchrec.EmbeddingCollection(tables=tables)
    ours = recemb.torchrec.EmbeddingCollection(tables=copy.deepcopy(tables))
    assert isinstance(ours, EmbeddingCollectionInterface) and ours.embedding_dim() == 4
    assert list(ours.state_dict()) == ["embeddings.t1.weight", "embeddings.t2.weight"]
    ours.load_state_dict(reference.state_dict())
    apply_optimizer_in_backward(torch.optim.SGD, reference.parameters(), {"lr": 0.5})
    apply_optimizer_in_backward(torch.optim.SGD, ours.parameters(), {"lr": 0.5})
    rng = np.random.default_rng(14)
    for dtype in (torch.int32, torch.int64):
        kjt = random_kjt(rng, ["a", "b"], 5, dtype)
        expected, actual = reference(kjt), ours(kjt)
        assert list(actual) == list(expected) == ["a@t1", "b", "a@t2"]
        for key in expected:
            torch.testing.assert_close(actual[key].values(), expected[key].values(),
                                       rtol=OUTPUT_RTOL, atol=OUTPUT_ATOL)
            torch.testing.assert_close(actual[key].lengths(), expected[key].lengths())
        for outputs in (expected, actual):
            sum(((jagged.values() - 0.3) ** 2).sum() for jagged in outputs.values()).backward()
    expected = tables_of(reference)
    for key, values in tables_of(ours).items():
        torch.testing.assert_close(values, expected[key], rtol=TABLE_RTOL, atol=TABLE_ATOL)


def test_state_dict_loads_into_torchrec():
    tables = bag_tables()
    _, ours = same_weights(tables, optimizer=recemb.optimizers.Adagrad(learning_rate=0.2))
    rng = np.random.default_rng(15)
    kjt = random_kjt(rng, ["a", "b", "c"], 7)
    (ours(kjt).values() ** 2).sum().backward()
    torch.manual_seed(2)
    reference = torchrec.EmbeddingBagCollection(tables=tables)
    reference.load_state_dict(ours.state_dict())  # strict: the same keys
    ours.eval()
    torch.testing.assert_close(ours(kjt).values(), reference(kjt).values().detach(),
                               rtol=OUTPUT_RTOL, atol=OUTPUT_ATOL)


def dlrm(embedding_bag_collection):
    torch.manual_seed(3)
    return DLRM(embedding_bag_collection=embedding_bag_collection, dense_in_features=5,
                dense_arch_layer_sizes=[8, 4], over_arch_layer_sizes=[8, 1])


def test_dlrm_trains_as_with_torchrec_ebc():
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=4, num_embeddings=20,
                                 feature_names=[f"f{i}"]) for i in range(3)]
    reference_ebc, ours_ebc = same_weights(tables)
    models = [dlrm(reference_ebc), dlrm(ours_ebc)]
    models[1].load_state_dict(models[0].state_dict())  # the same dense and sparse weights
    dense_optimizers = []
    for model in models:
        apply_optimizer_in_backward(torchrec.optim.RowWiseAdagrad,
                                    model.sparse_arch.embedding_bag_collection.parameters(),
                                    {"lr": 0.1})
        dense = [parameter for _, parameter in
                 in_backward_optimizer_filter(model.named_parameters())]
        dense_optimizers.append(torch.optim.SGD(dense, lr=0.1))
    rng = np.random.default_rng(16)
    batches = [(torch.from_numpy(rng.normal(size=(BATCH, 5)).astype(np.float32)),
                random_kjt(rng, ["f0", "f1", "f2"], 20),
                torch.from_numpy(rng.integers(0, 2, size=(BATCH, 1)).astype(np.float32)))
               for _ in range(3)]
    losses = [[], []]
    for _ in range(4):  # epochs over the same batches: the loss falls
        for dense_features, sparse_features, labels in batches:
            for model, optimizer, history in zip(models, dense_optimizers, losses):
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    model(dense_features, sparse_features), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                history.append(loss.item())
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert sum(losses[1][-3:]) < sum(losses[1][:3])
    expected = models[0].state_dict()
    for key, values in models[1].state_dict().items():
        torch.testing.assert_close(values, expected[key], rtol=TABLE_RTOL, atol=TABLE_ATOL)


def test_dynamic_table_trains_and_round_trips():
    tables = [EmbeddingBagConfig(name="users", embedding_dim=4, num_embeddings=100,
                                 feature_names=["user"]),
              EmbeddingBagConfig(name="products", embedding_dim=4, num_embeddings=10,
                                 feature_names=["item"])]
    options = {"optimizer": recemb.optimizers.Adagrad(learning_rate=0.1),
               "dynamic": {"users": recemb.DynamicVocabulary(capacity=100)}}
    ebc = recemb.torchrec.EmbeddingBagCollection(tables=copy.deepcopy(tables), **options)
    kjt = KeyedJaggedTensor(keys=["user", "item"],
                            values=torch.tensor([10**12, 7, 10**12, 3, 3, 1]),
                            lengths=torch.tensor([2, 1, 2, 1]))
    for _ in range(2):
        (ebc(kjt).values() ** 2).sum().backward()
    state = ebc.state_dict()
    assert sorted(state) == ["embedding_bags.products.weight", "embedding_bags.users.accumulators",
                             "embedding_bags.users.keys", "embedding_bags.users.weight"]
    assert state["embedding_bags.users.keys"].tolist() == [7, 10**12]
    copy_of = recemb.torchrec.EmbeddingBagCollection(tables=copy.deepcopy(tables), **options)
    copy_of.load_state_dict(state)
    for module in (ebc, copy_of):
        module.eval()
    torch.testing.assert_close(copy_of(kjt).values(), ebc(kjt).values(), rtol=0, atol=0)


def test_init_fn_and_deepcopy():
    tables = [EmbeddingBagConfig(name="t", embedding_dim=3, num_embeddings=5,
                                 init_fn=lambda weight: torch.nn.init.constant_(weight, 0.5)),
              EmbeddingBagConfig(name="u", embedding_dim=3, num_embeddings=50,
                                 weight_init_min=-0.01, weight_init_max=0.02)]
    ebc = recemb.torchrec.EmbeddingBagCollection(tables=tables, optimizer="sgd")
    assert tables[0].feature_names == ["t"]  # as TorchRec fills it in
    assert torch.equal(ebc.embedding_bags.t.weight, torch.full((5, 3), 0.5))
    u = ebc.embedding_bags.u.weight.detach()
    assert -0.01 <= float(u.min()) and float(u.max()) <= 0.02 and float(u.std()) > 0
    copied = copy.deepcopy(ebc)
    kjt = KeyedJaggedTensor(keys=["t", "u"], values=torch.tensor([1, 2, 3]),
                            lengths=torch.tensor([1, 1, 1, 0]))
    (copied(kjt).values().sum()).backward()  # trains the copy only
    assert torch.equal(ebc.embedding_bags.t.weight, torch.full((5, 3), 0.5))
    assert not torch.equal(copied.embedding_bags.t.weight, torch.full((5, 3), 0.5))
    assert torch.equal(copied.embedding_bags.t.weight,
                       copied.recemb_embedding.embedding_tables["t"])


def trained_ebc():
    _, ebc = same_weights(bag_tables(), optimizer=recemb.optimizers.Adagrad(learning_rate=0.1))
    return ebc


BAD_INPUTS = {
    "missing key": (KeyedJaggedTensor(keys=["a", "b"], values=torch.tensor([1, 2]),
                                      lengths=torch.tensor([1, 0, 1, 0])),
                    r"expected the configured features \['a', 'b', 'c'\], each once; missing "
                    r"\['c'\]"),
    "unknown key": (KeyedJaggedTensor(keys=["a", "b", "c", "d"], values=torch.tensor([1]),
                                      lengths=torch.tensor([1, 0, 0, 0])),
                    r"unknown \['d'\]"),
    "lengths": (KeyedJaggedTensor(keys=["a", "b", "c"], values=torch.tensor([1, 2, 3]),
                                  lengths=torch.tensor([1, 1, 0, 0, 2, 0])),
                r"lengths sum to 4, but there are 3 values"),
    "id out of range": (KeyedJaggedTensor(keys=["a", "b", "c"], values=torch.tensor([1, 2, 7]),
                                          lengths=torch.tensor([1, 1, 0, 0, 1, 0])),
                        r"feature 'c'.*7"),
    "negative id": (KeyedJaggedTensor(keys=["a", "b", "c"], values=torch.tensor([1, -2, 3]),
                                      lengths=torch.tensor([1, 1, 0, 0, 1, 0])),
                    r"feature 'a@t1'.*-2"),
    "float ids": (KeyedJaggedTensor(keys=["a", "b", "c"], values=torch.tensor([1.0, 2.0, 3.0]),
                                    lengths=torch.tensor([1, 1, 0, 0, 1, 0])),
                  r"values must be a 1-D int32 or int64 tensor, got torch.float32"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_refused_with_nothing_changed(case):
    kjt, message = BAD_INPUTS[case]
    ebc = trained_ebc()
    before = tables_of(ebc)
    with pytest.raises(ValueError, match=message):
        ebc(kjt)
    assert_tables_equal(before, ebc)
    assert ebc.recemb_embedding.step == 0


def test_weighted_needs_weights():
    _, ebc = same_weights(bag_tables(PoolingType.SUM), is_weighted=True, optimizer="sgd")
    kjt = KeyedJaggedTensor(keys=["a", "b", "c"], values=torch.tensor([1, 2, 3]),
                            lengths=torch.tensor([1, 1, 0, 0, 1, 0]))
    with pytest.raises(ValueError, match="is_weighted=True needs one weight per value in the "
                                         "KeyedJaggedTensor: 3 values, no weights"):
        ebc(kjt)


def test_unsupported_optimizer_is_refused_with_nothing_changed():
    ebc = trained_ebc()
    kjt = random_kjt(np.random.default_rng(17), ["a", "b", "c"], 7)
    apply_optimizer_in_backward(torch.optim.RMSprop, [ebc.embedding_bags.t2.weight], {"lr": 0.1})
    before = tables_of(ebc)
    engine = ebc.recemb_embedding
    with pytest.raises(ValueError, match=r"table 't2': torch.optim.RMSprop has no fused "
                                         r"equivalent in recemb; the supported optimizers are "
                                         r"torch.optim.SGD, torch.optim.Adam"):
        ebc(kjt)
    assert ebc.recemb_embedding is engine
    assert_tables_equal(before, ebc)


@pytest.mark.parametrize("optimizer_class, kwargs, message", [
    (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, r"torch.optim.SGD: recemb cannot honour "
                                                    r"momentum=0.9 \(recemb needs 0\)"),
    (torchrec.optim.RowWiseAdagrad, {"lr": 0.1, "weight_decay": 0.01},
     r"torchrec.optim.RowWiseAdagrad: recemb cannot honour weight_decay=0.01"),
])
def test_optimizer_settings_recemb_cannot_honour_are_refused(optimizer_class, kwargs, message):
    ebc = trained_ebc()
    apply_optimizer_in_backward(optimizer_class, ebc.parameters(), kwargs)
    with pytest.raises(ValueError, match=message):
        ebc(random_kjt(np.random.default_rng(18), ["a", "b", "c"], 7))


def test_training_without_an_optimizer_is_refused():
    _, ebc = same_weights(bag_tables())
    kjt = random_kjt(np.random.default_rng(19), ["a", "b", "c"], 7)
    with pytest.raises(ValueError, match=r"table\(s\) \['t1', 't2'\] have no optimizer"):
        ebc(kjt)
    with torch.no_grad():
        ebc(kjt)  # a pure lookup needs none


@pytest.mark.parametrize("change, message", [
    ({"pooling": PoolingType.NONE}, r"pooling=PoolingType.NONE: recemb pools with "
                                    r"PoolingType.SUM or PoolingType.MEAN"),
    ({"data_type": torchrec.DataType.INT8}, r"data_type=DataType.INT8: recemb's tables are "
                                            r"DataType.FP32, BF16 or FP16"),
    ({"need_pos": True}, r"recemb cannot honour need_pos=True"),
    ({"feature_names": ["x", "x"]}, r"feature_names \['x', 'x'\] repeat a name"),
])
def test_configs_recemb_cannot_honour_are_refused(change, message):
    config = EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10,
                                feature_names=["x"])
    for field, value in change.items():
        setattr(config, field, value)
    with pytest.raises(ValueError, match=message):
        recemb.torchrec.EmbeddingBagCollection(tables=[config])


@pytest.mark.parametrize("data_type", [torchrec.DataType.BF16, torchrec.DataType.FP16])
def test_16_bit_tables_hold_torchrecs_weights_and_pool_them_in_float32(data_type):
    """A BF16 / FP16 table: its weight is a tensor of that type over recemb's 16-bit rows
    (TorchRec's unsharded CPU module holds every 16-bit type as float16: state dicts load both
    ways, rounded to nearest as torch converts); the pooled values are float32 sums of those
    weights (TorchRec's own, pooled in float16, within its rounding); training rounds the rows
    back into the 16-bit type."""
    tables = [EmbeddingBagConfig(name="t", embedding_dim=6, num_embeddings=13,
                                 feature_names=["a"], pooling=PoolingType.SUM,
                                 data_type=data_type)]
    reference, ours = same_weights(tables, optimizer=recemb.optimizers.SGD(learning_rate=0.5))
    torch_dtype = torch.bfloat16 if data_type == torchrec.DataType.BF16 else torch.float16
    weight = ours.embedding_bags["t"].weight
    reference_weight = reference.embedding_bags["t"].weight
    assert weight.dtype == torch_dtype and reference_weight.dtype == torch.float16
    assert torch.equal(weight, reference_weight.detach().to(torch_dtype))
    assert ours.state_dict()["embedding_bags.t.weight"].dtype == torch_dtype
    reference.load_state_dict(ours.state_dict())  # and back
    assert torch.equal(reference_weight.detach(), weight.detach().to(torch.float16))

    rng = np.random.default_rng(23)
    kjt = random_kjt(rng, ["a"], 13)
    rows = weight.detach().double().numpy()
    lengths, values = kjt.lengths().numpy(), kjt.values().numpy()
    expected = np.zeros((BATCH, 6))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for example in range(BATCH):
        expected[example] = rows[values[offsets[example]:offsets[example + 1]]].sum(axis=0)
    ours.eval()
    actual = ours(kjt).values()
    assert actual.dtype == torch.float32
    np.testing.assert_allclose(actual.numpy(), expected, rtol=1e-6, atol=1e-7)
    torchrec_pooled = reference(kjt).values().detach().float().numpy()
    tolerance = 2.0 ** (-8 if data_type == torchrec.DataType.BF16 else -11)
    np.testing.assert_allclose(torchrec_pooled, expected, rtol=2 * tolerance,
                               atol=2 * tolerance * np.abs(rows).max())

    ours.train()
    before = weight.detach().clone()
    ours(kjt).values().sum().backward()
    changed = (weight != before).any(dim=1)
    assert changed[np.unique(values)].all() and weight.dtype == torch_dtype
    # Each touched row moved by about -0.5 * its number of occurrences, within the type's grid.
    counts = np.bincount(values, minlength=13)
    step = (weight.detach().double() - before.double()).numpy()
    np.testing.assert_allclose(step, -0.5 * counts[:, None] * np.ones((1, 6)),
                               atol=2 * tolerance * (np.abs(rows).max() + 0.5 * counts.max()))


def test_weighted_mean_and_bad_dynamic_configs_are_refused():
    config = EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=10,
                                pooling=PoolingType.MEAN)
    with pytest.raises(ValueError, match="pooling=PoolingType.MEAN with is_weighted=True"):
        recemb.torchrec.EmbeddingBagCollection(tables=[config], is_weighted=True)
    with pytest.raises(ValueError, match="num_embeddings=10 differs from its DynamicVocabulary's "
                                         "capacity=20"):
        recemb.torchrec.EmbeddingBagCollection(
            tables=[config], optimizer="sgd",
            dynamic={"t": recemb.DynamicVocabulary(capacity=20)})
    config.weight_init_max = 0.5
    with pytest.raises(ValueError, match="init_fn, weight_init_min and weight_init_max cannot "
                                         "be honoured"):
        recemb.torchrec.EmbeddingBagCollection(
            tables=[config], optimizer="sgd",
            dynamic={"t": recemb.DynamicVocabulary(capacity=10)})


def test_attaching_an_optimizer_later_keeps_tables_and_step():
    """An optimizer attached after training started rebuilds recemb's tables with it: the
    weights, a dynamic table's keys and rows, and the step carry over."""
    tables = [EmbeddingBagConfig(name="static", embedding_dim=4, num_embeddings=10,
                                 feature_names=["s"]),
              EmbeddingBagConfig(name="dynamic", embedding_dim=4, num_embeddings=50,
                                 feature_names=["d"])]
    ebc = recemb.torchrec.EmbeddingBagCollection(
        tables=tables, optimizer=recemb.optimizers.SGD(learning_rate=0.1),
        dynamic={"dynamic": recemb.DynamicVocabulary(capacity=50)})
    kjt = KeyedJaggedTensor(keys=["s", "d"], values=torch.tensor([1, 2, 99, 5]),
                            lengths=torch.tensor([1, 1, 1, 1]))
    (ebc(kjt).values() ** 2).sum().backward()
    before = tables_of(ebc)
    apply_optimizer_in_backward(torch.optim.Adagrad, ebc.parameters(), {"lr": 0.1})
    activations = ebc(kjt)  # rebuilds; the rows it reads are the ones trained so far
    assert_tables_equal(before, ebc)
    assert ebc.recemb_embedding.step == 1
    assert "static': (10, 4, AdagradMomentum" in repr(ebc.recemb_embedding)
    (activations.values() ** 2).sum().backward()
    assert ebc.recemb_embedding.step == 2
    assert torch.equal(ebc.embedding_bags.static.weight,
                       ebc.recemb_embedding.embedding_tables["static"])


def test_two_optimizers_on_one_table_are_refused():
    ebc = trained_ebc()
    apply_optimizer_in_backward(torch.optim.SGD, [ebc.embedding_bags.t1.weight], {"lr": 0.1})
    apply_optimizer_in_backward(torch.optim.Adam, [ebc.embedding_bags.t1.weight], {"lr": 0.1})
    with pytest.raises(ValueError, match=r"table 't1': 2 optimizers applied in backward "
                                         r"\(torch.optim.SGD, torch.optim.Adam\); recemb fuses "
                                         r"one optimizer per table"):
        ebc(random_kjt(np.random.default_rng(20), ["a", "b", "c"], 7))


def test_python_doc_example_runs(tmp_path, monkeypatch):
    """docs/python.md's example of recemb.torchrec (not run by test_examples.py, which runs
    without torchrec too)."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    section = text[text.index("## TorchRec's embedding modules"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("\n```\n")]
    monkeypatch.chdir(tmp_path)
    namespace = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        exec(compile(code, "docs/python.md", "exec"), namespace)
    assert ("sparse_arch.embedding_bag_collection.embedding_bags.t0.weight" in
            torch.load("dlrm.pt"))
    assert namespace["ebc"].recemb_embedding.step == 1


def test_fused_optimizer_of_torchrec_placeholders():
    """torchrec.optim.SGD / Adagrad only name FBGEMM's EXACT_SGD / EXACT_ADAGRAD (their step is
    not implemented, so TorchRec's CPU path cannot run them): they map as torch's SGD / Adagrad."""
    sgd = recemb.torchrec.fused_optimizer(torchrec.optim.SGD, kwargs={"lr": 0.3})
    assert isinstance(sgd, recemb.optimizers.SGD) and sgd.learning_rate == 0.3
    adagrad = recemb.torchrec.fused_optimizer(torchrec.optim.Adagrad, kwargs={"lr": 0.2})
    assert isinstance(adagrad, recemb.optimizers.AdagradMomentum)
    assert (adagrad.learning_rate, adagrad.momentum, adagrad.beta2, adagrad.exponent,
            adagrad.epsilon) == (0.2, 0.0, 1.0, 2.0, pytest.approx(1e-20))
    with pytest.raises(ValueError, match="torchrec.optim.LAMB has no fused equivalent"):
        recemb.torchrec.fused_optimizer(torchrec.optim.LAMB, kwargs={"lr": 0.1})


def test_embedding_collection_with_a_dynamic_table():
    tables = [EmbeddingConfig(name="users", embedding_dim=4, num_embeddings=30,
                              feature_names=["user"])]
    ec = recemb.torchrec.EmbeddingCollection(
        tables=tables, optimizer=recemb.optimizers.SGD(learning_rate=0.5),
        dynamic={"users": recemb.DynamicVocabulary(capacity=30)}, need_indices=True)
    kjt = KeyedJaggedTensor(keys=["user"], values=torch.tensor([-5, 10**15, -5]),
                            lengths=torch.tensor([2, 0, 1]))
    jagged = ec(kjt)["user"]
    assert jagged.values().shape == (3, 4) and jagged.lengths().tolist() == [2, 0, 1]
    assert jagged.weights().tolist() == [-5, 10**15, -5]  # need_indices: the ids, as TorchRec
    torch.testing.assert_close(jagged.values()[0], jagged.values()[2], rtol=0, atol=0)
    jagged.values().sum().backward()
    keys, rows, _ = ec.recemb_embedding.read_dynamic_table("users")
    assert keys.tolist() == [-5, 10**15]
    torch.testing.assert_close(rows, jagged.values()[:2].detach() - torch.tensor([[1.0], [0.5]]),
                               rtol=1e-6, atol=1e-6)


def test_attaching_an_optimizer_to_another_table_keeps_the_first_tables_state():
    """t1 trains with Adagrad throughout (as TorchRec's); attaching one to t2 after two steps
    rebuilds recemb's tables, and t1's accumulators carry over: t1 stays TorchRec's. The loss
    is separable, so t1's gradients do not depend on t2's optimizer."""
    reference, ours = same_weights(bag_tables(), optimizer=recemb.optimizers.SGD(
        learning_rate=0.1))
    apply_optimizer_in_backward(torch.optim.SGD, [reference.embedding_bags.t2.weight],
                                {"lr": 0.1})
    for module in (reference, ours):
        apply_optimizer_in_backward(torch.optim.Adagrad, [module.embedding_bags.t1.weight],
                                    {"lr": 0.1})
    rng = np.random.default_rng(21)
    target = torch.from_numpy(rng.normal(size=(BATCH, 14)).astype(np.float32))
    for step in range(4):
        if step == 2:
            apply_optimizer_in_backward(torchrec.optim.RowWiseAdagrad,
                                        [ours.embedding_bags.t2.weight], {"lr": 0.1})
        kjt = random_kjt(rng, ["a", "b", "c"], 7)
        for module in (reference, ours):
            ((module(kjt).values() - target) ** 2).sum().backward()
    assert "'t2': (7, 3, RowWiseAdagrad" in repr(ours.recemb_embedding)
    torch.testing.assert_close(ours.embedding_bags.t1.weight, reference.embedding_bags.t1.weight,
                               rtol=TABLE_RTOL, atol=TABLE_ATOL)
