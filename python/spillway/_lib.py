# SPDX-License-Identifier: MIT
"""ctypes bindings over libspillway (spillway/spillway.h).

Only what the Python layer uses is declared. Struct layouts follow the
public header field for field; each begins with `size`, which is set to the
ctypes struct's size so that a newer library reads only what we wrote.

Where the library comes from, in order:
  1. $SPILLWAY_LIB (a path to libspillway.so*),
  2. the path meson wrote into spillway/_paths.py (build tree or install),
  3. ctypes.util.find_library('spillway').
"""
import ctypes
import ctypes.util
import errno as _errno
import os

__all__ = ["SpillwayError", "lib", "load", "library_path"]


class SpillwayError(OSError):
    """An error from libspillway: .errno is the positive errno, str() the
    library's own sentence (its last-error message) when it gave one."""

    def __init__(self, err, message, what=None):
        err = abs(int(err))
        if not message:
            message = os.strerror(err)
        if what:
            message = "%s: %s" % (what, message)
        super().__init__(err, message)

    def __str__(self):
        return self.strerror


# ---------------------------------------------------------------- structs

c_size_t = ctypes.c_size_t
u8, u32, i32, u64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64


class ClientOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("spin_us", u32), ("reply_timeout_ms", u32)]


class AttachOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("session", ctypes.c_char_p),
                ("region_bytes", u64), ("page_size", u32),
                ("swap_bytes", u64), ("flags", u32),
                ("persistent", u32), ("lease_s", u32)]


ATTACH_SWAP_BYTES = 1 << 0


class SessionInfo(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("region_bytes", u64), ("page_size", u32),
                ("slots", u32), ("sq_entries", u32), ("cq_entries", u32),
                ("features", u32), ("numa_node", i32), ("locked", u8),
                ("hugepages", u8), ("reserved", u8 * 6), ("swap_bytes", u64),
                ("persistent", u8), ("reattached", u8), ("step_open", u8), ("reserved2", u8),
                ("lease_s", u32), ("tensors", u32), ("good_steps", u32),
                ("committed_step", u64), ("loss_scale", ctypes.c_float), ("skipped", u32)]


class ParamGroup(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float)]


class OptimizerOpts(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("mode", ctypes.c_int), ("tier", ctypes.c_int),
                ("groups", ctypes.POINTER(ParamGroup)), ("ngroups", u32),
                ("accumulation", u32), ("clip_coef", ctypes.c_float),
                ("max_norm", ctypes.c_float), ("dynamic_loss_scale", ctypes.c_int),
                ("init_loss_scale", ctypes.c_float), ("growth_interval", u32),
                ("window", u32), ("threads", u32), ("device", ctypes.c_char_p),
                # Added with the calls below (spw_optimizer_grad_none, ...):
                # passed only to a library that has them.
                ("wait_timeout_ms", u32),
                # Later still: a library without it takes the struct only
                # when state_dtype is 0 (fp32), and refuses others (E2BIG).
                ("reserved", u32), ("state_dtype", ctypes.c_int),
                # Later still (a library without it refuses a nonzero one):
                # exact mode's gradients by reference, GRAD_BY_REFERENCE.
                ("reserved2", u32), ("grad_store", ctypes.c_int),
                # Later still (a library without it refuses a nonzero one):
                # bf16 master weights, MASTER_BF16.
                ("master_dtype", ctypes.c_int)]


# sizeof(struct spw_optimizer_opts) before wait_timeout_ms
OPTIMIZER_OPTS_VER0 = OptimizerOpts.wait_timeout_ms.offset


class StepResult(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("grad_norm", ctypes.c_double),
                ("clip_coef", ctypes.c_float), ("loss_scale", ctypes.c_float),
                ("next_loss_scale", ctypes.c_float), ("skipped", ctypes.c_int),
                ("nonfinite", ctypes.c_int), ("reserved", u32)]


class OptimizerStats(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("steps", u64), ("bytes_d2h", u64), ("bytes_h2d", u64),
                ("chunks", u64), ("adam_s", ctypes.c_double), ("pin_wait_s", ctypes.c_double),
                ("pins", u64), ("fast_pins", u64), ("prefetches", u64), ("hints", ctypes.c_int),
                ("reserved", u32)]


class OptimizerStats2(ctypes.Structure):
    """struct spw_optimizer_stats with the fields added for parameter offload."""
    _fields_ = OptimizerStats._fields_ + [("fetches", u64), ("bytes_fetched", u64),
                                          ("fetch_prefetches", u64)]


# enums, as in the header
SOCKET_CONTROL, SOCKET_STATUS = 0, 1
TENSOR_RESIDENT, TENSOR_SWAPPABLE = 0, 1
TYPE_F32, TYPE_BF16, TYPE_F16 = 0, 1, 2
OPT_OVERLAPPED, OPT_EXACT = 0, 1
GRAD_STORE, GRAD_BY_REFERENCE, GRAD_STORE_BF16 = 0, 1, 2
STATE_PARAM, STATE_EXP_AVG, STATE_EXP_AVG_SQ = 0, 1, 2
STATE_F32, STATE_BF16, STATE_INT8 = 0, 1, 2
# enum spw_master_dtype
MASTER_F32, MASTER_BF16 = 0, 1
ALL_CHUNKS = 0xFFFFFFFF

# ---------------------------------------------------------------- loading

_vp = ctypes.c_void_p
# The package's version; the library it loads must be the same release
# (load() refuses another one, naming both).
VERSION = "0.1.0"

_PROTOS = {
    "spw_version": (ctypes.c_char_p, []),
    "spw_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "spw_client_last_error": (ctypes.c_char_p, [_vp]),
    "spw_client_new": (ctypes.c_int, [ctypes.POINTER(ClientOpts), ctypes.POINTER(_vp)]),
    "spw_client_free": (_vp, [_vp]),
    "spw_socket_path": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, c_size_t]),
    "spw_client_connect": (ctypes.c_int, [_vp, ctypes.c_char_p]),
    "spw_client_attach": (ctypes.c_int, [_vp, ctypes.POINTER(AttachOpts)]),
    "spw_client_detach": (ctypes.c_int, [_vp]),
    "spw_client_info": (ctypes.c_int, [_vp, ctypes.POINTER(SessionInfo)]),
    "spw_status_fetch": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "spw_optimizer_new": (ctypes.c_int, [_vp, ctypes.POINTER(OptimizerOpts), ctypes.POINTER(_vp)]),
    "spw_optimizer_free": (_vp, [_vp]),
    "spw_optimizer_last_error": (ctypes.c_char_p, [_vp]),
    "spw_optimizer_add": (ctypes.c_int, [_vp, ctypes.c_char_p, u32, u64, _vp, _vp, ctypes.c_int,
                                         ctypes.POINTER(u32)]),
    "spw_optimizer_chunks": (u32, [_vp, u32]),
    "spw_optimizer_begin": (ctypes.c_int, [_vp, u64, ctypes.POINTER(ctypes.c_float), ctypes.c_float]),
    "spw_optimizer_grad_ready": (ctypes.c_int, [_vp, u32, u32, _vp, c_size_t, ctypes.c_int, _vp]),
    "spw_optimizer_sync_grads": (ctypes.c_int, [_vp]),
    "spw_optimizer_end": (ctypes.c_int, [_vp, ctypes.POINTER(StepResult)]),
    "spw_optimizer_wait_params": (ctypes.c_int, [_vp, u32, _vp]),
    "spw_optimizer_sync": (ctypes.c_int, [_vp]),
    "spw_optimizer_read": (ctypes.c_int, [_vp, u32, ctypes.c_int, _vp]),
    "spw_optimizer_stats": (ctypes.c_int, [_vp, ctypes.POINTER(OptimizerStats)]),
    # int spw_optimizer_checkpoint_check(spw_optimizer *o, const char *dir);
    "spw_optimizer_checkpoint_check": (ctypes.c_int, [_vp, ctypes.c_char_p]),
}
# Not in every library: looked up, declared when present.
_OPTIONAL = {
    # Persistent sessions:
    # int spw_client_drop(spw_client *c, const char *session);
    "spw_client_drop": (ctypes.c_int, [_vp, ctypes.c_char_p]),
    # int spw_client_reconnect(spw_client *c, uint32_t wait_ms);
    "spw_client_reconnect": (ctypes.c_int, [_vp, u32]),
    # uint64_t spw_optimizer_resumed_step(const spw_optimizer *o);
    "spw_optimizer_resumed_step": (u64, [_vp]),
    # int spw_optimizer_write(spw_optimizer *o, uint32_t tensor,
    #                         enum spw_optimizer_state which, const float *in);
    "spw_optimizer_write": (ctypes.c_int, [_vp, u32, ctypes.c_int, _vp]),
    # The torch layer's p.grad-at-step() contract (newer libraries):
    # int spw_optimizer_grad_none(spw_optimizer *o, uint32_t tensor);
    "spw_optimizer_grad_none": (ctypes.c_int, [_vp, u32]),
    # int spw_optimizer_set_lag(spw_optimizer *o, uint32_t tensor, uint64_t lag);
    "spw_optimizer_set_lag": (ctypes.c_int, [_vp, u32, u64]),
    # int spw_optimizer_set_group(spw_optimizer *o, uint32_t group,
    #                             const struct spw_param_group *g);
    "spw_optimizer_set_group": (ctypes.c_int, [_vp, u32, ctypes.POINTER(ParamGroup)]),
    # int spw_optimizer_set_clip(spw_optimizer *o, float max_norm);
    "spw_optimizer_set_clip": (ctypes.c_int, [_vp, ctypes.c_float]),
    # int spw_optimizer_set_loss_scale(spw_optimizer *o, float loss_scale);
    "spw_optimizer_set_loss_scale": (ctypes.c_int, [_vp, ctypes.c_float]),
    # int spw_optimizer_param_view(spw_optimizer *o, uint32_t tensor, void **ptr,
    #                              size_t *bytes);
    "spw_optimizer_param_view": (ctypes.c_int, [_vp, u32, ctypes.POINTER(ctypes.c_void_p),
                                                ctypes.POINTER(ctypes.c_size_t)]),
    # int spw_optimizer_param_view_dlpack(spw_optimizer *o, uint32_t tensor, void **ret);
    "spw_optimizer_param_view_dlpack": (ctypes.c_int, [_vp, u32, ctypes.POINTER(ctypes.c_void_p)]),
    # The timeline (SPILLWAY_TRACE): int spw_trace_flush(spw_optimizer *o);
    "spw_trace_flush": (ctypes.c_int, [_vp]),
    # Parameter offload (spillway.torch.offload_parameters):
    # int spw_optimizer_add_offloaded(o, name, group, count, const float *init, uint32_t *ret);
    "spw_optimizer_add_offloaded": (ctypes.c_int, [_vp, ctypes.c_char_p, u32, u64, _vp,
                                                   ctypes.POINTER(u32)]),
    # int spw_optimizer_add_frozen(o, name, count, const void *init, enum spw_type, uint32_t *ret);
    "spw_optimizer_add_frozen": (ctypes.c_int, [_vp, ctypes.c_char_p, u64, _vp, ctypes.c_int,
                                                ctypes.POINTER(u32)]),
    # int spw_params_fetch(o, tensor, void *dst, size_t bytes, enum spw_type, void *stream);
    "spw_params_fetch": (ctypes.c_int, [_vp, u32, _vp, c_size_t, ctypes.c_int, _vp]),
    # int spw_params_release(o, tensor);
    "spw_params_release": (ctypes.c_int, [_vp, u32]),
}

_lib = None
_lib_path = None


def _candidates():
    env = os.environ.get("SPILLWAY_LIB")
    if env:
        yield env, "$SPILLWAY_LIB"
        return
    try:
        from . import _paths
        p = getattr(_paths, "LIBRARY", None)
        if p and os.path.exists(p):
            yield p, "spillway/_paths.py"
    except ImportError:
        pass
    found = ctypes.util.find_library("spillway")
    if found:
        yield found, "ctypes.util.find_library"


def load():
    """Loads libspillway once and returns the ctypes CDLL."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    tried = []
    for path, origin in _candidates():
        try:
            cdll = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (from %s): %s" % (path, origin, e))
            continue
        missing = [n for n in _PROTOS if not hasattr(cdll, n)]
        if missing:
            tried.append("%s (from %s): lacks %s" % (path, origin, ", ".join(missing)))
            continue
        cdll.spw_version.restype, cdll.spw_version.argtypes = ctypes.c_char_p, []
        got = decode(cdll.spw_version())
        if got != VERSION:
            tried.append("%s (from %s): is libspillway %s; this spillway package is %s (install both "
                         "from one build, or set SPILLWAY_LIB to the matching library)"
                         % (path, origin, got, VERSION))
            continue
        for name, (res, args) in list(_PROTOS.items()) + list(_OPTIONAL.items()):
            if not hasattr(cdll, name):
                continue
            fn = getattr(cdll, name)
            fn.restype, fn.argtypes = res, args
        _lib, _lib_path = cdll, path
        return _lib
    raise ImportError(
        "spillway: cannot load libspillway: "
        + ("; ".join(tried) if tried else "not found")
        + ". Set SPILLWAY_LIB to the library (e.g. build/client/libspillway.so), "
          "or install spillway (meson install, then ldconfig) so the loader finds it.")


def library_path():
    load()
    return _lib_path


def library_version():
    """The loaded libspillway's spw_version()."""
    return decode(load().spw_version())


def has(name):
    return hasattr(load(), name)


class _Lazy:
    def __getattr__(self, name):
        return getattr(load(), name)


lib = _Lazy()


def strerror(err):
    return load().spw_strerror(int(err)).decode("utf-8", "replace")


def decode(b):
    return b.decode("utf-8", "replace") if b else ""


def errno_name(err):
    return _errno.errorcode.get(abs(err), str(abs(err)))
