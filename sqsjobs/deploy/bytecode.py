"""Bytecode for the Lambda zip, compiled by the target runtime's own Python.

Lambda unpacks a zip into a read-only ``/var/task``: Python cannot write the ``.pyc`` files it
compiles there, so a zip without bytecode compiles every module it imports from source on every
cold start (``bench/cold_start.py`` measures what that costs). ``.pyc`` files are specific to a
Python minor version (their magic number and their ``cpython-312`` name), so they are compiled by
an interpreter of the function's version: this one when it matches, else ``python3.X`` on PATH;
without one the zip carries sources only and the build says so.

They are *unchecked-hash* pycs (PEP 552): the interpreter loads them without comparing the
source's timestamp, which the zip's fixed entry dates would never match. The sources stay beside
them (tracebacks read their lines; ``co_filename`` is the path under ``/var/task``). The
dependencies' bytecode is compiled once per dependency cache and kept beside it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Where Lambda unpacks the zip: the file names compiled into the code objects.
TASK_ROOT = "/var/task"

#: Run by the target interpreter: compile each (source, pyc, name) it is given, skip what it cannot
#: compile (vendored files for another Python, templates), print what it wrote.
_COMPILE = """
import json, py_compile, sys
done = []
for source, target, name in json.load(sys.stdin):
    try:
        py_compile.compile(source, cfile=target, dfile=name, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except py_compile.PyCompileError:
        continue
    done.append(target)
json.dump(done, sys.stdout)
"""


def interpreter(python_version: str) -> str | None:
    """A Python of ``python_version`` (``3.12``) to compile with: this one, or ``python3.12`` on PATH."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == python_version:
        return sys.executable
    found = shutil.which(f"python{python_version}")
    if found is None:
        return None
    # A version manager's shim may be on PATH without that version behind it: ask the interpreter.
    asked = subprocess.run(
        [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found if asked.returncode == 0 and asked.stdout.strip() == python_version else None


def cache_tag(python_version: str) -> str:
    """``cpython-312`` for ``3.12``: the part of a ``.pyc`` name that says which Python it is for."""
    return f"cpython-{python_version.replace('.', '')}"


def pyc_name(name: str, tag: str) -> str:
    """The zip name of ``name``'s bytecode: ``pkg/__pycache__/mod.cpython-312.pyc`` for ``pkg/mod.py``."""
    path = PurePosixPath(name)
    return str(path.parent / "__pycache__" / f"{path.stem}.{tag}.pyc").removeprefix("./")


def compile_sources(sources: Mapping[str, Path], python: str, tag: str, out: Path) -> dict[str, Path]:
    """Compile the ``.py`` entries of ``sources`` (zip name → file) into ``out``: zip name → ``.pyc`` file."""
    jobs = [
        (str(path), str(out / pyc_name(name, tag)), f"{TASK_ROOT}/{name}")
        for name, path in sources.items()
        if name.endswith(".py")
    ]
    if not jobs:
        return {}
    done = subprocess.run(
        [python, "-c", _COMPILE], input=json.dumps(jobs), capture_output=True, text=True, check=True
    )
    written = set(json.loads(done.stdout))
    compiled = {pyc_name(name, tag): out / pyc_name(name, tag) for name in sources if name.endswith(".py")}
    return {name: path for name, path in compiled.items() if str(path) in written}


def compiled_deps(deps: Path, sources: Mapping[str, Path], python: str, tag: str) -> dict[str, Path]:
    """The dependencies' bytecode, compiled once per dependency cache into ``<deps>-<tag>-pyc``."""
    out = deps.with_name(f"{deps.name}-{tag}-pyc")
    index = out / ".complete"
    if index.exists():
        return {name: out / name for name in json.loads(index.read_text())}
    # Builds may run side by side (test workers): each compiles into its own folder, the first
    # rename wins and the others use the winner's.
    partial = Path(tempfile.mkdtemp(prefix=f"{out.name}.partial-", dir=out.parent))
    made = compile_sources(sources, python, tag, partial)
    (partial / ".complete").write_text(json.dumps(sorted(made)))
    try:
        partial.rename(out)
    except OSError:  # another build finished first
        shutil.rmtree(partial, ignore_errors=True)
    return {name: out / name for name in json.loads(index.read_text())}
