# SPDX-License-Identifier: MIT
"""OffloadAdamW where torch.optim.AdamW code expects torch.optim.AdamW.

- torch's flags are accepted when off (amsgrad=False, foreach=None, ...)
  and refused, naming the flag, when on;
- opt.state[p] shows step, exp_avg and exp_avg_sq (equal to torch's), as a
  copy;
- OneCycleLR with cycle_momentum (betas change every step) equals torch,
  without rebuilding spillway's state;
- fp16 and bf16 models: state_dict keeps fp32 moments (torch's fp16 state
  would flush a small exp_avg_sq to 0), and a run resumed from it is
  bit-identical to one that never stopped.
"""
import copy
import unittest

import spwtest  # noqa: F401  (import path)
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW

RTOL, ATOL = 1e-5, 1e-6


def net():
    torch.manual_seed(21)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 2))


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)) for _ in range(n)]


class DropIn(spwtest.DaemonCase):
    def test_flags(self):
        m = net()
        opt = OffloadAdamW(m.parameters(), 1e-3, (0.9, 0.999), 1e-8, 1e-2, False, maximize=False,
                           foreach=None, capturable=False, differentiable=False, fused=None,
                           socket=self.d.control)
        opt.close()
        for flag in ("amsgrad", "maximize", "foreach", "capturable", "differentiable", "fused"):
            with self.assertRaises(ValueError) as cm:
                OffloadAdamW(m.parameters(), socket=self.d.control, **{flag: True})
            self.assertIn(flag + "=True", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            o = OffloadAdamW(m.parameters(), socket=self.d.control)
            try:
                o.add_param_group({"params": [nn.Parameter(torch.zeros(2))], "amsgrad": True})
            finally:
                o.close()
        self.assertIn("amsgrad", str(cm.exception))

    def test_state_view(self):
        a = net()
        b = copy.deepcopy(a)
        oa = OffloadAdamW(a.parameters(), lr=1e-2, socket=self.d.control)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
        try:
            self.assertEqual(len(oa.state), 0)
            self.assertEqual(oa.state[a[0].weight], {})
            for x, y in data(5, 22):
                for m, o in ((a, oa), (b, ob)):
                    o.zero_grad()
                    nn.functional.mse_loss(m(x), y).backward()
                    o.step()
            self.assertEqual(len(oa.state), 4)
            for pa, pb in zip(a.parameters(), b.parameters()):
                self.assertIn(pa, oa.state)
                sa, sb = oa.state[pa], ob.state[pb]
                self.assertEqual(float(sa["step"]), float(sb["step"]))
                for k in ("exp_avg", "exp_avg_sq"):
                    self.assertEqual(sa[k].shape, pa.shape)
                    self.assertTrue(torch.allclose(sa[k], sb[k], rtol=RTOL, atol=1e-8), k)
            # a copy: writing into it changes nothing
            s = oa.state[a[0].weight]
            s["exp_avg"].fill_(123.0)
            self.assertFalse(torch.equal(oa.state[a[0].weight]["exp_avg"], s["exp_avg"]))
            self.assertEqual({id(p) for p in oa.state}, {id(p) for p in a.parameters()})
        finally:
            oa.close()

    def test_any_parameter_name(self):
        # Module names are any string without '.': quotes, backslashes,
        # spaces and non-ASCII reach spillway's tensor names, whose rule
        # (printable ASCII, no quote, backslash or '..') they must not break.
        a = nn.Sequential()
        a.add_module('q"uote', nn.Linear(4, 3))
        a.add_module("back\\slash dir/", nn.Linear(3, 3))
        a.add_module("\u00e9t\u00e9", nn.Linear(3, 2))
        b = copy.deepcopy(a)
        # (name, tensor) pairs may carry any name at all, '..' included.
        named = [(n if i else "../" + n + "..", p) for i, (n, p) in enumerate(a.named_parameters())]
        oa = OffloadAdamW(named, lr=1e-2, socket=self.d.control)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
        try:
            for x, y in data(3, 24):
                x = x[:, :4]
                for m, o in ((a, oa), (b, ob)):
                    o.zero_grad()
                    nn.functional.mse_loss(m(x), y).backward()
                    o.step()
            for pa, pb in zip(a.parameters(), b.parameters()):
                self.assertTrue(torch.allclose(pa, pb, rtol=RTOL, atol=ATOL))
        finally:
            oa.close()

    def test_trainer_threads(self):
        # The pool fits around torch's own threads (docs/pipeline.md,
        # Threading policy); a value the user set is left alone.
        import os
        saved = os.environ.pop("SPILLWAY_TRAINER_THREADS", None)
        try:
            OffloadAdamW(net().parameters(), socket=self.d.control).close()
            self.assertEqual(os.environ["SPILLWAY_TRAINER_THREADS"], str(torch.get_num_threads()))
            os.environ["SPILLWAY_TRAINER_THREADS"] = "7"
            OffloadAdamW(net().parameters(), socket=self.d.control).close()
            self.assertEqual(os.environ["SPILLWAY_TRAINER_THREADS"], "7")
        finally:
            os.environ.pop("SPILLWAY_TRAINER_THREADS", None)
            if saved is not None:
                os.environ["SPILLWAY_TRAINER_THREADS"] = saved

    def test_one_cycle_cycle_momentum(self):
        a = net()
        b = copy.deepcopy(a)
        oa = OffloadAdamW(a.parameters(), lr=1e-2, weight_decay=0.05, socket=self.d.control)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.05)
        kw = dict(max_lr=2e-2, total_steps=20, cycle_momentum=True, base_momentum=0.8,
                  max_momentum=0.95)
        sa = torch.optim.lr_scheduler.OneCycleLR(oa, **kw)
        sb = torch.optim.lr_scheduler.OneCycleLR(ob, **kw)
        built = oa._opt
        betas = set()
        worst = 0.0
        try:
            for step, (x, y) in enumerate(data(20, 23)):
                for m, o, s in ((a, oa, sa), (b, ob, sb)):
                    o.zero_grad()
                    nn.functional.mse_loss(m(x), y).backward()
                    o.step()
                    s.step()
                    # a weight-decay schedule too
                    o.param_groups[0]["weight_decay"] = 0.05 * (1 + step % 3)
                betas.add(oa.param_groups[0]["betas"][0])
                for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
                    d = (pa - pb).abs().max().item()
                    worst = max(worst, d)
                    self.assertTrue(torch.allclose(pa, pb, rtol=RTOL, atol=ATOL),
                                    "step %d %s: %g" % (step + 1, n, d))
            self.assertGreater(len(betas), 10, "beta1 did not cycle: the test proves nothing")
            self.assertIs(oa._opt, built, "changing betas/weight_decay rebuilt spillway's state")
        finally:
            oa.close()
        print("parity OneCycleLR cycle_momentum + weight-decay schedule: max |offload - torch| = %.3g"
              % worst)


class Elementwise(nn.Module):
    """Runs in fp16 on the CPU (no fp16 matmul there in torch 1.13)."""

    def __init__(self, dtype):
        super().__init__()
        torch.manual_seed(24)
        self.w = nn.Parameter(torch.randn(64).to(dtype))
        self.b = nn.Parameter(torch.randn(64).to(dtype))

    def forward(self, x):
        y = x * self.w + self.b
        return y * y


class LowPrecisionStateDict(spwtest.DaemonCase):
    def steps(self, m, opt, n, seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(n):
            x = torch.randn(64, generator=g).to(m.w.dtype)
            opt.zero_grad()
            # small gradients: exp_avg_sq ~ 1e-10, below fp16's smallest subnormal
            (m(x).float().sum() * 1e-4).backward()
            opt.step()

    def round_trip(self, dtype):
        a = Elementwise(dtype)
        b = copy.deepcopy(a)
        oa = OffloadAdamW(a.named_parameters(), lr=1e-3, socket=self.d.control)
        try:
            self.steps(a, oa, 6, 25)
            sd = oa.state_dict()
            for k, s in sd["state"].items():
                self.assertEqual(s["exp_avg_sq"].dtype, torch.float32)
                self.assertEqual(s["exp_avg"].dtype, torch.float32)
                self.assertEqual(s["master"].dtype, torch.float32)
                self.assertTrue(bool((s["exp_avg_sq"] > 0).all()), "exp_avg_sq flushed to 0")
            if dtype == torch.float16:
                self.assertTrue(bool((sd["state"][0]["exp_avg_sq"].half() == 0).any()),
                                "the moments would not underflow in fp16: the test proves nothing")
            # resume on a copy of the model, from the state_dict
            with torch.no_grad():
                for pb, pa in zip(b.parameters(), a.parameters()):
                    pb.copy_(pa)
            ob = OffloadAdamW(b.named_parameters(), lr=1e-3, socket=self.d.control)
            try:
                ob.load_state_dict(sd)
                self.steps(a, oa, 6, 26)
                self.steps(b, ob, 6, 26)
                for pa, pb in zip(a.parameters(), b.parameters()):
                    self.assertTrue(torch.equal(pa, pb), "%s: resumed run differs by %g"
                                    % (dtype, (pa.float() - pb.float()).abs().max().item()))
                for k in ("exp_avg", "exp_avg_sq", "master"):
                    self.assertTrue(torch.equal(oa.state[a.w][k], ob.state[b.w][k]), k)
            finally:
                ob.close()
        finally:
            oa.close()

    def test_fp16(self):
        self.round_trip(torch.float16)

    def test_bf16(self):
        self.round_trip(torch.bfloat16)


if __name__ == "__main__":
    unittest.main(verbosity=2)
