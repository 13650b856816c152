"""eosflow's DAGs as an Airflow DAG bundle: the installed package's DAG files (eosflow_airflow.dag_files).

One entry in `[dag_processor] dag_bundle_config_list` (beside a team's own bundles):
`{"name": "eosflow", "classpath": "eosflow_airflow.bundle.EosflowDagBundle", "kwargs": {}}`. The files
change only with the package, so the bundle has no versions of its own.
"""

from __future__ import annotations

from pathlib import Path

from airflow.dag_processing.bundles.local import LocalDagBundle

from eosflow_airflow import dag_files

DAG_FILES = Path(dag_files.__file__).resolve().parent


class EosflowDagBundle(LocalDagBundle):
    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("path", str(DAG_FILES))
        super().__init__(**kwargs)
