"""Test-suite settings: a hypothesis profile for CI (``CI`` set in the environment), which writes
no example database into the clone and prints the blob that reproduces a failure."""

import os

from hypothesis import settings

settings.register_profile("ci", database=None, print_blob=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
