"""The consoles the memory commands print through: a table piped to a file or another program keeps
its full width (rich would cut it to 80 columns where there is no terminal to measure)."""

from __future__ import annotations

import sys

from rich.console import Console

PIPED_WIDTH = 1000  # a table no wider than its contents; wrapping is the reader's pager's job


def console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else PIPED_WIDTH
    return Console(stderr=stderr, highlight=False, width=width)
