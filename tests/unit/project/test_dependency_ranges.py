"""The product wheel asks for ranges, not pins, so it installs beside what a team's Airflow image already has;
each range starts at the version the project tests (constraints.txt, which `make setup` installs exactly)
and stops before the next major, or the next minor where the library breaks within one."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[3]
EXACT = {"dbt-core-experimental-parser"}  # an alpha: a range would let pip take any later pre-release


def _dependencies() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"]]


def _constraints() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = Version(version.strip())
    return pins


def test_every_dependency_is_a_range_from_the_tested_version_to_before_the_next_break():
    pins = _constraints()
    for req in _dependencies():
        name = canonicalize_name(req.name)
        tested = pins[name]
        specs = {s.operator: Version(s.version) for s in req.specifier}
        if name in EXACT:
            assert specs == {"==": tested}, req
            continue
        assert set(specs) == {">=", "<"}, f"{req}: a range >=tested,<next"
        assert specs[">="] == tested, f"{req}: the lower bound is the tested {tested}"
        upper = specs["<"]
        next_major = Version(f"{tested.major + 1}")
        next_minor = Version(f"{tested.major}.{tested.minor + 1}")
        assert upper in (next_major, next_minor), f"{req}: the upper bound is {next_major} or {next_minor}"
        assert tested in req.specifier, req  # what make setup installs is in range


def test_pyspark_stops_before_the_next_minor_whose_jvm_its_connector_jars_were_not_tested_on():
    (pyspark,) = [r for r in _dependencies() if r.name == "pyspark"]
    tested = _constraints()["pyspark"]
    assert {(s.operator, s.version) for s in pyspark.specifier} == {
        (">=", str(tested)),
        ("<", f"{tested.major}.{tested.minor + 1}"),
    }
