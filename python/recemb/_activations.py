"""Activation arrays recycled between lookups.

A lookup returns new float32 arrays. Made with np.empty each time, they cost a page fault per
4 KiB on every step: glibc hands large freed blocks back to the system, so the next array of the
same size is fresh memory again. For 26 features of 4096 x 64 floats that is about 2,000 faults a
step (what they cost: docs/performance.md, "Decisions").

ActivationArrays hands out the arrays of its recent calls again once nothing but itself refers to
them, so a loop that drops each step's activations before (or right after) the next lookup
writes into the same memory every step. An array that anything still refers to is never handed
out again: a view or slice of it, a memoryview, or a torch tensor made by torch.from_numpy each
hold a reference to it (numpy makes the array that owns the memory the base of every view).
Only a raw address taken from it (ctypes) escapes that count, as it would escape a free.
"""

import collections
import sys
import threading

import numpy as np

# Arrays of the last calls stay candidates for reuse: two, so that `activations = layer(inputs)`
# in a loop, which still holds the previous step's arrays during the call, alternates between
# two sets.
_GENERATIONS = 2


def _references(arrays, i):
    return sys.getrefcount(arrays[i])


def _count_when_unreferenced():
    """What _references reports for an array held only by a list: measured, not assumed, so that
    it follows the interpreter's own accounting."""
    return _references([np.empty(0, dtype=np.float32)], 0)


_UNREFERENCED = _count_when_unreferenced()


class ActivationArrays:
    """New float32 arrays for lookups, reusing the unreferenced arrays of the last calls.
    Thread-safe."""

    def __init__(self):
        self._generations = collections.deque(maxlen=_GENERATIONS)  # lists of arrays
        self._lock = threading.Lock()

    def new(self, shapes):
        """One uninitialised C-contiguous float32 array per shape: an array of this object's last
        calls with that shape and no other reference, or a new one. Arrays of those calls that
        are not reused and not referenced are released."""
        with self._lock:
            free = collections.defaultdict(list)
            for generation in self._generations:
                held = []
                for i in range(len(generation)):
                    if _references(generation, i) == _UNREFERENCED:
                        free[generation[i].shape].append(generation[i])
                    else:
                        held.append(generation[i])
                generation[:] = held
            arrays = []
            for shape in shapes:
                shape = tuple(int(n) for n in shape)
                spare = free.get(shape)
                arrays.append(spare.pop() if spare else np.empty(shape, dtype=np.float32))
            self._generations.append(list(arrays))
            return arrays
