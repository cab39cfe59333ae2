"""One version, written in pyproject.toml, reported by both commands, the metrics and the chart."""

from __future__ import annotations

import io
import json
import logging
import tomllib
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY

import slurmpool
import slurmpool.adapters.metrics  # noqa: F401 - registers slurmpool_build_info
from slurmpool.cli import main as cli
from slurmpool.__main__ import configure_logging
from slurmpool.__main__ import main as operator_main

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "slurmpool"
PYPROJECT_VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_the_installed_package_reports_pyprojects_version():
    # An editable install made before a version bump reports the old one: `make venv` reinstalls.
    assert slurmpool.__version__ == PYPROJECT_VERSION


@pytest.mark.parametrize("main, name", [(operator_main, "slurmpool"), (cli.main, "kubectl-slurmpool")])
def test_both_commands_print_the_version(main, name, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"{name} {PYPROJECT_VERSION}"


def test_build_info_names_version_python_and_kopf():
    import platform
    from importlib.metadata import version

    labels = {"version": PYPROJECT_VERSION, "python": platform.python_version(), "kopf": version("kopf")}
    assert REGISTRY.get_sample_value("slurmpool_build_info", labels) == 1


def test_chart_version_app_version_and_image_tag_follow_the_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == PYPROJECT_VERSION
    assert values["image"]["tag"] == "", "an empty tag means the chart's appVersion (_helpers.tpl)"
    rendered = (REPO / "deploy" / "manifests" / "slurmpool.yaml").read_text()
    # rendered with the placeholder repository (deploy/render-manifests.sh): the tag is appVersion
    assert f"image: registry.invalid/change-me/slurmpool:{PYPROJECT_VERSION}\n" in rendered


def test_changelog_has_an_unreleased_section_and_the_version():
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    assert f"## [{PYPROJECT_VERSION}]" in changelog
    assert "Apache License" in (REPO / "LICENSE").read_text().splitlines()[1]


@pytest.fixture
def root_logger():
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield root
    root.handlers[:], level = saved
    root.setLevel(level)


def test_json_log_format_writes_one_json_object_per_record(root_logger):
    configure_logging("json", verbose=False)
    stream = io.StringIO()
    for handler in root_logger.handlers:
        if handler.formatter is not None and "Json" in type(handler.formatter).__name__:
            handler.setStream(stream)
    logging.getLogger("slurmpool.test").info("pool %s settled", "gpu")
    logging.getLogger("asyncssh").info("dropped: asyncssh is kept at WARNING")
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["message"] == "pool gpu settled"
    assert record["severity"] == "info"


def test_an_unknown_log_format_is_refused(root_logger):
    with pytest.raises(SystemExit, match="choose one of text, json"):
        configure_logging("xml", verbose=False)
