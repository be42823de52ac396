# SPDX-License-Identifier: MIT
"""spillway.torch.offload_parameters: a module's parameters live in
spillway and are materialised only while a module runs (ZeRO-3 /
ZeRO-Infinity parameter offload).

    model = build_model()                                   # cpu or meta
    spillway.torch.offload_parameters(model, tier="nvme", max_live_bytes=256 << 20)
    spillway.torch.load_into(model, state_dict)             # when built on meta
    opt = OffloadAdamW(model.named_parameters(), tier="nvme", mode="exact")

How: every parameter's values go into one spillway optimizer (the fp32
master Adam updates; frozen parameters as frozen tensors) and the module's
nn.Parameter keeps an empty tensor. A forward pre-hook of each module that
owns parameters fetches them into buffers and puts tensors over those
buffers in module._parameters for the call; the forward hook puts the
placeholders back. While the module runs, saved-tensor hooks replace a
parameter that autograd saves (or a view of it) by a token, and backward
fetches it again when it unpacks the token. A trainable parameter is used
through a small autograd Function whose backward receives the parameter's
gradient: summed over its uses, it goes to spillway's gradient store
(spw_optimizer_grad_ready) once its last use has reported, and p.grad stays
None. OffloadAdamW on such parameters takes over the same spillway
optimizer instead of building its own (adopt()).
"""
import inspect
import itertools
import os
import threading
import weakref

import torch

from . import SpillwayError
from . import _lib as L
from ._offload_store import Entry, Store
from ._torch_checks import _TYPES

__all__ = ["offload_parameters", "gather_parameters", "load_into", "offload_stats"]

_HANDED = torch.empty(0)  # OffloadAdamW's e.src for a gradient the store handed over


# ------------------------------------------------------------ saved-tensor hooks

_tls = threading.local()
_patched = False


def _stack():
    s = getattr(_tls, "stack", None)
    if s is None:
        s = _tls.stack = []
    return s


def _patch_saved_tensors_hooks():
    """Lets our hooks see the hooks they are nested in (non-reentrant
    checkpointing pushes its own): torch 1.13 has no way to read the
    current default hooks, so the context manager records them."""
    global _patched
    if _patched:
        return
    cls = torch.autograd.graph.saved_tensors_hooks
    enter, exit_ = cls.__enter__, cls.__exit__

    def __enter__(self):
        _stack().append((self.pack_hook, self.unpack_hook))
        return enter(self)

    def __exit__(self, *a):
        _stack().pop()
        return exit_(self, *a)
    cls.__enter__, cls.__exit__ = __enter__, __exit__
    _patched = True


def _is_recompute_pack(pack):
    """Whether pack is non-reentrant checkpointing's hook for the forward it
    recomputes in backward: torch 1.13 names it inner_pack; torch 2.x
    marks its checkpoint hooks _checkpoint_internal, the recomputation's
    made in _recomputation_hook (its forward's in _checkpoint_hook)."""
    if getattr(pack, "__name__", "") == "inner_pack":
        return True
    return (getattr(pack, "_checkpoint_internal", False)
            and "_recomputation_hook" in getattr(pack, "__qualname__", ""))


# torch >= 2.1 runs a forward hook registered with always_call=True when
# the forward raises too. torch 2.x's checkpointing stops a recomputed
# forward half way by raising (early stop): the saved-tensor hooks pre()
# pushed must come off the stack before the exception reaches the
# checkpoint's own, which would otherwise pop ours and leave its hook in
# place for every later forward.
_ALWAYS_CALL = "always_call" in inspect.signature(torch.nn.Module.register_forward_hook).parameters


class _Token:
    __slots__ = ("e", "gen", "shape", "stride", "offset")


class _Outer:
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


class _Materialise(torch.autograd.Function):
    """The parameter as its uses see it; backward is where its gradient arrives."""

    @staticmethod
    def forward(ctx, anchor, box):
        ctx.box = box
        return box.t

    @staticmethod
    def backward(ctx, grad):
        box = ctx.box
        box.done = True
        h = box.handle()
        if h is not None:
            h.on_grad(box.e, grad)
        return None, None


class _Box:
    """One use of a parameter in a graph. A graph dropped without its
    backward (one that never runs backward, non-reentrant checkpointing's
    recomputation) frees its node and so the box: that use will send no
    gradient."""
    __slots__ = ("t", "e", "handle", "done")

    def __del__(self):
        if not self.done:
            h = self.handle()
            if h is not None:
                h.on_lost(self.e)


# ------------------------------------------------------------ the handle

class _Handle:
    """What offload_parameters leaves on the model (model._spillway_offload)."""

    def __init__(self, model, store, owners, names, hooks):
        self.model_ref = weakref.ref(model)
        self.store = store
        self.owners = owners          # module -> [(attr, entry)]
        self.names = names            # state-dict name -> entry
        self.hooks = hooks
        self.pushed = []              # our saved_tensors_hooks contexts, innermost last
        self.by_param = {id(e.p): e for e in store.entries}
        self.handed = {}              # id(live tensor) -> (entry, weakref)
        self.grads_in_flight = []
        self.grads_in_flight_bytes = 0
        _handles[:] = [r for r in _handles if r() is not None] + [weakref.ref(self)]

    # ---------------------------------------------------------- forward

    def root_pre(self, module, args):
        if self.pushed:  # left by a forward that raised
            while self.pushed:
                self.pushed.pop().__exit__(None, None, None)
            for m, pairs in self.owners.items():
                m.__dict__.pop("_spw_pushed", None)
                for attr, e in pairs:
                    if m._parameters[attr] is not e.p:
                        m._parameters[attr] = e.p
                        self.store.unhold(e)
        self.store.new_pass((torch.is_grad_enabled(), module.training))
        self.handed.clear()

    def pre(self, module, args):
        st = self.store
        pairs = self.owners[module]
        grad = torch.is_grad_enabled()
        st.demand(tuple(e.idx for _, e in pairs))
        # Non-reentrant checkpointing recomputes the forward inside backward
        # under its own hooks and never runs that graph backward: uses made
        # there send no gradient. (Elsewhere the box's finaliser finds it
        # out later.)
        top = _stack()[-1] if _stack() else None
        below = next((h for h in reversed(_stack()) if not getattr(h[0], "_spillway", False)), None)
        recompute = below is not None and _is_recompute_pack(below[0])
        for attr, e in pairs:
            st.hold(e)
            if e.live is None or e.live_grad != grad or not st.valid(e):
                st.ensure(e)
                t = st.tensor(e)
                if grad and e.trainable:
                    box = _Box()
                    box.t, box.e, box.handle, box.done = t, e, weakref.ref(self), False
                    if e.anchor is None:
                        e.anchor = torch.zeros((), requires_grad=True)
                    t = _Materialise.apply(e.anchor, box)
                    box.t = None  # the graph's node must not keep the buffer alive
                    if recompute:
                        box.done = True
                    else:
                        e.expect += 1
                e.live, e.live_grad = t, grad
                self.handed[id(t)] = (e, weakref.ref(t))
            module._parameters[attr] = e.live
        if grad:
            ctx = torch.autograd.graph.saved_tensors_hooks(*self._hooks(top))
            ctx.__enter__()
            self.pushed.append(ctx)
            module.__dict__["_spw_pushed"] = module.__dict__.get("_spw_pushed", 0) + 1

    def post(self, module, args, output):
        if module.__dict__.get("_spw_pushed"):
            module.__dict__["_spw_pushed"] -= 1
            if self.pushed:
                self.pushed.pop().__exit__(None, None, None)
        for attr, e in self.owners[module]:
            module._parameters[attr] = e.p
            self.store.unhold(e)

    def _hooks(self, outer):
        me = weakref.ref(self)

        def pack(t):
            h = me()
            if h is not None:
                b = t if t._base is None else t._base
                hit = h.handed.get(id(b))
                if hit is not None and hit[1]() is b:
                    tok = _Token()
                    tok.e, tok.gen = hit[0], h.store.gen
                    tok.shape, tok.stride = tuple(t.shape), tuple(t.stride())
                    tok.offset = t.storage_offset()
                    return tok
            return _Outer(outer[0](t)) if outer else t

        def unpack(x):
            if isinstance(x, _Token):
                h = me()
                if h is None:
                    raise RuntimeError("spillway: the offloaded model is gone; backward cannot "
                                       "fetch parameter %s" % x.e.name)
                return h.unpack(x)
            if isinstance(x, _Outer):
                return outer[1](x.v)
            return x
        pack._spillway = True  # ours: pre() looks past it for checkpointing's
        return pack, unpack

    def unpack(self, tok):
        st, e = self.store, tok.e
        if tok.gen != st.gen and e.trainable:
            raise RuntimeError("spillway: backward needs parameter %s as it was in forward, but "
                               "the optimizer has stepped since" % e.name)
        st.demand((e.idx,))
        st.ensure(e)
        return st.tensor(e, tok.shape, tok.stride, tok.offset)

    # ---------------------------------------------------------- gradients

    def on_grad(self, e, g):
        e.gacc = g if e.gacc is None else e.gacc + g
        e.expect -= 1
        if e.expect <= 0:
            e.expect = 0
            self.deliver(e)

    def on_lost(self, e):
        e.expect -= 1
        if e.expect <= 0:
            e.expect = 0
            if e.gacc is not None:
                self.deliver(e)

    def deliver(self, e):
        g, e.gacc = e.gacc, None
        if g is None:
            return
        if self.store.grad_log is not None:
            self.store.grad_log.setdefault(e.name, []).append(g.detach().clone())
        opt = self.store.owner() if self.store.owner else None
        oe = e.oentry
        if opt is None or oe is None:
            return  # no optimizer takes it (a backward for the inputs' gradients)
        if oe.backwards >= self.store.accum:
            raise RuntimeError(
                "OffloadAdamW: offloaded parameter %s got a gradient in backward %d before "
                "step(); the parameters were offloaded with accumulation_steps=%d (backwards "
                "per step, their gradients summed in spillway): pass the number of backwards "
                "per step to offload_parameters and OffloadAdamW"
                % (e.name, oe.backwards + 1, self.store.accum))
        if g.dtype not in _TYPES:
            raise RuntimeError("OffloadAdamW: parameter %s got a %s gradient" % (e.name, g.dtype))
        self._hand_over(opt, e, oe, g)

    def _hand_over(self, opt, e, oe, g):
        opt._open_step()
        g = g if g.is_contiguous() else g.contiguous()
        nbytes = g.numel() * g.element_size()
        try:
            opt._opt.grad_ready(oe.tid, g.data_ptr(), nbytes, _TYPES[g.dtype],
                                stream=self.store._stream())
        except SpillwayError as err:
            opt._broken(err)
            raise
        oe.handed, oe.src, oe.src_version, oe.none = None, _HANDED, _HANDED._version, False
        oe.backwards += 1
        # The library reads the gradient later: keep it until it has, but
        # never more than about one budget of them.
        self.grads_in_flight.append(g)
        self.grads_in_flight_bytes += nbytes
        limit = self.store.budget or (64 << 20)
        if self.grads_in_flight_bytes > limit:
            opt._opt.sync_grads()
            self.grads_in_flight, self.grads_in_flight_bytes = [], 0

    def settle(self):
        for e in self.store.entries:
            self.settle_one(e)

    def settle_one(self, e):
        """Before OffloadAdamW settles a step: the gradient of a parameter
        whose every use has not reported (a use that got no gradient) goes
        now; with accumulation, a parameter that missed some backwards gets
        zeros for them (torch's p.grad would hold the sum of the others)."""
        if e.gacc is not None:
            e.expect = 0
            self.deliver(e)
        oe = e.oentry
        if oe is not None and 0 < oe.backwards < self.store.accum:
            zero = torch.zeros(e.shape, dtype=torch.float32, device=self.store.device)
            for _ in range(self.store.accum - oe.backwards):
                self._hand_over(self.store.owner(), e, oe, zero)

    def step_ended(self):
        self.grads_in_flight, self.grads_in_flight_bytes = [], 0
        m = self.model_ref()
        self.store.step_ended((True, m.training if m is not None else True))


def _handle_of(model):
    h = model.__dict__.get("_spillway_offload")
    if h is None:
        raise ValueError("spillway: %s has no offloaded parameters (offload_parameters first)"
                         % type(model).__name__)
    return h


def offload_parameters(model, tier="cpu", device="cpu", max_live_bytes=None, prefetch_layers=2,
                       mode="exact", session=None, socket=None, page_size=None, timeout=None,
                       window=0, threads=0, prefetch_bytes=None, region_bytes=None,
                       accumulation_steps=1):
    """Moves every parameter of model into spillway (see the module
    docstring) and returns model. tier: 'cpu' or 'nvme'; device: where
    parameters are materialised ('cpu' or a cuda device); max_live_bytes:
    the most bytes of materialised parameters (None: no limit; a single
    module's parameters may go over it); prefetch_layers: fetch groups
    (a module's parameters) fetched ahead along the order recorded in the
    previous pass; mode: the spillway optimizer's mode, which OffloadAdamW
    on these parameters must use. A model on the meta device is
    registered with zeros: fill it with load_into(). prefetch_bytes:
    prefetch as many groups as fit in these bytes instead of
    prefetch_layers; region_bytes: the session's pinned memory (default:
    all of the state on the cpu tier, a few pages per window on nvme);
    accumulation_steps: backwards per optimizer step, their gradients summed
    in spillway's gradient store (OffloadAdamW must be given the same).
    session, socket, page_size, timeout, window, threads: as OffloadAdamW's."""
    if "_spillway_offload" in model.__dict__:
        raise ValueError("spillway: %s is offloaded already" % type(model).__name__)
    if tier not in ("cpu", "nvme"):
        raise ValueError("tier must be 'cpu' or 'nvme', not %r" % (tier,))
    if mode not in ("exact", "overlapped"):
        raise ValueError("mode must be 'exact' or 'overlapped', not %r" % (mode,))
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError("device must be cpu or cuda, not %s" % device)
    if max_live_bytes is not None and not max_live_bytes > 0:
        raise ValueError("max_live_bytes must be > 0 or None, not %r" % (max_live_bytes,))
    if not (isinstance(accumulation_steps, int) and accumulation_steps >= 1):
        raise ValueError("accumulation_steps must be an integer >= 1, not %r" % (accumulation_steps,))
    if not (isinstance(prefetch_layers, int) and prefetch_layers >= 0):
        raise ValueError("prefetch_layers must be an integer >= 0, not %r" % (prefetch_layers,))
    _patch_saved_tensors_hooks()
    entries, by_param, owners, names, swapped = [], {}, {}, {}, []

    def walk(m, prefix):
        for attr, p in m._parameters.items():
            if p is None:
                continue
            e = by_param.get(id(p))
            if e is None:
                if p.dtype not in _TYPES:
                    raise ValueError("spillway: parameter %s is %s; spillway offloads float32, "
                                     "bfloat16 and float16" % (prefix + attr, p.dtype))
                e = Entry(len(entries), prefix + attr, p, p.shape, p.dtype)
                if p.device.type == "meta":
                    # A meta tensor cannot take another device's data: a new
                    # placeholder parameter takes its place in every module.
                    e.p = torch.nn.Parameter(torch.empty(0, dtype=p.dtype, device=device),
                                             requires_grad=p.requires_grad)
                entries.append(e)
                by_param[id(p)] = e
            elif prefix + attr not in e.names:
                e.names.append(prefix + attr)
            if m._parameters[attr] is not e.p:
                swapped.append((m, attr, m._parameters[attr]))
                m._parameters[attr] = e.p
            owners.setdefault(m, []).append((attr, e))
            names[prefix + attr] = e
        for cname, c in m._modules.items():
            if c is not None:
                walk(c, prefix + cname + ".")
    try:
        walk(model, "")
        if not entries:
            raise ValueError("spillway: %s has no parameters" % type(model).__name__)
        session = session or "torch-params/%d.%d" % (os.getpid(), next(_counter))
        store = Store(entries, tier, device, mode, max_live_bytes, prefetch_layers, socket,
                      session, page_size, int(timeout * 1000) if timeout else 0, window, threads,
                      region_bytes, accumulation_steps)
    except Exception:
        for m, attr, p in swapped:  # a meta model gets its parameters back
            m._parameters[attr] = p
        raise
    if prefetch_bytes is not None:
        store.ahead_bytes = int(prefetch_bytes)
    handle = _Handle(model, store, owners, names, [])
    hooks = [model.register_forward_pre_hook(handle.root_pre)]
    for m in owners:
        hooks.append(m.register_forward_pre_hook(handle.pre))
        hooks.append(m.register_forward_hook(handle.post, **({"always_call": True} if _ALWAYS_CALL else {})))
        hooks.append(m._register_load_state_dict_pre_hook(_loading_hook(handle), with_module=True))
    hooks.append(model._register_state_dict_hook(_state_dict_hook))
    handle.hooks = hooks
    model.__dict__["_spillway_offload"] = handle
    return model


_counter = itertools.count()


def _state_dict_hook(module, destination, prefix, local_metadata):
    h = module.__dict__.get("_spillway_offload")
    if h is None:
        return
    for name, e in h.names.items():
        k = prefix + name
        if k in destination:
            destination[k] = h.store.read(e)


def _loading_hook(handle):
    """model.load_state_dict: an offloaded parameter's value goes into
    spillway, and the module's placeholder gets an empty tensor to copy."""
    ref = weakref.ref(handle)

    def hook(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        h = ref()
        if h is None:
            return
        for attr, e in h.owners.get(module, ()):
            v = state_dict.get(prefix + attr)
            if v is None or not isinstance(v, torch.Tensor):
                continue
            try:
                h.store.write(e, v)
            except (ValueError, RuntimeError) as err:
                errors.append(str(err))
                continue
            state_dict[prefix + attr] = torch.empty(0, dtype=e.dtype, device=h.store.device)
    return hook


def offload_stats(model):
    """The store's figures: fetches, prefetch hits, peak live and
    materialised parameter bytes, and the budget."""
    return _handle_of(model).store.figures()


class gather_parameters:
    """with gather_parameters(model): every parameter holds its full
    values (a copy); changes made inside go back into spillway on exit
    (between steps)."""

    def __init__(self, model, write_back=True):
        self.h = _handle_of(model)
        self.write_back = write_back
        self.saved = []

    def __enter__(self):
        st = self.h.store
        for e in st.entries:
            full = st.read(e)
            e.p.data = full
            self.saved.append((e, e.p._version, full))
        return self

    def __exit__(self, *exc):
        st = self.h.store
        try:
            for e, v, full in self.saved:
                # changed in place, or given other data, inside
                if self.write_back and (e.p._version != v or e.p.data_ptr() != full.data_ptr()):
                    st.write(e, e.p.data)
        finally:
            for e, _, _ in self.saved:
                e.p.data = torch.empty(0, dtype=e.dtype, device=st.device)
                if e.oentry is not None:
                    e.oentry.version, e.oentry.ptr = e.p._version, e.p.data_ptr()
            self.saved = []
        return False


def load_into(model, state, strict=True):
    """Writes weights into model's offloaded parameters tensor by tensor:
    state is a state dict, a path to one (torch.load), or an iterable of
    (name, tensor) pairs (a generator streams a model larger than host
    memory). A state dict passed in is emptied as it goes when it is a
    plain dict the caller gave (so each tensor can be freed). Module
    buffers named in state are set too. Returns the names loaded."""
    h = _handle_of(model)
    if isinstance(state, (str, bytes)) or hasattr(state, "__fspath__"):
        state = torch.load(state, map_location="cpu")
    if hasattr(state, "keys"):
        keys = list(state.keys())
        items = ((k, state[k]) for k in keys)
    else:
        items = iter(state)
    bufs = dict(_named_buffers(model))
    done = set()
    for k, v in items:
        e = h.names.get(k)
        if e is not None:
            h.store.write(e, v)
            done.update(e.names)
        elif k in bufs:
            m, attr = bufs[k]
            m._buffers[attr] = v.detach().to(h.store.device).clone()
            done.add(k)
        elif strict:
            raise KeyError("load_into: %s is not a parameter or buffer of %s" % (k, type(model).__name__))
        del v
    if strict:
        missing = sorted(set(h.names) - done)
        if missing:
            raise KeyError("load_into: no value for %s%s" % (", ".join(missing[:5]),
                           " and %d more" % (len(missing) - 5) if len(missing) > 5 else ""))
    return sorted(done)


def _named_buffers(model):
    def walk(m, prefix):
        for attr, b in m._buffers.items():
            if b is not None:
                yield prefix + attr, (m, attr)
        for cname, c in m._modules.items():
            if c is not None:
                yield from walk(c, prefix + cname + ".")
    return walk(model, "")


# ------------------------------------------------------------ OffloadAdamW side

def is_offloaded(opt, e):
    """Whether OffloadAdamW's entry e is an offloaded parameter (its
    gradients go to spillway in backward, never into p.grad)."""
    return isinstance(opt._opt, _Adopted) and id(e.p) in opt._opt._h.by_param


def grad_of(opt, e):
    """OffloadAdamW's p.grad at step(): for an offloaded parameter, what
    the store handed over (after handing over what is still pending)."""
    if isinstance(opt._opt, _Adopted) and e.tid is not None:
        se = opt._opt._h.by_param.get(id(e.p))
        if se is not None:
            opt._opt._h.settle_one(se)
    return e.src if e.src is _HANDED else e.p.grad


class _Adopted:
    """OffloadAdamW's spillway optimizer when its parameters are offloaded:
    the store's, with its param groups mapped (one spillway group per
    tensor) onto OffloadAdamW's."""

    def __init__(self, handle, group_of):
        self._h, self._st = handle, handle.store
        self._group_of = group_of     # spillway group -> OffloadAdamW group

    def __getattr__(self, name):
        return getattr(self._st.opt, name)

    def begin(self, step, lrs=None, loss_scale=0.0):
        if lrs is not None:
            lrs = [lrs[g] for g in self._group_of]
        return self._st.opt.begin(step, lrs, loss_scale)

    def set_group(self, group, g):
        for sg, og in enumerate(self._group_of):
            if og == group:
                self._st.opt.set_group(sg, g)

    def end(self):
        self._h.settle()
        r = self._st.opt.end()
        self._h.step_ended()
        return r

    def close(self):
        for e in self._st.entries:
            e.oentry = None
        self._st.owner = None


def adopt(opt, snapshot):
    """Called first in OffloadAdamW._build: when its parameters are
    offloaded, it takes the store's spillway optimizer and returns True."""
    stores = {}
    for e in opt._entries:
        h = _handle_of_param(id(e.p))
        stores[id(h)] = h
    if list(stores) == [id(None)]:
        return False
    if id(None) in stores or len(stores) > 1:
        raise ValueError("OffloadAdamW: some parameters are offloaded (offload_parameters) and "
                         "some are not, or they come from several models; one OffloadAdamW takes "
                         "the parameters of one offloaded model")
    h = next(iter(stores.values()))
    st = h.store
    if opt.tier != st.tier or opt.mode != st.mode:
        raise ValueError("OffloadAdamW: the parameters were offloaded with tier=%r mode=%r; the "
                         "optimizer must use the same (it updates them where they are)"
                         % (st.tier, st.mode))
    if opt._dynamic:
        raise ValueError("OffloadAdamW: loss_scale='dynamic' is not available with offloaded "
                         "parameters (use a fixed loss_scale)")
    if getattr(opt, "_persistent", False):
        raise ValueError("OffloadAdamW: persistent=True is not available with offloaded "
                         "parameters yet (their session is offload_parameters')")
    if opt.accumulation_steps != st.accum:
        raise ValueError("OffloadAdamW: accumulation_steps=%d, but the parameters were offloaded "
                         "with accumulation_steps=%d (spillway sums their gradients over that "
                         "many backwards)" % (opt.accumulation_steps, st.accum))
    if st.owner is not None and st.owner() not in (None, opt):
        raise ValueError("OffloadAdamW: these offloaded parameters already have an optimizer")
    mine = {id(e.p): e for e in opt._entries}
    left = [e.name for e in st.entries if e.trainable and id(e.p) not in mine]
    if left:
        raise ValueError("OffloadAdamW: give it every trainable offloaded parameter of the model "
                         "(missing %s)" % ", ".join(left[:5]))
    kept = []
    group_of = [0] * max(1, sum(1 for e in st.entries if e.trainable))
    for oe in opt._entries:
        se = h.by_param[id(oe.p)]
        if not se.trainable:
            continue  # a frozen tensor in spillway: no state, never updated
        oe.tid, oe.numel = se.tid, se.numel
        oe.ref = torch.empty(se.shape, device="meta")  # the shape, for opt.state
        oe.ptr, oe.version = oe.p.data_ptr(), oe.p._version
        oe.forget_step()
        se.oentry = oe
        group_of[se.group] = oe.group
        kept.append(oe)
    opt._entries = kept
    opt._by_id = {id(e.p): e for e in kept}
    opt._session, opt._own_session = st.session, False
    opt._opt = _Adopted(h, group_of)
    st.owner = weakref.ref(opt)
    for gi, g in enumerate(opt.param_groups):
        opt._opt.set_group(gi, dict(lr=float(g["lr"]), beta1=float(g["betas"][0]),
                                    beta2=float(g["betas"][1]), eps=float(g["eps"]),
                                    weight_decay=float(g["weight_decay"])))
    if st.mode == "exact":
        st.opt.set_clip(float(opt.max_grad_norm or 0.0))
    for oe in kept:
        snap = snapshot.get(oe) if snapshot else None
        if snap is not None:
            if snap[0] is not None:
                st.write(h.by_param[id(oe.p)], snap[0])
            st.opt.write(oe.tid, L.STATE_EXP_AVG, snap[1].contiguous().data_ptr())
            st.opt.write(oe.tid, L.STATE_EXP_AVG_SQ, snap[2].contiguous().data_ptr())
        if opt._step_no - oe.steps:
            st.opt.set_lag(oe.tid, opt._step_no - oe.steps)
    opt._built_hparams = opt._hparams()
    opt._built = True
    return True


_handles = []  # weak references to every live handle


def _handle_of_param(pid):
    """The handle whose model has the placeholder parameter id(p) == pid."""
    for ref in list(_handles):
        h = ref()
        if h is not None and pid in h.by_param:
            return h
    return None
