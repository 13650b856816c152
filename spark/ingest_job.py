"""spark-submit entry point of one ingestion run, for running from a checkout by hand.

eosflow itself submits src/eosflow/spark/task.py (installed with the package); this is the same.
"""

import sys

from eosflow.cli.ingest import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
