"""setup.py — the part of the package build that pyproject.toml cannot say: before the Python
files are copied, run the Makefile's library build against the NCCL of the environment being
installed into (the nvidia-nccl wheel that its torch loads, when it has one), then put libmok.so
and its NCCL record (libmok.nccl) inside the package, where mok._capi looks first.

NCCL_HOME set by the caller wins; CUDA_HOME picks the toolkit as in the Makefile. A wheel built
here (python -m build) carries the library built against this environment's NCCL."""
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


def target_nccl_home():
    """The nvidia.nccl package of the interpreter that runs this build, as that interpreter sees
    its own site-packages (pip's isolated build hides them from this process: ask a fresh one
    without the isolation's variables)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME")}
    probe = "import nvidia.nccl as n; print(list(n.__path__)[0])"
    try:
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    path = out.stdout.strip()
    if out.returncode == 0 and os.path.exists(os.path.join(path, "include", "nccl.h")):
        return path
    return None


class BuildWithLibrary(build_py):
    def run(self):
        cmd = ["make", "-C", ROOT, f"-j{os.cpu_count() or 2}", "build/libmok.so"]
        if "NCCL_HOME" not in os.environ:
            home = target_nccl_home()
            if home:
                cmd.append(f"NCCL_HOME={home}")
        print("mok: " + " ".join(cmd), flush=True)
        subprocess.check_call(cmd)
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
