"""eosflow as an Airflow provider: what the `apache_airflow_provider` entry point tells Airflow.

`airflow providers list` names it; its two connection types (the schema registry, the Iceberg catalog: none of
Airflow's providers has them) appear in the connection form (docs/DESIGN.md, "In a team's own Airflow").
Kafka, Postgres, Spark and the alerts' webhook (http) use their own providers' types. Its hooks, operators,
triggers and notifier are declared as providers declare theirs (`airflow providers triggers`, `notifications`,
`get eosflow --full`). The view is registered by the `airflow.plugins` entry point, not here: Airflow loads a
provider's plugins as well, and would load it twice.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

INTEGRATION = "eosflow"


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "eosflow",  # the distribution's name: Airflow checks they agree
        "name": "eosflow",
        "description": "Kafka into the warehouse, Kafka or Iceberg exactly once, and the proof of it.",
        "versions": [version("eosflow")],
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "eosflow_airflow.hooks.eosflow",
                    "eosflow_airflow.hooks.connection_types",
                    "eosflow_airflow.hooks.spark_submit",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["eosflow_airflow.operators.tasks", "eosflow_airflow.operators.spark"],
            }
        ],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["eosflow_airflow.triggers.wake"]}],
        "notifications": ["eosflow_airflow.notifications.alerts.FailureAlert"],
        "connection-types": [
            {
                "connection-type": "eosflow_schema_registry",
                "hook-class-name": "eosflow_airflow.hooks.connection_types.SchemaRegistryHook",
                "hook-name": "Schema registry (eosflow)",
            },
            {
                "connection-type": "eosflow_iceberg",
                "hook-class-name": "eosflow_airflow.hooks.connection_types.IcebergCatalogHook",
                "hook-name": "Iceberg catalog (eosflow)",
            },
        ],
    }
