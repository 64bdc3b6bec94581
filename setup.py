"""Builds the extension recemb._recemb with CMake (the only build system) for the interpreter
running pip; pyproject.toml holds the package metadata."""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # build/pip, at the depth of the Makefile's build trees: ccache's base_dir (Makefile) then
        # finds the files they compiled with the same flags.
        build = os.path.join(ROOT, "build", "pip")
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build, *generator,
                               "-DCMAKE_BUILD_TYPE=Release", "-DRECEMB_BUILD_TESTS=OFF",
                               "-DRECEMB_BUILD_BENCHMARKS=OFF", "-DRECEMB_BUILD_EXAMPLES=OFF",
                               "-DRECEMB_BUILD_PYTHON=ON",
                               f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", build, "--target", "_recemb", "--parallel",
                               str(os.cpu_count() or 1)])
        (built,) = glob.glob(os.path.join(build, "python", "recemb", "_recemb*.so"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[Extension("recemb._recemb", sources=[])], cmdclass={"build_ext": CMakeBuild})
