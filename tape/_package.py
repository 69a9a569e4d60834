"""The installed distribution: its version, and a check that ``ops`` is fluidtape's own.

fluidtape installs four import packages (``tape``, ``ops``, ``layers``, ``optim``). ``ops`` is
also the name of an unrelated package on the Python package index; installed too, it can shadow
ours, and importing fluidtape then fails deep inside with an obscure ``ModuleNotFoundError``.
``check_ops_package`` turns that into one clear error naming both locations.
"""

from __future__ import annotations

import os
import re

import ops

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def check_ops_package(ops):
    """Raises ImportError unless module ``ops`` sits beside this ``tape`` package."""
    where = os.path.abspath(getattr(ops, "__file__", None) or "<no file>")
    if os.path.dirname(os.path.dirname(where)) != _ROOT:
        raise ImportError(
            "fluidtape's 'ops' package is shadowed by another package of the same name\n"
            f"  expected: {os.path.join(_ROOT, 'ops', '__init__.py')}\n"
            f"  actual:   {where}\n"
            "  hint: 'ops' is also an unrelated package on PyPI; uninstall it "
            "(pip uninstall ops) or use a virtual environment without it"
        )


def version():
    """The installed distribution's version; from pyproject.toml when running from a source
    tree that is not installed."""
    from importlib import metadata

    try:
        return metadata.version("fluidtape")
    except metadata.PackageNotFoundError:
        pass
    try:
        with open(os.path.join(_ROOT, "pyproject.toml"), encoding="utf-8") as handle:
            found = re.search(r'^version\s*=\s*"([^"]+)"', handle.read(), re.MULTILINE)
    except OSError:
        found = None
    return found.group(1) if found else "0+unknown"


check_ops_package(ops)  # before anything reads ops.<module>: another 'ops' fails obscurely
VERSION = version()
