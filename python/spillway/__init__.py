# SPDX-License-Identifier: MIT
"""spillway: Python binding over libspillway.

    import spillway
    s = spillway.Session("job/0", region_bytes=64 << 20)   # connect + attach
    print(spillway.status())                                # the daemon's status document

The PyTorch optimizer lives in spillway.torch (OffloadAdamW); DeepSpeed
configs are read by spillway.from_deepspeed_config().
"""
import ctypes
import errno
import json
import os
import time

from ._lib import SpillwayError, load, library_path, library_version  # noqa: F401
from . import _lib as L
from . import _state_dtype
from ._progress import AttachProgress

__all__ = ["SpillwayError", "Session", "Optimizer", "StepResult", "socket_path", "status",
           "checkpoint", "restore", "from_deepspeed_config", "library_path", "library_version", "DeepSpeedConfigError", "SpillwaySettings"]

__version__ = L.VERSION


def _check(r, what=None, msg=None):
    if r < 0:
        raise SpillwayError(r, msg or L.strerror(r), what)
    return r


def socket_path(kind="control"):
    """The default path of the daemon's control or status socket
    ($SPILLWAY_SOCKET, $XDG_RUNTIME_DIR/spillway, /run/spillway)."""
    k = {"control": L.SOCKET_CONTROL, "status": L.SOCKET_STATUS}[kind]
    buf = ctypes.create_string_buffer(4096)
    _check(L.lib.spw_socket_path(k, buf, len(buf)), "socket path")
    return buf.value.decode()


def _status_path_for(control):
    return os.path.join(os.path.dirname(control), "status.sock")


def status(socket=None):
    """The daemon's status document as a dict. socket: the status socket,
    or a control socket path (its directory's status.sock is used)."""
    if socket and os.path.basename(socket) != "status.sock":
        socket = _status_path_for(socket)
    out = ctypes.c_void_p()
    r = L.lib.spw_status_fetch(socket.encode() if socket else None, ctypes.byref(out))
    _check(r, "status %s" % (socket or socket_path("status")))
    try:
        text = ctypes.string_at(out.value).decode("utf-8", "replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(out.value))
    return json.loads(text)


class Session:
    """A client connected to spillwayd with one session attached.

    name: "job/rank" ([A-Za-z0-9._/-]); socket: the control socket (None:
    $SPILLWAY_SOCKET or the default path); region_bytes: pinned memory to
    reserve; page_size: 0 for the daemon's default (4 MiB); swap_bytes: NVMe
    swap to reserve, exactly (0: none, a resident-only session; None: the
    daemon's swap.session_bytes); progress: while the daemon locks the
    region, True draws a tqdm bar on stderr (when tqdm is installed and
    stderr is a terminal), a callable gets (ready_bytes, total_bytes) from
    the status document's region_ready_bytes.

    persistent: the session outlives this process when it dies without
    close(): the daemon keeps it, orphaned, for lease_s seconds (default
    900), and the next Session of the same name and uid takes it over
    (info()["reattached"]). close() ends it; garbage collection of a
    persistent Session only disconnects, so an exception that kills the
    trainer leaves the state to resume."""

    def __init__(self, name, region_bytes, page_size=0, socket=None, reply_timeout_ms=0, swap_bytes=None,
                 progress=None, persistent=False, lease_s=0):
        lib = L.load()
        self.name = name
        self.socket = socket or socket_path("control")
        self._c = None
        self.owner = None  # the Optimizer that took the client over, if any
        opts = L.ClientOpts(size=ctypes.sizeof(L.ClientOpts), reply_timeout_ms=reply_timeout_ms)
        c = ctypes.c_void_p()
        _check(lib.spw_client_new(ctypes.byref(opts), ctypes.byref(c)), "spillway client")
        self._c = c
        r = lib.spw_client_connect(c, self.socket.encode())
        if r < 0:
            msg = L.decode(lib.spw_client_last_error(c))
            lib.spw_client_free(c)
            self._c = None
            if self.socket not in msg:
                msg = "%s (socket %s)" % (msg or L.strerror(r), self.socket)
            if r in (-2, -111) and "spillwayd" not in msg:  # ENOENT, ECONNREFUSED
                msg += ("; start the daemon first: `systemctl start spillwayd`, or "
                        "`spillwayd --config FILE` with socket.dir set to %s"
                        % os.path.dirname(self.socket))
            raise SpillwayError(r, "cannot reach spillwayd: " + msg)
        a = L.AttachOpts(size=ctypes.sizeof(L.AttachOpts), session=name.encode(),
                         region_bytes=int(region_bytes), page_size=int(page_size))
        if swap_bytes is not None:
            a.swap_bytes, a.flags = int(swap_bytes), L.ATTACH_SWAP_BYTES
        self.persistent = bool(persistent)
        a.persistent, a.lease_s = int(self.persistent), int(lease_s)
        status_path = _status_path_for(self.socket)
        with AttachProgress(progress, name, lambda: status(status_path), a.region_bytes):
            # A session whose dead trainer's last requests are still
            # completing answers EAGAIN for a moment: a restarted trainer
            # waits it out.
            for _ in range(250):
                r = lib.spw_client_attach(c, ctypes.byref(a))
                if r != -errno.EAGAIN:
                    break
                time.sleep(0.02)
        if r < 0:
            msg = L.decode(lib.spw_client_last_error(c))
            self.close()
            raise SpillwayError(r, msg, "attach session %s" % name)

    @property
    def handle(self):
        if self._c is None:
            raise SpillwayError(107, "session %s is closed" % self.name)  # ENOTCONN
        return self._c

    def last_error(self):
        return L.decode(L.lib.spw_client_last_error(self.handle))

    def info(self):
        i = L.SessionInfo(size=ctypes.sizeof(L.SessionInfo))
        _check(L.lib.spw_client_info(self.handle, ctypes.byref(i)), "session info")
        return {"region_bytes": i.region_bytes, "page_size": i.page_size, "slots": i.slots,
                "sq_entries": i.sq_entries, "cq_entries": i.cq_entries, "features": i.features,
                "numa_node": i.numa_node, "locked": bool(i.locked), "hugepages": bool(i.hugepages),
                "swap_bytes": i.swap_bytes, "persistent": bool(i.persistent),
                "reattached": bool(i.reattached), "step_open": bool(i.step_open), "lease_s": i.lease_s,
                "tensors": i.tensors, "committed_step": i.committed_step, "loss_scale": i.loss_scale,
                "good_steps": i.good_steps, "skipped": bool(i.skipped)}

    def reconnect(self, wait_s):
        """After spillwayd went away (a restart with persist.state_dir): dials
        the same socket for up to wait_s seconds and takes the persistent
        session over again (spw_client_reconnect). The optimizer on it must
        be closed first; info() then says what was committed."""
        if self.owner is not None:
            raise ValueError("session %s: close its optimizer before reconnecting" % self.name)
        r = L.lib.spw_client_reconnect(self.handle, int(wait_s * 1000))
        if r < 0:
            raise SpillwayError(r, self.last_error(), "reconnect session %s" % self.name)

    def close(self):
        """Detaches (cleanly when possible) and frees the client."""
        if self._c is None:
            return
        if self.owner is not None:
            self.owner.close()
        lib = L.load()
        lib.spw_client_detach(self._c)
        lib.spw_client_free(self._c)
        self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _disconnect(self):
        """Frees the client without a detach: a persistent session stays
        with the daemon, orphaned, for the next trainer."""
        if self._c is None:
            return
        if self.owner is not None:
            self.owner.close()
        L.load().spw_client_free(self._c)
        self._c = None

    def __del__(self):
        try:
            if getattr(self, "persistent", False):
                self._disconnect()
            else:
                self.close()
        except Exception:
            pass


def drop(name, socket=None):
    """Ends the orphaned persistent session name now (yours, or any as
    root): its memory, tensors and swap are released."""
    lib = L.load()
    if not L.has("spw_client_drop"):
        raise NotImplementedError("drop needs a libspillway with spw_client_drop (%s is older)" % L.library_path())
    sock = socket or socket_path("control")
    c = ctypes.c_void_p()
    _check(lib.spw_client_new(None, ctypes.byref(c)), "spillway client")
    try:
        r = lib.spw_client_connect(c, sock.encode())
        if r == 0:
            r = lib.spw_client_drop(c, name.encode())
        if r < 0:
            raise SpillwayError(r, L.decode(lib.spw_client_last_error(c)), "drop session %s" % name)
    finally:
        lib.spw_client_free(c)


class StepResult:
    __slots__ = ("grad_norm", "clip_coef", "loss_scale", "next_loss_scale", "skipped", "nonfinite")

    def __init__(self, r):
        self.grad_norm = r.grad_norm
        self.clip_coef = r.clip_coef
        self.loss_scale = r.loss_scale
        self.next_loss_scale = r.next_loss_scale
        self.skipped = bool(r.skipped)
        self.nonfinite = bool(r.nonfinite)

    def __repr__(self):
        return "StepResult(grad_norm=%g, clip_coef=%g, skipped=%s)" % (
            self.grad_norm, self.clip_coef, self.skipped)


_DLTENSOR = b"dltensor"  # the capsule's name, alive as long as the module


def _capsule(managed):
    """A DLManagedTensor pointer as the PyCapsule DLPack consumers take."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(managed, _DLTENSOR, None)


class Optimizer:
    """spw_optimizer: the offload pipeline, one call per C function. The
    session's client belongs to it until close(). Pointers are integers
    (addresses of the caller's buffers, e.g. tensor.data_ptr())."""

    MODES = {"overlapped": L.OPT_OVERLAPPED, "exact": L.OPT_EXACT}
    TIERS = {"cpu": L.TENSOR_RESIDENT, "nvme": L.TENSOR_SWAPPABLE}

    def __init__(self, session, groups, mode="overlapped", tier="cpu", accumulation=1,
                 clip_coef=0.0, max_norm=0.0, window=0, threads=0, device=None,
                 dynamic_loss_scale=False, init_loss_scale=0.0, growth_interval=0,
                 timeout_ms=0, trace=None, state_dtype="fp32", grad_by_reference=False,
                 grad_store_dtype="fp32", master_dtype="fp32"):
        lib = L.load()
        sdt = _state_dtype.check(state_dtype)
        gst = _state_dtype.check_grad_store(grad_store_dtype)
        mdt = _state_dtype.check_master(master_dtype)
        if session.owner is not None:
            raise ValueError("session %s already has an optimizer" % session.name)
        if mode not in self.MODES:
            raise ValueError("mode must be 'overlapped' or 'exact', not %r" % (mode,))
        if tier not in self.TIERS:
            raise ValueError("tier must be 'cpu' or 'nvme', not %r" % (tier,))
        arr = (L.ParamGroup * len(groups))()
        for i, g in enumerate(groups):
            arr[i] = L.ParamGroup(g["lr"], g["beta1"], g["beta2"], g["eps"], g["weight_decay"])
        self._device = device.encode() if device else None
        opts = L.OptimizerOpts(size=ctypes.sizeof(L.OptimizerOpts), mode=self.MODES[mode],
                               tier=self.TIERS[tier], groups=arr, ngroups=len(groups),
                               accumulation=accumulation, clip_coef=clip_coef, max_norm=max_norm,
                               dynamic_loss_scale=int(bool(dynamic_loss_scale)),
                               init_loss_scale=init_loss_scale, growth_interval=growth_interval,
                               window=window, threads=threads, device=self._device,
                               wait_timeout_ms=timeout_ms, state_dtype=sdt,
                               grad_store=L.GRAD_BY_REFERENCE if grad_by_reference else gst,
                               master_dtype=mdt)
        if not L.has("spw_optimizer_grad_none"):
            if timeout_ms:
                raise NotImplementedError("a wait timeout needs a libspillway with "
                                          "spw_optimizer_opts.wait_timeout_ms (%s is older)"
                                          % L.library_path())
            opts.size = L.OPTIMIZER_OPTS_VER0
        o = ctypes.c_void_p()
        # The library reads SPILLWAY_TRACE once, in spw_optimizer_new: set
        # for that call only, so other optimizers keep the caller's value.
        old = os.environ.get("SPILLWAY_TRACE")
        if trace is not None:
            os.environ["SPILLWAY_TRACE"] = os.fspath(trace)
        try:
            r = lib.spw_optimizer_new(session.handle, ctypes.byref(opts), ctypes.byref(o))
        finally:
            if trace is not None and old is None:
                del os.environ["SPILLWAY_TRACE"]
            elif trace is not None:
                os.environ["SPILLWAY_TRACE"] = old
        if r < 0:
            raise SpillwayError(r, session.last_error(), "optimizer")
        self._o = o
        self.session = session
        session.owner = self
        self.can_write = L.has("spw_optimizer_write")

    @staticmethod
    def can(name):
        """Whether the library has the optional function name."""
        return L.has(name)

    def _err(self, r, what):
        msg = L.decode(L.lib.spw_optimizer_last_error(self._o)) if self._o else ""
        return SpillwayError(r, msg, what)

    def _call(self, r, what):
        if r < 0:
            raise self._err(r, what)
        return r

    @property
    def closed(self):
        return self._o is None

    def add(self, name, group, count, init_ptr, dev_ptr, param_type):
        t = L.u32()
        r = L.lib.spw_optimizer_add(self._o, name.encode(), group, count, init_ptr, dev_ptr,
                                    param_type, ctypes.byref(t))
        self._call(r, "add %s" % name)
        return t.value

    def chunks(self, tensor):
        return L.lib.spw_optimizer_chunks(self._o, tensor)

    def begin(self, step, lrs=None, loss_scale=0.0):
        arr = (ctypes.c_float * len(lrs))(*lrs) if lrs is not None else None
        self._call(L.lib.spw_optimizer_begin(self._o, step, arr, loss_scale), "begin step %d" % step)

    def grad_ready(self, tensor, ptr, nbytes, gtype, chunk=L.ALL_CHUNKS, stream=None):
        self._call(L.lib.spw_optimizer_grad_ready(self._o, tensor, chunk, ptr, nbytes, gtype, stream),
                   "gradient")

    def sync_grads(self):
        self._call(L.lib.spw_optimizer_sync_grads(self._o), "sync gradients")

    def end(self):
        res = L.StepResult(size=ctypes.sizeof(L.StepResult))
        self._call(L.lib.spw_optimizer_end(self._o, ctypes.byref(res)), "end step")
        return StepResult(res)

    def wait_params(self, tensor, stream=None):
        self._call(L.lib.spw_optimizer_wait_params(self._o, tensor, stream), "wait for parameters")

    def sync(self):
        self._call(L.lib.spw_optimizer_sync(self._o), "sync")

    def param_view(self, tensor):
        """spw_optimizer_param_view_dlpack: the tensor's fp32 master weights
        as a DLPack capsule (torch.utils.dlpack.from_dlpack), or None where
        the library has no view for it (its last error says why)."""
        if not L.has("spw_optimizer_param_view_dlpack"):
            return None
        m = ctypes.c_void_p()
        if L.lib.spw_optimizer_param_view_dlpack(self._o, tensor, ctypes.byref(m)) < 0:
            return None
        return _capsule(m.value)

    def read(self, tensor, which, out_ptr):
        self._call(L.lib.spw_optimizer_read(self._o, tensor, which, out_ptr), "read state")

    def write(self, tensor, which, in_ptr):
        if not self.can_write:
            raise NotImplementedError("libspillway lacks spw_optimizer_write()")
        self._call(L.lib.spw_optimizer_write(self._o, tensor, which, in_ptr), "write state")

    def grad_none(self, tensor):
        self._call(L.lib.spw_optimizer_grad_none(self._o, tensor), "no gradient")

    def set_lag(self, tensor, lag):
        self._call(L.lib.spw_optimizer_set_lag(self._o, tensor, lag), "set lag")

    def set_group(self, group, g):
        pg = L.ParamGroup(g["lr"], g["beta1"], g["beta2"], g["eps"], g["weight_decay"])
        self._call(L.lib.spw_optimizer_set_group(self._o, group, ctypes.byref(pg)),
                   "set param group %d" % group)

    def set_clip(self, max_norm):
        self._call(L.lib.spw_optimizer_set_clip(self._o, max_norm), "set clip")

    def set_loss_scale(self, scale):
        self._call(L.lib.spw_optimizer_set_loss_scale(self._o, scale), "set loss scale")

    def stats(self):
        st = L.OptimizerStats(size=ctypes.sizeof(L.OptimizerStats))
        self._call(L.lib.spw_optimizer_stats(self._o, ctypes.byref(st)), "stats")
        return {n: getattr(st, n) for n, _ in L.OptimizerStats._fields_ if n not in ("size", "reserved")}

    def trace_flush(self):
        """Writes the timeline (SPILLWAY_TRACE or trace=) to its file now:
        True, or False when tracing is off for this optimizer."""
        if not L.has("spw_trace_flush"):
            raise NotImplementedError("trace_flush needs a libspillway with spw_trace_flush (%s is older)"
                                      % L.library_path())
        r = L.lib.spw_trace_flush(self._o)
        if r == -errno.ENODATA:
            return False
        self._call(r, "trace flush")
        return True

    @property
    def resumed_step(self):
        """The committed step a reattached persistent session's state holds
        (0: the optimizer started fresh)."""
        if not L.has("spw_optimizer_resumed_step"):
            return 0
        return L.lib.spw_optimizer_resumed_step(self._o)

    def checkpoint_check(self, directory):
        """None when the checkpoint in directory would load into this
        optimizer's session (the same page size and layout, every page's
        CRC-32C right); else the sentence saying why not. Reads the whole
        checkpoint; changes nothing."""
        r = L.lib.spw_optimizer_checkpoint_check(self._o, os.fsencode(directory))
        return L.decode(L.lib.spw_optimizer_last_error(self._o)) if r < 0 else None

    def close(self):
        """Frees the optimizer (its tensors are unregistered, unless the
        session is persistent); the session's client is free for other
        uses again."""
        if self._o is None:
            return
        L.lib.spw_optimizer_free(self._o)
        self._o = None
        if self.session.owner is self:
            self.session.owner = None


from ._checkpoint import checkpoint, restore  # noqa: E402,F401
from .deepspeed import from_deepspeed_config, DeepSpeedConfigError, SpillwaySettings  # noqa: E402
