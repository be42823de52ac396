# SPDX-License-Identifier: MIT
"""spillway.torch: OffloadAdamW, torch.optim.AdamW with its state in spillway.

    from spillway.torch import OffloadAdamW
    opt = OffloadAdamW(model.parameters(), lr=1e-3, weight_decay=0.01, tier="nvme")
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # gradients go to spillway as backward makes them
        opt.step()                        # waits for the last updates; parameters are new

How it works: p.grad at step() is the source of truth, as for torch.
Every parameter gets a hook on its AccumulateGrad node, which runs once
torch has written p.grad in a backward; the hook hands p.grad to libspillway
early (it copies it into the daemon's pinned memory and, in overlapped mode,
runs AdamW on CPU threads while backward goes on). step() checks every
parameter's p.grad against what was handed over (the same tensor, the same
_version): a gradient changed afterwards (clip_grad_norm_, GradScaler's
unscale_, masking, a later hook, another backward) is handed over again in
exact mode, whose updates start only at step(), and raises in overlapped
mode, where Adam already ran. A parameter whose p.grad is None at step() is
skipped, as torch skips it.

Differences from torch.optim.AdamW, all deliberate:
- mode='overlapped' applies each gradient during backward: a step takes
  accumulation_steps backwards, and .grad must not change after the last.
  mode='exact' takes any number of backwards and any change to .grad.
- A learning rate is read when the step begins (its first gradient); in
  exact mode a change before step() still applies, in overlapped mode it
  takes effect a step late, with a warning.
- amsgrad, maximize, foreach, fused, capturable and differentiable are
  accepted only as False/None.
- state[p] and state_dict() are read out of spillway (copies, moments in
  fp32 whatever the parameter's type).
"""
import itertools
import math
import os
import warnings
import weakref

import ctypes
import torch
import torch.optim

from . import Optimizer as _SpwOptimizer, Session, SpillwayError
from . import _torch_region as _region
from . import _lib as L, _torch_persist as _persist, _checkpoint as _ckpt, _state_dtype, _torch_view as _view, \
    _torch_gradref as _gradref
from ._torch_persist import RewoundError  # noqa: F401
from ._torch_amp import AmpMixin, PassedScaler as _PassedScaler, watch_unscale as _watch_unscale
from ._torch_hooks import make_accumulated_hook as _make_accumulated_hook, \
    make_average_hook as _make_average_hook, remove_hooks as _remove_hooks
from ._torch_checks import _TYPES, f32 as _f32, check_flags as _check_flags, \
    check_hparams as _check_hparams, check_param as _check_param, spw_name, trace_flush as _trace_flush
from ._torch_state import LiveState, StateMixin
from ._torch_offload import adopt as _adopt, grad_of as _grad_of, offload_parameters, gather_parameters, load_into, offload_stats  # noqa: F401,E501

__all__ = ["OffloadAdamW", "offload_parameters", "gather_parameters", "load_into", "offload_stats"]

_session_counter = itertools.count()
_watch_unscale()  # GradScaler.unscale_ tells an OffloadAdamW (_torch_amp.py says why)
_EALREADY = 114


class _Entry:
    """One registered parameter and what was handed over for it this step."""
    __slots__ = ("p", "name", "group", "tid", "ref", "ptr", "version", "acc", "hooks", "handed",
                 "src", "src_version", "backwards", "none", "steps", "numel", "view", "__weakref__")

    def __init__(self, p, name, group):
        self.p, self.name, self.group = p, name, group
        self.tid = self.ref = self.ptr = self.version = self.acc = self.view = None
        self.hooks = []
        self.handed = self.src = self.src_version = None  # what spillway has this step
        self.backwards = 0          # AccumulateGrad calls this step
        self.none = False           # marked "no gradient" this step
        self.steps = 0              # updates applied (torch's state['step'])
        self.numel = p.numel()

    def forget_step(self):
        self.handed = self.src = self.src_version = None
        self.backwards = 0
        self.none = False


class OffloadAdamW(StateMixin, AmpMixin, torch.optim.Optimizer):
    """torch.optim.AdamW whose fp32 master weights and moments live in
    spillway: tier 'cpu' (resident in the daemon's pinned memory) or 'nvme'
    (swapped to the daemon's NVMe tier).

    mode: 'overlapped' (Adam on each gradient during backward; a step is
    accumulation_steps backwards; clipping only by a fixed clip_coef) or
    'exact' (Adam at step(), on p.grad as it is then: any number of
    backwards, clip_grad_norm_, GradScaler, edits to .grad; max_grad_norm
    clips like torch.nn.utils.clip_grad_norm_; inf/nan steps are skipped).
    accumulation_steps: backwards per step (overlapped: required; exact: a
    hint for when to hand gradients over early). loss_scale: None, a fixed
    fp16 loss scale, or 'dynamic' (exact mode; GradScaler's policy, with
    init_loss_scale and growth_interval; multiply the loss by
    opt.loss_scale, or use opt.scale_loss(loss)). session: a name
    ("job/rank") or a spillway.Session; socket: spillwayd's control socket.
    data_parallel_group: a torch.distributed group (or "world") whose ranks
    average each gradient before spillway gets it, instead of DDP; with DDP,
    call opt.attach_ddp(ddp_model) instead. timeout: seconds any wait on
    the daemon may take before it raises (None: the library's default).
    page_size, region_bytes, window, threads: tuning (see spillway.h).
    state_dtype: 'fp32', 'bf16' or 'int8' moments in the tiers (docs/pipeline.md).
    master_dtype: 'fp32' or 'bf16' master weights in the tiers; bf16 (2 bytes a weight
    instead of 4) rounds each update stochastically, lossy (docs/pipeline.md).
    grad_store_dtype: 'fp32' or 'bf16', the store exact mode keeps a step's gradients
    in until their norm is known (where it needs one: a GPU, or persistent=True); bf16
    halves its memory and disk traffic and is exact for a bf16 model's gradients.
    persistent (session="name", or a Session(persistent=True) reconnected in place):
    the state outlives a trainer that dies, for lease seconds (None: 900); the next
    OffloadAdamW of that name resumes it from opt.resumed_step (docs/persistent.md);
    a daemon restart under step(), clip_grad_norm_(), GradScaler.step(opt), backward
    (attach_ddp too) is ridden out for reconnect seconds (0: never; else RewoundError).

    params may also be (name, tensor) pairs, e.g. model.named_parameters(),
    so that errors and spillway's status name them. Parameters with
    requires_grad=False are registered too (they take state in spillway) so
    that unfreezing them later trains them; leave them out to save it.
    """

    _step_supports_amp_scaling = True
    flush = _persist.flush  # persistent=True: the last step saved for a crash of spillwayd; returns it

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None, tier="cpu", mode="overlapped",
                 max_grad_norm=None, accumulation_steps=1, loss_scale=None,
                 init_loss_scale=65536.0, growth_interval=2000, session=None, socket=None,
                 clip_coef=None, data_parallel_group=None, timeout=None, page_size=None,
                 region_bytes=None, window=0, threads=0, trace=None, persistent=False, lease=None,
                 state_dtype="fp32", reconnect=60.0, grad_store_dtype="fp32", master_dtype="fp32"):
        _state_dtype.check(state_dtype)  # moments as bf16 in the tiers: docs/pipeline.md
        _state_dtype.check_grad_store(grad_store_dtype)
        _state_dtype.check_master(master_dtype)
        self.state_dtype = state_dtype
        self.grad_store_dtype = grad_store_dtype
        self.master_dtype = master_dtype
        self._live_state = LiveState(self)
        _persist.check(self, persistent, lease, session, reconnect)  # sets _persistent, _lease, _reconnect
        self._built = False
        self._opt = None
        self._trace = trace
        self._entries = []
        self._by_id = {}
        self._names = {}
        self._session = None
        self._own_session = True
        self._failed = None
        flags = dict(amsgrad=amsgrad, maximize=maximize, foreach=foreach, capturable=capturable,
                     differentiable=differentiable, fused=fused)
        _check_flags(flags, "OffloadAdamW")
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
        if loss_scale == "dynamic":
            if mode != "exact":
                raise ValueError("loss_scale='dynamic' needs mode='exact': a step with inf/nan "
                                 "gradients must be skipped before Adam runs")
            if not (init_loss_scale > 0 and math.isfinite(init_loss_scale)):
                raise ValueError("init_loss_scale must be finite and > 0, not %r" % (init_loss_scale,))
            if not (isinstance(growth_interval, int) and growth_interval >= 1):
                raise ValueError("growth_interval must be an integer >= 1, not %r" % (growth_interval,))
        elif loss_scale is not None and not (isinstance(loss_scale, (int, float))
                                             and 0 < loss_scale and math.isfinite(loss_scale)):
            raise ValueError("loss_scale must be None, 'dynamic' or a finite number > 0, not %r"
                             % (loss_scale,))
        if timeout is not None and not (0 < timeout <= 86400):
            raise ValueError("timeout must be seconds in (0, 86400] or None, not %r" % (timeout,))
        _check_hparams(lr, betas, eps, weight_decay, "defaults")
        self.tier, self.mode = tier, mode
        self.max_grad_norm = max_grad_norm
        self.accumulation_steps = accumulation_steps
        self.clip_coef = clip_coef
        self.data_parallel_group = data_parallel_group
        self._dynamic = loss_scale == "dynamic"
        self._scale = float(init_loss_scale) if self._dynamic else float(loss_scale or 1.0)
        self._growth_interval = growth_interval
        self._timeout = timeout
        self._page_size = page_size
        self._region_bytes = region_bytes
        self._window = window
        self._threads = threads
        self._socket = socket
        self._step_no = 0
        self._in_step = False
        self._ended = None          # the StepResult of a step clip_grad_norm_ ended
        self._begun = None
        self._built_hparams = None
        self._dp_checked = False
        self._ddp = None
        self.last_result = None
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **flags)
        super().__init__(params, defaults)
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

    # torch.optim.Optimizer assigns self.state (a defaultdict) in __init__
    # and load_state_dict; the state lives in spillway, so those are dropped.
    @property
    def state(self):
        return self._live_state

    @state.setter
    def state(self, value):
        pass

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
        _check_flags(param_group, "OffloadAdamW: param group %d" % len(self.param_groups))
        gi = len(self.param_groups)
        super().add_param_group(param_group)
        g = self.param_groups[-1]
        try:
            _check_hparams(g["lr"], g["betas"], g["eps"], g["weight_decay"], "param group %d" % gi)
        except ValueError:
            self.param_groups.pop()
            raise
        new = [_Entry(p, self._names[p], gi) for p in plain]
        if new and self._entries and new[0].p.device.type != self._entries[0].p.device.type:
            self.param_groups.pop()
            raise ValueError("OffloadAdamW: parameter %s is on %s, the others on %s"
                             % (new[0].name, new[0].p.device, self._entries[0].p.device))
        if not self._built:
            self._add_entries(new)
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

    def _add_entries(self, new):
        self._entries.extend(new)
        for e in new:
            self._by_id[id(e.p)] = e

    def _entry_of(self, p):
        return self._by_id.get(id(p))

    # ------------------------------------------------------------ building

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
        if _adopt(self, snapshot):
            return  # offloaded parameters: the store's optimizer (spillway._torch_offload)
        entries = self._entries
        device = self._device_name(entries)
        self._grad_ref = _gradref.eligible(self, entries)  # no gradient store in the region (exact mode)
        if self._own_session:
            _region.own_session(self, entries)  # a session the size of the state's needs
        groups = [dict(lr=float(g["lr"]), beta1=float(g["betas"][0]), beta2=float(g["betas"][1]),
                       eps=float(g["eps"]), weight_decay=float(g["weight_decay"]))
                  for g in self.param_groups]
        # The pool sizes itself around the trainer's compute threads
        # (docs/pipeline.md, Threading policy): torch's intra-op threads on
        # a CPU trainer, one launcher thread on a GPU. A value the user set
        # stays.
        if "SPILLWAY_TRAINER_THREADS" not in os.environ:
            os.environ["SPILLWAY_TRAINER_THREADS"] = str(
                max(1, torch.get_num_threads()) if device == "host" else 1)
        opt = _SpwOptimizer(self._session, groups, mode=self.mode, tier=self.tier, accumulation=1,
                            clip_coef=float(self.clip_coef or 0.0),
                            max_norm=float(self.max_grad_norm or 0.0),
                            dynamic_loss_scale=self._dynamic, init_loss_scale=self._scale,
                            growth_interval=self._growth_interval if self._dynamic else 0,
                            window=self._window, threads=self._threads, device=device, grad_by_reference=self._grad_ref,
                            timeout_ms=self._timeout_ms(), trace=self._trace, state_dtype=self.state_dtype,
                            grad_store_dtype=self.grad_store_dtype, master_dtype=self.master_dtype)
        try:
            idx = {e: i for i, e in enumerate(entries)}
            # Backward produces the last layers' gradients first.
            for e in reversed(entries):
                snap = snapshot.get(e) if snapshot else None
                if snap is not None and snap[0] is not None:
                    init = snap[0]
                else:
                    init = e.p.detach().to("cpu", torch.float32).contiguous().view(-1)
                e.tid = opt.add(spw_name(idx[e], e.name), e.group, e.numel, init.data_ptr(),
                                e.p.data_ptr(), _TYPES[e.p.dtype])
            for e in entries:
                snap = snapshot.get(e) if snapshot else None
                if snap is not None:
                    opt.write(e.tid, L.STATE_EXP_AVG, _f32(snap[1]).data_ptr())
                    opt.write(e.tid, L.STATE_EXP_AVG_SQ, _f32(snap[2]).data_ptr())
                lag = self._step_no - e.steps
                if lag:
                    if not opt.can("spw_optimizer_set_lag"):
                        raise NotImplementedError(
                            "OffloadAdamW: parameter %s has had %d updates, the optimizer %d; "
                            "per-parameter step counts need spw_optimizer_set_lag() in "
                            "libspillway, which %s lacks" % (e.name, e.steps, self._step_no,
                                                              L.library_path()))
                    opt.set_lag(e.tid, lag)
        except Exception:
            opt.close()
            raise
        self._opt = opt
        self.resumed_step = _persist.resume(self, opt, entries)
        _view.attach(self, opt, entries)  # cpu tier: the parameters become the master weights
        for e in entries:
            e.ref = e.p.detach()  # keeps the buffer spillway writes into alive
            e.ptr = e.p.data_ptr()
            e.version = e.p._version
            e.forget_step()
            self._attach_hooks(e)
        self._built_hparams = self._hparams()
        self._built = True

    def _timeout_ms(self):
        return int(self._timeout * 1000) if self._timeout else 0

    def _attach_hooks(self, e):
        """The AccumulateGrad hook (and the data-parallel averaging hook) of
        a parameter that requires a gradient; later for one unfrozen later."""
        if e.acc is not None or not e.p.requires_grad:
            return
        me, er = weakref.ref(self), weakref.ref(e)
        if self.data_parallel_group not in (None, False):
            e.hooks.append(e.p.register_hook(_make_average_hook(me, er)))
        with torch.enable_grad():
            acc = e.p.expand_as(e.p).grad_fn.next_functions[0][0]
        # The parameter holds its AccumulateGrad node weakly: keep it, or
        # the next backward makes a new one without the hook.
        e.acc = acc
        e.hooks.append(acc.register_hook(_make_accumulated_hook(me, er)))

    def _rebuild(self, entries, snapshot=None, params_changed=False):
        """Frees the spw optimizer and builds a new one for entries, carrying
        master weights and moments over (or those of snapshot)."""
        if snapshot is None:
            if self._step_no > 0 and not L.has("spw_optimizer_write"):
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
        self._entries = []
        self._by_id = {}
        self._add_entries(entries)
        _persist.before_rebuild(self)
        try:
            self._build(snapshot)
        except Exception:
            for e in entries:
                if e not in old_entries:
                    _remove_hooks(e)
            self._entries, self._by_id = [], {}
            self._add_entries(old_entries)
            try:
                self._build({e: s for e, s in snapshot.items() if e in old_entries})
            except Exception:
                pass
            raise

    # ------------------------------------------------------------ hand-over

    def _usable(self):
        if self._failed:
            raise RuntimeError(self._failed)
        if self._opt is None:
            raise RuntimeError("OffloadAdamW is closed")

    def _broken(self, err):
        """libspillway failed (the daemon went away or stopped answering):
        the optimizer is broken; every later call says why."""
        if self._failed is None:
            self._failed = "OffloadAdamW: spillway failed: %s (close it; make a new one)" % err

    def _fail(self, msg):
        """An error that leaves the step unfinishable (overlapped mode
        already applied gradients that turned out different): every later
        call raises it too."""
        self._failed = msg + " (this optimizer cannot step again; make a new one)"
        raise RuntimeError(msg)

    def _stream(self, e):
        if e.p.device.type == "cuda":
            return ctypes.c_void_p(torch.cuda.current_stream(e.p.device).cuda_stream)
        return None

    def _check_grad(self, e, g):
        if g.layout != torch.strided:
            raise RuntimeError("OffloadAdamW: parameter %s got a sparse gradient; spillway takes "
                               "dense gradients only (e.g. nn.Embedding(sparse=False))" % e.name)
        if g.dtype not in _TYPES:
            raise RuntimeError("OffloadAdamW: parameter %s got a %s gradient; spillway takes "
                               "float32, bfloat16 and float16" % (e.name, g.dtype))
        if g.device != e.p.device:
            raise RuntimeError("OffloadAdamW: parameter %s is on %s but its gradient on %s"
                               % (e.name, e.p.device, g.device))
        if g.shape != e.p.shape:
            raise RuntimeError("OffloadAdamW: parameter %s has a gradient of shape %s, the "
                               "parameter is %s" % (e.name, tuple(g.shape), tuple(e.p.shape)))

    def _hand_over(self, e, src):
        g = src if src.is_contiguous() else src.contiguous()
        try:
            self._opt.grad_ready(e.tid, g.data_ptr(), g.numel() * g.element_size(),
                                 _TYPES[g.dtype], stream=self._stream(e))
        except SpillwayError as err:
            if err.errno == _EALREADY:
                raise RuntimeError("OffloadAdamW: parameter %s was handed over twice in one step "
                                   "(%s)" % (e.name, err)) from None
            self._broken(err)
            raise
        # g keeps the memory alive until the step ends; src and its
        # version are what step() compares p.grad with.
        e.handed, e.src, e.src_version, e.none = g, src, src._version, False

    def _grad_none(self, e):
        """Drops what e handed over this step; unless it gets a gradient
        again, it is skipped (no decay, no moments, its step stays)."""
        if not self._opt.can("spw_optimizer_grad_none"):
            raise NotImplementedError(
                "OffloadAdamW: parameter %s has no gradient at step() (or a changed one in mode="
                "'exact'); skipping it as torch does, or taking its gradient again, needs "
                "spw_optimizer_grad_none() in libspillway, which %s lacks"
                % (e.name, L.library_path()))
        self._opt.grad_none(e.tid)
        e.handed = e.src = e.src_version = None
        e.none = True

    def _on_accumulated(self, e):
        """After torch wrote p.grad in a backward: hand it over early."""
        if self._opt is None or e.tid is None or self._failed:
            return
        if self._ddp is not None:
            # DDP's comm hook hands the averages over (spillway._torch_ddp).
            from ._torch_ddp import on_accumulated
            on_accumulated(self, self._ddp)
            return
        g = e.p.grad
        if g is None:
            return
        self._check_grad(e, g)
        e.backwards += 1
        if self._ended is not None:
            raise RuntimeError("OffloadAdamW: parameter %s got a gradient after clip_grad_norm_() "
                               "ended the step; call step() first" % e.name)
        if self.mode == "overlapped":
            if e.src is not None:
                raise RuntimeError(
                    "OffloadAdamW: parameter %s got a gradient in another backward after spillway "
                    "updated it this step: mode='overlapped' applies each gradient after "
                    "accumulation_steps=%d backward(s). Several backwards per step (GAN loops, "
                    "reentrant checkpointing) need mode='exact', which reads p.grad at step(); "
                    "for gradient accumulation set accumulation_steps to the backwards per step"
                    % (e.name, self.accumulation_steps))
            if e.backwards < self.accumulation_steps:
                return
        else:
            if e.backwards < self.accumulation_steps:
                return
            if not self._opt.can("spw_optimizer_grad_none"):
                return  # this library cannot take a gradient back: hand over at step()
            if e.src is not None:
                self._grad_none(e)
        self._open_step()
        self._hand_over(e, g)

    def _on_grad(self, e, grad):
        """data_parallel_group: the gradient of one backward, averaged
        across the group before torch adds it into p.grad."""
        import torch.distributed as dist
        group = self.data_parallel_group
        if group == "world":
            group = dist.group.WORLD
        g = grad.clone()
        dist.all_reduce(g, group=group)
        g.div_(dist.get_world_size(group))
        return g

    # ------------------------------------------------------------ steps

    def _sync_changes(self):
        """Before a step begins: parameters changed from outside are taken
        again; changed betas/eps/weight_decay are set (no rebuild when the
        library can)."""
        for e in self._entries:
            if (e.p.data_ptr() != e.ptr or e.p._version != e.version) and not _view.viewed(e):
                if self._step_no > 0 and not L.has("spw_optimizer_write"):
                    raise RuntimeError(
                        "OffloadAdamW: parameter %s changed from outside since the last step "
                        "(e.g. load_state_dict on the model); pushing it into spillway while "
                        "keeping the moments needs spw_optimizer_write(), which this "
                        "libspillway lacks" % e.name)
                self._rebuild(self._entries, params_changed=True)
                return
        hp = self._hparams()
        if hp == self._built_hparams:
            return
        if self._opt.can("spw_optimizer_set_group"):
            self._set_groups(hp)
            return
        if self._step_no > 0 and not L.has("spw_optimizer_write"):
            raise RuntimeError("OffloadAdamW: param_groups' betas/eps/weight_decay changed; "
                               "this libspillway can take that only by rebuilding the state "
                               "with spw_optimizer_write(), which it lacks")
        self._rebuild(self._entries)

    def _set_groups(self, hp):
        for gi, (new, old) in enumerate(zip(hp, self._built_hparams)):
            g = self.param_groups[gi]
            if new != old or float(g["lr"]) != self._begun_lr(gi):
                _check_hparams(g["lr"], g["betas"], g["eps"], g["weight_decay"], "param group %d" % gi)
                self._opt.set_group(gi, dict(lr=float(g["lr"]), beta1=new[0], beta2=new[1],
                                             eps=new[2], weight_decay=new[3]))
        self._built_hparams = hp

    def _begun_lr(self, gi):
        return self._begun[gi] if self._begun is not None else None

    def _open_step(self):
        if self._in_step:
            return
        self._usable()
        self._sync_changes()
        lrs = [float(g["lr"]) for g in self.param_groups]
        self._opt.begin(self._step_no + 1, lrs, 0.0 if self._dynamic else self._scale)
        self._begun = lrs
        self._in_step = True

    def _check_data_parallel(self):
        from ._torch_ddp import check_data_parallel
        check_data_parallel(self)

    def _settle(self):
        """Makes what spillway has equal p.grad of every parameter: hands
        over what backward did not, again what changed since (exact mode),
        and marks parameters without a gradient to be skipped."""
        self._check_data_parallel()
        for e in self._entries:
            self._attach_hooks(e)  # a parameter unfrozen since the last step
            g = _grad_of(self, e)
            if e.src is not None:
                if g is e.src and g._version == e.src_version:
                    continue
                if self.mode == "overlapped":
                    self._fail(self._changed_message(e, g))
                self._grad_none(e)
            if g is None:
                if not e.none:
                    self._grad_none(e)
                continue
            self._check_grad(e, g)
            self._hand_over(e, g)

    def _changed_message(self, e, g):
        how = ("set to None" if g is None else "replaced by another tensor" if g is not e.src
               else "changed in place")
        return ("OffloadAdamW: the gradient of parameter %s was %s after spillway applied it: "
                "mode='overlapped' updates each parameter during backward, so what is done to "
                ".grad afterwards (torch.nn.utils.clip_grad_norm_, GradScaler.unscale_, masking, "
                "zero_grad, a hook added later) cannot be honoured. Use mode='exact', which reads "
                "p.grad at step() (clip with opt.clip_grad_norm_(max_norm) or max_grad_norm=), or "
                "clip_coef= for a fixed clip coefficient" % (e.name, how))

    def _end(self):
        if self.mode == "exact" and self._opt.can("spw_optimizer_set_group"):
            hp = self._hparams()
            if hp != self._built_hparams or [float(g["lr"]) for g in self.param_groups] != self._begun:
                self._set_groups(hp)  # exact mode's updates start at end: still in time
                self._begun = [float(g["lr"]) for g in self.param_groups]
        try:
            return self._opt.end()
        except SpillwayError as err:
            self._broken(err)
            raise

    def _finish(self, res):
        """After end: waits for the parameters, counts the step."""
        self._ended = None
        try:
            if any(e.p.device.type == "cuda" for e in self._entries):
                for e in self._entries:
                    self._opt.wait_params(e.tid, self._stream(e))
            else:
                self._opt.sync()
        except SpillwayError as err:
            self._broken(err)
            raise
        finally:
            self._in_step = False
            updated = not res.skipped and any(not e.none for e in self._entries)
            if updated:
                self._step_no += 1
            for e in self._entries:
                if updated and not e.none:
                    e.steps += 1
                e.forget_step()
                e.version = e.p._version
            if self._dynamic:
                self._scale = res.next_loss_scale
            self.last_result = res
        lrs = [float(g["lr"]) for g in self.param_groups]
        if lrs != self._begun:
            warnings.warn("OffloadAdamW: a learning rate changed between backward and step(); "
                          "mode='overlapped' used the one in place when the step's first gradient "
                          "arrived (change lr before backward, e.g. scheduler.step() after "
                          "optimizer.step())", RuntimeWarning, stacklevel=3)

    def _check_since_end(self, what):
        for e in self._entries:
            g = _grad_of(self, e)
            same = (g is None and e.none) or (g is not None and g is e.src
                                              and g._version == e.src_version)
            if not same:
                raise RuntimeError("OffloadAdamW: the gradient of parameter %s changed between %s "
                                   "and step(); %s ended the step with the gradients as they were "
                                   "(change them before it)" % (e.name, what, what))

    @torch.no_grad()
    def step(self, closure=None, grad_scaler=None):
        """Settles every gradient (p.grad now), ends the step, waits for the
        updated parameters, and returns closure's loss when given.
        grad_scaler: passed by GradScaler.step (torch.amp's and
        torch.cuda.amp's: this optimizer unscales, checks for inf/nan and
        skips in its own pass; torch 2.x warns once that it will stop
        passing it). A GradScaler that does not pass it (step() wrapped,
        as by accelerate) sets self.grad_scale and self.found_inf
        instead, which are read the same way."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._usable()
        if grad_scaler is not None:
            self._step_scaled(_PassedScaler(grad_scaler, self))
            return loss
        if getattr(self, "found_inf", None) is not None:
            # GradScaler's newer contract: it set grad_scale and found_inf
            # (a step() wrapped without grad_scaler=, as accelerate does).
            self._step_scaled(self._attribute_scaler())
            return loss
        if self._ended is not None:  # clip_grad_norm_ ended the step; a restart: redone with its max_norm
            self._finish_clipped()
            return loss
        if not self._in_step and all(_grad_of(self, e) is None for e in self._entries):
            return loss  # as torch: no gradient, nothing to do
        _persist.step(self)  # _open_step, _settle, _finish(_end()); rides out a daemon restart
        return loss

    def zero_grad(self, *args, **kwargs):
        """As torch's. In mode='overlapped', gradients handed over since the
        last step are already applied: zeroing them then raises."""
        if self.mode == "overlapped" and self._in_step:
            applied = [e.name for e in self._entries if e.src is not None]
            if applied:
                self._fail("OffloadAdamW: zero_grad() between backward and step() would discard the "
                           "gradients of %s%s, but mode='overlapped' has already applied them. "
                           "Loops that discard gradients (GAN training, where G's backward also "
                           "fills D's) need mode='exact', which reads p.grad at step()"
                           % (", ".join(applied[:3]), " and %d more" % (len(applied) - 3)
                              if len(applied) > 3 else ""))
        return super().zero_grad(*args, **kwargs)

    # ------------------------------------------------------------ misc

    def attach_ddp(self, ddp_model):
        """Makes this optimizer take DistributedDataParallel's averaged
        gradients (see spillway.torch_ddp)."""
        from ._torch_ddp import attach
        attach(self, ddp_model)

    def stats(self):
        """libspillway's counters (spw_optimizer_stats) as a dict."""
        return self._opt.stats()

    def trace_flush(self):
        return _trace_flush(self._opt)

    @property
    def session(self):
        return self._session

    def save_checkpoint(self, dir):
        """persistent=True: spillwayd writes the state at the last step into the new dir (a dict of figures)."""
        return _ckpt.save(self, dir)

    def load_checkpoint(self, dir):
        """persistent=True: parameters and state become dir's checkpoint's; returns its step."""
        return _ckpt.load(self, dir)

    def close(self):
        """Frees spillway's state of this optimizer and detaches its session
        (when it made it). The optimizer cannot step afterwards."""
        for e in self._entries:
            _remove_hooks(e)
            e.forget_step()
        if self._opt is not None:
            self._opt.close()
            self._opt = None
        if self._own_session and self._session is not None:
            self._session.close()
            self._session = None

    def __del__(self):
        try:
            _persist.abandon(self) or self.close()
        except Exception:
            pass

    def __getstate__(self):
        raise TypeError("OffloadAdamW cannot be pickled; save its state_dict()")

    def __repr__(self):
        return "OffloadAdamW(tier=%r, mode=%r, params=%d, groups=%d, session=%r)" % (
            self.tier, self.mode, len(self._entries), len(self.param_groups), self._session_name)
