"""`python -m eosflow.cli`: the same as the `eosflow` command."""

import sys

from eosflow.cli.main import main

sys.exit(main())
