"""`python -m eosflow.cli`: the same as the `eosflow` command."""

import sys

from eosflow.cli.main import run

sys.exit(run())
