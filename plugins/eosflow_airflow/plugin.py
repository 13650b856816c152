"""The eosflow Airflow plugin: the view (a FastAPI app at /eosflow) and its entry in the navigation."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from eosflow_airflow.view import app


class EosflowPlugin(AirflowPlugin):
    name = "eosflow"
    fastapi_apps = [{"app": app, "url_prefix": "/eosflow", "name": "eosflow"}]
    external_views = [
        {
            "name": "eosflow pipelines",
            "href": "eosflow/",  # relative: served by this API server, behind its login
            "destination": "nav",
            "category": "browse",
            "url_route": "eosflow",
        }
    ]
