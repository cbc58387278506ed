"""`python -m pipelines JOB ...`: the same as `tfrs-logq JOB ...` (`pipelines.cli`)."""

import sys

from pipelines import cli

if __name__ == "__main__":
    sys.exit(cli.main())
