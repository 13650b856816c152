"""spark-submit entry point of one ingestion run; the code ships as --py-files (see eosflow.ingest.submit)."""

import sys

from eosflow.ingest.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
