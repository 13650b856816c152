"""spark-submit entry point of one ingestion run, for running from a checkout by hand: a shim of the job's one
entry, eosflow.spark.job_main (eosflow itself submits src/eosflow/spark/task.py, the same shim, installed).
"""

import sys

from eosflow.spark.job_main import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
