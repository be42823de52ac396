# SPDX-License-Identifier: MIT
"""Loss scaling: GradScaler's optimizer side and OffloadAdamW's own dynamic
loss scale, with inf/nan steps skipped.

torch 1.13's torch.cuda.amp.GradScaler is CUDA-only (it disables itself
without CUDA, and two of its kernels have no CPU version), and this test
runs on the CPU. CpuGradScaler is torch.amp.GradScaler("cpu") where torch
has one (2.3 and later), else a stand-in: GradScaler itself (its state
machine, unscale_, step and the _step_supports_amp_scaling dispatch are
torch's code) with scale(), the unscale kernel and update() written in
Python to the same policy. What is tested is the contract between
GradScaler and the optimizer: step(grad_scaler=...) with gradients still
scaled (spillway unscales, checks and skips in its own pass, and reports
found_inf so update() backs off), and with unscale_ done before (then
clipping in between). The same loops run with torch.optim.AdamW, which
GradScaler drives the ordinary way; parameters must agree after every
step (torch.allclose(rtol=1e-5, atol=1e-6)) and so must the scales.
"""
import copy
import inspect
import math
import unittest

import spwtest  # noqa: F401  (import path)
import torch
import torch.nn as nn
from torch.cuda.amp import GradScaler
from spillway.torch import OffloadAdamW

RTOL, ATOL = 1e-5, 1e-6
INF_STEPS = (2, 7)


def CpuGradScaler(**kw):
    """A GradScaler on the CPU: torch's own where it has one (torch >= 2.3:
    torch.amp.GradScaler("cpu")), else the stand-in below."""
    try:
        return torch.amp.GradScaler("cpu", **kw)
    except (AttributeError, TypeError):
        return StandInGradScaler(**kw)


def OwnUnscaleScaler(**kw):
    """CpuGradScaler's class with an unscale_ of its own that does not call
    GradScaler's (as FSDP's ShardedGradScaler has one): spillway's wrapper of
    GradScaler.unscale_ does not see it."""
    base = type(CpuGradScaler())

    class OwnUnscale(base):
        def unscale_(self, optimizer):
            try:
                from torch.amp.grad_scaler import OptState
            except ImportError:
                from torch.cuda.amp.grad_scaler import OptState
            st = self._per_optimizer_states[id(optimizer)]
            inv = self._scale.double().reciprocal().float()
            st["found_inf_per_device"] = self._unscale_grads_(optimizer, inv, torch.zeros(1), False)
            st["stage"] = OptState.UNSCALED
    try:
        return OwnUnscale("cpu", **kw)  # torch.amp.GradScaler's signature
    except TypeError:
        return OwnUnscale(**kw)  # the stand-in's


class StandInGradScaler(GradScaler):
    def __init__(self, **kw):
        super().__init__(enabled=False, **kw)  # would warn and disable itself on a CPU host
        self._enabled = True
        self._init_scale = kw.get("init_scale", 2.0 ** 16)
        self._scale = None
        self._growth_factor = kw.get("growth_factor", 2.0)
        self._backoff_factor = kw.get("backoff_factor", 0.5)
        self._growth_interval = kw.get("growth_interval", 2000)
        self._init_growth_tracker = 0
        self._growth_tracker = None
        from collections import defaultdict
        from torch.cuda.amp.grad_scaler import _refresh_per_optimizer_state
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def scale(self, outputs):
        if self._scale is None:
            self._lazy_init_scale_growth_tracker(outputs.device)
        return outputs * self._scale

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        with torch.no_grad():
            for g in optimizer.param_groups:
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    if not bool(torch.isfinite(p.grad).all()):
                        found_inf.fill_(1.0)
                    # In place and, as torch 2.x's unscale kernel does,
                    # without a new p.grad._version (.data has its own).
                    p.grad.data.mul_(inv_scale)
        return {found_inf.device: found_inf}

    def step(self, optimizer, *args, **kwargs):
        # torch 2.x's newer contract, for an optimizer with
        # _step_supports_amp_scaling whose step() takes no grad_scaler=
        # (wrapped, as accelerate wraps it): the inf/nan check of .grad at
        # scale 1 unless unscale_ ran, then optimizer.grad_scale and
        # optimizer.found_inf for step() to read. (torch 1.13 passes
        # grad_scaler= to any such step().)
        if (getattr(optimizer, "_step_supports_amp_scaling", False)
                and "grad_scaler" not in inspect.signature(optimizer.step).parameters):
            from torch.cuda.amp.grad_scaler import OptState
            st = self._per_optimizer_states[id(optimizer)]
            if st["stage"] is OptState.READY:
                st["found_inf_per_device"] = self._unscale_grads_(optimizer, torch.ones(1), torch.zeros(1), True)
            optimizer.grad_scale = None if st["stage"] is OptState.UNSCALED else self._scale
            optimizer.found_inf = sum(st["found_inf_per_device"].values())
            r = optimizer.step(*args, **kwargs)
            st["stage"] = OptState.STEPPED
            del optimizer.grad_scale, optimizer.found_inf
            return r
        return super().step(optimizer, *args, **kwargs)

    def update(self, new_scale=None):
        found = sum(float(f.item()) for st in self._per_optimizer_states.values()
                    for f in st["found_inf_per_device"].values())
        assert self._per_optimizer_states, "No inf checks were recorded prior to update."
        if found:
            self._scale.mul_(self._backoff_factor)
            self._growth_tracker.zero_()
        else:
            self._growth_tracker.add_(1)
            if int(self._growth_tracker.item()) == self._growth_interval:
                self._scale.mul_(self._growth_factor)
                self._growth_tracker.zero_()
        from collections import defaultdict
        from torch.cuda.amp.grad_scaler import _refresh_per_optimizer_state
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)


def net():
    torch.manual_seed(31)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))


class Scaler(spwtest.DaemonCase):
    def loop(self, variant):
        a = net()
        b = copy.deepcopy(a)
        oa = OffloadAdamW(a.named_parameters(), lr=1e-2, mode="exact", socket=self.d.control)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
        if variant == "wrapped":
            # as accelerate wraps step() under a GradScaler: the scaler then
            # passes no grad_scaler= but sets grad_scale and found_inf
            for o in (oa, ob):
                o.step = (lambda f: lambda *a, **k: f(*a, **k))(o.step)
        make = OwnUnscaleScaler if variant == "own-unscale" else CpuGradScaler
        sa, sb = make(init_scale=2.0 ** 10, growth_interval=3), make(init_scale=2.0 ** 10, growth_interval=3)
        gen = torch.Generator().manual_seed(32)
        worst = 0.0
        try:
            for step in range(12):
                x, y = torch.randn(8, 8, generator=gen), torch.randn(8, 2, generator=gen)
                before = [p.detach().clone() for p in a.parameters()]
                scale_before = float(sa.get_scale())
                for m, o, s in ((a, oa, sa), (b, ob, sb)):
                    o.zero_grad()
                    loss = nn.functional.mse_loss(m(x), y)
                    if step in INF_STEPS:
                        loss = loss * math.inf
                    s.scale(loss).backward()
                    if variant not in ("fused", "wrapped"):
                        s.unscale_(o)
                        if variant == "clip-opt" and o is oa:
                            oa.clip_grad_norm_(0.05)
                        elif variant != "unscale":
                            nn.utils.clip_grad_norm_(m.parameters(), 0.05)
                    s.step(o)
                    s.update()
                self.assertEqual(float(sa.get_scale()), float(sb.get_scale()), "step %d" % step)
                if step in INF_STEPS:
                    self.assertLess(float(sa.get_scale()), scale_before)
                    for p, q in zip(a.parameters(), before):
                        self.assertTrue(torch.equal(p, q), "a skipped step moved a parameter")
                    # fused: spillway's own check skipped it; otherwise the
                    # scaler's check before step() did
                    self.assertTrue(oa.last_result is None or oa.last_result.skipped
                                    or variant != "fused")
                elif variant in ("fused", "wrapped"):
                    self.assertFalse(oa.last_result.skipped)
                    self.assertEqual(oa.last_result.loss_scale, scale_before)
                for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
                    d = (pa - pb).abs().max().item()
                    worst = max(worst, d)
                    self.assertTrue(torch.allclose(pa, pb, rtol=RTOL, atol=ATOL),
                                    "%s step %d %s: %g" % (variant, step, n, d))
            self.assertGreater(float(sa.get_scale()), 2.0 ** 9, "the scale never grew back")
            for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
                self.assertEqual(float(oa.state[pa]["step"]), float(ob.state[pb]["step"]))
                # Adam's step hardly moves when every gradient is scaled
                # alike; its moments do: none was taken in scaled.
                for k in ("exp_avg", "exp_avg_sq"):
                    self.assertTrue(torch.allclose(oa.state[pa][k], ob.state[pb][k], rtol=1e-4, atol=1e-9),
                                    "%s %s %s: %g" % (variant, n, k, (oa.state[pa][k] - ob.state[pb][k]).abs().max()))
        finally:
            oa.close()
        print("parity GradScaler (%s): max |offload - torch| = %.3g" % (variant, worst))

    def test_fused_unscale(self):
        self.loop("fused")

    def test_wrapped_step(self):
        self.loop("wrapped")

    def test_own_unscale_then_step(self):
        self.loop("own-unscale")

    def test_unscale_then_step(self):
        self.loop("unscale")

    def test_unscale_then_torch_clip(self):
        self.loop("clip-torch")

    def test_unscale_then_opt_clip(self):
        self.loop("clip-opt")

    def test_overlapped_refused(self):
        m = net()
        o = OffloadAdamW(m.parameters(), socket=self.d.control)
        s = CpuGradScaler()
        try:
            s.scale(m(torch.randn(2, 8)).sum()).backward()
            with self.assertRaises(RuntimeError) as cm:
                s.step(o)
            self.assertIn("mode='exact'", str(cm.exception))
        finally:
            o.close()


class Fp16Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(33)
        self.w = nn.Parameter(torch.randn(96).half())
        self.b = nn.Parameter(torch.randn(96).half())

    def forward(self, x):
        y = x * self.w + self.b
        return (y * y).float().mean()


class DynamicLossScale(spwtest.DaemonCase):
    """OffloadAdamW(loss_scale='dynamic') on an fp16 model, against
    torch.optim.AdamW on an fp32 master copy fed the same fp16 gradients
    with GradScaler's policy written out."""

    def test_fp16_dynamic(self):
        m = Fp16Model()
        master = [nn.Parameter(p.detach().float().clone()) for p in m.parameters()]
        ref = torch.optim.AdamW(master, lr=1e-3)
        opt = OffloadAdamW(m.named_parameters(), lr=1e-3, mode="exact", loss_scale="dynamic",
                           init_loss_scale=2.0 ** 12, growth_interval=3, socket=self.d.control)
        scale, good, skipped = 2.0 ** 12, 0, 0
        gen = torch.Generator().manual_seed(34)
        worst = 0.0
        try:
            for step in range(14):
                self.assertEqual(opt.loss_scale, scale, "step %d" % step)
                x = torch.randn(96, generator=gen).half()
                opt.zero_grad()
                loss = m(x)
                if step in (3, 4, 9):
                    loss = loss * 1e30  # overflows once scaled and cast
                opt.scale_loss(loss).backward()
                grads = [p.grad.float() for p in m.parameters()]
                before = [p.detach().clone() for p in m.parameters()]
                opt.step()
                if all(bool(torch.isfinite(g).all()) for g in grads):
                    for q, g in zip(master, grads):
                        q.grad = g / scale
                    ref.step()
                    good += 1
                    if good == 3:
                        scale, good = scale * 2, 0
                    self.assertFalse(opt.last_result.skipped)
                else:
                    skipped += 1
                    scale, good = scale / 2, 0
                    self.assertTrue(opt.last_result.skipped, "step %d not skipped" % step)
                    for p, q in zip(m.parameters(), before):
                        self.assertTrue(torch.equal(p, q))
                for (n, p), q in zip(m.named_parameters(), master):
                    got = opt.state[p]["master"] if opt.state[p] else p.detach().float()
                    d = (got - q.detach()).abs().max().item()
                    worst = max(worst, d)
                    self.assertTrue(torch.allclose(got, q.detach(), rtol=RTOL, atol=ATOL),
                                    "step %d %s master: %g" % (step, n, d))
                    self.assertTrue(torch.equal(p.detach(), q.detach().half()),
                                    "step %d %s: fp16 copy is not the rounded master" % (step, n))
            self.assertEqual(skipped, 3)
            self.assertEqual(float(opt.state[m.w]["step"]), 14 - 3)
        finally:
            opt.close()
        print("parity fp16 dynamic loss scale (masters): max |offload - torch| = %.3g" % worst)

    def test_dynamic_needs_exact(self):
        with self.assertRaises(ValueError) as cm:
            OffloadAdamW(Fp16Model().parameters(), loss_scale="dynamic", socket=self.d.control)
        self.assertIn("mode='exact'", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
