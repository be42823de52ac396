# SPDX-License-Identifier: MIT
"""Pieces of spillway.torch that are not the step itself: the live view
behind OffloadAdamW.state, and GradScaler's optimizer-side contract."""
import weakref
from collections.abc import Mapping

import torch


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


def scaler_stage(scaler, opt):
    """(unscaled, found_inf) from torch.cuda.amp.GradScaler's record of opt:
    whether unscale_(opt) already ran this iteration (the gradients in .grad
    are unscaled), and if so whether it found inf/nan."""
    from torch.cuda.amp.grad_scaler import OptState
    st = scaler._per_optimizer_states[id(opt)]
    if st["stage"] is OptState.UNSCALED:
        found = sum(float(v.item()) for v in st["found_inf_per_device"].values())
        return True, found > 0
    return False, False


def scaler_scale(scaler):
    """The scale the loss was multiplied by (a float; syncs with the device)."""
    s = scaler._get_scale_async()
    if s is None:
        raise RuntimeError("OffloadAdamW.step(grad_scaler=...): the GradScaler has no scale yet "
                           "(call scaler.scale(loss) before backward)")
    return float(s.item())


def scaler_record(scaler, opt, nonfinite):
    """Tells GradScaler what spillway's fused check found, so that
    scaler.update() backs off or grows the scale as it would have."""
    st = scaler._per_optimizer_states[id(opt)]
    dev = scaler._scale.device
    st["found_inf_per_device"] = {dev: torch.full((1,), 1.0 if nonfinite else 0.0,
                                                  dtype=torch.float32, device=dev)}
