"""spark-submit's entry script for one ingestion run, inside the package so an installed eosflow has it.

The code itself ships as --py-files (eosflow.spark.submit); this file only hands the arguments to
`eosflow ingest`'s own entry (eosflow.cli.ingest.main), so exit codes mean the same.
"""

import sys

from eosflow.cli.ingest import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
