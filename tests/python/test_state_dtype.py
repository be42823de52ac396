# SPDX-License-Identifier: MIT
"""OffloadAdamW(state_dtype="bf16"|"int8"): moments kept as bf16 or as
8-bit blockwise codes in spillway.

Against a torch twin that runs kernels.h's AdamW one fp32 operation at a
time with its moments rounded to bf16 after every update (torch's fp32 ->
bfloat16 cast rounds to nearest even, as the kernels do): the parameters
are the same bits, and the moments state_dict returns are fp32 tensors
holding exactly the twin's bf16 values. The same for int8 moments against
a twin that codes them as kernels/q8.h says (blocks of 256, one scale
each). fp32 state (the default) keeps moments that are
not bf16 values. load_state_dict rounds the moments it pushes in. A persistent session left
by a bf16 optimizer is refused to an fp32 one and taken over by a bf16
one. Bad state_dtype values are refused by OffloadAdamW and
spillway.Optimizer.
"""
import copy
import math
import os
import subprocess
import sys
import unittest

import spwtest
import spillway
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW

LR, B1, B2, EPS, WD = 1e-2, 0.9, 0.999, 1e-8, 0.01
HERE = os.path.dirname(os.path.abspath(__file__))


def model():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(12, 40), nn.Tanh(), nn.Linear(40, 5))


def sqrt32(x):
    """The correctly rounded fp32 square root, as the kernels' (IEEE) one:
    torch 2.x's CPU torch.sqrt on fp32 is not (one element in six off by
    an ulp on AVX2, torch 2.15); the double's square root rounded to fp32
    is (53 >= 2 * 24 + 2 bits)."""
    return torch.sqrt(x.double()).float()


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
            d = sqrt32(v) * ibc + f32(EPS)
            p.copy_(p * decay + nss * (m / d))
            self.m[i], self.v[i] = m.bfloat16(), v.bfloat16()


def fdiv(a, b):
    """a / b in fp32, as a C float division of float constants."""
    return (torch.tensor(a, dtype=torch.float32) / torch.tensor(b, dtype=torch.float32)).item()


class Q8:
    """kernels/q8.h's blockwise codes for one flattened moment (blocks of
    256 from element 0, as the chunks' are)."""

    def __init__(self, n, signed):
        self.n, self.signed = n, signed
        self.nb = -(-n // 256)
        self.codes = torch.zeros(self.nb * 256)
        self.scales = torch.zeros(self.nb)

    def decode(self):
        q = self.codes.view(self.nb, 256)
        s = self.scales.view(self.nb, 1)
        if self.signed:
            a = q.abs() * fdiv(1.0, 127.0)
            mag = (a * a) * s
            return torch.where(q < 0, -mag, mag).flatten()[:self.n]
        a = q * fdiv(1.0, 255.0)
        a2 = a * a
        return ((a2 * a2) * s).flatten()[:self.n]

    def encode(self, x):
        x = torch.cat([x.flatten(), torch.zeros(self.nb * 256 - self.n)]).view(self.nb, 256)
        self.scales = x.abs().amax(dim=1)
        s = self.scales.view(self.nb, 1)
        # One fp32 multiplier per block, no division per element. (A
        # tensor, not a scalar, divided: torch turns scalar / t into
        # reciprocal(t) * scalar, two roundings.)
        if self.signed:
            f = torch.round(sqrt32(x.abs()) * (torch.full_like(s, 127.0) / sqrt32(s)))
            q = torch.where(f >= 1, f.clamp(max=127.0), torch.zeros_like(f))
            q = torch.where(torch.signbit(x), -q, q)
        else:
            f = torch.round(sqrt32(sqrt32(x)) * (torch.full_like(s, 255.0) / sqrt32(sqrt32(s))))
            q = torch.where(f >= 1, f.clamp(max=255.0), torch.zeros_like(f))
        self.codes = q.flatten()


class Q8Twin(Bf16Twin):
    """The same update with int8 moments."""

    def __init__(self, params):
        super().__init__(params)
        self.mq = [Q8(p.numel(), True) for p in self.params]
        self.vq = [Q8(p.numel(), False) for p in self.params]

    @torch.no_grad()
    def step(self):
        self.t += 1
        lr, b1, b2, wd = f32(LR), f32(B1), f32(B2), f32(WD)
        omb1, omb2, decay = f32(1.0 - b1), f32(1.0 - b2), f32(1.0 - lr * wd)
        nss = f32(-(lr / (1.0 - b1 ** self.t)))
        ibc = f32(1.0 / math.sqrt(1.0 - b2 ** self.t))
        for i, p in enumerate(self.params):
            g = p.grad
            m0, v0 = self.mq[i].decode().view_as(p), self.vq[i].decode().view_as(p)
            m = m0 + omb1 * (g - m0)
            v = v0 * b2 + (omb2 * g) * g
            d = sqrt32(v) * ibc + f32(EPS)
            p.copy_(p * decay + nss * (m / d))
            self.mq[i].encode(m)
            self.vq[i].encode(v)


def train(m, opt, steps, gen):
    for _ in range(steps):
        x, y = torch.randn(16, 12, generator=gen), torch.randn(16, 5, generator=gen)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()


def is_bf16(t):
    return torch.equal(t.bfloat16().float(), t)


class StateDtype(spwtest.DaemonCase):
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

    def test_int8_matches_twin(self):
        a = model()
        twin = copy.deepcopy(a)
        oa = OffloadAdamW(a.parameters(), lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD,
                          socket=self.d.control, state_dtype="int8")
        ot = Q8Twin(twin.parameters())
        try:
            train(a, oa, 20, torch.Generator().manual_seed(1))
            train(twin, ot, 20, torch.Generator().manual_seed(1))
            for pa, pb in zip(a.parameters(), twin.parameters()):
                self.assertTrue(torch.equal(pa, pb), "params differ by %g" % (pa - pb).abs().max().item())
            sd = oa.state_dict()
            for i, p in enumerate(ot.params):
                for key, q in (("exp_avg", ot.mq[i]), ("exp_avg_sq", ot.vq[i])):
                    got = sd["state"][i][key]
                    self.assertEqual(got.dtype, torch.float32)
                    self.assertTrue(torch.equal(got, q.decode().view_as(p)), "%s of %d" % (key, i))
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

    def test_persistent_other_dtype_refused(self):
        """A persistent session left by a bf16 optimizer: an fp32 one is
        refused naming the state dtype, the session stays orphaned, and a
        bf16 one takes it over at the committed step (2 or 3: the child
        exits at once after its third step)."""
        session = "state/persist"
        child = (
            "import os, torch, torch.nn as nn, spwtest\n"
            "from spillway.torch import OffloadAdamW\n"
            "torch.manual_seed(3)\n"
            "m = nn.Sequential(nn.Linear(12, 40), nn.Tanh(), nn.Linear(40, 5))\n"
            "o = OffloadAdamW(m.parameters(), lr=1e-2, socket=%r, session=%r, persistent=True, lease=60,\n"
            "                 state_dtype='bf16')\n"
            "for _ in range(3):\n"
            "    o.zero_grad()\n"
            "    m(torch.ones(4, 12)).sum().backward()\n"
            "    o.step()\n"
            "os._exit(0)\n") % (self.d.control, session)
        r = subprocess.run([sys.executable, "-c", child], cwd=HERE, capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        st = {session: spwtest.wait_orphaned(self.d.control, session)}
        self.assertEqual(st[session]["state"], "orphaned")
        before = st[session]["committed_step"]
        self.assertGreater(before, 0)

        def take_over(dtype):
            m = model()
            o = OffloadAdamW(m.parameters(), lr=1e-2, socket=self.d.control, session=session,
                             persistent=True, lease=60, state_dtype=dtype)
            o.zero_grad()
            m(torch.ones(4, 12)).sum().backward()
            return o

        with self.assertRaises(spillway.SpillwayError) as cm:
            take_over("fp32").close()
        self.assertIn("state_dtype", str(cm.exception))
        st = {s["name"]: s for s in spillway.status(self.d.control)["sessions"]}
        self.assertEqual(st[session]["state"], "orphaned")
        o = take_over("bf16")
        try:
            o.step()
            self.assertEqual(o.resumed_step, before)
        finally:
            o.close()

    def test_grad_store_bf16(self):
        """grad_store_dtype='bf16' on a bf16 model in exact mode: the store
        holds its gradients as they are, so training ends bit-identical to
        an fp32 store, in fewer of the region's pages."""
        old = os.environ.get("SPILLWAY_GRAD_BY_REFERENCE")
        os.environ["SPILLWAY_GRAD_BY_REFERENCE"] = "0"  # a store, as on a GPU
        torch.manual_seed(5)  # a layer of several chunks: two share a bf16 store page
        a = nn.Sequential(nn.Linear(12, 200), nn.Tanh(), nn.Linear(200, 200), nn.Tanh(),
                          nn.Linear(200, 5)).to(torch.bfloat16)
        b = copy.deepcopy(a)
        kw = dict(lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD, socket=self.d.control, mode="exact",
                  max_grad_norm=1.0)
        oa = OffloadAdamW(a.parameters(), session="gstore/bf16", grad_store_dtype="bf16", **kw)
        ob = OffloadAdamW(b.parameters(), session="gstore/fp32", **kw)
        try:
            for m, o in ((a, oa), (b, ob)):
                gen = torch.Generator().manual_seed(4)
                for _ in range(5):
                    x, y = torch.randn(16, 12, generator=gen), torch.randn(16, 5, generator=gen)
                    o.zero_grad()
                    nn.functional.mse_loss(m(x.bfloat16()).float(), y).backward()
                    o.step()
            for pa, pb in zip(a.parameters(), b.parameters()):
                self.assertTrue(torch.equal(pa, pb))
            sa, sb = oa.state_dict(), ob.state_dict()
            for k in sa["state"]:
                for key in ("exp_avg", "exp_avg_sq"):
                    self.assertTrue(torch.equal(sa["state"][k][key], sb["state"][k][key]), key)
            slots = {s["name"]: s["slots_used"] for s in spillway.status(self.d.control)["sessions"]}
            self.assertLess(slots["gstore/bf16"], slots["gstore/fp32"])
        finally:
            oa.close()
            ob.close()
            if old is None:
                del os.environ["SPILLWAY_GRAD_BY_REFERENCE"]
            else:
                os.environ["SPILLWAY_GRAD_BY_REFERENCE"] = old

    def test_refusals(self):
        a = model()
        with self.assertRaises(ValueError):
            OffloadAdamW(a.parameters(), socket=self.d.control, grad_store_dtype="fp16")
        with self.assertRaises(ValueError):
            OffloadAdamW(a.parameters(), socket=self.d.control, state_dtype="int4")
        with self.assertRaises(ValueError):
            OffloadAdamW(a.parameters(), socket=self.d.control, state_dtype="float32")
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
