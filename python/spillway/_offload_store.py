# SPDX-License-Identifier: MIT
"""The parameter store behind spillway.torch.offload_parameters: one
spillway optimizer whose tensors are a model's parameters (trainable ones
with spw_optimizer_add_offloaded, frozen ones with _add_frozen), the
buffers parameters are materialised into, the live-bytes budget, and
prefetch along the recorded fetch order.

A parameter's values live only in spillway (the fp32 master the optimizer
updates). To use one, the store fetches it into a buffer (spw_params_fetch,
waited with spw_optimizer_wait_params, handed back with spw_params_release);
the buffer stays cached, valid until the next optimizer step or write, and
is reused or dropped when the budget needs the room.

On the host device buffers are bytearrays wrapped by torch.frombuffer: every
tensor handed out holds the bytearray, so the store knows both when a
buffer is still used by someone (autograd, a module's output) and, through
a weak reference, when its memory is really gone. On cuda, buffers come
from torch's caching allocator, which already makes reuse cheap and safe.
"""
import ctypes
import os
import sys
import weakref
from collections import OrderedDict

import torch

from . import Optimizer as _SpwOptimizer
from . import Session
from . import _lib as L
from ._torch_checks import _TYPES, spw_name

_MAX_GROUPS = 65536  # spw_optimizer_new's limit on param groups


class _Mem(bytearray):
    """Host memory of one buffer (a subclass: bytearrays take no weakrefs)."""
    __slots__ = ("__weakref__",)


class _Buf:
    """One materialised buffer of nbytes."""
    __slots__ = ("nbytes", "mem", "dev", "ptr")

    def __init__(self, nbytes, device):
        self.nbytes = nbytes
        if device.type == "cpu":
            self.mem, self.dev = _Mem(nbytes), None
            t = torch.frombuffer(self.mem, dtype=torch.uint8)
            self.ptr = t.data_ptr()
            del t
        else:
            self.mem, self.dev = None, torch.empty(nbytes, dtype=torch.uint8, device=device)
            self.ptr = self.dev.data_ptr()

    def tensor(self, dtype, shape, stride=None, offset=0):
        """A fresh tensor over the buffer (not a view: its _base is None)."""
        if self.dev is not None:
            flat = self.dev.view(dtype)
        else:
            flat = torch.frombuffer(self.mem, dtype=dtype)
        if stride is None:
            stride = torch.empty(0).new_empty(shape).stride() if len(shape) else ()
        stor = flat.untyped_storage() if hasattr(flat, "untyped_storage") else flat.storage()
        return torch.empty(0, dtype=dtype, device=flat.device).set_(
            stor, offset, torch.Size(shape), stride)

    def busy(self):
        # Our own reference (self.mem) and getrefcount's argument: any more
        # is a tensor someone still holds.
        return self.mem is not None and sys.getrefcount(self.mem) > 2


class Entry:
    """One offloaded parameter."""
    __slots__ = ("idx", "name", "names", "p", "shape", "numel", "dtype", "nbytes", "tid",
                 "trainable", "group", "buf", "gen", "inflight", "prefetched", "holds", "live",
                 "live_grad", "gacc", "expect", "anchor", "oentry", "init", "__weakref__")

    def __init__(self, idx, name, p, shape, dtype):
        self.idx, self.name, self.names, self.p = idx, name, [name], p
        self.shape, self.dtype = tuple(shape), dtype
        self.numel = 1
        for s in self.shape:
            self.numel *= s
        self.nbytes = self.numel * torch.empty(0, dtype=dtype).element_size()
        self.tid = self.group = None
        self.trainable = p.requires_grad
        self.buf = None
        self.gen = -1           # the store generation its buffer's values belong to
        self.inflight = False   # a fetch into buf is queued, not yet waited
        self.prefetched = False  # buf was filled ahead of need
        self.holds = 0          # modules running with it
        self.live = None        # the tensor modules use in this forward
        self.live_grad = False
        self.gacc = None        # its gradient summed over this backward's uses
        self.expect = 0         # uses whose gradient has not arrived yet
        self.anchor = None
        self.oentry = None      # OffloadAdamW's entry, once an optimizer adopts the store
        self.init = p           # the values to start from (a meta tensor: zeros)


class Store:
    def __init__(self, entries, tier, device, mode, max_live_bytes, prefetch_layers, socket,
                 session, page_size, timeout_ms, window, threads, region_bytes=None, accumulation=1):
        self.entries = entries
        self.tier, self.device, self.mode = tier, device, mode
        self.budget = int(max_live_bytes) if max_live_bytes else None
        self.depth = int(prefetch_layers)
        self.accum = int(accumulation)  # backwards per step (gradients summed in spillway)
        self.ahead_bytes = None     # prefetch by bytes ahead instead (stage3_prefetch_bucket_size)
        self.gen = 0
        self.owner = None           # weakref to the OffloadAdamW using it
        self.grad_log = None        # tests: {name: gradient handed over}
        # budget and what is materialised
        self.live_bytes = self.peak_live = 0          # buffers the store holds
        self.mat_bytes = self.peak_mat = 0            # buffers alive anywhere
        self.max_entry = max((e.nbytes for e in entries), default=0)
        self.pool = {}                                # nbytes -> [free _Buf]
        self.idle = OrderedDict()                     # entries with a buffer, no holds (LRU)
        self._refs, self._nrefs = {}, 0               # weakrefs to buffers' memory
        # prefetch
        self.preds = {}             # pass key -> [groups] of the last pass of that kind
        self.cur, self.key, self.cursor = [], None, 0
        self.stats = dict(fetches=0, demand_fetches=0, prefetches=0, prefetch_hits=0,
                          reuses=0, evictions=0, over_budget=0)
        self._build(socket, session, page_size, timeout_ms, window, threads, region_bytes)

    # ------------------------------------------------------------ spillway side

    def _build(self, socket, session, page_size, timeout_ms, window, threads, region_bytes):
        trainable = [e for e in self.entries if e.trainable]
        if len(trainable) > _MAX_GROUPS:
            raise ValueError("offload_parameters: %d trainable tensors; spillway keeps at most %d "
                             "(one param group each)" % (len(trainable), _MAX_GROUPS))
        k = 4 if self.mode == "exact" else 3
        total = sum(e.numel * 4 for e in self.entries)
        psz = page_size
        if not psz:
            psz = 64 << 10
            while psz < (4 << 20) and total * k / psz > 4096:
                psz *= 2
        win = window or 4
        pages_t = sum(-(-e.numel * 4 // psz) for e in trainable)
        pages_f = sum(-(-e.numel * 4 // psz) for e in self.entries if not e.trainable)
        if self.tier == "cpu":
            pages = pages_t * k + pages_f
            swap = 0
        else:
            pages = 4 * win * k
            swap = (pages_t * k + pages_f) * psz
        pages += 2 * win + 8
        if isinstance(session, Session):
            self.session, self.own_session = session, False
        else:
            self.session = Session(session, region_bytes=region_bytes or pages * psz, page_size=psz,
                                   socket=socket,
                                   reply_timeout_ms=timeout_ms, swap_bytes=swap)
            self.own_session = True
        dev = "host" if self.device.type == "cpu" else "cuda:%d" % (
            self.device.index if self.device.index is not None else torch.cuda.current_device())
        if "SPILLWAY_TRAINER_THREADS" not in os.environ:
            os.environ["SPILLWAY_TRAINER_THREADS"] = str(
                max(1, torch.get_num_threads()) if dev == "host" else 1)
        groups = [dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)
                  for _ in range(max(1, len(trainable)))]
        try:
            self.opt = _SpwOptimizer(self.session, groups, mode=self.mode, tier=self.tier,
                                     accumulation=self.accum, window=window, threads=threads,
                                     device=dev,
                                     timeout_ms=timeout_ms)
        except Exception:
            self.close()
            raise
        try:
            g = 0
            # Backward needs the last layers first: register them first.
            for e in reversed(self.entries):
                init = self._init_of(e)
                t = L.u32()
                name = spw_name(e.idx, e.name).encode()
                if e.trainable:
                    e.group, g = g, g + 1
                    r = L.lib.spw_optimizer_add_offloaded(self.opt._o, name, e.group, e.numel,
                                                          init.data_ptr(), ctypes.byref(t))
                else:
                    r = L.lib.spw_optimizer_add_frozen(self.opt._o, name, e.numel, init.data_ptr(),
                                                       L.TYPE_F32, ctypes.byref(t))
                self.opt._call(r, "offload %s" % e.name)
                e.tid = t.value
                del init
        except Exception:
            self.close()  # the model keeps its parameters
            raise
        # spillway has every value: the model's copies go
        for e in self.entries:
            if e.p.device.type != "meta":
                e.p.data = torch.empty(0, dtype=e.dtype, device=self.device)
            e.init = None

    @staticmethod
    def _init_of(e):
        p = e.init.detach()
        if p.device.type == "meta":
            return torch.zeros(e.numel, dtype=torch.float32)
        return p.to("cpu", torch.float32).contiguous().view(-1)

    def close(self):
        if getattr(self, "opt", None) is not None:
            self.opt.close()
            self.opt = None
        if getattr(self, "own_session", False) and self.session is not None:
            self.session.close()
            self.session = None

    def write(self, e, values):
        """Puts values (any dtype, e's shape or numel) into e's master."""
        src = values.detach().to("cpu", torch.float32).contiguous().view(-1)
        if src.numel() != e.numel:
            raise ValueError("parameter %s holds %d elements (%s), the value given %d (%s)"
                             % (e.name, e.numel, e.shape, src.numel(), tuple(values.shape)))
        owner = self.owner() if self.owner else None
        if owner is not None and owner._in_step:
            raise RuntimeError("parameter %s: written between backward and step()" % e.name)
        self._drop(e)  # a fetch in flight lands first; the buffer is stale after
        self.opt.write(e.tid, L.STATE_PARAM, src.data_ptr())

    def read(self, e):
        """A fresh copy of e's values in its dtype and shape (not counted
        in the live budget: the caller asked for a full copy)."""
        out = torch.empty(e.shape, dtype=e.dtype, device=self.device)
        self._wait(e)
        if self.valid(e):
            out.copy_(self.tensor(e))
            return out
        self._fetch_into(e, out.data_ptr())
        self._wait(e)
        return out

    # ------------------------------------------------------------ buffers

    def _track(self, buf):
        """Counts buf as materialised until its memory is really freed."""
        self.mat_bytes += buf.nbytes
        self.peak_mat = max(self.peak_mat, self.mat_bytes)
        n, me = buf.nbytes, weakref.ref(self)
        key = self._nrefs = self._nrefs + 1

        def gone(_ref):
            s = me()
            if s is not None:
                s.mat_bytes -= n
                s._refs.pop(key, None)
        self._refs[key] = weakref.ref(buf.mem if buf.mem is not None else buf.dev, gone)

    def _alloc(self, nbytes, protect, demand=True):
        free = self.pool.get(nbytes)
        while free:
            b = free.pop()
            if not b.busy():
                return b
            self._forget(b)
        if self.budget is not None and self.live_bytes + nbytes > self.budget:
            b = self._take_same_size(nbytes, protect, demand)
            if b is None:
                b = self._make_room(nbytes, protect, demand)
            if b is not None:
                return b
        b = _Buf(nbytes, self.device)
        self._track(b)
        self.live_bytes += nbytes
        self.peak_live = max(self.peak_live, self.live_bytes)
        if self.budget is not None and self.live_bytes > self.budget:
            self.stats["over_budget"] += 1
        return b

    def _forget(self, b):
        """The store lets go of b (its memory goes once nobody holds it)."""
        self.live_bytes -= b.nbytes

    def _give_back(self, b):
        """b goes to the free pool (when it fits the budget) or away. On
        cuda it always goes: torch's caching allocator reuses the memory
        once the last tensor over it is gone, which the store cannot see."""
        if b.mem is None or b.busy() or (self.budget is not None and self.live_bytes > self.budget):
            self._forget(b)
            return
        self.pool.setdefault(b.nbytes, []).append(b)

    def _take_same_size(self, nbytes, protect, demand):
        """The buffer of an idle cached parameter of nbytes (least recently
        used, those needed soon last), dropped from it to be refilled."""
        for soon in (False, True) if demand else (False,):
            for e in self.idle:
                b = e.buf
                if (b is None or b.nbytes != nbytes or b.mem is None or e.holds
                        or (e.idx in protect) != soon):
                    continue
                self._drop(e, pool=False)
                self.stats["evictions"] += 1
                if b.busy():
                    return None  # someone still reads it: not this one
                self.live_bytes += nbytes  # taken back, to be refilled
                return b
        return None

    def _make_room(self, nbytes, protect, demand=True):
        """Frees held buffers until nbytes more fit the budget: free ones
        first, then idle cached parameters (least recently used, those the
        prediction needs soon last), then fetches in flight (waited first).
        What cannot be freed (parameters in use) is allowed over. Returns
        the buffer of an evicted parameter when it is of nbytes and nobody
        holds it, for the caller to reuse (fresh memory costs a first
        touch of every page), else None."""
        if self.budget is None:
            return None
        need = lambda: self.live_bytes + nbytes > self.budget  # noqa: E731
        for size in list(self.pool):
            while need() and self.pool[size]:
                self._forget(self.pool[size].pop())
        if not need():
            return None
        for soon in (False, True) if demand else (False,):
            for e in list(self.idle):
                if not need():
                    return None
                if (e.idx in protect) != soon or e.holds:
                    continue
                if e.inflight:
                    self._wait(e)
                b = e.buf
                self._drop(e, pool=False)
                self.stats["evictions"] += 1
                if b is not None and b.nbytes == nbytes and b.mem is not None and not b.busy():
                    self.live_bytes += nbytes  # taken back, to be refilled
                    return b
        return None

    def _drop(self, e, pool=True):
        """e's buffer is no longer its values."""
        if e.inflight:
            self._wait(e)
        e.live = None
        e.gen = -1
        self.idle.pop(e, None)
        if e.buf is not None:
            b, e.buf = e.buf, None
            if pool:
                self._give_back(b)
            else:
                self._forget(b)

    # ------------------------------------------------------------ fetching

    def _fetch_into(self, e, ptr):
        self.opt._call(L.lib.spw_params_fetch(self.opt._o, e.tid, ptr, e.nbytes, _TYPES[e.dtype],
                                              self._stream()), "fetch %s" % e.name)
        e.inflight = True
        self.stats["fetches"] += 1

    def _wait(self, e):
        if not e.inflight:
            return
        e.inflight = False
        self.opt.wait_params(e.tid, self._stream())
        self.opt._call(L.lib.spw_params_release(self.opt._o, e.tid), "release %s" % e.name)

    def _stream(self):
        if self.device.type == "cuda":
            return ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)
        return None

    def valid(self, e):
        return e.buf is not None and e.gen == (self.gen if e.trainable else 0)

    def _issue(self, e, protect, demand=True):
        if e.buf is not None:
            self._drop(e)
        e.buf = self._alloc(e.nbytes, protect, demand)
        e.gen = self.gen if e.trainable else 0
        e.prefetched = False
        self._fetch_into(e, e.buf.ptr)
        if not e.holds:
            self.idle[e] = None

    def ensure(self, e):
        """Makes e's buffer hold its current values (waiting for them)."""
        if self.valid(e):
            if e.prefetched:
                self.stats["prefetch_hits"] += 1
                e.prefetched = False
            else:
                self.stats["reuses"] += 1
            self._wait(e)
        else:
            self.stats["demand_fetches"] += 1
            self._issue(e, self._window())
            self._wait(e)
        if e in self.idle:
            self.idle.move_to_end(e)

    def tensor(self, e, shape=None, stride=None, offset=0):
        return e.buf.tensor(e.dtype, e.shape if shape is None else shape, stride, offset)

    def hold(self, e):
        e.holds += 1
        self.idle.pop(e, None)

    def unhold(self, e):
        e.holds -= 1
        if e.holds == 0 and e.buf is not None:
            self.idle[e] = None

    # ------------------------------------------------------------ order, prefetch

    def new_pass(self, key):
        """A forward of the root module begins: the pass before it is the
        prediction for the next pass of its kind."""
        if self.cur and self.key is not None:
            self.preds[self.key] = self.cur
        self.cur, self.key, self.cursor = [], key, 0
        for e in self.entries:
            e.live = None

    def demand(self, group):
        """Records a fetch group (a module's parameters, or one unpacked in
        backward), then prefetches the groups that followed it last time."""
        self.cur.append(group)
        pred = self.preds.get(self.key)
        if not pred:
            return
        c = self.cursor
        if c < len(pred) and pred[c] == group:
            self.cursor = c + 1
        else:
            for i in range(c, min(len(pred), c + 32)):
                if pred[i] == group:
                    self.cursor = i + 1
                    break
        self.prefetch(pred, self.cursor, group)

    def _window(self):
        pred = self.preds.get(self.key) if self.key is not None else None
        if not pred:
            return frozenset()
        return frozenset(i for g in self._ahead(pred, self.cursor) for i in g)

    def _ahead(self, pred, at):
        """The groups to have ready after position at: prefetch_layers of
        them, or as many as fit in ahead_bytes."""
        if self.ahead_bytes is None:
            return pred[at:at + self.depth]
        out, n = [], 0
        for g in pred[at:]:
            n += sum(self.entries[i].nbytes for i in g)
            if out and n > self.ahead_bytes:
                break
            out.append(g)
        return out

    def prefetch(self, pred, at, current=()):
        """Fetches the groups pred[at:at + depth] ahead, within the budget,
        never dropping them or the current group for one another."""
        if self.depth <= 0 and self.ahead_bytes is None:
            return
        ahead = self._ahead(pred, at)
        protect = frozenset(i for g in ahead for i in g).union(current)
        for group in ahead:
            for i in group:
                e = self.entries[i]
                if self.valid(e):
                    continue
                if not self._fits(e.nbytes, protect):
                    return  # no room without dropping what is in use or needed sooner
                self._issue(e, protect, demand=False)
                e.prefetched = True
                self.stats["prefetches"] += 1

    def _fits(self, nbytes, protect):
        """Whether nbytes more fit the budget once free buffers and idle
        parameters outside protect are let go."""
        if self.budget is None or self.live_bytes + nbytes <= self.budget:
            return True
        spare = sum(b.nbytes for bs in self.pool.values() for b in bs)
        spare += sum(e.buf.nbytes for e in self.idle
                     if e.buf is not None and not e.holds and e.idx not in protect)
        return self.live_bytes + nbytes - spare <= self.budget

    def step_ended(self, key):
        """The optimizer updated the masters: every trainable buffer is
        stale. Starts the next pass's first fetches (the updates of those
        parameters run first)."""
        self.gen += 1
        for e in self.entries:
            e.expect = 0
            e.gacc = None
            if e.trainable and e.buf is not None:
                self._drop(e)
        pred = self.preds.get(key)
        if self.key == key and self.cur:
            pred = self.cur  # the pass that just ran is the newest of its kind
        if pred:
            self.prefetch(pred, 0)

    def figures(self):
        s = dict(self.stats)
        st = L.OptimizerStats2(size=ctypes.sizeof(L.OptimizerStats2))
        arg = ctypes.cast(ctypes.byref(st), ctypes.POINTER(L.OptimizerStats))  # the longer struct
        self.opt._call(L.lib.spw_optimizer_stats(self.opt._o, arg), "stats")
        # libspillway's side: fetches it ran, and read-ahead hints from its
        # own record of the fetch order that the daemon took (NVMe tier)
        s.update(spw_fetches=st.fetches, spw_bytes_fetched=st.bytes_fetched,
                 spw_read_ahead_hints=st.fetch_prefetches)
        s.update(live_bytes=self.live_bytes, peak_live_bytes=self.peak_live,
                 materialised_bytes=self.mat_bytes, peak_materialised_bytes=self.peak_mat,
                 max_live_bytes=self.budget, largest_param_bytes=self.max_entry)
        looked = s["prefetch_hits"] + s["demand_fetches"]
        s["prefetch_hit_rate"] = s["prefetch_hits"] / looked if looked else 0.0
        return s

    def reset_peaks(self):
        self.peak_live, self.peak_mat = self.live_bytes, self.mat_bytes
        for k in self.stats:
            self.stats[k] = 0
