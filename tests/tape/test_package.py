"""The distribution: its version, its exported error types, and a clear error when another
package named 'ops' shadows fluidtape's."""

import os
import pathlib
import re
import subprocess
import sys

import tape

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_is_the_distributions():
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert tape.__version__ == declared.group(1)


def test_error_types_documented_by_load_and_programs_are_exported():
    assert "CheckpointError" in tape.load.__doc__
    assert issubclass(tape.CheckpointError, tape.FluidError)
    assert issubclass(tape.ProgramFormatError, ValueError)
    assert issubclass(tape.ScalarOverflowError, OverflowError)


def test_an_unrelated_ops_package_in_its_place_is_named(tmp_path):
    fake = tmp_path / "ops"
    fake.mkdir()
    (fake / "__init__.py").write_text("VERSION = 'someone else'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    result = subprocess.run(
        [sys.executable, "-c", "import layers"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    message = result.stderr.strip().splitlines()
    assert "ImportError: fluidtape's 'ops' package is shadowed by another package" in message[-4]
    assert message[-2].strip() == f"actual:   {fake / '__init__.py'}"
    assert "pip uninstall ops" in message[-1]
