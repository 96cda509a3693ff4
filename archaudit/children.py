"""Programs archaudit runs (nvcc, cu++filt) and its worker processes: each ends when archaudit
ends, however it ends.

They may run in a session of their own (verify's compiles: a timeout ends nvcc with its cicc and
ptxas), which a signal to archaudit's process group does not reach, and a SIGKILL of archaudit
runs none of its clean-up: on Linux the kernel sends the child SIGKILL when the thread that
started it ends (PR_SET_PDEATHSIG, armed between fork and exec). Elsewhere nothing is armed."""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

_PR_SET_PDEATHSIG = 1
_prctl = None
if sys.platform.startswith("linux"):
    try:
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


# how often a worker without PR_SET_PDEATHSIG looks whether its parent is still there
PARENT_POLL_S = 0.5


def die_with_parent(parent: int) -> None:
    """In a worker process: end it when `parent` (the pid of the process that started it, taken
    there) ends, however that ends. A killed scan otherwise left its workers blocked on pipes
    nobody writes (their own fork holds the write ends) or still working, holding their memory.
    Linux: PR_SET_PDEATHSIG, the kernel sends SIGKILL (the thread that forked must stay alive: the
    scan's pools are forked by the thread that runs scan() and closed before it returns).
    Elsewhere: a daemon thread polls getppid(). Either way, a parent already gone means exit now."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # died before the signal was armed: nobody would send it
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(PARENT_POLL_S)
            os._exit(1)

        threading.Thread(target=watch, name="archaudit-parent-watch", daemon=True).start()
