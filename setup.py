"""setup.py — the part of the package build that pyproject.toml cannot say: before the Python
files are copied, run the Makefile's library build with this interpreter as its PYTHON, so that
it picks the NCCL of the environment being installed into (the nvidia-nccl wheel its torch
loads, when it has one), then put libmok.so and its NCCL record (libmok.nccl) inside the
package, where mok._capi looks first.

NCCL_HOME and CUDA_HOME set by the caller reach the Makefile as usual. A wheel built
here (python -m build) carries the library built against this environment's NCCL."""
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    def run(self):
        # the Makefile finds the NCCL wheel through PYTHON: this interpreter, with pip's
        # build-isolation variables removed so that it sees its own site-packages (the torch
        # the package is installed beside)
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
        cmd = ["make", "-C", ROOT, f"-j{os.cpu_count() or 2}", f"PYTHON={sys.executable}",
               "build/libmok.so"]
        print("mok: " + " ".join(cmd), flush=True)
        subprocess.check_call(cmd, env=env)
        super().run()
        dest = os.path.join(self.build_lib, "mok")
        os.makedirs(dest, exist_ok=True)
        for name in ("libmok.so", "libmok.nccl"):
            shutil.copy2(os.path.join(ROOT, "build", name), os.path.join(dest, name))


class WithLibrary(Distribution):
    """The package holds a compiled library: its wheel is tagged for this platform, not 'any'."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=WithLibrary)
