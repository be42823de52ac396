# SPDX-License-Identifier: MIT
"""OffloadAdamW on a persistent session (docs/persistent.md).

With persistent=True the optimizer's state outlives the trainer: when the
process dies (SIGKILL, OOM, an exception that ends it), spillwayd keeps
the session for `lease` seconds, and an OffloadAdamW of the same session
name in the next process takes it over: the model's parameters get the
master weights of the last committed step, and `opt.resumed_step` says
which step that was, so the trainer goes on with the data of the next.
"""
import errno
import os

import torch

from . import Session, SpillwayError
from . import _lib as L

LEASE_MAX_S = 7 * 24 * 3600


def check(opt, persistent, lease, session, reconnect=0):
    """The arguments checked, set on opt (resumed_step 0 until a resume)."""
    if not isinstance(persistent, bool):
        raise TypeError("persistent must be True or False, not %r" % (persistent,))
    if lease is not None and not (isinstance(lease, (int, float)) and 1 <= lease <= LEASE_MAX_S):
        raise ValueError("lease must be seconds in [1, %d] (7 days) or None for the daemon's 900, not %r"
                         % (LEASE_MAX_S, lease))
    if lease is not None and not persistent:
        raise ValueError("lease= is for persistent=True sessions")
    if persistent and session is None:
        raise ValueError("persistent=True needs session='job/rank0': the name the restarted trainer "
                         "attaches again to find its state")
    if isinstance(session, Session) and persistent != session.persistent:
        raise ValueError("persistent=%s, but Session %s was made with persistent=%s; make them agree"
                         % (persistent, session.name, session.persistent))
    if not (isinstance(reconnect, (int, float)) and 0 <= reconnect <= 86400):
        raise ValueError("reconnect must be seconds in [0, 86400] (0: never), not %r" % (reconnect,))
    opt._persistent, opt._lease, opt._reconnect, opt.resumed_step = persistent, lease, reconnect, 0


def session_args(opt):
    """What OffloadAdamW's own Session gets."""
    if not opt._persistent:
        return {}
    return {"persistent": True, "lease_s": int(opt._lease or 0)}


def state_roles(opt):
    """Full-size state roles a chunk keeps: p, m, v, and the gradient
    store (exact mode, unless by reference: spillway._torch_gradref) or,
    on a persistent session, the overlapped mode's undo copy of p
    (client/journal.c)."""
    return 4 if (opt.mode == "exact" and not getattr(opt, "_grad_ref", False)) or opt._persistent else 3


def journal_pages(opt, psz):
    """A persistent session's update journal (client/journal.c), resident:
    a slot of a 4096-element unit's p, m, v per pool thread (64 at most),
    two step records, two done bitmaps."""
    if not opt._persistent:
        return 0
    threads = min(64, opt._threads or os.cpu_count() or 1)
    return -(-(threads * (128 + 12 * 4096) + 4096) // psz) + 2


def done_pages(entries, psz):
    """Pages of the journal's two done bitmaps (client/journal.c,
    spw__journal_done_tensor): a bit per 4096-element unit of every chunk."""
    chunk = psz // 4
    units = -(-chunk // 4096)
    nchunks = sum(-(-e.numel // chunk) for e in entries)
    words = max(1, -(-(nchunks * units) // 64))
    return -(-(2 * words * 8) // psz)


def resume(opt, spw, entries):
    """Right after the build: on a taken-over session, the parameters get
    the committed master weights and the step count and loss scale go on
    from the committed step. Returns that step (0: a fresh start)."""
    step = spw.resumed_step if opt._persistent else 0
    if not step:
        return 0
    with torch.no_grad():
        for e in entries:
            master = torch.empty(e.numel, dtype=torch.float32)
            spw.read(e.tid, L.STATE_PARAM, master.data_ptr())
            e.p.copy_(master.view(e.p.shape))
    info = opt._session.info()
    # A skipped step (inf/nan) did not count: its number comes again.
    opt._step_no = step - 1 if info["skipped"] else step
    for e in entries:
        e.steps = opt._step_no
    if opt._dynamic and info["loss_scale"] > 0:
        opt._scale = float(info["loss_scale"])
    return step


def before_rebuild(opt):
    """A rebuild (new parameters or groups) on a persistent session starts
    a new session: the state is carried by the rebuild's snapshot, and the
    old tensors must not stay beside the new ones."""
    if not opt._persistent or opt._session is None:
        return
    if not opt._own_session:
        raise NotImplementedError("OffloadAdamW: changing the parameters or param groups of an optimizer "
                                  "on a persistent Session you passed in is not supported; let OffloadAdamW "
                                  "make the session (session='name')")
    opt._session.close()
    opt._session = None


def abandon(opt):
    """Garbage collection of a persistent optimizer (the trainer is going
    away, perhaps by an exception): the connection is closed without a
    detach, so the state waits for the next trainer. True when done."""
    s = getattr(opt, "_session", None)
    if not getattr(opt, "_persistent", False) or s is None:
        return False
    if opt._own_session:
        s._disconnect()
        opt._session = None
    opt._opt = None
    return True


# ---------------------------------------------------------------- restarts

class RewoundError(RuntimeError):
    """spillwayd went away during a step and came back with the state of
    an earlier step than the one before it (after a crash: the last flush).
    The model's parameters hold resumed_step's weights; the trainer goes on
    with the data of resumed_step + 1 (the data position is the trainer's):

        try:
            opt.step()
        except spillway.torch.RewoundError as e:
            step = e.resumed_step   # the loop goes on with step + 1's batch
    """

    def __init__(self, resumed_step, step, why):
        self.resumed_step, self.step = resumed_step, step
        super().__init__("OffloadAdamW: spillwayd went away during step %d (%s) and came back with "
                         "the state of step %d; the model's parameters hold that step's weights: go on "
                         "with the data of step %d" % (step, why, resumed_step, resumed_step + 1))


def went_away(opt, err):
    """Whether err is the daemon going away under a persistent optimizer
    that rides restarts out (reconnect > 0). Its session may be one
    OffloadAdamW made or a Session passed in: check() holds a passed-in
    Session to persistent=True, and _recover reconnects that very object
    (Session.reconnect), so the caller's handle stays valid."""
    s = getattr(opt, "_session", None)
    return (getattr(opt, "_persistent", False) and getattr(opt, "_reconnect", 0) > 0
            and s is not None and s.persistent and err.errno in (errno.ECONNRESET, errno.EPIPE))


def _recover(opt, err, n):
    """The optimizer freed, the session taken over again in the restarted
    daemon, a new optimizer adopting its tensors (the parameters get the
    committed master weights). True: the step being taken is to be redone
    (its gradients are in p.grad, computed from the weights it resumed
    at); False: it was committed before the daemon went. Otherwise
    RewoundError. n: the step being taken."""
    if opt._opt is not None:
        opt._opt.close()
        opt._opt = None
    opt._failed, opt._in_step, opt._ended, opt._begun = None, False, None, None
    ddp = getattr(opt, "_ddp", None)
    if ddp is not None:
        # DDP's hand-overs of this backward (spillway._torch_ddp) went to
        # the dead daemon's optimizer; the redo takes p.grad, DDP's average.
        with ddp.lock:
            ddp.handed = []
    try:
        opt._session.reconnect(opt._reconnect)
        for e in opt._entries:
            e.tid = None
            e.forget_step()
        opt._build(snapshot=None)
    except SpillwayError as again:
        opt._broken(again)
        raise
    opt.reconnects = getattr(opt, "reconnects", 0) + 1
    if opt._step_no == n - 1:
        return True
    if opt._step_no == n:
        return False
    raise RewoundError(opt.resumed_step, n, err)


COMMITTED = object()  # ride(): the step was committed before the daemon went


def ride(opt, work, redo=None):
    """work() (a step's work, or what is left of it) riding out a daemon
    restart when persistent=True with reconnect > 0: each time the daemon
    goes away under it the session is taken over again and redo() (work()
    when None) runs in it, from p.grad. Returns what the last run
    returned, or COMMITTED when the step was committed before the daemon
    went (it is not redone); otherwise RewoundError."""
    while True:
        n = opt._step_no + 1
        try:
            gone = getattr(opt, "_gone", None)
            if gone is not None:
                opt._gone = None
                raise gone
            return work()
        except SpillwayError as err:
            if not went_away(opt, err):
                raise
            if not _recover(opt, err, n):
                return COMMITTED
            work = redo or work


def step(opt):
    """OffloadAdamW.step()'s work (begin, the gradients, end, the wait for
    the parameters), redone from p.grad after a daemon restart or found
    already committed (ride)."""
    def work():
        opt._open_step()
        opt._settle()
        opt._finish(opt._end())
    ride(opt, work)


def hook_failed(opt, err):
    """A backward hook's hand-over (or, under DDP, the all-reduce future's:
    spillway._torch_ddp) met the daemon gone: kept for step() (True),
    which reconnects; the gradients stay in p.grad (under DDP, the
    average: DDP writes it there after the all-reduce either way)."""
    if not went_away(opt, err):
        return False
    opt._gone, opt._failed = err, None
    return True


def flush(opt):
    """persistent=True: spillwayd saves the session's state at its last
    committed step into its persist.state_dir (spw_client_flush), from a
    client of its own; a kill -9 of the daemon or a power cut then loses
    only the steps after it. Returns the step saved."""
    import ctypes
    from ._checkpoint import CheckpointResult
    opt._usable()
    if not opt._persistent:
        raise ValueError("flush() is for OffloadAdamW(persistent=True): only a persistent session is kept "
                         "across a crash of spillwayd")
    lib = L.load()
    fn = getattr(lib, "spw_client_flush", None)
    if fn is None:
        raise NotImplementedError("flush() needs a libspillway with spw_client_flush (%s is older)"
                                  % L.library_path())
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(CheckpointResult)]
    res = CheckpointResult(size=ctypes.sizeof(CheckpointResult))
    c = ctypes.c_void_p()
    r = lib.spw_client_new(None, ctypes.byref(c))
    if r < 0:
        raise SpillwayError(r, None, "spillway client")
    try:
        r = lib.spw_client_connect(c, opt._session.socket.encode())
        if r == 0:
            r = fn(c, opt._session_name.encode(), ctypes.byref(res))
        if r < 0:
            raise SpillwayError(r, L.decode(lib.spw_client_last_error(c)), "flush %s" % opt._session_name)
    finally:
        lib.spw_client_free(c)
    return res.committed_step
