"""`python -m pipelines JOB ...`: the same as `tfrs-logq JOB ...` (`pipelines.cli`)."""

import sys

from pipelines import cli

sys.exit(cli.main())
