"""spark-submit's entry script for one ingestion run, inside the package so an installed eosflow has it.

The code itself ships as --py-files (eosflow.spark.submit); this file only hands the arguments to the
job's entry (eosflow.spark.job_main.main), which `eosflow ingest` runs too, so exit codes mean the same.
"""

import sys

from eosflow.spark.job_main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
