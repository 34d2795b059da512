"""The site's generated pages (scripts/mkdocs_hooks.py): the API page documents every public
name, the command-line page is what each command's ``--help`` prints, and the config page
holds the table of config keys (pipelines/config_table.py; its content: test_config_doc.py).

The full ``mkdocs build --strict`` runs in CI (``python3 scripts/dev.py docs``); it needs the
docs environment, which the test environment does not hold.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

import beam_tfrecords

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


hooks = _hooks()


def test_the_api_page_documents_every_public_name():
    page = hooks.on_page_markdown((ROOT / "docs" / "api.md").read_text())
    documented = {line.split(".")[-1] for line in page.splitlines() if line.startswith(":::")}
    assert documented == set(beam_tfrecords.__all__) - {"__version__"}
    for name, module in hooks.public_names().items():
        assert getattr(beam_tfrecords, name).__module__ == module, name


@pytest.mark.e2e
def test_the_cli_page_shows_each_commands_help(monkeypatch):
    monkeypatch.setenv("BEAM_TFRECORDS_CLI_PYTHON", sys.executable)
    page = hooks.on_page_markdown((ROOT / "docs" / "cli.md").read_text())
    assert "<!-- cli-help" not in page
    assert "usage: beam-tfrecords [--debug]" in page
    for command in ("init", "build", "verify", "inspect", "schema"):
        assert f"usage: beam-tfrecords {command} [-h]" in page, command


@pytest.mark.slow
def test_the_config_page_shows_the_table_of_keys(monkeypatch):
    from beam_tfrecords.pipelines.config_table import markdown

    monkeypatch.setenv("BEAM_TFRECORDS_CLI_PYTHON", sys.executable)
    page = (ROOT / "docs" / "config.md").read_text()
    assert hooks.on_page_markdown(page) == page.replace("<!-- config-keys -->", markdown())
