"""MkDocs hook (mkdocs.yml ``hooks:``): the command-line page is generated from the commands.

A line ``<!-- cli-help: build -->`` in a page becomes the text ``beam-tfrecords build --help``
prints, run at build time through the project's environment, so the reference cannot drift
from the argument parsers. ``<!-- cli-help: -->`` (no command) is the top-level usage.
``<!-- api-reference -->`` becomes one mkdocstrings block per name in
``beam_tfrecords.__all__``, so a new public name appears on the API page by itself.
``<!-- config-keys -->`` becomes the config reference: one row per config key, printed by
``python -m beam_tfrecords.pipelines.config_table`` from the table the config's validation
allows keys by, with the defaults read from the code's dataclasses.

The commands (and the config table's defaults) import Apache Beam, which the docs environment
does not hold: the interpreter is ``BEAM_TFRECORDS_CLI_PYTHON`` (scripts/dev.py docs sets it
to .venv's), else .venv's, else the one running MkDocs. A command whose ``--help`` fails fails
the build, and so does a config table that cannot be printed.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARK = re.compile(r"^<!-- cli-help: ?([\w-]*) -->$", re.M)
COLUMNS = "96"  # argparse wraps at $COLUMNS: a fixed width keeps the page the same everywhere


def _python() -> str:
    chosen = os.environ.get("BEAM_TFRECORDS_CLI_PYTHON")
    if chosen:
        return chosen
    project = ROOT / ".venv" / "bin" / "python"
    return str(project) if project.exists() else sys.executable


def _module_output(module: str, *args: str, what: str) -> str:
    """What ``python -m module args`` prints, run through the project's environment."""
    return _output(["-m", module, *args], what=what)


def _output(args: list[str], *, what: str) -> str:
    done = subprocess.run(
        [_python(), *args], capture_output=True,
        text=True, timeout=300, cwd=ROOT, env=dict(os.environ, COLUMNS=COLUMNS))
    text = done.stdout
    if done.returncode != 0 or not text.strip():
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return text.rstrip()


# ``beam-tfrecords [command] --help`` for each command of argv[1] (a JSON list), in one
# process: the commands import Beam, which costs seconds a process.
_HELPS = """
import contextlib, io, json, sys
from beam_tfrecords.pipelines import cli
helps = {}
for command in json.loads(sys.argv[1]):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            status = cli.main([command, "--help"] if command else ["--help"])
    except SystemExit as done:
        status = done.code
    if status not in (0, None) or not out.getvalue().strip():
        sys.exit(f"beam-tfrecords {command} --help failed ({status})")
    helps[command] = out.getvalue().rstrip()
print(json.dumps(helps))
"""


def cli_helps(commands: list[str]) -> dict[str, str]:
    """What ``beam-tfrecords [command] --help`` prints, for each command (``""``: the
    top-level usage), asked of one process."""
    import json

    return json.loads(_output(["-c", _HELPS, json.dumps(commands)],
                              what="beam-tfrecords --help"))


def cli_help(command: str) -> str:
    """What ``beam-tfrecords [command] --help`` prints."""
    return cli_helps([command])[command]


def config_reference() -> str:
    """The config reference table (pipelines/config_table.py), as Markdown."""
    return _module_output("beam_tfrecords.pipelines.config_table",
                          what="the config reference (python -m "
                               "beam_tfrecords.pipelines.config_table)")


def on_page_markdown(markdown: str, **_) -> str:
    commands = MARK.findall(markdown)
    helps = cli_helps(commands) if commands else {}

    def render(found: re.Match) -> str:
        return f"```text\n{helps[found.group(1)]}\n```"

    markdown = CONFIG_MARK.sub(lambda _: config_reference(), markdown)
    return API_MARK.sub(lambda _: api_reference(), MARK.sub(render, markdown))


API_MARK = re.compile(r"^<!-- api-reference -->$", re.M)
CONFIG_MARK = re.compile(r"^<!-- config-keys -->$", re.M)


def public_names() -> dict[str, str]:
    """``{name: module}`` of every name in ``beam_tfrecords.__all__`` that documents itself
    (``__version__`` does not), read from ``__init__.py``'s ``__all__`` and its lazy-import
    table without importing the package."""
    tree = ast.parse((ROOT / "__init__.py").read_text())
    values = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
              if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id in ("__all__", "_LAZY")}
    unknown = set(values["__all__"]) - set(values["_LAZY"]) - {"__version__"}
    if unknown:
        raise RuntimeError(f"__init__.py's __all__ names {sorted(unknown)} but its _LAZY table "
                           "does not say where they live: the API page cannot document them")
    return {name: values["_LAZY"][name] for name in values["__all__"] if name in values["_LAZY"]}


def api_reference() -> str:
    """One mkdocstrings block per public name, in ``__all__``'s order."""
    return "\n\n".join(f"::: {module}.{name}" for name, module in public_names().items())
