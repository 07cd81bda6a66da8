"""CPython's cyclic garbage collector held off while a list is fetched and applied.

A collection holds the event loop for as long as it takes to walk the objects it looks at, and a
full one looks at them all. While a list of 100,000 pods is held (about 20 container objects a
pod as the API server sends it, managedFields dropped) and applied (three objects a pod kept),
the collector starts a full collection each time the heap has grown by a quarter, each walking
millions of objects: seconds each (bench/relist_stall.py), every slice's yield to the loop
undone. Held off until the list is applied (seconds for 100,000 pods; a page request that hangs
fails after the client's timeout), nothing is lost: what survives, cyclic garbage included
(applying a list makes none, the other tasks little), is moved to the oldest generation at the
end without a walk (freeze, then unfreeze), and the next full collection, which comes as it
would have without the list, frees what is garbage.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


class _Hold:
    """The lists being fetched or applied (informers list concurrently), and the collector's
    state when the first of them began."""

    def __init__(self) -> None:
        self.count = 0
        self.was_enabled = True


_HOLD = _Hold()


@contextlib.contextmanager
def collections_held() -> Iterator[None]:
    """No automatic collections inside (while any caller is inside); on the way out of the last
    one, the objects made meanwhile join the oldest generation without a collection."""
    if _HOLD.count == 0:
        _HOLD.was_enabled = gc.isenabled()
        gc.disable()
    _HOLD.count += 1
    try:
        yield
    finally:
        _HOLD.count -= 1
        if _HOLD.count == 0:
            # (The young generation holds every object made meanwhile, however few the collector's
            # count says: a relist frees as many old objects as it makes new ones. Objects someone
            # else froze are left where they are.)
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            if _HOLD.was_enabled:
                gc.enable()
