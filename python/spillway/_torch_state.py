# SPDX-License-Identifier: MIT
"""OffloadAdamW's state: the live view behind opt.state, reading it out of
spillway, state_dict and load_state_dict."""
import itertools
import weakref
from collections.abc import Mapping

import torch

from . import SpillwayError
from . import _lib as L
from ._torch_checks import check_flags, check_hparams, f32


class LiveState(Mapping):
    """OffloadAdamW.state: torch.optim.AdamW's per-parameter state
    (step, exp_avg, exp_avg_sq, and 'master' for 16-bit parameters), read
    out of spillway when a parameter's entry is looked up. Every value is a
    fresh fp32 copy: writing into it changes nothing in spillway (use
    load_state_dict for that). A parameter that has not been updated yet
    reads as {} (as torch's defaultdict), but is not listed."""

    def __init__(self, opt):
        self._opt = weakref.ref(opt)

    def _owner(self):
        o = self._opt()
        if o is None:
            raise RuntimeError("OffloadAdamW is gone")
        return o

    def __getitem__(self, p):
        o = self._owner()
        e = o._entry_of(p)
        if e is None or e.steps == 0:
            return {}
        return o._state_of(e)

    def __iter__(self):
        o = self._owner()
        return iter([e.p for e in o._entries if e.steps > 0])

    def __len__(self):
        return sum(1 for e in self._owner()._entries if e.steps > 0)

    def __contains__(self, p):
        e = self._owner()._entry_of(p)
        return e is not None and e.steps > 0

    def __repr__(self):
        return "<OffloadAdamW state of %d parameters, read from spillway on access>" % len(self)


class StateMixin:
    """OffloadAdamW's methods that read and write its state in spillway."""

    def _snapshot(self, entries, masters):
        """Reads the state of entries that have any out of spillway."""
        snap = {}
        if self._opt is None or self._step_no == 0:
            return snap
        self._opt.sync()
        for e in entries:
            if e.steps == 0:
                continue  # its moments were never written: nothing to carry
            m = self._read(e, L.STATE_EXP_AVG)
            v = self._read(e, L.STATE_EXP_AVG_SQ)
            master = self._read(e, L.STATE_PARAM) if masters else None
            snap[e] = (master, m, v)
        return snap

    def _read(self, e, which):
        out = torch.empty(e.numel, dtype=torch.float32)
        self._opt.read(e.tid, which, out.data_ptr())
        return out


    def _state_of(self, e):
        if self._in_step:
            raise RuntimeError("OffloadAdamW: the state is read between steps, not between "
                               "backward and step()")
        self._usable()
        self._opt.sync()
        # An offloaded parameter (spillway._torch_offload) is an empty
        # placeholder; its shape is kept on a meta tensor in e.ref.
        shape = e.ref.shape if e.ref is not None and e.ref.device.type == "meta" else e.p.shape
        s = {"step": torch.tensor(float(e.steps)),
             "exp_avg": self._read(e, L.STATE_EXP_AVG).view(shape),
             "exp_avg_sq": self._read(e, L.STATE_EXP_AVG_SQ).view(shape)}
        if e.p.dtype != torch.float32:
            s["master"] = self._read(e, L.STATE_PARAM).view(shape)
        return s

    def state_dict(self):
        """torch.optim.AdamW's format (loadable into it), read out of
        spillway: moments in fp32 whatever the parameters' type (torch's
        load_state_dict casts them), 16-bit parameters with their fp32
        'master'."""
        if self._failed is None and self._opt is not None and self._in_step:
            raise RuntimeError("OffloadAdamW: state_dict() between backward and step()")
        try:
            self._usable()
            return super().state_dict()
        except (RuntimeError, SpillwayError) as err:
            raise RuntimeError(
                "OffloadAdamW.state_dict: spillway's state cannot be read (%s). The Adam moments "
                "and fp32 master weights of %d parameters live in spillwayd and are lost if it is "
                "gone; the model's parameters hold what step %d left them (the last step that "
                "completed): save model.state_dict() and go on with a fresh OffloadAdamW, whose "
                "moments restart from zero, or restore an earlier optimizer state_dict"
                % (err, len(self._entries), self._step_no)) from err

    def load_state_dict(self, state_dict):
        """Loads a state_dict of OffloadAdamW or torch.optim.AdamW: groups'
        hyperparameters, each parameter's step, and its moments (fp32 as
        given, not cast to the parameter's type) pushed into spillway."""
        if self._in_step:
            raise RuntimeError("OffloadAdamW: load_state_dict() between backward and step()")
        self._usable()
        states = state_dict.get("state", {})
        moments = False
        for k, s in states.items():
            if "exp_avg" in s or "exp_avg_sq" in s:
                moments = True
                if "exp_avg" not in s or "exp_avg_sq" not in s:
                    raise ValueError("OffloadAdamW.load_state_dict: state of parameter %s lacks "
                                     "exp_avg or exp_avg_sq" % (k,))
            if s.get("max_exp_avg_sq") is not None:
                raise ValueError("OffloadAdamW.load_state_dict: state of parameter %s is AMSGrad's"
                                 % (k,))
        saved_groups = state_dict.get("param_groups", [])
        for i, g in enumerate(saved_groups):
            check_flags(g, "OffloadAdamW.load_state_dict: param group %d" % i)
            check_hparams(g.get("lr", 0.0), g.get("betas", (0.9, 0.999)), g.get("eps", 1e-8),
                           g.get("weight_decay", 0.0), "param group %d" % i)
        if moments and not L.has("spw_optimizer_write"):
            raise NotImplementedError(
                "OffloadAdamW.load_state_dict: pushing exp_avg/exp_avg_sq into spillway needs "
                "spw_optimizer_write(), which this libspillway (%s) lacks; only a state_dict "
                "without moments (before any step) can be loaded" % L.library_path())
        kept_groups = self.param_groups
        super().load_state_dict(state_dict)
        self.__dict__.pop("state", None)  # torch's cast copy; the originals are read below
        saved_ids = itertools.chain.from_iterable(g["params"] for g in saved_groups)
        mine = itertools.chain.from_iterable(g["params"] for g in self.param_groups)
        by_param = {id(p): states.get(k) for k, p in zip(saved_ids, mine)}
        snapshot, steps = {}, {}
        for e in self._entries:
            s = by_param.get(id(e.p))
            steps[e] = int(float(s["step"])) if s and "step" in s else 0
            if not s or "exp_avg" not in s:
                continue
            master = s.get("master") if e.p.dtype != torch.float32 else None
            snapshot[e] = (None if master is None else f32(master), f32(s["exp_avg"]),
                           f32(s["exp_avg_sq"]))
        prev = self._step_no, {e: e.steps for e in self._entries}
        self._step_no = max(steps.values(), default=0)
        for e in self._entries:
            e.steps = steps[e]
        try:
            self._rebuild(self._entries, snapshot=snapshot)
        except Exception:
            self.param_groups = kept_groups
            self._step_no = prev[0]
            for e in self._entries:
                e.steps = prev[1].get(e, 0)
            raise
