# SPDX-License-Identifier: MIT
"""The mappings spw_optimizer_param_view hands out, and who unmaps them.

A view is the optimizer's while it lives; spw_optimizer_free turns it into
private memory holding the last values, at the same address, and from then
on it is ours. Each view is a ctypes buffer (what torch.frombuffer keeps
alive); it is unmapped once both have happened: the optimizer is freed and
nothing holds the buffer any more. Unmapping earlier would pull the memory
from under the optimizer (or under a tensor that still uses it)."""
import ctypes
import threading
import weakref

from . import _lib as L

_libc = ctypes.CDLL(None, use_errno=True)
_libc.munmap.restype, _libc.munmap.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]
_lock = threading.Lock()
_by_opt = weakref.WeakKeyDictionary()  # optimizer wrapper -> [_Mapping]


class _Mapping:
    __slots__ = ("ptr", "nbytes", "freed", "dropped")

    def __init__(self, ptr, nbytes):
        self.ptr, self.nbytes = ptr, nbytes
        self.freed = False      # the optimizer let go of it (spw_optimizer_free ran)
        self.dropped = False    # nothing in Python holds its buffer any more

    def settle(self):
        """Unmaps once both sides let go (lock held)."""
        if self.freed and self.dropped and self.ptr:
            _libc.munmap(self.ptr, self.nbytes)
            self.ptr = 0


def _dropped(m):
    with _lock:
        m.dropped = True
        m.settle()


def param_view(opt, tensor):
    """A writable ctypes buffer over tensor's master weights, or None when
    the library has no view for it."""
    if not L.has("spw_optimizer_param_view"):
        return None
    ptr, nbytes = ctypes.c_void_p(), ctypes.c_size_t()
    r = L.lib.spw_optimizer_param_view(opt._o, tensor, ctypes.byref(ptr), ctypes.byref(nbytes))
    if r < 0:
        return None
    # A subclass per size: ctypes arrays take weak references only then.
    buf = type("ParamView", (ctypes.c_char * nbytes.value,), {}).from_address(ptr.value)
    m = _Mapping(ptr.value, nbytes.value)
    with _lock:
        _by_opt.setdefault(opt, []).append(m)
    weakref.finalize(buf, _dropped, m)
    return buf


def optimizer_freed(opt):
    """After spw_optimizer_free: its views are ours now."""
    with _lock:
        for m in _by_opt.pop(opt, []):
            m.freed = True
            m.settle()
