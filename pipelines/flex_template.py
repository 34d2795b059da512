"""The Dataflow Flex Template entry point: template parameters -> the ``build`` command.

A Flex Template launcher runs the image's entry script with every parameter as
``--name=value`` (names from ``pipelines/flex/metadata.json``) plus Dataflow's own options.
Most of our flags already have that shape (``--config=...``, ``--output=...``), but two do
not: template parameter names use underscores, and a boolean parameter arrives as
``--skip_if_unchanged=true``, which a ``store_true`` flag refuses. :func:`template_argv` maps
those onto the build command's flags and passes everything else through unchanged (Beam
options such as ``--runner``, ``--project``, ``--temp_location``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["BOOLEAN_PARAMETERS", "RENAMED_PARAMETERS", "main", "template_argv"]

# Template parameter -> build flag, for names that differ.
RENAMED_PARAMETERS = {"keep_versions": "keep-versions", "progress_interval": "progress-interval"}
# Template parameters that are switches of the build command: "true" sets, "false" omits.
BOOLEAN_PARAMETERS = {"skip_if_unchanged": "skip-if-unchanged"}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


def template_argv(argv: Sequence[str]) -> list[str]:
    """The build command's arguments for a Flex Template launcher's ``argv``.

    Args:
        argv: the launcher's arguments (``--name=value`` per template parameter, and Beam's).

    Returns:
        The same arguments with template names mapped onto the build's flags; ValueError for a
        boolean parameter that is neither true nor false.
    """
    out: list[str] = []
    for arg in argv:
        name, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        key = name.replace("-", "_")
        if key in BOOLEAN_PARAMETERS:
            if not eq or value.strip().lower() in _TRUE:
                out.append("--" + BOOLEAN_PARAMETERS[key])
            elif value.strip().lower() not in _FALSE:
                raise ValueError(f"template parameter {name}={value!r}: expected true or false")
        elif key in RENAMED_PARAMETERS:
            out.append("--" + RENAMED_PARAMETERS[key] + eq + value)
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """The build command for a launcher's arguments. Run as the launcher's script, the
    process is the command's: SIGINT and SIGTERM are claimed before Beam is imported, as the
    console script does (pipelines/signals.py).

    Args:
        argv: the launcher's arguments; None: ``sys.argv[1:]`` (and the signals are claimed).

    Returns:
        The build command's exit status (2 for a bad template parameter).
    """
    from beam_tfrecords.pipelines import signals

    if argv is None:
        signals.claim_signals()
    from beam_tfrecords.pipelines.cli import main as cli_main

    try:
        args = template_argv(sys.argv[1:] if argv is None else argv)
    except ValueError as err:
        print(f"beam-tfrecords build: {err}", file=sys.stderr)
        return 2
    return cli_main(["build", *args], check_flags=False)  # template parameters are not ours


if __name__ == "__main__":
    sys.exit(main())
