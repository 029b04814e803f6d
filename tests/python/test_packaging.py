"""test_packaging.py — what an installed mok does about NCCL before it loads anything: with a
torch whose NCCL wheel differs from the one libmok was built against, `import mok` warns
(NcclMismatchWarning, with the fix) and loading the library (mok._capi) refuses with the same
message; with the same NCCL, both are silent. A fake torch and nvidia.nccl on the path stand in
for the real ones (nothing is imported from them), so this needs neither torch nor a GPU."""
import os
import subprocess
import sys

import importlib.util

HERE = os.path.dirname(os.path.abspath(__file__))
# the mok under test: the source checkout's python/ when there is one, else the installed package
SOURCE = os.path.join(HERE, "..", "..", "python")
if os.path.isdir(os.path.join(SOURCE, "mok")):
    PKG_PARENT = SOURCE
else:
    PKG_PARENT = os.path.dirname(os.path.dirname(importlib.util.find_spec("mok").origin))


def _fake_env(tmp_path, code):
    """A site folder with an empty torch package and an nvidia.nccl wheel of NCCL_VERSION_CODE
    code, and a libmok whose record says 22809 (NCCL 2.28.9)."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("raise ImportError('not the real torch')\n")
    nccl = site / "nvidia" / "nccl"
    (nccl / "include").mkdir(parents=True)
    (nccl / "include" / "nccl.h").write_text(f"#define NCCL_VERSION_CODE {code}\n")
    (site / "nvidia" / "__init__.py").write_text("")
    (nccl / "__init__.py").write_text("")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libmok.so").write_bytes(b"")  # never loaded: the check refuses first, or we stop
    (lib / "libmok.nccl").write_text("nccl_version_code=22809 nccl_home=/x nccl_libdir=/x/lib\n")
    return site, lib


def _run(site, lib, code):
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{PKG_PARENT}",
               MOK_LIBRARY=str(lib / "libmok.so"))
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)


def test_mismatch_warns_on_import_and_refuses_to_load(tmp_path):
    site, lib = _fake_env(tmp_path, 23007)
    r = _run(site, lib, "import mok")
    assert r.returncode == 0, r.stderr
    assert "NcclMismatchWarning" in r.stderr and "NCCL 2.28.9" in r.stderr and \
        "NCCL 2.30.7" in r.stderr and "pip install --force-reinstall" in r.stderr, r.stderr
    r = _run(site, lib, "import mok._capi")
    assert r.returncode != 0 and "ImportError" in r.stderr and "NCCL 2.30.7" in r.stderr, r.stderr


def test_same_nccl_is_silent(tmp_path):
    site, lib = _fake_env(tmp_path, 22809)
    r = _run(site, lib, "import mok; from mok import _library; "
                        "print(_library.mismatch(_library.find_library()))")
    assert r.returncode == 0 and r.stdout.strip() == "None" and "Warning" not in r.stderr, r.stderr
