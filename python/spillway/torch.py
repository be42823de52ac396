# SPDX-License-Identifier: MIT
"""spillway.torch: OffloadAdamW, torch.optim.AdamW with its state in spillway.

    from spillway.torch import OffloadAdamW
    opt = OffloadAdamW(model.parameters(), lr=1e-3, weight_decay=0.01, tier="nvme")
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # gradients go to spillway as backward makes them
        opt.step()                        # waits for the last updates; parameters are new

How it works: every parameter gets a gradient hook (torch 1.13 has no
post-accumulate-grad hook; the gradient hook sees the gradient of one
backward before it is added into .grad). The first hook of a step begins a
spillway step with the param groups' current learning rates, and each hook
hands its gradient to libspillway, which copies it into the daemon's pinned
memory and runs AdamW on CPU threads while backward goes on. step() ends the
step and waits until the updated parameters are written back.

Differences from torch.optim.AdamW, all deliberate:
- Every backward between two step() calls is a micro-batch: with
  accumulation_steps=N, call backward exactly N times per step.
- A learning rate is read when the step's first gradient arrives (the usual
  scheduler.step() after optimizer.step() is right; changing lr between
  backward and step() takes effect a step late, with a warning).
- A parameter that gets no gradient in a step gets a zero gradient (torch
  would skip it: no weight decay, no moment decay that step).
- Parameters with requires_grad=False are not registered and never change.
- amsgrad, maximize and foreach are not supported (capturable is ignored).
"""
import ctypes
import itertools
import math
import os
import warnings
import weakref
from collections import defaultdict

import torch
import torch.optim

from . import Optimizer as _SpwOptimizer
from . import Session, SpillwayError
from . import _lib as L

__all__ = ["OffloadAdamW"]

_TYPES = {torch.float32: L.TYPE_F32, torch.bfloat16: L.TYPE_BF16, torch.float16: L.TYPE_F16}
_session_counter = itertools.count()
_EALREADY = 114


class _Entry:
    """One registered parameter."""
    __slots__ = ("p", "name", "group", "tid", "ref", "ptr", "version", "arrivals", "hook",
                 "numel", "__weakref__")

    def __init__(self, p, name, group):
        self.p, self.name, self.group = p, name, group
        self.tid = None
        self.ref = None
        self.ptr = None
        self.version = None
        self.arrivals = 0
        self.hook = None
        self.numel = p.numel()


def _param_label(name, p):
    return "%s %s" % (name, tuple(p.shape))


def _spw_name(idx, name):
    s = "%d:%s" % (idx, name)
    s = "".join(ch if 32 < ord(ch) < 127 else "_" for ch in s)
    return s[:200]


class OffloadAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW whose fp32 master weights and moments live in
    spillway: tier 'cpu' (resident in the daemon's pinned memory) or 'nvme'
    (swapped to the daemon's NVMe tier).

    mode: 'overlapped' (Adam on each gradient as it arrives; clipping only
    by a fixed clip_coef) or 'exact' (Adam after the global norm is known:
    max_grad_norm clips like torch.nn.utils.clip_grad_norm_, and steps with
    inf/nan gradients are skipped). accumulation_steps: backward calls per
    step. session: a session name ("job/rank") or a spillway.Session to use;
    socket: spillwayd's control socket (default $SPILLWAY_SOCKET, then the
    default path). data_parallel_group: a torch.distributed process group
    (or "world") whose ranks average each gradient before it is handed over
    (data parallel without DistributedDataParallel). page_size, region_bytes,
    window, threads: tuning (see spillway.h); 0/None choose.

    params may also be (name, tensor) pairs, e.g. model.named_parameters(),
    so that errors and spillway's status name them.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, *,
                 tier="cpu", mode="overlapped", max_grad_norm=None, accumulation_steps=1,
                 session=None, socket=None, clip_coef=None, data_parallel_group=None,
                 page_size=None, region_bytes=None, window=0, threads=0):
        self._built = False
        self._opt = None
        self._entries = []
        self._names = {}
        self._session = None
        self._own_session = True
        if tier not in ("cpu", "nvme"):
            raise ValueError("tier must be 'cpu' or 'nvme', not %r" % (tier,))
        if mode not in ("overlapped", "exact"):
            raise ValueError("mode must be 'overlapped' or 'exact', not %r" % (mode,))
        if not (isinstance(accumulation_steps, int) and accumulation_steps >= 1):
            raise ValueError("accumulation_steps must be an integer >= 1, not %r" % (accumulation_steps,))
        if max_grad_norm is not None and not max_grad_norm > 0:
            raise ValueError("max_grad_norm must be > 0 or None, not %r" % (max_grad_norm,))
        if max_grad_norm is not None and mode != "exact":
            raise ValueError("max_grad_norm needs mode='exact': in overlapped mode Adam runs before "
                             "the global gradient norm is known (a fixed clip_coef= is possible)")
        if clip_coef is not None and not (0 < clip_coef and mode == "overlapped"):
            raise ValueError("clip_coef is a fixed coefficient > 0 for mode='overlapped'")
        _check_hparams(lr, betas, eps, weight_decay, "defaults")
        self.tier, self.mode = tier, mode
        self.max_grad_norm = max_grad_norm
        self.accumulation_steps = accumulation_steps
        self.clip_coef = clip_coef
        self.data_parallel_group = data_parallel_group
        self._page_size = page_size
        self._region_bytes = region_bytes
        self._window = window
        self._threads = threads
        self._socket = socket
        self._step_no = 0
        self._in_step = False
        self._begun_lrs = None
        self._held = []
        self._cb_queued = False
        self._built_hparams = None
        self.last_result = None
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=False,
                        foreach=None, maximize=False, capturable=False)
        super().__init__(params, defaults)
        if not self._entries:
            raise ValueError("OffloadAdamW: no parameter requires a gradient")
        devs = {e.p.device.type for e in self._entries}
        if len(devs) > 1:
            raise ValueError("OffloadAdamW: parameters on several device types (%s); one "
                             "optimizer serves one device" % ", ".join(sorted(devs)))
        if isinstance(session, Session):
            self._session, self._own_session = session, False
            self._session_name = session.name
        else:
            self._session_name = session or "torch/%d.%d" % (os.getpid(), next(_session_counter))
        self._build(snapshot=None)

    # ------------------------------------------------------------ groups

    def add_param_group(self, param_group):
        """As torch's; the new parameters are registered in spillway at once
        (after the first step this keeps every other parameter's moments,
        which needs spw_optimizer_write in libspillway)."""
        if not isinstance(param_group, dict):
            raise TypeError("param group must be a dict")
        param_group = dict(param_group)
        params = param_group["params"]
        if isinstance(params, torch.Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections")
        else:
            params = list(params)
        plain = []
        first = sum(len(g["params"]) for g in self.param_groups)
        for i, item in enumerate(params):
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
                name, p = item
            else:
                name, p = "param%d" % (first + i), item
            if not isinstance(p, torch.Tensor):
                raise TypeError("OffloadAdamW: parameter %s is a %s, not a torch.Tensor"
                                % (name, type(p).__name__))
            _check_param(name, p)
            plain.append(p)
            self._names.setdefault(p, name)
        param_group["params"] = plain
        for k in ("amsgrad", "maximize"):
            if param_group.get(k, False):
                raise ValueError("OffloadAdamW: %s=True is not supported" % k)
        if param_group.get("foreach"):
            raise ValueError("OffloadAdamW: foreach is not supported (spillway runs its own kernels)")
        gi = len(self.param_groups)
        super().add_param_group(param_group)
        g = self.param_groups[-1]
        try:
            _check_hparams(g["lr"], g["betas"], g["eps"], g["weight_decay"], "param group %d" % gi)
        except ValueError:
            self.param_groups.pop()
            raise
        new = [_Entry(p, self._names[p], gi) for p in plain if p.requires_grad]
        if new and self._entries and new[0].p.device.type != self._entries[0].p.device.type:
            self.param_groups.pop()
            raise ValueError("OffloadAdamW: parameter %s is on %s, the others on %s"
                             % (new[0].name, new[0].p.device, self._entries[0].p.device))
        if not self._built:
            self._entries.extend(new)
            return
        if self._in_step:
            self.param_groups.pop()
            raise RuntimeError("OffloadAdamW: add_param_group during a step (between backward and step())")
        old = list(self._entries)
        try:
            self._rebuild(old + new)
        except Exception:
            self.param_groups.pop()
            raise

    # ------------------------------------------------------------ building

    def _layout(self, entries):
        has_g = self.mode == "exact" or self.accumulation_steps > 1
        k = 4 if has_g else 3
        total = sum(e.numel * 4 for e in entries)
        psz = self._page_size
        if not psz:
            psz = 64 << 10
            while psz < (4 << 20) and total * k / psz > 4096:
                psz *= 2
        win = self._window or 4
        if self.tier == "cpu":
            pages = sum(-(-e.numel * 4 // psz) for e in entries) * k
        else:
            pages = 4 * win * k
        pages += 2 * win + 8
        return psz, pages * psz

    def _device_name(self, entries):
        d = entries[0].p.device
        if d.type == "cpu":
            return "host"
        if d.type == "cuda":
            return "cuda:%d" % (d.index if d.index is not None else torch.cuda.current_device())
        raise ValueError("OffloadAdamW: parameter %s is on device %s; libspillway serves cpu "
                         "(host backend) and cuda" % (entries[0].name, d))

    def _hparams(self):
        return [(float(g["betas"][0]), float(g["betas"][1]), float(g["eps"]),
                 float(g["weight_decay"])) for g in self.param_groups]

    def _build(self, snapshot):
        """Creates the spw optimizer for self._entries and registers them.
        snapshot: {entry: (master or None, exp_avg, exp_avg_sq)} to restore."""
        entries = self._entries
        device = self._device_name(entries)
        psz, region = self._layout(entries)
        if self._region_bytes:
            region = self._region_bytes
        if self._own_session:
            if self._session is not None and self._session.info()["region_bytes"] < region:
                self._session.close()
                self._session = None
            if self._session is None:
                self._session = Session(self._session_name, region_bytes=region, page_size=psz,
                                        socket=self._socket)
        groups = [dict(lr=float(g["lr"]), beta1=float(g["betas"][0]), beta2=float(g["betas"][1]),
                       eps=float(g["eps"]), weight_decay=float(g["weight_decay"]))
                  for g in self.param_groups]
        opt = _SpwOptimizer(self._session, groups, mode=self.mode, tier=self.tier,
                            accumulation=self.accumulation_steps,
                            clip_coef=float(self.clip_coef or 0.0),
                            max_norm=float(self.max_grad_norm or 0.0),
                            window=self._window, threads=self._threads, device=device)
        try:
            idx = {e: i for i, e in enumerate(entries)}
            # Backward produces the last layers' gradients first.
            for e in reversed(entries):
                snap = snapshot.get(e) if snapshot else None
                if snap is not None and snap[0] is not None:
                    init = snap[0]
                else:
                    init = e.p.detach().to("cpu", torch.float32).contiguous().view(-1)
                e.tid = opt.add(_spw_name(idx[e], e.name), e.group, e.numel, init.data_ptr(),
                                e.p.data_ptr(), _TYPES[e.p.dtype])
            if snapshot:
                for e in entries:
                    snap = snapshot.get(e)
                    if snap is None:
                        continue
                    opt.write(e.tid, L.STATE_EXP_AVG, _f32(snap[1]).data_ptr())
                    opt.write(e.tid, L.STATE_EXP_AVG_SQ, _f32(snap[2]).data_ptr())
        except Exception:
            opt.close()
            raise
        self._opt = opt
        me = weakref.ref(self)
        for e in entries:
            e.ref = e.p.detach()  # keeps the buffer spillway writes into alive
            e.ptr = e.p.data_ptr()
            e.version = e.p._version
            e.arrivals = 0
            if e.hook is None:
                e.hook = e.p.register_hook(_make_hook(me, weakref.ref(e)))
        self._built_hparams = self._hparams()
        self._built = True

    def _snapshot(self, entries, masters):
        """Reads the state of entries out of spillway (after sync)."""
        snap = {}
        if self._opt is None or self._step_no == 0:
            return snap
        self._opt.sync()
        for e in entries:
            m = self._read(e, L.STATE_EXP_AVG)
            v = self._read(e, L.STATE_EXP_AVG_SQ)
            master = self._read(e, L.STATE_PARAM) if masters else None
            snap[e] = (master, m, v)
        return snap

    def _read(self, e, which):
        out = torch.empty(e.numel, dtype=torch.float32)
        self._opt.read(e.tid, which, out.data_ptr())
        return out

    def _rebuild(self, entries, snapshot=None, params_changed=False):
        """Frees the spw optimizer and builds a new one for entries, carrying
        master weights and moments over (or those of snapshot)."""
        if snapshot is None:
            if self._step_no > 0 and not _SpwOptimizer_can_write():
                raise NotImplementedError(
                    "OffloadAdamW: changing the registered parameters or their hyperparameters "
                    "after the first step needs spw_optimizer_write() in libspillway, to put the "
                    "moments back; this libspillway (%s) lacks it" % L.library_path())
            # Master weights of low-precision parameters are carried unless
            # the parameters themselves were changed from outside.
            snapshot = self._snapshot([e for e in entries if e.tid is not None],
                                      masters=not params_changed)
            for e, s in list(snapshot.items()):
                if e.p.dtype == torch.float32:
                    snapshot[e] = (None, s[1], s[2])
        old_entries = self._entries
        if self._opt is not None:
            self._opt.close()
            self._opt = None
        for e in entries:
            e.tid = None
        self._entries = list(entries)
        try:
            self._build(snapshot)
        except Exception:
            dropped = [e for e in entries if e not in old_entries]
            for e in dropped:
                if e.hook is not None:
                    e.hook.remove()
                    e.hook = None
            self._entries = old_entries
            try:
                self._build({e: s for e, s in snapshot.items() if e in old_entries})
            except Exception:
                pass
            raise

    # ------------------------------------------------------------ steps

    def _changed(self):
        """Whether parameters or hyperparameters changed since the build."""
        if self._hparams() != self._built_hparams:
            return "hyperparameters"
        for e in self._entries:
            if e.p.data_ptr() != e.ptr or e.p._version != e.version:
                return "parameter %s" % e.name
        return None

    def _open_step(self):
        if self._in_step:
            return
        if self._opt is None:
            raise RuntimeError("OffloadAdamW is closed")
        what = self._changed()
        if what is not None:
            params_changed = what.startswith("parameter")
            if self._step_no > 0 and not _SpwOptimizer_can_write():
                raise RuntimeError(
                    "OffloadAdamW: %s changed from outside since the last step (e.g. "
                    "load_state_dict on the model, or param_groups' betas/eps/weight_decay); "
                    "pushing it into spillway while keeping the moments needs "
                    "spw_optimizer_write(), which this libspillway lacks" % what)
            self._rebuild(self._entries, params_changed=params_changed)
        lrs = [float(g["lr"]) for g in self.param_groups]
        self._opt.begin(self._step_no + 1, lrs)
        self._begun_lrs = lrs
        for e in self._entries:
            e.arrivals = 0
        self._in_step = True

    def _stream(self, e):
        if e.p.device.type == "cuda":
            return ctypes.c_void_p(torch.cuda.current_stream(e.p.device).cuda_stream)
        return None

    def _hand_over(self, e, g):
        try:
            self._opt.grad_ready(e.tid, g.data_ptr(), g.numel() * g.element_size(),
                                 _TYPES[g.dtype], stream=self._stream(e))
        except SpillwayError as err:
            if err.errno == _EALREADY:
                raise RuntimeError(
                    "OffloadAdamW: parameter %s got more gradients than accumulation_steps=%d "
                    "before step(): every backward between two steps is a micro-batch (%s)"
                    % (e.name, self.accumulation_steps, err)) from None
            raise
        e.arrivals += 1
        self._held.append(g)

    def _on_grad(self, e, grad):
        if grad.layout != torch.strided:
            raise RuntimeError("OffloadAdamW: parameter %s got a sparse gradient; spillway takes "
                               "dense gradients only (e.g. nn.Embedding(sparse=False))" % e.name)
        if grad.dtype not in _TYPES:
            raise RuntimeError("OffloadAdamW: parameter %s got a %s gradient; spillway takes "
                               "float32, bfloat16 and float16" % (e.name, grad.dtype))
        ret = None
        g = grad.contiguous()
        group = self.data_parallel_group
        if group is not None:
            import torch.distributed as dist
            if group == "world":
                group = dist.group.WORLD
            if g is grad:
                g = grad.clone()
            dist.all_reduce(g, group=group)
            g.div_(dist.get_world_size(group))
            ret = g
        self._open_step()
        self._hand_over(e, g)
        if self.accumulation_steps > 1 and not self._cb_queued:
            self._cb_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        return ret

    def _end_of_backward(self):
        # Between micro-batches: let the gradients go once they are copied out.
        self._cb_queued = False
        if self._opt is not None and self._in_step:
            self._opt.sync_grads()
            self._held.clear()

    @torch.no_grad()
    def step(self, closure=None):
        """Ends the step: hands over what backward did not (gradients set by
        hand, or zeros for parameters without one), waits for the updates,
        and returns closure's loss when given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._opt is None:
            raise RuntimeError("OffloadAdamW is closed")
        n = self.accumulation_steps
        if not self._in_step and all(e.p.grad is None for e in self._entries):
            return loss  # as torch: no gradient, nothing to do
        partial = [e for e in self._entries if 0 < e.arrivals < n]
        if self._in_step and partial:
            e = partial[0]
            raise RuntimeError("OffloadAdamW: parameter %s got %d of its %d gradients this step "
                               "(accumulation_steps=%d): call backward %d times per step"
                               % (e.name, e.arrivals, n, n, n))
        self._open_step()
        for e in self._entries:
            if e.arrivals:
                continue
            if e.p.grad is not None:
                if e.p.grad.layout != torch.strided:
                    raise RuntimeError("OffloadAdamW: parameter %s has a sparse gradient" % e.name)
                self._hand_over(e, e.p.grad.detach().contiguous())
            zero = None
            while e.arrivals < n:
                if zero is None:
                    zero = torch.zeros_like(e.p, memory_format=torch.contiguous_format)
                self._hand_over(e, zero)
        res = self._opt.end()
        self._held.clear()
        if any(e.p.device.type == "cuda" for e in self._entries):
            for e in self._entries:
                self._opt.wait_params(e.tid, self._stream(e))
        else:
            self._opt.sync()
        self._in_step = False
        if not res.skipped:
            self._step_no += 1
        self.last_result = res
        for e in self._entries:
            e.version = e.p._version
        lrs = [float(g["lr"]) for g in self.param_groups]
        if lrs != self._begun_lrs:
            warnings.warn("OffloadAdamW: a learning rate changed between backward and step(); "
                          "this step used the one in place when its first gradient arrived "
                          "(change lr before backward, e.g. scheduler.step() after "
                          "optimizer.step())", RuntimeWarning, stacklevel=2)
        return loss

    # ------------------------------------------------------------ state

    def _state_now(self):
        """torch-format state of every registered parameter, read from spillway."""
        st = defaultdict(dict)
        if self._step_no == 0:
            return st
        self._opt.sync()
        for e in self._entries:
            s = {"step": torch.tensor(float(self._step_no)),
                 "exp_avg": self._read(e, L.STATE_EXP_AVG).view_as(e.p).to(e.p.dtype),
                 "exp_avg_sq": self._read(e, L.STATE_EXP_AVG_SQ).view_as(e.p).to(e.p.dtype)}
            if e.p.dtype != torch.float32:
                s["master"] = self._read(e, L.STATE_PARAM).view_as(e.p)
            st[e.p] = s
        return st

    def state_dict(self):
        """torch.optim.AdamW's format (loadable into it): moments are read out
        of spillway; low-precision parameters also carry their fp32 'master'."""
        if self._in_step:
            raise RuntimeError("OffloadAdamW: state_dict() between backward and step()")
        if self._opt is None:
            raise RuntimeError("OffloadAdamW is closed")
        kept = self.state
        self.state = self._state_now()
        try:
            return super().state_dict()
        finally:
            self.state = kept

    def load_state_dict(self, state_dict):
        """Loads a state_dict of OffloadAdamW or torch.optim.AdamW: groups'
        hyperparameters, and the moments and step pushed into spillway
        (which needs spw_optimizer_write in libspillway when there are
        moments)."""
        if self._in_step:
            raise RuntimeError("OffloadAdamW: load_state_dict() between backward and step()")
        if self._opt is None:
            raise RuntimeError("OffloadAdamW is closed")
        states = state_dict.get("state", {})
        steps = set()
        moments = False
        for k, s in states.items():
            if "step" in s:
                steps.add(float(s["step"]))
            if "exp_avg" in s or "exp_avg_sq" in s:
                moments = True
                if "exp_avg" not in s or "exp_avg_sq" not in s:
                    raise ValueError("OffloadAdamW.load_state_dict: state of parameter %s lacks "
                                     "exp_avg or exp_avg_sq" % (k,))
            if s.get("max_exp_avg_sq") is not None:
                raise ValueError("OffloadAdamW.load_state_dict: state of parameter %s is AMSGrad's"
                                 % (k,))
        if len(steps) > 1:
            raise ValueError("OffloadAdamW.load_state_dict: parameters are at different steps (%s); "
                             "spillway keeps one step count" % sorted(steps))
        for i, g in enumerate(state_dict.get("param_groups", [])):
            for k in ("amsgrad", "maximize"):
                if g.get(k, False):
                    raise ValueError("OffloadAdamW.load_state_dict: param group %d has %s=True" % (i, k))
            _check_hparams(g.get("lr", 0.0), g.get("betas", (0.9, 0.999)), g.get("eps", 1e-8),
                           g.get("weight_decay", 0.0), "param group %d" % i)
        if moments and not _SpwOptimizer_can_write():
            raise NotImplementedError(
                "OffloadAdamW.load_state_dict: pushing exp_avg/exp_avg_sq into spillway needs "
                "spw_optimizer_write(), which this libspillway (%s) lacks; only a state_dict "
                "without moments (before any step) can be loaded" % L.library_path())
        kept_groups = self.param_groups
        super().load_state_dict(state_dict)
        loaded, self.state = self.state, defaultdict(dict)
        snapshot = {}
        for e in self._entries:
            s = loaded.get(e.p)
            if not s or "exp_avg" not in s:
                continue
            master = s.get("master") if e.p.dtype != torch.float32 else None
            snapshot[e] = (None if master is None else _f32(master), _f32(s["exp_avg"]),
                           _f32(s["exp_avg_sq"]))
        prev_step = self._step_no
        self._step_no = int(steps.pop()) if steps else 0
        try:
            self._rebuild(self._entries, snapshot=snapshot)
        except Exception:
            self.param_groups = kept_groups
            self._step_no = prev_step
            raise

    # ------------------------------------------------------------ misc

    def stats(self):
        """libspillway's counters (spw_optimizer_stats) as a dict."""
        return self._opt.stats()

    @property
    def session(self):
        return self._session

    def close(self):
        """Frees spillway's state of this optimizer and detaches its session
        (when it made it). The optimizer cannot step afterwards."""
        for e in self._entries:
            if e.hook is not None:
                e.hook.remove()
                e.hook = None
        if self._opt is not None:
            self._opt.close()
            self._opt = None
        if self._own_session and self._session is not None:
            self._session.close()
            self._session = None
        self._held.clear()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self):
        raise TypeError("OffloadAdamW cannot be pickled; save its state_dict()")

    def __repr__(self):
        return "OffloadAdamW(tier=%r, mode=%r, params=%d, groups=%d, session=%r)" % (
            self.tier, self.mode, len(self._entries), len(self.param_groups), self._session_name)


def _SpwOptimizer_can_write():
    return L.has("spw_optimizer_write")


def _f32(t):
    return t.detach().to("cpu", torch.float32).contiguous().view(-1)


def _make_hook(opt_ref, entry_ref):
    def hook(grad):
        opt, e = opt_ref(), entry_ref()
        if opt is None or e is None or opt._opt is None or e.tid is None:
            return None
        return opt._on_grad(e, grad)
    return hook


def _check_param(name, p):
    label = _param_label(name, p)
    if p.layout != torch.strided:
        raise ValueError("OffloadAdamW: parameter %s is sparse (%s); spillway serves dense "
                         "parameters" % (label, p.layout))
    if not p.is_floating_point():
        raise ValueError("OffloadAdamW: parameter %s is %s, not floating point; Adam updates "
                         "float32, bfloat16 and float16 parameters" % (label, p.dtype))
    if p.dtype not in _TYPES:
        raise ValueError("OffloadAdamW: parameter %s is %s; libspillway serves float32, bfloat16 "
                         "and float16 parameters" % (label, p.dtype))
    if p.device.type not in ("cpu", "cuda"):
        raise ValueError("OffloadAdamW: parameter %s is on device %s; libspillway serves cpu "
                         "(host backend) and cuda" % (label, p.device))
    if not p.is_leaf:
        raise ValueError("OffloadAdamW: parameter %s is not a leaf tensor" % label)
    if not p.is_contiguous():
        raise ValueError("OffloadAdamW: parameter %s is not contiguous; spillway writes updated "
                         "parameters into one contiguous buffer" % label)


def _check_hparams(lr, betas, eps, weight_decay, where):
    try:
        b1, b2 = betas
        ok = (0.0 <= float(lr) and math.isfinite(float(lr)) and 0.0 <= float(b1) < 1.0
              and 0.0 <= float(b2) < 1.0 and 0.0 <= float(eps) and 0.0 <= float(weight_decay))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError("OffloadAdamW: %s: invalid hyperparameters lr=%r betas=%r eps=%r "
                         "weight_decay=%r" % (where, lr, betas, eps, weight_decay))
