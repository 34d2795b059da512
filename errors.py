"""The one base class for errors meant for users.

An error derived from :class:`UserError` is about the input, the config, the output location or
another build -- something the user can act on -- and its message is complete in one line: the
command line prints exactly that line and exits non-zero. Anything else that escapes is a bug
of ours, and the command prints its traceback (``--debug`` prints one for every error).
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """A failure the user can act on; ``str(err)`` is the one line to show them."""
