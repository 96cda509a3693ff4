"""Programs archaudit runs (nvcc, cu++filt): each ends when archaudit ends, however it ends.

They may run in a session of their own (verify's compiles: a timeout ends nvcc with its cicc and
ptxas), which a signal to archaudit's process group does not reach, and a SIGKILL of archaudit
runs none of its clean-up: on Linux the kernel sends the child SIGKILL when the thread that
started it ends (PR_SET_PDEATHSIG, armed between fork and exec). Elsewhere nothing is armed."""
from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
_prctl = None
if sys.platform.startswith("linux"):
    try:
        import ctypes

        # looked up here, in the parent: the child only calls it (no allocation after fork)
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        _prctl = None


def ending_with_us():
    """A preexec_fn for subprocess: the child gets SIGKILL when this thread ends; a child whose
    parent is already gone by then exits at once (nobody would send it)."""
    if _prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm
