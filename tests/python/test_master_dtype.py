# SPDX-License-Identifier: MIT
"""OffloadAdamW(master_dtype="bf16"): master weights kept as bf16 in
spillway, each update rounded stochastically (tests/pipeline's
master-dtype tests prove the bits against kernels/; these the Python side).

- an fp32 model's parameters come back as bf16 values, close to an fp32
  master's run, on both tiers;
- updates far below half a bf16 ulp still move the weights, on average by
  what fp32 weights move (rounding to nearest would leave them all where
  they were): the reason for stochastic rounding;
- state_dict / load_state_dict into a new optimizer resumes bit-identically
  (the random bits are the step's);
- a checkpoint's to-torch gives the bf16 weights widened, and from-torch
  takes them back;
- bad values are refused.
"""
import copy
import os
import tempfile
import unittest

import spwtest
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW
from spillway.checkpoint import from_torch, to_torch


def model():
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(16, 48), nn.Tanh(), nn.Linear(48, 4))


def batches(n, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)) for _ in range(n)]


def train(m, opt, data):
    for x, y in data:
        opt.zero_grad()
        # in fp32 (torch 1.13's CPU mse_loss has no bf16 kernel)
        nn.functional.mse_loss(m(x).float(), y.float()).backward()
        opt.step()


def is_bf16(t):
    return bool((t.detach().float().contiguous().view(torch.int32) & 0xFFFF).eq(0).all())


class MasterDtype(spwtest.DaemonCase):
    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=True)

    def opt(self, m, **kw):
        kw.setdefault("lr", 1e-2)
        return OffloadAdamW(m.parameters(), socket=self.d.control, **kw)

    def test_bf16_weights_close_to_fp32(self):
        data = batches(12)
        for tier in ("cpu", "nvme"):
            for mode in ("overlapped", "exact"):
                a, b = model(), model()
                oa, ob = self.opt(a, tier=tier, mode=mode), self.opt(b, tier=tier, mode=mode, master_dtype="bf16")
                try:
                    train(a, oa, data)
                    train(b, ob, data)
                finally:
                    oa.close()
                    ob.close()
                for pa, pb in zip(a.parameters(), b.parameters()):
                    self.assertTrue(is_bf16(pb), (tier, mode))
                    self.assertFalse(is_bf16(pa), (tier, mode))
                    # 12 steps of lr 1e-2 from the same start: within a few bf16 ulps
                    self.assertLess(float((pa - pb).abs().max()), 0.05, (tier, mode))

    def test_bf16_model_is_the_master(self):
        # A bf16 model: the copy-out is the stored weight itself, so the
        # master weights read back are the model's parameters, bit for bit.
        data = [(x.bfloat16(), y.bfloat16()) for x, y in batches(6)]
        m = model().bfloat16()
        o = self.opt(m, mode="exact", master_dtype="bf16", state_dtype="int8")
        try:
            before = [p.detach().clone() for p in m.parameters()]
            train(m, o, data)
            for p, p0 in zip(m.parameters(), before):
                self.assertEqual(p.dtype, torch.bfloat16)
                self.assertFalse(torch.equal(p, p0))
            o._opt.sync()
            for e in o._entries:
                w = torch.empty(e.numel, dtype=torch.float32)
                o._opt.read(e.tid, 0, w.data_ptr())  # SPW_STATE_PARAM, widened
                self.assertTrue(torch.equal(e.p.detach().float().view(-1), w))
        finally:
            o.close()

    def test_small_updates_move_on_average(self):
        # Adam's first steps move each weight by about lr: 1e-4, a 78th of a
        # bf16 ulp at 1.0 (2^-7). 200 of them: fp32 goes to about 0.98.
        def run(master):
            w = nn.Parameter(torch.ones(8192))
            o = OffloadAdamW([w], lr=1e-4, weight_decay=0.0, socket=self.d.control, mode="exact",
                             master_dtype=master)
            try:
                for _ in range(200):
                    o.zero_grad()
                    w.sum().backward()
                    o.step()
            finally:
                o.close()
            return w.detach()

        f, b = run("fp32"), run("bf16")
        self.assertLess(float(f.mean()), 0.985)
        # every weight moved somewhere, on average as far as fp32's
        self.assertTrue(is_bf16(b))
        self.assertLess(abs(float(b.mean()) - float(f.mean())), 5e-4)
        self.assertGreater(len(torch.unique(b)), 1)

    def test_state_dict_resumes_bit_identical(self):
        data = batches(8)
        a = model()
        oa = self.opt(a, mode="exact", master_dtype="bf16", state_dtype="int8")
        b = model()
        ob = self.opt(b, mode="exact", master_dtype="bf16", state_dtype="int8")
        try:
            train(a, oa, data)
            train(b, ob, data[:4])
            sd = copy.deepcopy(ob.state_dict())
            ob.close()
            c = copy.deepcopy(b)
            oc = self.opt(c, mode="exact", master_dtype="bf16", state_dtype="int8")
            oc.load_state_dict(sd)
            train(c, oc, data[4:])
            oc.close()
        finally:
            oa.close()
        for pa, pc in zip(a.parameters(), c.parameters()):
            self.assertTrue(torch.equal(pa, pc))

    def test_checkpoint_round_trip(self):
        m = model()
        o = OffloadAdamW(m.parameters(), lr=1e-2, socket=self.d.control, mode="exact", persistent=True,
                         session="master/ckpt", master_dtype="bf16")
        with tempfile.TemporaryDirectory() as tmp:
            try:
                train(m, o, batches(3))
                o.save_checkpoint(os.path.join(tmp, "ck"))
            finally:
                o.close()  # its own session: detached and gone
            doc = to_torch(os.path.join(tmp, "ck"), os.path.join(tmp, "out.pt"))
            self.assertEqual(doc["spillway"]["layout"]["master_dtype"], "bf16")
            for p, w in zip(m.parameters(), doc["params"].values()):
                self.assertEqual(w.dtype, torch.float32)
                self.assertTrue(torch.equal(p.detach(), w))
            from_torch(os.path.join(tmp, "out.pt"), os.path.join(tmp, "back"))
            back = to_torch(os.path.join(tmp, "back"))
            for w, v in zip(doc["params"].values(), back["params"].values()):
                self.assertTrue(torch.equal(w, v))

    def test_refusals(self):
        m = model()
        with self.assertRaises(ValueError) as cm:
            OffloadAdamW(m.parameters(), socket=self.d.control, master_dtype="fp16")
        self.assertIn("master_dtype", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
