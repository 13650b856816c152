"""eosflow never starts Spark on a mixed pyspark: the Spark provider's pyspark-client overwrites pyspark's
Python files (4.2.0 over 4.3.0) and leaves its jars. A fake pyspark folder each, no JVM."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from eosflow import settings as settings_mod
from eosflow.errors import StackError
from eosflow.spark import session, submit, versions


def fake_pyspark(root: Path, python: str, jars: str | None) -> Path:
    folder = root / "pyspark"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    # pyspark's own line (4.3.0) and pyspark-client's are both `__version__: str = '...'`
    (folder / "version.py").write_text(f"__version__: str = '{python}'\n")
    if jars is not None:
        (folder / "jars").mkdir()
        for name in (f"spark-core_2.13-{jars}.jar", f"spark-sql_2.13-{jars}.jar", "py4j-0.10.9.9.jar"):
            (folder / "jars" / name).write_bytes(b"")
    return folder


def test_the_python_files_and_the_jars_of_one_version_pass(tmp_path):
    folder = fake_pyspark(tmp_path, "4.3.0", "4.3.0")
    assert versions.installed(folder) == ("4.3.0", "4.3.0")
    versions.check(folder)


def test_the_providers_client_over_pyspark_is_refused_naming_both_versions_and_the_fix(tmp_path):
    folder = fake_pyspark(tmp_path, "4.2.0", "4.3.0")
    with pytest.raises(versions.MixedPysparkError) as refused:
        versions.check(folder)
    message = str(refused.value)
    assert "Python files are 4.2.0" in message and "jars (the JVM Spark would run) 4.3.0" in message
    assert "pip install --force-reinstall --no-deps pyspark==4.3.0" in message
    assert "pyspark-client" in message and "Spark provider" in message
    assert isinstance(refused.value, StackError)  # the CLI's exit 2 and its one line


def test_nothing_to_compare_passes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    versions.check(fake_pyspark(tmp_path / "a", "4.3.0", None))  # a Spark distribution's python/pyspark
    client_only = fake_pyspark(tmp_path / "b", "4.2.0", "4.3.0")
    (client_only / "version.py").unlink()
    versions.check(client_only)


def test_the_installed_pyspark_is_not_mixed():
    folder = Path(pyspark.__file__).parent
    python, jvm = versions.installed(folder)
    assert python == pyspark.__version__ and jvm == python
    versions.check()


def test_spark_submit_and_a_session_are_refused_before_a_jvm_starts(tmp_path, monkeypatch):
    folder = fake_pyspark(tmp_path, "4.2.0", "4.3.0")
    monkeypatch.setattr(pyspark, "__file__", str(folder / "__init__.py"))
    settings = settings_mod.load()
    with pytest.raises(versions.MixedPysparkError, match="pyspark==4.3.0"):
        submit.spark_env(settings)  # the Airflow task's spark-submit, and the CLI test's
    # A worker that ran a Spark test before holds an active session, which get_spark hands back as it is
    # (its JVM already runs): the check is for a session about to start.
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    with pytest.raises(versions.MixedPysparkError, match="pyspark==4.3.0"):
        session.get_spark(settings, "never-started")  # in process, and the job's driver under spark-submit


def test_a_job_that_meets_a_mixed_pyspark_exits_2_as_a_configuration_error_not_retried():
    """A retry cannot mend the installation: the job exits 2 (a refusal), with the entry naming the fix."""
    from eosflow.runners.outcomes import reported
    from eosflow.spark.versions import MixedPysparkError

    code, line = reported(MixedPysparkError("pyspark's Python files are 4.2.0, its jars 4.3.0"))
    assert code == 2 and "mixedpysparkerror" in line
