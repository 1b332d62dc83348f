"""Transport over pipes: one target process, newline-delimited JSON on stdin/stdout.

The target runs in its own process group, so ending it ends everything it
started. stdout is read by a thread that splits raw bytes on ``\\n`` and records
each line in the transcript *before* anything parses it; stderr is drained by
another thread, kept apart, recorded up to a cap, and its tail is kept for
findings. Memory is bounded: a line longer than ``max_line`` bytes is cut (the
entry says how long it was), and stderr beyond ``max_stderr`` bytes is only
counted.

``command`` checks the target command, ``reading`` has the reader threads,
``process`` starts, writes to and ends the process group; the layer's names are
imported here.
"""

from conformance.transport.command import TargetCommandError, split_command
from conformance.transport.process import (
    DEFAULT_GRACE,
    ExitInfo,
    TargetProcess,
    close_all,
    owner_of_connection,
)
from conformance.transport.reading import TargetExited, TargetTimeout

__all__ = ["DEFAULT_GRACE", "ExitInfo", "TargetCommandError", "TargetExited", "TargetProcess",
           "TargetTimeout", "close_all", "owner_of_connection", "split_command"]
