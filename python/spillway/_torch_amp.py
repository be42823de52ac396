# SPDX-License-Identifier: MIT
"""Clipping and loss scaling of OffloadAdamW: clip_grad_norm_, its own
dynamic loss scale, and torch.cuda.amp.GradScaler's optimizer side
(_step_supports_amp_scaling: GradScaler.step calls step(grad_scaler=...)
and leaves unscaling, the inf/nan check and the skip to the optimizer).
Each rides out a daemon restart as step() does (spillway._torch_persist.ride):
the step is redone in the taken-over session from p.grad, clipped to the
same max_norm and scaled by the same GradScaler scale, or found committed."""
import math

import torch

from . import _lib as L, _torch_persist as _persist
from ._torch_persist import RewoundError
from ._torch_gradref import after_early_end
from ._torch_offload import grad_of, is_offloaded


# GradScaler.unscale_(opt) divides each p.grad in place, and torch 2.x's
# kernel for it (_amp_foreach_non_finite_check_and_unscale_) leaves the
# tensors' _version as it was: OffloadAdamW, which takes a gradient over
# when backward writes it and checks _version at step(), would go on with
# the scaled copy it holds. So unscale_ is wrapped, once per process: an
# OffloadAdamW passed to it is told (_grads_unscaled), and takes every
# gradient over again from p.grad. Other optimizers see no difference.


def watch_unscale():
    """Wraps GradScaler.unscale_ (torch.amp's, and torch.cuda.amp's where it
    is its own, as in torch 1.13) to tell an OffloadAdamW before and after."""
    classes = []
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        classes.append(amp.GradScaler)
    try:
        from torch.cuda.amp import GradScaler as CudaScaler
        classes.append(CudaScaler)
    except ImportError:
        pass
    for cls in classes:
        orig = cls.__dict__.get("unscale_")
        if orig is None or getattr(orig, "_spillway", False):
            continue  # inherited (torch 2.x's torch.cuda.amp), or wrapped already

        def unscale_(self, optimizer, _orig=orig):
            before = getattr(optimizer, "_grads_unscaling", None)
            if before is not None:
                before()
            r = _orig(self, optimizer)
            after = getattr(optimizer, "_grads_unscaled", None)
            if after is not None:
                after()
            return r
        unscale_._spillway = True
        unscale_.__doc__, unscale_.__name__ = orig.__doc__, orig.__name__
        cls.unscale_ = unscale_


class PassedScaler:
    """The GradScaler as step(grad_scaler=...) gets it (torch 1.13 to 2.15
    pass it to an optimizer with _step_supports_amp_scaling): from its
    record of opt, whether unscale_(opt) already ran this iteration (the
    gradients in .grad are unscaled) and if so whether it found inf/nan;
    its scale; and a way to tell it what spillway's check found."""

    def __init__(self, scaler, opt):
        try:
            from torch.amp.grad_scaler import OptState  # torch 2.x (torch.cuda.amp's is an alias)
        except ImportError:
            from torch.cuda.amp.grad_scaler import OptState  # torch 1.13
        self.scaler, self.opt = scaler, opt
        st = scaler._per_optimizer_states[id(opt)]
        self.unscaled = st["stage"] is OptState.UNSCALED
        self.found_inf = self.unscaled and sum(float(v.item()) for v in st["found_inf_per_device"].values()) > 0

    def scale(self):
        """The scale the loss was multiplied by (a float; syncs with the device)."""
        s = self.scaler._get_scale_async()
        if s is None:
            raise RuntimeError("OffloadAdamW.step(grad_scaler=...): the GradScaler has no scale yet "
                               "(call scaler.scale(loss) before backward)")
        return float(s.item())

    def record(self, nonfinite):
        """Tells GradScaler what spillway's fused check found, so that
        scaler.update() backs off or grows the scale as it would have."""
        st = self.scaler._per_optimizer_states[id(self.opt)]
        dev = self.scaler._scale.device
        st["found_inf_per_device"] = {dev: torch.full((1,), 1.0 if nonfinite else 0.0,
                                                      dtype=torch.float32, device=dev)}


class AttributeScaler:
    """The GradScaler as its newer contract gives it (what torch's GradScaler
    does for a step() without a grad_scaler parameter, e.g. one wrapped by
    accelerate): before step() it has checked p.grad for inf/nan itself
    (unscale_ or a check at scale 1) and set opt.grad_scale (None once
    unscale_ ran) and opt.found_inf. It reads found_inf after step(), so
    there is nothing to tell it: its own check saw the gradients spillway
    applies, all of them in p.grad (offloaded parameters are refused)."""

    def __init__(self, opt):
        gs = opt.grad_scale
        self.unscaled = gs is None
        self.found_inf = float(opt.found_inf) > 0
        self._scale = None if gs is None else float(gs)

    def scale(self):
        return self._scale

    def record(self, nonfinite):
        pass


class AmpMixin:
    """OffloadAdamW's clipping and loss-scaling methods."""

    def _offloaded_names(self):
        """The offloaded parameters' names, three and a count ("" for none):
        their gradients never reach .grad, where a GradScaler looks."""
        names = [e.name for e in self._entries if is_offloaded(self, e)]
        return ", ".join(names[:3]) + (" and %d more" % (len(names) - 3) if len(names) > 3 else "")

    def _grads_unscaling(self):
        """GradScaler.unscale_(self) is about to run (watch_unscale): it can
        only reach gradients in p.grad."""
        offloaded = self._offloaded_names()
        if offloaded:
            raise RuntimeError("OffloadAdamW: GradScaler.unscale_(opt) cannot unscale the gradients of offloaded "
                               "parameters (%s): they went to spillway in backward and were never in .grad. "
                               "Call scaler.step(opt) without unscale_ (spillway unscales them in its own pass) "
                               "and clip with OffloadAdamW(max_grad_norm=)" % offloaded)

    def _grads_unscaled(self):
        """GradScaler.unscale_(self) divided p.grad in place, which torch 2.x
        does without a new _version: every gradient handed over is taken
        again from p.grad at the next settle (mode='exact'; in overlapped
        mode Adam already ran, and step() says the gradient changed)."""
        for e in self._entries:
            if e.src is not None and e.p.grad is e.src:
                e.src_version = None

    def _attribute_scaler(self):
        """The AttributeScaler of this step, unless offloaded parameters'
        gradients (never in p.grad) would escape the GradScaler's check."""
        offloaded = self._offloaded_names()
        if offloaded:
            raise RuntimeError("OffloadAdamW: this GradScaler checked only .grad for inf/nan (it set "
                               "optimizer.found_inf; step() was called without grad_scaler=), and the "
                               "gradients of offloaded parameters (%s) went to spillway in backward instead: "
                               "its scale would never back off. Call step() as GradScaler.step(opt) does for "
                               "an unwrapped optimizer, or use OffloadAdamW(loss_scale='dynamic')" % offloaded)
        return AttributeScaler(self)

    def _step_scaled(self, sc):
        """step() under a GradScaler: sc a PassedScaler or an AttributeScaler."""
        if self.mode != "exact":
            raise RuntimeError("OffloadAdamW: GradScaler needs mode='exact': a step with inf/nan "
                               "gradients must be skipped before Adam runs, and mode='overlapped' "
                               "runs it during backward")
        if self._dynamic:
            raise RuntimeError("OffloadAdamW: loss_scale='dynamic' and a GradScaler both scale the "
                               "loss; use one of them")
        if not self._opt.can("spw_optimizer_set_loss_scale"):
            raise NotImplementedError("OffloadAdamW: GradScaler needs spw_optimizer_set_loss_scale() "
                                      "in libspillway, which %s lacks" % L.library_path())
        unscaled, found_inf = sc.unscaled, sc.found_inf
        if unscaled:
            # A scaler whose unscale_ the wrapper does not see (a subclass
            # with its own) divided .grad only: offloaded parameters'
            # gradients are still scaled in spillway.
            self._grads_unscaling()
        if self._ended is not None:
            if not unscaled:
                raise RuntimeError("OffloadAdamW: clip_grad_norm_() ran on gradients GradScaler had "
                                   "not unscaled; call scaler.unscale_(opt) before it")
            self._finish_clipped()
            return

        def work():
            if found_inf:
                # unscale_ found inf/nan: torch skips the step. Whatever was
                # handed over is dropped, and nothing is left half-open.
                if self._in_step:
                    for e in self._entries:
                        self._grad_none(e)
                    self._finish(self._end())
                return
            if not self._in_step and all(grad_of(self, e) is None for e in self._entries):
                sc.record(False)
                return
            self._open_step()
            self._settle()
            self._opt.set_loss_scale(1.0 if unscaled else sc.scale())
            res = self._end()
            if not unscaled:
                sc.record(res.nonfinite)
            self._finish(res)
        try:
            done = _persist.ride(self, work)
        except RewoundError:
            if not unscaled:
                sc.record(False)  # so that scaler.update() may run before the loop goes back
            raise
        if done is _persist.COMMITTED and not unscaled:
            sc.record(False)  # committed, so not skipped (a skipped one is redone)

    def _end_clipped(self, max_norm):
        """Begins the step (unless backward did), settles the gradients and
        ends it clipped to max_norm; returns the StepResult."""
        self._open_step()
        self._settle()
        self._opt.set_clip(max_norm)
        try:
            return self._end()
        finally:
            self._opt.set_clip(float(self.max_grad_norm or 0.0))

    def _finish_clipped(self):
        """step() after clip_grad_norm_ ended the step: waits for its
        updates. After a daemon restart meanwhile the step is redone in the
        taken-over session from p.grad, clipped to the same max_norm (the
        same gradients give the same norm), or found committed."""
        self._check_since_end("clip_grad_norm_()")
        res, max_norm = self._ended, self._ended_max_norm
        _persist.ride(self, lambda: self._finish(res), lambda: self._finish(self._end_clipped(max_norm)))

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm, norm_type=2.0, error_if_nonfinite=False):
        """As torch.nn.utils.clip_grad_norm_(params, max_norm) on this
        optimizer's parameters (exact mode): returns the total L2 norm of the
        gradients, as a tensor, computed in spillway's own pass over them.
        The clipping is applied inside spillway's update: p.grad is left as
        it is, and the step is ended here (step() then only waits), so change
        no gradient between this and step()."""
        max_norm = float(max_norm)
        if float(norm_type) != 2.0:
            raise ValueError("OffloadAdamW.clip_grad_norm_: only norm_type=2 (spillway sums squares)")
        if not (max_norm > 0 and math.isfinite(max_norm)):
            raise ValueError("OffloadAdamW.clip_grad_norm_: max_norm must be finite and > 0, not %r"
                             % max_norm)
        if self.mode != "exact":
            raise RuntimeError("OffloadAdamW.clip_grad_norm_ needs mode='exact': mode='overlapped' "
                               "runs Adam during backward, before the global norm is known "
                               "(clip_coef= clips by a fixed coefficient)")
        self._usable()
        if not self._opt.can("spw_optimizer_set_clip"):
            raise NotImplementedError("OffloadAdamW.clip_grad_norm_ needs spw_optimizer_set_clip() "
                                      "in libspillway, which %s lacks" % L.library_path())
        if self._ended is not None:
            raise RuntimeError("OffloadAdamW.clip_grad_norm_: called twice before step()")
        dev = self._entries[0].p.device
        if not self._in_step and all(grad_of(self, e) is None for e in self._entries):
            return torch.zeros((), device=dev)
        res = _persist.ride(self, lambda: self._end_clipped(max_norm))  # redone after a daemon restart
        if res is _persist.COMMITTED:
            raise RuntimeError("OffloadAdamW.clip_grad_norm_: spillwayd went away and came back with step %d "
                               "committed, the step this call was ending, so its gradient norm is lost; the "
                               "model's parameters hold that step's weights: go on with the data of step %d "
                               "(without step())" % (self._step_no, self._step_no + 1))
        self._ended, self._ended_max_norm = res, max_norm
        after_early_end(self)
        if error_if_nonfinite and not math.isfinite(res.grad_norm):
            raise RuntimeError("The total norm of order 2.0 for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped. To disable this error and "
                               "scale the gradients by the non-finite norm anyway, set "
                               "`error_if_nonfinite=False`")
        return torch.tensor(res.grad_norm, dtype=torch.float32, device=dev)

    # ------------------------------------------------------------ loss scale

    @property
    def loss_scale(self):
        """The loss scale of the next step (1.0 when none is set)."""
        return self._scale

    def scale_loss(self, loss):
        """loss * loss_scale: backward on this with loss_scale set."""
        return loss * self._scale
