"""Builds the extension recemb._recemb with CMake (the only build system) for the interpreter
running pip, and recemb/_tf_ops.so (recemb.keras's TensorFlow ops) and recemb/_jax_ffi.so (its JAX
custom calls) when that interpreter imports tensorflow / jax; pyproject.toml holds the package
metadata."""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def _importable(module):
    """Whether this interpreter can import `module` (tensorflow, jax: then recemb.keras's ops or
    custom calls for it are built too)."""
    return subprocess.call([sys.executable, "-c", f"import {module}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # build/pip, at the depth of the Makefile's build trees: ccache's base_dir (Makefile) then
        # finds the files they compiled with the same flags.
        build = os.path.join(ROOT, "build", "pip")
        tensorflow, jax = _importable("tensorflow"), _importable("jax")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, *generator,
                               "-DCMAKE_BUILD_TYPE=Release", "-DRECEMB_BUILD_TESTS=OFF",
                               "-DRECEMB_BUILD_BENCHMARKS=OFF", "-DRECEMB_BUILD_EXAMPLES=OFF",
                               "-DRECEMB_BUILD_PYTHON=ON",
                               f"-DRECEMB_BUILD_TF_OPS={'ON' if tensorflow else 'OFF'}",
                               f"-DRECEMB_BUILD_JAX_FFI={'ON' if jax else 'OFF'}",
                               f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build, "--target", "_recemb", "--parallel",
                               str(os.cpu_count() or 1)])
        (built,) = glob.glob(os.path.join(build, "python", "recemb", "_recemb*.so"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)
        for wanted, library in ((tensorflow, "_tf_ops.so"), (jax, "_jax_ffi.so")):
            if wanted:  # beside the extension (docs/keras.md)
                shutil.copyfile(os.path.join(build, "python", "recemb", library),
                                os.path.join(os.path.dirname(target), library))


setup(ext_modules=[Extension("recemb._recemb", sources=[])], cmdclass={"build_ext": CMakeBuild})
