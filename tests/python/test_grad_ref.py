# SPDX-License-Identifier: MIT
"""OffloadAdamW(mode='exact') on CPU parameters reads the gradients by
reference (spillway._torch_gradref): no gradient store in the region.

Each test trains a model next to a copy of it with the store
(SPILLWAY_GRAD_BY_REFERENCE=0) and compares them bit for bit:
- after every step the parameters, at the end state_dict(); with
  max_grad_norm=, opt.clip_grad_norm_, GradScaler (fused, and unscale_ with
  torch's clip_grad_norm_, which changes p.grad after its hand-over), a
  parameter without a gradient in some steps;
- the session's region is smaller by the gradients' pages (and the
  window's gradient staging pages), and no gradient bytes are copied;
- not by reference: overlapped mode, a persistent session, the variable
  set to 0.
"""
import contextlib
import copy
import os
import unittest

import spwtest  # noqa: F401  (import path)
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW
from test_amp import CpuGradScaler

PAGE = 64 << 10
WINDOW = 4  # OffloadAdamW's default


@contextlib.contextmanager
def store():
    old = os.environ.get("SPILLWAY_GRAD_BY_REFERENCE")
    os.environ["SPILLWAY_GRAD_BY_REFERENCE"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["SPILLWAY_GRAD_BY_REFERENCE"]
        else:
            os.environ["SPILLWAY_GRAD_BY_REFERENCE"] = old


class Net(nn.Module):
    """70k+ weights (several 64 KiB pages), tiny biases, and a parameter
    that takes part only in odd steps (None gradient in the others)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.body = nn.Sequential(nn.Linear(24, 3000), nn.Tanh(), nn.Linear(3000, 4))
        self.odd = nn.Parameter(torch.linspace(-1, 1, 4))

    def forward(self, x, step):
        y = self.body(x)
        return y * self.odd if step % 2 else y


def batches(n):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(8, 24, generator=g), torch.randn(8, 4, generator=g)) for _ in range(n)]


class GradRef(spwtest.DaemonCase):
    def pair(self, **kw):
        a = Net()
        b = copy.deepcopy(a)
        oa = OffloadAdamW(a.parameters(), lr=1e-2, mode="exact", socket=self.d.control, page_size=PAGE, **kw)
        with store():
            ob = OffloadAdamW(b.parameters(), lr=1e-2, mode="exact", socket=self.d.control, page_size=PAGE, **kw)
        self.addCleanup(oa.close)
        self.addCleanup(ob.close)
        self.assertTrue(oa._grad_ref)
        self.assertFalse(ob._grad_ref)
        return a, oa, b, ob

    def train(self, variant, m, o, scaler, step, x, y):
        o.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(m(x, step), y)
        if scaler is None:
            loss.backward()
            if variant == "opt-clip":
                o.clip_grad_norm_(0.05)
            o.step()
            return
        scaler.scale(loss * (float("inf") if step == 3 else 1.0)).backward()
        if variant == "scaler-torch-clip":
            scaler.unscale_(o)
            nn.utils.clip_grad_norm_(m.parameters(), 0.05)  # p.grad changed after its hand-over
        scaler.step(o)
        scaler.update()

    def check(self, variant, **kw):
        a, oa, b, ob = self.pair(**kw)
        scalers = (None, None)
        if variant.startswith("scaler"):
            scalers = (CpuGradScaler(init_scale=2.0 ** 10), CpuGradScaler(init_scale=2.0 ** 10))
        for step, (x, y) in enumerate(batches(6), 1):
            self.train(variant, a, oa, scalers[0], step, x, y)
            with store():
                self.train(variant, b, ob, scalers[1], step, x, y)
            for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
                self.assertTrue(torch.equal(pa, pb), "%s step %d: %s differs" % (variant, step, n))
        sa, sb = oa.state_dict(), ob.state_dict()
        self.assertEqual(sorted(sa["state"]), sorted(sb["state"]))
        for k in sa["state"]:
            for s in ("step", "exp_avg", "exp_avg_sq"):
                self.assertTrue(torch.equal(torch.as_tensor(sa["state"][k][s]), torch.as_tensor(sb["state"][k][s])),
                                "%s: state %s %s" % (variant, k, s))
        self.assertEqual(oa.stats()["bytes_d2h"], 0)  # nothing copied
        self.assertGreater(ob.stats()["bytes_d2h"], 0)

    def test_max_grad_norm(self):
        self.check("plain", max_grad_norm=0.05)

    def test_opt_clip_grad_norm(self):
        self.check("opt-clip")

    def test_grad_scaler_fused(self):
        self.check("scaler-fused")

    def test_grad_scaler_unscale_torch_clip(self):
        self.check("scaler-torch-clip")

    def test_region_smaller_by_the_gradients(self):
        a, oa, b, ob = self.pair()
        grad_pages = sum(-(-p.numel() * 4 // PAGE) for p in a.parameters())
        ra, rb = oa.session.info()["region_bytes"], ob.session.info()["region_bytes"]
        self.assertEqual(rb - ra, (grad_pages + WINDOW) * PAGE)
        print("region: %d bytes with the store, %d by reference" % (rb, ra))

    def test_not_by_reference(self):
        m = Net()
        o = OffloadAdamW(m.parameters(), socket=self.d.control)  # overlapped: no store anyway
        self.assertFalse(o._grad_ref)
        o.close()
        o = OffloadAdamW(m.parameters(), mode="exact", socket=self.d.control, session="gr/persist",
                         persistent=True)
        self.assertFalse(o._grad_ref)  # a takeover finishes a step from the stored gradients
        o.close()
        with store():
            o = OffloadAdamW(m.parameters(), mode="exact", socket=self.d.control)
        self.assertFalse(o._grad_ref)
        o.close()


if __name__ == "__main__":
    unittest.main()
