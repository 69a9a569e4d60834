"""``python -m benchmarks``: runs benchmarks/run.py."""

import sys

from benchmarks.run import main

if __name__ == "__main__":  # (not when a worker process imports it: benchmarks.isolated)
    sys.exit(main())
