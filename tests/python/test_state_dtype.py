# SPDX-License-Identifier: MIT
"""OffloadAdamW(state_dtype="bf16"): moments kept as bf16 in spillway.

Against a torch twin that runs kernels.h's AdamW one fp32 operation at a
time with its moments rounded to bf16 after every update (torch's fp32 ->
bfloat16 cast rounds to nearest even, as the kernels do): the parameters
are the same bits, and the moments state_dict returns are fp32 tensors
holding exactly the twin's bf16 values. fp32 state (the default) keeps moments that are
not bf16 values. load_state_dict rounds the moments it pushes in. Bad
state_dtype values are refused by OffloadAdamW and spillway.Optimizer.
"""
import copy
import math
import unittest

import spwtest
import spillway
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW

LR, B1, B2, EPS, WD = 1e-2, 0.9, 0.999, 1e-8, 0.01


def model():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(12, 40), nn.Tanh(), nn.Linear(40, 5))


def f32(x):
    """x rounded once to fp32, as a C float."""
    return torch.tensor(x, dtype=torch.float64).float().item()


class Bf16Twin:
    """kernels.h's AdamW, one fp32 operation at a time (separate torch ops,
    so nothing is fused), the constants as spw_adamw_prepare() makes them,
    and the moments stored as bfloat16 (nearest even) after each update."""

    def __init__(self, params):
        self.params = list(params)
        self.m = [torch.zeros_like(p, dtype=torch.bfloat16) for p in self.params]
        self.v = [torch.zeros_like(p, dtype=torch.bfloat16) for p in self.params]
        self.t = 0

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        self.t += 1
        lr, b1, b2, wd = f32(LR), f32(B1), f32(B2), f32(WD)
        omb1, omb2, decay = f32(1.0 - b1), f32(1.0 - b2), f32(1.0 - lr * wd)
        nss = f32(-(lr / (1.0 - b1 ** self.t)))
        ibc = f32(1.0 / math.sqrt(1.0 - b2 ** self.t))
        for i, p in enumerate(self.params):
            g = p.grad
            m0, v0 = self.m[i].float(), self.v[i].float()
            m = m0 + omb1 * (g - m0)
            v = v0 * b2 + (omb2 * g) * g
            d = torch.sqrt(v) * ibc + f32(EPS)
            p.copy_(p * decay + nss * (m / d))
            self.m[i], self.v[i] = m.bfloat16(), v.bfloat16()


def train(m, opt, steps, gen):
    for _ in range(steps):
        x, y = torch.randn(16, 12, generator=gen), torch.randn(16, 5, generator=gen)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()


def is_bf16(t):
    return torch.equal(t.bfloat16().float(), t)


class StateDtype(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=False)

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0

    def test_bf16_matches_twin(self):
        a = model()
        twin = copy.deepcopy(a)
        oa = OffloadAdamW(a.parameters(), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD,
                          socket=self.d.control, state_dtype="bf16")
        ot = Bf16Twin(twin.parameters())
        try:
            train(a, oa, 20, torch.Generator().manual_seed(1))
            train(twin, ot, 20, torch.Generator().manual_seed(1))
            for pa, pb in zip(a.parameters(), twin.parameters()):
                self.assertTrue(torch.equal(pa, pb), "params differ by %g" % (pa - pb).abs().max().item())
            sd = oa.state_dict()
            for i, _ in enumerate(ot.params):
                st = sd["state"][i]
                for key, want in (("exp_avg", ot.m[i]), ("exp_avg_sq", ot.v[i])):
                    got = st[key]
                    self.assertEqual(got.dtype, torch.float32, key)
                    self.assertTrue(is_bf16(got), "%s of %d holds values that are not bf16" % (key, i))
                    self.assertTrue(torch.equal(got, want.float()),
                                    "%s of %d differs by %g" % (key, i, (got - want.float()).abs().max()))
        finally:
            oa.close()

    def test_fp32_default_is_not_rounded(self):
        a = model()
        oa = OffloadAdamW(a.parameters(), lr=LR, socket=self.d.control)
        try:
            train(a, oa, 3, torch.Generator().manual_seed(1))
            sd = oa.state_dict()
            self.assertFalse(all(is_bf16(s["exp_avg"]) for s in sd["state"].values()))
        finally:
            oa.close()

    def test_load_rounds(self):
        a = model()
        b = copy.deepcopy(a)
        ref = torch.optim.AdamW(b.parameters(), lr=LR)
        train(b, ref, 4, torch.Generator().manual_seed(2))
        sd = ref.state_dict()
        oa = OffloadAdamW(a.parameters(), lr=LR, socket=self.d.control, state_dtype="bf16")
        try:
            with torch.no_grad():
                for pa, pb in zip(a.parameters(), b.parameters()):
                    pa.copy_(pb)
            oa.load_state_dict(sd)
            back = oa.state_dict()
            for k, st in sd["state"].items():
                for key in ("exp_avg", "exp_avg_sq"):
                    self.assertTrue(torch.equal(back["state"][k][key], st[key].bfloat16().float()), key)
        finally:
            oa.close()

    def test_refusals(self):
        a = model()
        with self.assertRaises(ValueError):
            OffloadAdamW(a.parameters(), socket=self.d.control, state_dtype="int4")
        s = spillway.Session("state/refuse", 8 << 20, socket=self.d.control)
        try:
            g = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}
            with self.assertRaises(ValueError):
                spillway.Optimizer(s, [g], device="host", state_dtype="fp16")
            o = spillway.Optimizer(s, [g], device="host", state_dtype="bf16")
            o.close()
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
