"""_library.py — where libmok.so is, and whether the NCCL it was built against is the one torch
will load. A process holds one libnccl.so.2: whichever of libmok and torch loads first decides it
for both, and a libmok built against another NCCL than torch's wheel fails later (an undefined
NCCL symbol on import, or MOK_ERR_NCCL when a group forms). The check reads files only: it
imports neither torch nor libmok, so `import mok` reports a mismatch before either is loaded."""
import importlib.util
import os
import re


def find_library():
    """libmok.so: MOK_LIBRARY if set, else the one inside this package (pip install), else the
    source checkout's build/ (PYTHONPATH=python or pip install -e)."""
    env = os.environ.get("MOK_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "libmok.so"),
                 os.path.join(here, "..", "..", "build", "libmok.so")):
        if os.path.exists(cand):
            return os.path.abspath(cand)
    raise OSError("libmok.so not found: `pip install .` in mok's source, or build it there with "
                  "`make` (then PYTHONPATH=python), or set MOK_LIBRARY")


def library_record(library_path):
    """{key: value} of the libmok.nccl file the build wrote beside library_path (nccl_version_code,
    nccl_home, nccl_libdir), or {} when there is none."""
    path = os.path.join(os.path.dirname(library_path), "libmok.nccl")
    try:
        with open(path) as f:
            return dict(item.split("=", 1) for item in f.read().split() if "=" in item)
    except OSError:
        return {}


def header_version(nccl_h):
    """NCCL_VERSION_CODE of an nccl.h, or None."""
    try:
        with open(nccl_h) as f:
            m = re.search(r"^#define\s+NCCL_VERSION_CODE\s+(\d+)", f.read(), re.M)
    except OSError:
        return None
    return int(m.group(1)) if m else None


def torch_nccl():
    """(version code, folder) of the nvidia-nccl wheel that torch in this environment loads, or
    None when torch or the wheel is absent (a torch without the wheel brings its own NCCL)."""
    try:
        if importlib.util.find_spec("torch") is None:
            return None
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = list(spec.submodule_search_locations)[0]
    code = header_version(os.path.join(folder, "include", "nccl.h"))  # the wheel ships its header
    return (code, folder) if code is not None else None


def mismatch(library_path):
    """A message when libmok's NCCL differs from torch's, else None."""
    record = library_record(library_path)
    theirs = torch_nccl()
    if not record or theirs is None or not record.get("nccl_version_code", "").isdigit():
        return None
    built = int(record["nccl_version_code"])
    if built == theirs[0]:
        return None
    def text(code):
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return (f"mok: {library_path} was built against NCCL {text(built)} "
            f"({record.get('nccl_libdir', '?')}), but torch here loads NCCL {text(theirs[0])} "
            f"({theirs[1]}); a process holds one NCCL, so mok's groups would fail. Rebuild against "
            f"torch's: `pip install --force-reinstall --no-deps .` in mok's source (an installed "
            f"package), or `make` there (a source checkout: it rebuilds when the NCCL it finds "
            f"changes)")
