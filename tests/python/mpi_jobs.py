"""Jobs of Python scripts under `mpirun` for the tests: whether they can run here, and one run,
bounded in time."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import recemb

HERE = os.path.dirname(os.path.abspath(__file__))


def mpi_skip_reason():
    if shutil.which("mpirun") is None:
        return "mpirun is not installed (openmpi-bin)"
    if not recemb.mpi_available():
        return "recemb was built without MPI (recemb.mpi_available() is False)"
    return None


needs_mpi = pytest.mark.skipif(mpi_skip_reason() is not None, reason=str(mpi_skip_reason()))


def run_mpi_job(num_processes, script, *arguments, timeout):
    """(exit status, stdout, stderr, seconds) of `mpirun -np num_processes` running the script
    `script` of this directory with `arguments`; the test fails if the job has not ended after
    `timeout` seconds (the job is then killed)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(recemb.__file__)))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [package, HERE,
                                                        os.environ.get("PYTHONPATH")])))
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(num_processes),
               sys.executable, os.path.join(HERE, script), *arguments]
    start = time.monotonic()
    # A session of its own, so that a timeout ends mpirun and every rank it started.
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            pytest.fail(f"{' '.join(command)}: the job hung ({timeout} s)\n{stdout}\n{stderr}")
    return process.returncode, stdout, stderr, time.monotonic() - start
