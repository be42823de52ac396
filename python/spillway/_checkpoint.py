# SPDX-License-Identifier: MIT
"""Checkpoints of persistent sessions (docs/persistent.md, "Checkpoints").

spillway.checkpoint(name, dir) asks spillwayd to write the persistent
session `name` at its next commit point into the new directory `dir`;
spillway.restore(name, dir) makes a new orphaned persistent session of
that name from it, which the next OffloadAdamW(persistent=True,
session=name) takes over and resumes from the checkpoint's step.
OffloadAdamW.save_checkpoint(dir) is the first for the optimizer's own
session.
"""
import ctypes
import json
import os

from . import _lib as L
from ._lib import SpillwayError


class CheckpointResult(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("committed_step", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("copied_bytes", ctypes.c_uint64), ("seconds", ctypes.c_double),
                ("wait_seconds", ctypes.c_double), ("tensors", ctypes.c_uint32), ("lease_s", ctypes.c_uint32),
                ("bytes_total", ctypes.c_uint64), ("stall_seconds", ctypes.c_double),
                ("steps_during_copy", ctypes.c_uint64), ("cow_bytes", ctypes.c_uint64),
                ("cow_peak_bytes", ctypes.c_uint64), ("cow_waits", ctypes.c_uint64),
                ("direct_bytes", ctypes.c_uint64), ("buffered_bytes", ctypes.c_uint64),
                ("cow_moved_bytes", ctypes.c_uint64), ("yields", ctypes.c_uint64),
                ("yield_seconds", ctypes.c_double), ("cow_from_reads_bytes", ctypes.c_uint64),
                ("swap_read_bytes", ctypes.c_uint64)]


_PROTOS = {
    "spw_client_checkpoint": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                             ctypes.POINTER(CheckpointResult)]),
    "spw_client_checkpoint_meta": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                                  ctypes.POINTER(CheckpointResult)]),
    "spw_client_restore": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32,
                                          ctypes.POINTER(CheckpointResult)]),
}


def _fn(name):
    lib = L.load()
    fn = getattr(lib, name, None)
    if fn is None:
        raise NotImplementedError("%s needs a libspillway with %s (%s is older)" % (name, name, L.library_path()))
    fn.restype, fn.argtypes = _PROTOS[name]
    return lib, fn


def _call(verb, name, directory, socket, lease, meta=None):
    from . import socket_path  # the package's, which imports this module
    if not isinstance(name, str) or not name:
        raise TypeError("the session name must be a non-empty str, not %r" % (name,))
    if meta is not None and not L.has("spw_client_checkpoint_meta"):
        meta = None  # an older libspillway: the checkpoint goes without it (to-torch then uses defaults)
    lib, fn = _fn("spw_client_" + verb + ("_meta" if meta is not None else ""))
    sock = socket or socket_path("control")
    res = CheckpointResult(size=ctypes.sizeof(CheckpointResult))
    c = ctypes.c_void_p()
    r = lib.spw_client_new(None, ctypes.byref(c))
    if r < 0:
        raise SpillwayError(r, None, "spillway client")
    try:
        r = lib.spw_client_connect(c, sock.encode())
        if r == 0:
            path = os.path.abspath(os.fspath(directory)).encode()
            if verb == "restore":
                r = fn(c, name.encode(), path, int(lease or 0), ctypes.byref(res))
            elif meta is not None:
                r = fn(c, name.encode(), path, json.dumps(meta).encode(), ctypes.byref(res))
            else:
                r = fn(c, name.encode(), path, ctypes.byref(res))
        if r < 0:
            raise SpillwayError(r, L.decode(lib.spw_client_last_error(c)), "%s %s" % (verb, name))
    finally:
        lib.spw_client_free(c)
    return {"committed_step": res.committed_step, "tensors": res.tensors, "bytes": res.bytes,
            "bytes_total": res.bytes_total,
            "copied_bytes": res.copied_bytes, "direct_bytes": res.direct_bytes,
            "buffered_bytes": res.buffered_bytes, "seconds": res.seconds, "wait_seconds": res.wait_seconds,
            "stall_seconds": res.stall_seconds, "steps_during_copy": res.steps_during_copy,
            "cow_bytes": res.cow_bytes, "cow_waits": res.cow_waits, "cow_moved_bytes": res.cow_moved_bytes,
            "cow_from_reads_bytes": res.cow_from_reads_bytes, "swap_read_bytes": res.swap_read_bytes,
            "yields": res.yields, "yield_seconds": res.yield_seconds, "lease_s": res.lease_s}


def checkpoint(session_name, dir, socket=None, meta=None):
    """Writes the persistent session session_name (yours) into dir, a new
    directory whose parent is yours, at its next commit point; its trainer
    trains on while the pages are copied (copy-on-write). meta: a dict kept in the manifest
    as "client" (OffloadAdamW.save_checkpoint puts its parameters' names
    and shapes and its param groups there). Returns a dict:
    committed_step, tensors, bytes, bytes_total, seconds, wait_seconds; how
    the bytes went (bytes = copied_bytes + direct_bytes + buffered_bytes:
    reflinked from swap files where the filesystem can, written with
    O_DIRECT, or through the page cache where the filesystem takes no
    O_DIRECT); and what the trainer felt: stall_seconds, steps_during_copy,
    cow_bytes (pages saved aside before the trainer changed them, of which
    cow_from_reads_bytes were saved as the trainer's own reads brought them
    in from swap: the copy did not read those again; swap_read_bytes is
    what it read from swap itself), cow_waits,
    cow_moved_bytes; and, under checkpoint.priority "low", yields and
    yield_seconds (how often and how long the copy held back for sessions
    waiting on the disk). Raises SpillwayError (errno EEXIST, EPERM, ENOENT, ...)
    with the daemon's sentence.

    `python -m spillway.checkpoint to-torch DIR OUT.pt` converts the
    result for torch.optim.AdamW (spillway.checkpoint.to_torch)."""
    return _call("checkpoint", session_name, dir, socket, None, meta)


def restore(session_name, dir, socket=None, lease=None):
    """Creates the persistent session session_name, orphaned for lease
    seconds (None: 900), from the checkpoint in dir, every page's CRC
    checked. OffloadAdamW(..., session=session_name, persistent=True) then
    takes it over: the model's parameters get the checkpoint's master
    weights and opt.resumed_step its step. Returns the same dict as
    checkpoint() (lease_s set)."""
    return _call("restore", session_name, dir, socket, lease)


def load(opt, directory):
    """OffloadAdamW.load_checkpoint: the optimizer's own persistent session
    is released, restored from directory under the same name and taken
    over, as a restarted trainer would (the model's parameters get the
    checkpoint's master weights, opt.resumed_step its step). The checkpoint
    must be of the same model and settings. Before anything is released the
    whole checkpoint is checked (its manifest's format; then
    spw_optimizer_checkpoint_check: each data file's size, the page size, the layout record
    against this optimizer's, every page's CRC-32C; one read of it, which
    the restore's own read then mostly finds in the page cache): a wrong,
    cut or damaged directory, or one of another model or other settings,
    raises CheckpointError naming the tensor, page or difference and leaves
    the optimizer as it was. Only a restore the daemon refuses after that
    (its caps, a disk failing meanwhile, another client taking the name)
    closes the optimizer, its previous state released: the SpillwayError
    says so and how to go on from the checkpoint."""
    from ._portable import CheckpointError, read_manifest
    from ._torch_hooks import remove_hooks
    if not getattr(opt, "_persistent", False) or not opt._own_session:
        raise ValueError("load_checkpoint needs OffloadAdamW(persistent=True, session='job/rank0') making its "
                         "own session; or: spillway.restore(name, dir), then OffloadAdamW(persistent=True, "
                         "session=name)")
    if opt._opt is None or opt._session is None:
        raise RuntimeError("load_checkpoint: the optimizer was closed")
    name = opt._session_name
    # A checkpoint's format and version (the library's check below does
    # the page size, the layout, the files' sizes and the CRCs).
    read_manifest(directory, sizes=False)
    opt._opt.sync()
    why = opt._opt.checkpoint_check(directory)
    if why is not None:
        raise CheckpointError("load_checkpoint: " + why)
    for e in opt._entries:
        remove_hooks(e)
        e.forget_step()
    opt._opt.close()
    opt._opt = None
    opt._session.close()
    opt._session = None
    try:
        restore(name, directory, socket=opt._socket, lease=opt._lease)
    except SpillwayError as e:
        opt.close()
        raise SpillwayError(e.errno, "load_checkpoint: %s. This optimizer's state was released before the restore, "
                            "so it is closed now; the checkpoint %s is intact: once that is fixed, "
                            "spillway.restore(%r, %r), then OffloadAdamW(..., session=%r, persistent=True) "
                            "goes on from its step" % (e, directory, name, os.fspath(directory), name)) from e
    except BaseException:
        opt.close()
        raise
    opt._build(snapshot=None)
    return opt.resumed_step


def save(opt, directory):
    """OffloadAdamW.save_checkpoint: the optimizer's own persistent
    session, through a second client, after the last step committed."""
    if not getattr(opt, "_persistent", False):
        raise ValueError("save_checkpoint needs OffloadAdamW(persistent=True, session='job/rank0'): only a "
                         "persistent session marks the commit points a checkpoint is taken at; for this "
                         "optimizer, torch.save(opt.state_dict(), path) does the job")
    if opt._opt is None or opt._session is None:
        raise RuntimeError("save_checkpoint: the optimizer holds no state yet (take a step first) or was closed")
    opt._opt.sync()
    return checkpoint(opt._session_name, directory, socket=opt._socket, meta=torch_meta(opt))


def _plain(v):
    """v when JSON holds it as it is (numbers, bools, None, str, lists of them)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    return isinstance(v, (list, tuple)) and all(_plain(x) for x in v)


# What a control frame leaves for the meta (spw_client_checkpoint_meta).
META_MAX = 56 << 10


def torch_meta(opt):
    """What to-torch needs that the session's tensors do not say: the
    parameters' torch names, shapes and update counts (in OffloadAdamW's
    order, the INDEX of its tensor names "INDEX:name"), and the param
    groups' hyperparameters. Names, then shapes, are left out when the
    frame would not hold them (to-torch then gives flat tensors named as
    spillway names them)."""
    shapes = []
    for e in opt._entries:
        ref = e.ref if e.ref is not None and e.ref.device.type == "meta" else e.p
        shapes.append(list(ref.shape))
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params" and _plain(v)}
              for g in opt.param_groups]
    t = {"param_groups": groups, "steps": [e.steps for e in opt._entries], "shapes": shapes,
         "names": [e.name for e in opt._entries], "state_dtype": opt.state_dtype, "mode": opt.mode,
         "master_dtype": opt.master_dtype}
    for drop in ("names", "shapes", "steps"):
        if len(json.dumps({"torch": t})) <= META_MAX:
            break
        del t[drop]
    return {"torch": t}
