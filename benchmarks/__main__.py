"""``python -m benchmarks``: runs benchmarks/run.py."""

import sys

from benchmarks.run import main

sys.exit(main())
