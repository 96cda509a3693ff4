"""How the analysis runs in this process: the cyclic collector paused, a thread with a large
stack, and how many worker processes to use."""
from __future__ import annotations

import gc
import os
import threading
from contextlib import contextmanager

# young objects left by a paused stretch beyond which they are frozen rather than collected
# (small scans, as in the tests, are collected as usual: freezing would keep their cycles)
FREEZE_AFTER_OBJECTS = 2_000_000


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while analysing. The IR and the interpreter's values
    are millions of long-lived objects without cycles; the collector's repeated passes over them
    made parsing 2.3x slower (31 MB of sglang: 56 s -> 24 s CPU) for nothing it could free.
    Reference counting still frees everything not in a cycle. Re-entrant.
    On leaving, a large heap is frozen first (gc.freeze: exempt from collection, still freed
    by reference counting): otherwise the next collection walks all of it once more (about
    50 s after a full scan, inside the report formatter)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_count()[0] > FREEZE_AFTER_OBJECTS:
                gc.freeze()
            gc.enable()



def run_with_big_stack(fn):
    """Run fn in a thread with a large stack: the tree walks and the interpreter recurse deeply
    on pathological inputs, and a RecursionError is far better than a C stack overflow."""
    box: dict = {}

    def target():
        try:
            with gc_paused():
                box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    old = threading.stack_size()
    threading.stack_size(512 * 1024 * 1024)
    try:
        t = threading.Thread(target=target, name="archaudit-analysis")
        t.start()
    finally:
        threading.stack_size(old)
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
