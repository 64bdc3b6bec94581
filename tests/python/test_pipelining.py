"""Embedding.prefetch / finish_lookup against the unpipelined layer: bitwise the same with
pipeline_staleness="none", the rows of the step before with "one_step"; errors; several ranks."""

import numpy as np
import pytest

import recemb
import sharded_problem as problem

SEED = 4242
STEPS = 5


def make_layer(**kwargs):
    features, optimizer = problem.make_features()
    return recemb.Embedding(features, optimizer, seed=SEED, num_threads=2, **kwargs)


def batches(rank=0, world_size=1):
    """(ids, weights, gradients) of each step: rank `rank`'s slice of the global batches, with
    random gradients drawn for the global batch's shapes (independent of the activations)."""
    first, last = problem.example_range(rank, world_size)
    shapes = {name: value.shape for name, value in make_layer()(
        *problem.global_batch(SEED, 0)).items()}
    result = []
    for step in range(STEPS):
        ids, weights = problem.global_batch(SEED, step)
        shaped = {name: np.empty(shape, np.float32) for name, shape in shapes.items()}
        gradients = problem.gradients(SEED, step, shaped)
        result.append((problem.take_all(ids, first, last), problem.take_all(weights, first, last),
                       problem.take_all(gradients, first, last)))
    return result


def state(layer):
    return {(name, slot): np.array(values) for name, slots in layer.slot_variables.items()
            for slot, values in slots.items()} | {
        (name, "parameters"): np.array(table) for name, table in layer.embedding_tables.items()}


def copies(activations):
    return {name: np.array(value) for name, value in activations.items()}


def serial(layer, data, lookup_ahead=False):
    """The activations of each step of the usual loop (lookup t, apply t), or with lookup_ahead
    of the loop a one-step-stale pipeline must equal (lookup t + 1 before apply t)."""
    history, batch = [], recemb.LookupBatch()
    activations = layer.lookup(data[0][0], data[0][1], batch=batch)
    for step, (_, _, gradients) in enumerate(data):
        history.append(copies(activations))
        if lookup_ahead and step + 1 < len(data):
            following = recemb.LookupBatch()
            activations = layer.lookup(data[step + 1][0], data[step + 1][1], batch=following)
            layer.apply_gradients(gradients, batch)
            batch = following
        else:
            layer.apply_gradients(gradients, batch)
            if step + 1 < len(data):
                activations = layer.lookup(data[step + 1][0], data[step + 1][1], batch=batch)
    return history


def pipelined(layer, data):
    """The activations of each step of the pipelined loop: prefetch t + 1, apply t, finish t + 1."""
    history = []
    batch = layer.prefetch(data[0][0], data[0][1])
    activations = layer.finish_lookup(batch)
    for step, (_, _, gradients) in enumerate(data):
        history.append(copies(activations))
        following = (layer.prefetch(data[step + 1][0], data[step + 1][1])
                     if step + 1 < len(data) else None)
        layer.apply_gradients(gradients, batch)
        if following is not None:
            activations = layer.finish_lookup(following)
            batch = following
    return history


def assert_bitwise_equal(actual, expected):
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(actual[key], value, err_msg=str(key))
        assert actual[key].tobytes() == value.tobytes(), key


@pytest.mark.parametrize("placement", [None, problem.placement("row_wise", 3)],
                         ids=["whole", "row_wise_3"])
def test_no_staleness_equals_the_unpipelined_layer_bitwise(placement):
    data = batches()
    reference = make_layer(placement=placement)
    expected = serial(reference, data)
    layer = make_layer(placement=placement, pipeline_staleness="none")
    actual = pipelined(layer, data)
    for step, (got, want) in enumerate(zip(actual, expected)):
        assert_bitwise_equal(got, want)
    assert_bitwise_equal(state(layer), state(reference))
    assert layer.step == reference.step == STEPS


def test_one_step_staleness_reads_the_rows_before_the_last_update():
    data = batches()
    fresh = serial(make_layer(), data)
    expected = serial(make_layer(), data, lookup_ahead=True)
    layer = make_layer(pipeline_staleness="one_step")
    actual = pipelined(layer, data)
    for got, want in zip(actual, expected):
        assert_bitwise_equal(got, want)
    assert any(not np.array_equal(actual[-1][name], fresh[-1][name]) for name in fresh[-1])
    reference = make_layer()
    serial(reference, data)
    assert_bitwise_equal(state(layer), state(reference))  # the same updates (fixed gradients)
    # TF's name of the same choice.
    tf_layer = make_layer(pipeline_execution_with_tensor_core=True)
    for got, want in zip(pipelined(tf_layer, data), expected):
        assert_bitwise_equal(got, want)


def test_errors():
    layer = make_layer()
    before = state(layer)
    ids, weights, _ = batches()[0]
    bad = {**ids, "user_id": np.where(np.arange(len(ids["user_id"])) == 2, 99, ids["user_id"])}
    batch = layer.prefetch(bad, weights)
    with pytest.raises(ValueError, match="feature 'user_id'.*99"):
        layer.finish_lookup(batch)
    assert not batch.applicable
    assert_bitwise_equal(state(layer), before)
    with pytest.raises(RuntimeError, match="prefetch"):
        layer.finish_lookup(batch)  # completed already
    with pytest.raises(RuntimeError, match="prefetch"):
        layer.finish_lookup(recemb.LookupBatch())
    # Checks made in Python raise at once, before anything starts.
    with pytest.raises(ValueError, match="liked"):
        layer.prefetch({name: value for name, value in ids.items() if name != "liked"}, None)
    with pytest.raises(ValueError, match="pipeline_staleness='two': unknown pipeline_staleness "
                                         "'two'; valid names are 'none', 'one_step'"):
        make_layer(pipeline_staleness="two")
    with pytest.raises(ValueError, match="pipeline_staleness=1: unknown pipeline_staleness '1'; "
                                         "valid names are 'none', 'one_step'"):
        make_layer(pipeline_staleness=1)
    with pytest.raises(ValueError, match="pipeline_execution_with_tensor_core=False contradicts "
                                         "pipeline_staleness='one_step'"):
        make_layer(pipeline_staleness="one_step", pipeline_execution_with_tensor_core=False)
    # The layer still works.
    batch = layer.prefetch(ids, weights)
    np.testing.assert_array_equal(layer.finish_lookup(batch)["watched"],
                                  layer(ids, weights)["watched"])


def test_ranks_pipeline_and_agree_on_errors_while_a_prefetch_runs():
    """Two in-process ranks: the pipelined loop equals the unpipelined one bitwise, and a check
    made in Python failing on one rank while a prefetch is pending raises on both, changing
    nothing (the agreement waits for the prefetch's exchange)."""
    placement = problem.placement("row_wise", 2)

    def work(rank, communicator):
        data = batches(rank, 2)
        reference = make_layer(placement=placement, communicator=communicator)
        expected = serial(reference, data)
        layer = make_layer(placement=placement, communicator=communicator)
        actual = pipelined(layer, data)
        batch = layer.prefetch(data[0][0], data[0][1])
        layer.finish_lookup(batch)
        before = state(layer)
        pending = layer.prefetch(data[1][0], data[1][1])
        gradients = dict(data[0][2])
        if rank == 1:
            gradients["item"] = np.ones((1, 4), np.float32)
        with pytest.raises(ValueError) as error:
            layer.apply_gradients(gradients, batch)
        layer.finish_lookup(pending)
        after = state(layer)
        return actual, expected, before, after, str(error.value), state(reference)

    results = problem.run_ranks(2, work)
    for result in results:
        if isinstance(result, Exception):
            raise result
    for rank, (actual, expected, before, after, message, reference) in enumerate(results):
        for got, want in zip(actual, expected):
            assert_bitwise_equal(got, want)
        assert_bitwise_equal(after, before)
        assert_bitwise_equal(before, reference)  # nothing applied since the pipelined loop
        if rank == 1:
            assert "gradient of shape (1, 4)" in message
        else:
            assert message.startswith("rank 1: ") and "gradient of shape (1, 4)" in message
