"""MPI jobs of Python processes (mpi_rank_exit_script.py under `mpirun -np 2`): a rank that
leaves (an uncaught exception, sys.exit, SystemExit, or exit 0 skipping the others' collectives)
ends the whole job within seconds, with a non-zero status and a message naming it, where the job
used to hang forever; ranks that finish at different times are not ended; a check made in Python
that fails on one rank reaches every rank with its own message. Also: a layer without a
communicator in a process an MPI launcher started among several warns."""

import warnings

import pytest

import recemb
from recemb import placement

from mpi_jobs import needs_mpi, run_mpi_job

TIMEOUT_SECONDS = 60  # a job that hangs fails the test after this long


def run_job(case):
    """(exit status, stdout + stderr, seconds) of the 2-rank job of `case`."""
    returncode, stdout, stderr, seconds = run_mpi_job(2, "mpi_rank_exit_script.py", case,
                                                      timeout=TIMEOUT_SECONDS)
    return returncode, stdout + stderr, seconds


@needs_mpi
@pytest.mark.parametrize("case, status", [("raise", 1), ("sys_exit_1", 1), ("system_exit_7", 7),
                                          ("exit_0", 0)])
def test_a_rank_that_leaves_ends_the_job_within_seconds(case, status):
    returncode, output, seconds = run_job(case)
    assert returncode != 0, output
    assert seconds < 30, output
    # Rank 0, waiting in the lookup of step 2, names rank 1 and ends the job.
    assert (f"rank 1 left the MPI job (exit status {status}) without taking part in the "
            f"exchange") in output, output
    assert "recemb: rank 0: ending the MPI job (MPI_Abort)" in output, output
    assert "rank 0: done" not in output, output
    if case == "raise":
        assert "RuntimeError: a bug in the dense model of rank 1" in output, output


@needs_mpi
def test_a_rank_that_goes_on_after_a_rank_left_gets_errors_then_ends_the_job():
    returncode, output, seconds = run_job("exit_0_caught")
    assert returncode != 0, output
    assert seconds < 30, output
    assert ("rank 0: step 2: rank 1 left the MPI job (exit status 0) without taking part in the "
            "exchange") in output, output
    for t in (3, 4):
        assert (f"rank 0: step {t}: mpi_communicator: no more exchanges on this rank, which ends "
                f"the MPI job when it exits: an earlier one failed: rank 1 left the MPI job") \
            in output, output
    assert "rank 0: done" in output, output
    assert "recemb: rank 0: ending the MPI job (MPI_Abort)" in output, output


@needs_mpi
def test_ranks_that_finish_at_different_times_are_not_ended():
    returncode, output, seconds = run_job("busy")
    assert returncode == 0, output
    assert seconds >= 5, output
    assert "rank 0: done" in output, output


@needs_mpi
def test_a_check_failing_on_one_rank_gives_every_rank_its_message():
    returncode, output, _ = run_job("agreement")
    assert returncode == 0, output
    messages = {
        "float ids": "feature 'a': ids must be integers, got dtype float64",
        "gradient shape": "feature 'b': gradient of shape (3, 3), expected the activation's "
                          "shape (16, 8)",
        "missing feature": "features: keys do not match the feature config (missing ['b'], "
                           "unexpected [])"}
    try:
        import recemb.torch  # noqa: F401
        messages["torch float ids"] = messages["float ids"]
        messages["torch missing feature"] = messages["missing feature"]
    except ImportError:
        pass
    for case, message in messages.items():
        assert f"rank 1: {case}: ValueError: {message}" in output, output
        assert f"rank 0: {case}: InvalidArgument: rank 1: {message}" in output, output
    # The failed apply_gradients counted no step and left the batch applicable: 5 steps, the
    # batch applied after it, and the last.
    for rank in range(2):
        assert f"rank {rank}: steps after the errors: 7" in output, output


def make_layer(**options):
    table = recemb.TableConfig(vocabulary_size=10, dim=4, name="t")
    return recemb.Embedding({"a": recemb.FeatureConfig(table=table)}, optimizer="sgd", **options)


@pytest.mark.parametrize("variable", ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"])
def test_a_layer_without_communicator_under_mpirun_warns_once(monkeypatch, variable):
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.delenv("PMI_SIZE", raising=False)
    monkeypatch.setenv(variable, "2")
    monkeypatch.setattr(placement, "_warned_launched_among_several", False)
    with pytest.warns(RuntimeWarning) as record:
        make_layer()
    assert len(record) == 1
    assert str(record[0].message).startswith(
        "this process is one of 2 that an MPI launcher (mpirun) started, but the layer has no "
        "communicator: each process trains a model of its own on its own batches. Pass "
        "communicator=\"mpi\"")
    assert record[0].filename == __file__  # the line that built the layer
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_layer()  # once per process


@pytest.mark.parametrize("environment", [{}, {"OMPI_COMM_WORLD_SIZE": "1"}, {"PMI_SIZE": "1"},
                                         {"OMPI_COMM_WORLD_SIZE": "2", "communicator": "local"}])
def test_no_warning_alone_or_with_a_communicator(monkeypatch, environment):
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.delenv("PMI_SIZE", raising=False)
    environment = dict(environment)
    local = environment.pop("communicator", None) == "local"
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(placement, "_warned_launched_among_several", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_layer(communicator=recemb.local_communicator() if local else None)
