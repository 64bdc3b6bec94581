"""recemb.torch: the module against torch.nn.EmbeddingBag + the matching torch optimizer on the
same random data, state_dict, and translate_optimizer."""

import io
import json
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import recemb  # noqa: E402
import recemb.torch  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
VOCABULARY, DIM, BATCH = 40, 6, 8


def random_batch(rng):
    """Two features of one table: "ragged" (EmbeddingBag's values + offsets) and "dense"
    ([B, 3] ids; EmbeddingBag's 2-D input)."""
    lengths = rng.integers(0, 5, size=BATCH)
    lengths[2] = 0  # an empty bag
    values = rng.integers(0, VOCABULARY, size=lengths.sum())
    ragged = recemb.Ragged.from_row_lengths(torch.from_numpy(values), lengths)
    dense = torch.from_numpy(rng.integers(0, VOCABULARY, size=(BATCH, 3)))
    offsets = torch.from_numpy(np.asarray(ragged.row_splits[:-1]))
    return {"ragged": ragged, "dense": dense}, (ragged.values, offsets, dense)


class Pair:
    """The recemb module and the torch reference, trained side by side with the same head."""

    def __init__(self, seed, mode, torch_optimizer):
        rng = np.random.default_rng(seed)
        self.rng = rng
        initial = rng.normal(size=(VOCABULARY, DIM)).astype(np.float32)
        table = recemb.TableConfig(VOCABULARY, DIM, initializer=initial, combiner=mode,
                                   name="table")
        self.bag = torch.nn.EmbeddingBag(VOCABULARY, DIM, mode=mode, sparse=True)
        with torch.no_grad():
            self.bag.weight.copy_(torch.from_numpy(initial))
        self.torch_optimizer = torch_optimizer(self.bag.parameters())
        self.module = recemb.torch.Embedding(
            {"ragged": recemb.FeatureConfig(table), "dense": recemb.FeatureConfig(table)},
            recemb.torch.translate_optimizer(self.torch_optimizer))
        self.head = torch.from_numpy(rng.normal(size=(2 * DIM,)).astype(np.float32))

    def loss(self, first, second):
        return ((torch.cat([first, second], dim=1) @ self.head - 1.0) ** 2).mean()

    def recemb_loss(self, features):
        out = self.module(features)
        return self.loss(out["ragged"], out["dense"]), out

    def torch_step(self, reference_inputs):
        values, offsets, dense = reference_inputs
        loss = self.loss(self.bag(values, offsets), self.bag(dense))
        self.torch_optimizer.zero_grad()
        loss.backward()
        self.torch_optimizer.step()
        return loss

    def assert_tables_match(self):
        np.testing.assert_allclose(self.module.embedding_tables["table"].numpy(),
                                   self.bag.weight.detach().numpy(), rtol=RTOL, atol=ATOL)


OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.05),
    # recemb's Adagrad has no epsilon: torch's eps=1e-10 next to an accumulator >= 0.1 changes
    # nothing in float32 (translate_optimizer accepts eps <= 2^-24 * sqrt(0.1)).
    "adagrad": lambda params: torch.optim.Adagrad(params, lr=0.3, initial_accumulator_value=0.1,
                                                  eps=1e-10),
    "sparse_adam": lambda params: torch.optim.SparseAdam(list(params), lr=0.05),
}


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_matches_embedding_bag_and_torch_optimizer(mode, optimizer):
    pair = Pair(zlib.crc32(f"{mode}/{optimizer}".encode()), mode, OPTIMIZERS[optimizer])
    for step in range(6):
        features, reference_inputs = random_batch(pair.rng)
        loss, out = pair.recemb_loss(features)
        assert out["ragged"].requires_grad and out["ragged"].dtype == torch.float32
        with torch.no_grad():  # an evaluation pass in between changes nothing
            evaluation = pair.module(random_batch(pair.rng)[0])
            assert not evaluation["dense"].requires_grad
        loss.backward()
        reference_loss = pair.torch_step(reference_inputs)
        assert float(loss) == pytest.approx(float(reference_loss), rel=1e-5)
        pair.assert_tables_match()
        assert pair.module.step == step + 1
    if optimizer == "adagrad":
        accumulators = pair.torch_optimizer.state[pair.bag.weight]["sum"].to_dense().numpy()
        np.testing.assert_allclose(pair.module.slot_variables["table"]["accumulators"].numpy(),
                                   accumulators, rtol=RTOL, atol=ATOL)


def test_prefetch_gives_the_forward_results_bitwise():
    """The loop with prefetch (the next batch's lookup started before this step's backward)
    gives the same losses, tables and slots as the plain loop, bitwise; a forward of other
    inputs than the prefetched ones drops the prefetch and looks them up."""
    data = [random_batch(np.random.default_rng([5, step]))[0] for step in range(5)]

    def train(prefetch):
        pair = Pair(11, "mean", OPTIMIZERS["adagrad"])
        losses = []
        if prefetch:
            pair.module.prefetch(data[0])
        for step, features in enumerate(data):
            loss, _ = pair.recemb_loss(features)
            if prefetch and step + 1 < len(data):
                pair.module.prefetch(data[step + 1])
            loss.backward()
            losses.append(loss.detach().numpy().tobytes())
        return losses, pair.module.state_dict()

    plain_losses, plain_state = train(prefetch=False)
    losses, state = train(prefetch=True)
    assert losses == plain_losses
    assert state.keys() == plain_state.keys()
    for key, value in plain_state.items():
        assert state[key].numpy().tobytes() == value.numpy().tobytes(), key

    pair = Pair(11, "mean", OPTIMIZERS["adagrad"])
    pair.module.prefetch(data[1])
    loss, out = pair.recemb_loss(data[0])  # not the prefetched inputs
    expected, _ = Pair(11, "mean", OPTIMIZERS["adagrad"]).recemb_loss(data[0])
    assert loss.detach().numpy().tobytes() == expected.detach().numpy().tobytes()


def test_each_forward_applies_its_own_batch():
    pair = Pair(7, "sum", OPTIMIZERS["adagrad"])
    first, first_reference = random_batch(pair.rng)
    second, _ = random_batch(pair.rng)
    loss, _ = pair.recemb_loss(first)
    unused_loss, _ = pair.recemb_loss(second)  # a grad-mode forward that is never backwarded
    loss.backward()
    pair.torch_step(first_reference)
    pair.assert_tables_match()
    with pytest.raises(RuntimeError):  # retain_graph or not, a batch is applied once
        loss2, _ = pair.recemb_loss(first)
        loss2.backward(retain_graph=True)
        loss2.backward()


def test_unused_outputs_get_no_gradient_but_count_as_touched():
    table = recemb.TableConfig(5, 2, initializer="ones", combiner="sum", name="t")
    module = recemb.torch.Embedding({"a": recemb.FeatureConfig(table),
                                     "b": recemb.FeatureConfig(table)}, "sgd")
    out = module({"a": torch.tensor([1]), "b": torch.tensor([2])})
    out["a"].sum().backward()
    np.testing.assert_allclose(module.embedding_tables["t"][1].numpy(), [0.99, 0.99])
    np.testing.assert_array_equal(module.embedding_tables["t"][2].numpy(), [1, 1])
    assert module.step == 1


def test_inputs_may_be_numpy_or_torch_sparse_and_single_feature():
    table = recemb.TableConfig(6, 2, initializer=recemb.initializers.RowId(), combiner="sum")
    module = recemb.torch.Embedding(recemb.FeatureConfig(table), recemb.optimizers.SGD(0.1))
    sparse = torch.sparse_coo_tensor(torch.tensor([[1, 0], [2, 0]]), torch.tensor([4, 5]),
                                     (2, 3))
    out = module(sparse)
    assert isinstance(out, torch.Tensor)
    np.testing.assert_array_equal(out.detach().numpy(), [[5, 5], [4, 4]])
    out.sum().backward()
    np.testing.assert_allclose(module.embedding_tables["table_0"][4].numpy(), [3.9, 3.9])
    out = module(np.array([[1, 2]]), weights=torch.tensor([[1.0, 0.5]]))
    np.testing.assert_allclose(out.detach().numpy(), [[2.0, 2.0]])


def make_module(optimizer):
    video = recemb.TableConfig(30, 4, name="video")
    user = recemb.TableConfig(10, 3, name="user", optimizer=recemb.optimizers.SGD(0.5))
    return recemb.torch.Embedding({"v": recemb.FeatureConfig(video),
                                   "u": recemb.FeatureConfig(user)}, optimizer)


def train(module, rng, steps):
    for _ in range(steps):
        out = module({"v": torch.from_numpy(rng.integers(0, 30, size=(4, 2))),
                      "u": torch.from_numpy(rng.integers(0, 10, size=4))})
        (out["v"].sum() + (out["u"] ** 2).sum()).backward()


def test_state_dict_round_trip():
    schedule = recemb.schedules.ExponentialDecay(initial_learning_rate=0.3, decay_steps=1,
                                                 decay_rate=0.5)
    trained = make_module(recemb.optimizers.Adagrad(learning_rate=schedule))
    train(trained, np.random.default_rng(0), 3)
    state = trained.state_dict()
    assert sorted(state) == ["step", "user.parameters", "video.accumulators",
                             "video.parameters"]
    assert int(state["step"]) == 3
    assert np.shares_memory(state["video.parameters"].numpy(),
                            trained.embedding_tables["video"].numpy())
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    restored = make_module(recemb.optimizers.Adagrad(learning_rate=schedule))
    restored.load_state_dict(torch.load(buffer))
    assert restored.step == 3
    for key, value in trained.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key
    # Training on continues identically: the schedule resumes at step 3.
    train(trained, np.random.default_rng(1), 2)
    train(restored, np.random.default_rng(1), 2)
    for key, value in trained.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key

    wrapper = torch.nn.Sequential()
    wrapper.add_module("embedding", make_module("adagrad"))
    assert "embedding.video.accumulators" in wrapper.state_dict()
    wrapper.load_state_dict({f"embedding.{key}": value for key, value in state.items()})
    assert wrapper.embedding.step == 3


def test_checkpoint_holds_the_state_dict(tmp_path):
    """save / restore and state_dict / load_state_dict carry the same variables: each
    "<table>.<variable>" entry is a raw float32 file of the checkpoint, and "step" its step."""
    schedule = recemb.schedules.ExponentialDecay(initial_learning_rate=0.3, decay_steps=1,
                                                 decay_rate=0.5)
    trained = make_module(recemb.optimizers.Adagrad(learning_rate=schedule))
    train(trained, np.random.default_rng(2), 3)
    path = trained.save(tmp_path)
    state = trained.state_dict()
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["step"] == int(state["step"]) == 3
    files = {f"{table['config']['name']}.{variable['name']}": variable
             for table in manifest["tables"] for variable in table["variables"]}
    assert sorted(files) == sorted(key for key in state if key != "step")
    for key, variable in files.items():
        stored = np.fromfile(path / variable["file"], dtype="<f4").reshape(variable["shape"])
        np.testing.assert_array_equal(stored, state[key].numpy(), err_msg=key)

    restored = make_module(recemb.optimizers.Adagrad(learning_rate=schedule))
    assert restored.restore(tmp_path) == 3
    loaded = make_module(recemb.optimizers.Adagrad(learning_rate=schedule))
    loaded.load_state_dict(state)
    for key, value in state.items():
        assert torch.equal(restored.state_dict()[key], value), key
        assert torch.equal(loaded.state_dict()[key], value), key
    # Training continues identically after either.
    for module in (trained, restored, loaded):
        train(module, np.random.default_rng(3), 2)
    for key, value in trained.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key
        assert torch.equal(loaded.state_dict()[key], value), key


def test_export_serves_the_forward_lookup(tmp_path):
    module = make_module("adagrad")
    train(module, np.random.default_rng(4), 2)
    module.export(tmp_path / "model.recemb", dtype="float32")
    model = recemb.ServingModel.open(tmp_path / "model.recemb",
                                     feature_config=module.layer.feature_config)
    ids = {"v": np.random.default_rng(5).integers(0, 30, size=(4, 2)), "u": np.arange(4)}
    with torch.no_grad():
        expected = module(ids)
    for name, activation in model.lookup(ids).items():
        assert torch.equal(torch.from_numpy(activation), expected[name]), name


def test_load_state_dict_errors():
    module = make_module("adagrad")
    state = module.state_dict()
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*step"):
        module.load_state_dict({k: v for k, v in state.items() if k != "step"})
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*extra"):
        module.load_state_dict({**state, "extra": torch.zeros(1)})
    bad = dict(state)
    bad["video.parameters"] = torch.zeros(4, 30)
    with pytest.raises(RuntimeError, match="size mismatch for video.parameters"):
        module.load_state_dict(bad)
    bad["video.parameters"] = torch.full((30, 4), float("nan"))
    with pytest.raises(RuntimeError, match="non-finite"):
        module.load_state_dict(bad)


def dummy():
    return [torch.zeros(1, requires_grad=True)]


def test_translate_optimizer():
    sgd = recemb.torch.translate_optimizer(torch.optim.SGD(dummy(), lr=0.25))
    assert isinstance(sgd, recemb.optimizers.SGD) and sgd.learning_rate == 0.25
    adagrad = recemb.torch.translate_optimizer(
        torch.optim.Adagrad(dummy(), lr=0.1, initial_accumulator_value=0.5))
    assert (adagrad.learning_rate, adagrad.initial_accumulator_value) == (0.1, 0.5)
    adam = recemb.torch.translate_optimizer(torch.optim.Adam(dummy(), lr=0.01, betas=(0.8, 0.9)))
    assert (adam.beta_1, adam.beta_2, adam.lazy_adam, adam.bias_correction,
            adam.sum_inside_sqrt) == (0.8, 0.9, False, True, False)
    sparse_adam = recemb.torch.translate_optimizer(torch.optim.SparseAdam(dummy(), lr=0.01))
    assert sparse_adam.lazy_adam and sparse_adam.epsilon == 1e-8
    module = recemb.torch.Embedding(recemb.FeatureConfig(recemb.TableConfig(3, 2)),
                                    torch.optim.SGD(dummy(), lr=0.5))
    assert module.layer.optimizer.learning_rate == 0.5


@pytest.mark.parametrize("make,message", [
    (lambda: torch.optim.SGD(dummy(), lr=0.1, momentum=0.9), "momentum=0.9"),
    (lambda: torch.optim.SGD(dummy(), lr=0.1, momentum=0.9, nesterov=True), "nesterov=True"),
    (lambda: torch.optim.SGD(dummy(), lr=0.1, weight_decay=0.01), "weight_decay=0.01"),
    (lambda: torch.optim.SGD(dummy(), lr=0.1, maximize=True), "maximize=True"),
    (lambda: torch.optim.Adam(dummy(), amsgrad=True), "amsgrad=True"),
    (lambda: torch.optim.Adam(dummy(), weight_decay=0.1), "weight_decay"),
    (lambda: torch.optim.Adagrad(dummy()), "initial_accumulator_value=0.0"),
    (lambda: torch.optim.Adagrad(dummy(), initial_accumulator_value=0.1, eps=1e-3), "eps=0.001"),
    (lambda: torch.optim.Adagrad(dummy(), initial_accumulator_value=0.1, lr_decay=0.1),
     "lr_decay"),
    (lambda: torch.optim.RMSprop(dummy()), "cannot translate torch.optim.rmsprop.RMSprop"),
    (lambda: torch.optim.SGD([{"params": dummy(), "lr": 0.1}, {"params": dummy(), "lr": 0.2}],
                             lr=0.1), r"param groups differ in \['lr'\]"),
])
def test_translate_optimizer_rejects_what_recemb_cannot_honour(make, message):
    with pytest.raises(ValueError, match=message):
        recemb.torch.translate_optimizer(make())


def test_eval_mode_forward_is_a_pure_lookup():
    pair = Pair(71, "sum", OPTIMIZERS["sgd"])
    features, (values, offsets, dense) = random_batch(pair.rng)
    pair.module.eval()
    out = pair.module(features)  # grad enabled, but eval mode: nothing to apply later
    assert not out["ragged"].requires_grad and not out["dense"].requires_grad
    with torch.no_grad():
        np.testing.assert_allclose(out["ragged"].numpy(), pair.bag(values, offsets).numpy(),
                                   rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(out["dense"].numpy(), pair.bag(dense).numpy(), rtol=RTOL,
                                   atol=ATOL)
    pair.module.train()
    loss, out = pair.recemb_loss(features)
    assert out["dense"].requires_grad
    loss.backward()
    pair.torch_step((values, offsets, dense))
    pair.assert_tables_match()
    assert pair.module.step == 1


class _Model(torch.nn.Module):
    """A recemb embedding and a dense head, as a user's model holds them (module level, so that
    torch.save can pickle it)."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = embedding
        self.head = torch.nn.Linear(2 * DIM, 1)

    def forward(self, features):
        out = self.embedding(features)
        return self.head(torch.cat([out["ragged"], out["dense"]], dim=1)).squeeze(1)


def _train_step(model, optimizer, features):
    loss = (model(features) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _assert_same_state(model, other):
    mine, theirs = model.state_dict(), other.state_dict()
    assert mine.keys() == theirs.keys()
    for key, value in mine.items():
        assert value.numpy().tobytes() == theirs[key].numpy().tobytes(), key


@pytest.mark.parametrize("how", ["deepcopy", "torch.save"])
def test_deepcopy_and_torch_save_give_an_independent_module_with_the_same_state(how):
    import copy

    rng = np.random.default_rng(72)
    torch.manual_seed(72)
    table = recemb.TableConfig(VOCABULARY, DIM, name="table")
    model = _Model(recemb.torch.Embedding(
        {"ragged": recemb.FeatureConfig(table), "dense": recemb.FeatureConfig(table)},
        recemb.optimizers.Adagrad(learning_rate=0.2), seed=4))
    dense_optimizer = torch.optim.SGD(model.head.parameters(), lr=0.1)
    for _ in range(2):
        _train_step(model, dense_optimizer, random_batch(rng)[0])
    model.embedding.prefetch(random_batch(rng)[0])  # pending: not part of the state
    if how == "deepcopy":
        other = copy.deepcopy(model)
    else:
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        other = torch.load(buffer, weights_only=False)
    _assert_same_state(model, other)
    assert other.embedding.step == 2
    assert repr(other) == repr(model)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    features = random_batch(rng)[0]
    _train_step(other, torch.optim.SGD(other.head.parameters(), lr=0.1), features)
    for key, value in model.state_dict().items():  # training the copy leaves the original
        assert value.numpy().tobytes() == before[key].numpy().tobytes(), key
    _train_step(model, dense_optimizer, features)  # the same step from the same state
    _assert_same_state(model, other)
    assert model.embedding.step == other.embedding.step == 3


def test_repr_shows_tables_features_and_optimizer():
    video = recemb.TableConfig(1000, 16, name="video")
    user = recemb.TableConfig(500, 8, name="user", optimizer=recemb.optimizers.SGD(0.5))
    module = recemb.torch.Embedding(
        {"watched": recemb.FeatureConfig(video), "user_id": recemb.FeatureConfig(user)},
        recemb.optimizers.Adagrad(learning_rate=0.1))
    assert module.embedding_tables[video].shape == (1000, 16)
    with pytest.raises(KeyError, match=r"no table named 'audio'; the tables are \['user', "
                                       r"'video'\]"):
        module.embedding_tables["audio"]
    assert repr(module) == (
        "Embedding(tables={'user': (500, 8, SGD(learning_rate=0.5)), 'video': (1000, 16)}, "
        "features=['user_id', 'watched'], optimizer=Adagrad(learning_rate=0.1))")


def test_tf_pipelining_flag_selects_one_step_staleness():
    table = recemb.TableConfig(10, 4)
    for flag, staleness in ((True, "one_step"), (False, "none")):
        module = recemb.torch.Embedding(recemb.FeatureConfig(table),
                                        pipeline_execution_with_tensor_core=flag)
        chosen = module.layer._options["pipeline_staleness"]
        assert recemb._recemb.pipeline_staleness_name(chosen) == staleness


def test_a_custom_model_is_served_by_recemb_rows_and_a_torchscript_mlp(tmp_path):
    """docs/python.md, "Serving a custom torch model": the rows from recemb's serving file
    (ServingModel.lookup) and the dense part as TorchScript reproduce the trained model's
    predictions on held-out examples; the MLP's weights also travel in the file's extra_arrays."""
    rng = np.random.default_rng(5)
    torch.manual_seed(5)
    user = recemb.TableConfig(vocabulary_size=40, dim=4, name="user")
    item = recemb.TableConfig(vocabulary_size=60, dim=6, name="item", combiner="sum")
    features = {"user": recemb.FeatureConfig(user, name="user"),
                "items": recemb.FeatureConfig(item, name="items")}
    embedding = recemb.torch.Embedding(features, recemb.optimizers.Adagrad(learning_rate=0.1))
    mlp = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(mlp.parameters(), lr=0.01)

    def examples(count):
        ids = {"user": rng.integers(0, 40, size=count),
               "items": recemb.Ragged.from_lists([rng.integers(0, 60, size=rng.integers(1, 5))
                                                  for _ in range(count)])}
        labels = torch.from_numpy((ids["user"] % 2).astype(np.float32)).reshape(-1, 1)
        return ids, labels

    def predict(rows):
        return mlp(torch.cat([rows["user"], rows["items"]], dim=1))

    for _ in range(20):
        ids, labels = examples(32)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(predict(embedding(ids)),
                                                                    labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert embedding.step == 20

    embedding.export(tmp_path / "model.recemb", extra_arrays=mlp.state_dict(),
                     metadata={"dense": "Linear(10, 16), ReLU, Linear(16, 1)"})
    torch.jit.script(mlp).save(str(tmp_path / "mlp.pt"))
    served_rows = recemb.ServingModel.open(tmp_path / "model.recemb", feature_config=features)
    served_mlp = torch.jit.load(str(tmp_path / "mlp.pt"))
    rebuilt = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    rebuilt.load_state_dict({name: torch.from_numpy(values.copy())
                             for name, values in served_rows.extra_arrays.items()})

    held_out, _ = examples(50)
    embedding.eval()
    with torch.no_grad():
        trained = predict(embedding(held_out))
        rows = served_rows.lookup(held_out)
        dense_input = torch.from_numpy(np.concatenate([rows["user"], rows["items"]], axis=1))
        served = served_mlp(dense_input)
        from_file_alone = rebuilt(dense_input)
    assert embedding.step == 20  # evaluation changed nothing
    torch.testing.assert_close(served, trained, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(from_file_alone, trained, rtol=1e-6, atol=1e-7)
    assert trained.std() > 0  # predictions that depend on the examples


def test_dense_gradients_synced_with_torch_distributed_under_mpirun():
    """docs/python.md, "Dense layers under mpirun": 2 ranks of a recemb.torch model whose MLP's
    gradients are summed with torch.distributed (gloo) keep the MLP the same on both ranks, and
    the MLP and the tables equal the one-process run (mpi_torch_dense_script.py checks)."""
    from mpi_jobs import mpi_skip_reason, run_mpi_job
    if mpi_skip_reason() is not None:
        pytest.skip(mpi_skip_reason())
    import socket
    with socket.socket() as probe:  # a free port for gloo's rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    returncode, stdout, stderr, _ = run_mpi_job(2, "mpi_torch_dense_script.py", str(port),
                                                timeout=180)
    assert returncode == 0, stdout + stderr
    assert "rank 0 of 2: ok" in stdout and "rank 1 of 2: ok" in stdout, stdout + stderr
