"""spark-submit entry point of one ingestion run, for running from a checkout by hand.

eosflow itself submits src/eosflow/ingest/spark_job.py (installed with the package); this is the same.
"""

import sys

from eosflow.ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
