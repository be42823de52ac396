# SPDX-License-Identifier: MIT
"""OffloadAdamW against torch.optim.AdamW, and its refusals.

Parity: the same model trained by both for 50 steps (three param groups
with their own lr/betas/eps/weight_decay, a LambdaLR schedule), parameters
compared after every step with torch.allclose(rtol=1e-5, atol=1e-6), for
tier cpu and nvme, modes overlapped and exact, with gradient accumulation 4,
and with clipping (exact mode) against torch.nn.utils.clip_grad_norm_.
Prints the largest difference seen per configuration.
"""
import copy
import unittest

import spwtest
import spillway
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW

STEPS = 50


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 24)
        self.norm = nn.LayerNorm(24)
        self.fc2 = nn.Linear(24, 24)
        self.head = nn.Linear(24, 5)

    def forward(self, x):
        return self.head(torch.tanh(self.fc2(self.norm(torch.tanh(self.fc1(x))))))


def groups(m):
    return [
        {"params": [m.fc1.weight, m.fc2.weight], "lr": 3e-3, "weight_decay": 0.1},
        {"params": [m.fc1.bias, m.fc2.bias, m.norm.weight, m.norm.bias], "lr": 1e-2,
         "weight_decay": 0.0, "betas": (0.8, 0.99), "eps": 1e-6},
        {"params": [m.head.weight, m.head.bias], "lr": 5e-3, "weight_decay": 0.05, "eps": 1e-7},
    ]


def schedule(step):
    return min(1.0, (step + 1) / 10.0) * 0.97 ** step


def train_pair(test, socket, tier, mode, accum, clip):
    torch.manual_seed(1)
    a = Net()
    b = copy.deepcopy(a)
    oa = OffloadAdamW(groups(a), tier=tier, mode=mode, accumulation_steps=accum,
                      max_grad_norm=clip, socket=socket)
    ob = torch.optim.AdamW(groups(b))
    sa = torch.optim.lr_scheduler.LambdaLR(oa, schedule)
    sb = torch.optim.lr_scheduler.LambdaLR(ob, schedule)
    gen = torch.Generator().manual_seed(2)
    worst = 0.0
    clipped = 0
    try:
        for step in range(STEPS):
            batches = [(torch.randn(16, 12, generator=gen), torch.randn(16, 5, generator=gen))
                       for _ in range(accum)]
            for model, opt, sched in ((a, oa, sa), (b, ob, sb)):
                opt.zero_grad(set_to_none=True)
                for x, y in batches:
                    (nn.functional.mse_loss(model(x), y) / accum).backward()
                if clip and opt is ob:
                    nn.utils.clip_grad_norm_(b.parameters(), clip)
                opt.step()
                sched.step()
            if clip and oa.last_result.clip_coef < 1.0:
                clipped += 1
            for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
                d = (pa - pb).abs().max().item()
                worst = max(worst, d)
                test.assertTrue(torch.allclose(pa, pb, rtol=1e-5, atol=1e-6),
                                "step %d, %s: max abs diff %g" % (step + 1, name, d))
        test.assertEqual(oa.stats()["steps"], STEPS)
        if clip:
            test.assertGreater(clipped, 0, "max_grad_norm=%g never clipped: the test proves nothing" % clip)
    finally:
        oa.close()
    return worst


class Parity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon()
        cls.swap_ok, cls.swap_why = spwtest.swappable_supported(cls.d)
        cls.figures = []

    @classmethod
    def tearDownClass(cls):
        for f in cls.figures:
            print("parity %-40s max |offload - torch| = %.3g" % f)
        assert cls.d.stop() == 0, "spillwayd did not shut down cleanly"

    def run_case(self, tier, mode, accum=1, clip=None):
        if tier == "nvme" and not self.swap_ok:
            self.skipTest("daemon refuses swappable tensors: " + self.swap_why)
        worst = train_pair(self, self.d.control, tier, mode, accum, clip)
        self.figures.append(("tier=%s mode=%s accum=%d clip=%s" % (tier, mode, accum, clip), worst))

    def test_session_swap_sized_by_tier(self):
        # The optimizer's own session asks for the swap its tier needs:
        # none on the cpu tier, every state page (p, m, v) on nvme.
        if not self.swap_ok:
            self.skipTest("daemon refuses swappable tensors: " + self.swap_why)
        for tier in ("cpu", "nvme"):
            m = Net()
            opt = OffloadAdamW(m.parameters(), tier=tier, socket=self.d.control)
            try:
                got = opt._session.info()["swap_bytes"]
                numel = sum(p.numel() for p in m.parameters())
                if tier == "cpu":
                    self.assertEqual(got, 0)
                else:
                    self.assertGreaterEqual(got, 3 * 4 * numel)
            finally:
                opt.close()


def _add_cases():
    for tier in ("cpu", "nvme"):
        for mode in ("overlapped", "exact"):
            for accum in (1, 4):
                clips = (None, 0.05) if mode == "exact" else (None,)
                for clip in clips:
                    name = "test_%s_%s_accum%d%s" % (tier, mode, accum, "_clip" if clip else "")
                    setattr(Parity, name,
                            lambda self, t=tier, m=mode, a=accum, c=clip: self.run_case(t, m, a, c))


_add_cases()


class Refusals(spwtest.DaemonCase):
    def sessions(self):
        return {s["name"]: s for s in spillway.status(self.d.control).get("sessions", [])}

    def test_no_daemon(self):
        sock = "/tmp/spw-py-nowhere/control.sock"
        with self.assertRaises(spillway.SpillwayError) as cm:
            OffloadAdamW(nn.Linear(2, 2).parameters(), socket=sock)
        msg = str(cm.exception)
        self.assertIn(sock, msg)
        self.assertIn("spillwayd", msg)

    def test_not_floating_point(self):
        w = nn.Parameter(torch.zeros(3))
        counts = torch.zeros(3, dtype=torch.int64)
        with self.assertRaises(ValueError) as cm:
            OffloadAdamW([("fc.weight", w), ("counts", counts)], socket=self.d.control,
                         session="refuse/int")
        self.assertIn("counts", str(cm.exception))
        self.assertIn("floating point", str(cm.exception))
        self.assertNotIn("refuse/int", self.sessions())

    def test_float64_and_device(self):
        with self.assertRaises(ValueError) as cm:
            OffloadAdamW([("w64", nn.Parameter(torch.zeros(3, dtype=torch.float64)))],
                         socket=self.d.control, session="refuse/f64")
        self.assertIn("w64", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            OffloadAdamW([("wmeta", nn.Parameter(torch.empty(3, device="meta")))],
                         socket=self.d.control, session="refuse/meta")
        self.assertIn("wmeta", str(cm.exception))
        self.assertIn("meta", str(cm.exception))
        self.assertNotIn("refuse/f64", self.sessions())
        self.assertNotIn("refuse/meta", self.sessions())

    def test_sparse_gradient(self):
        emb = nn.Embedding(10, 4, sparse=True)
        opt = OffloadAdamW([("emb.weight", emb.weight)], socket=self.d.control)
        try:
            with self.assertRaises(RuntimeError) as cm:
                emb(torch.tensor([1, 2])).sum().backward()
            self.assertIn("emb.weight", str(cm.exception))
            self.assertIn("sparse", str(cm.exception))
        finally:
            opt.close()

    def test_add_param_group_refused_leaves_nothing(self):
        m = nn.Linear(4, 3)
        opt = OffloadAdamW(m.named_parameters(), socket=self.d.control, session="refuse/group")
        try:
            before = self.sessions()["refuse/group"]["tensors"]
            with self.assertRaises(ValueError) as cm:
                opt.add_param_group({"params": [("extra.ok", nn.Parameter(torch.zeros(2))),
                                                ("extra.bad", torch.zeros(2, dtype=torch.int32))]})
            self.assertIn("extra.bad", str(cm.exception))
            self.assertEqual(len(opt.param_groups), 1)
            self.assertEqual(self.sessions()["refuse/group"]["tensors"], before)
            # and it still trains
            m(torch.randn(2, 4)).sum().backward()
            opt.step()
        finally:
            opt.close()
        self.assertNotIn("refuse/group", self.sessions())

    def test_add_param_group_before_first_step(self):
        torch.manual_seed(3)
        m1, m2 = nn.Linear(4, 3), nn.Linear(3, 2)
        r1, r2 = copy.deepcopy(m1), copy.deepcopy(m2)
        opt = OffloadAdamW(m1.parameters(), lr=1e-2, socket=self.d.control)
        ref = torch.optim.AdamW(r1.parameters(), lr=1e-2)
        opt.add_param_group({"params": m2.parameters(), "lr": 2e-2, "weight_decay": 0.0})
        ref.add_param_group({"params": r2.parameters(), "lr": 2e-2, "weight_decay": 0.0})
        try:
            for _ in range(5):
                x = torch.randn(8, 4)
                for a, b, o in ((m1, m2, opt), (r1, r2, ref)):
                    o.zero_grad()
                    b(torch.tanh(a(x))).pow(2).mean().backward()
                    o.step()
            for pa, pb in zip(list(m1.parameters()) + list(m2.parameters()),
                              list(r1.parameters()) + list(r2.parameters())):
                self.assertTrue(torch.allclose(pa, pb, rtol=1e-5, atol=1e-6))
        finally:
            opt.close()

    def test_accumulation_misuse(self):
        # Overlapped mode applies each gradient after accumulation_steps
        # backwards; a step() after fewer takes p.grad as it is (as torch
        # would), and one backward too many raises, naming mode='exact'.
        torch.manual_seed(4)
        m = nn.Linear(3, 1)
        ref = copy.deepcopy(m)
        opt = OffloadAdamW([("lin.weight", m.weight), ("lin.bias", m.bias)], accumulation_steps=2,
                           socket=self.d.control)
        topt = torch.optim.AdamW(ref.parameters())
        try:
            x = torch.randn(2, 3)
            for model, o in ((m, opt), (ref, topt)):
                model(x).sum().backward()
                o.step()
                o.zero_grad()
            self.assertTrue(torch.allclose(m.weight, ref.weight, rtol=1e-5, atol=1e-6))
            m(torch.randn(2, 3)).sum().backward()
            m(torch.randn(2, 3)).sum().backward()
            with self.assertRaises(RuntimeError) as cm:
                m(torch.randn(2, 3)).sum().backward()
            self.assertIn("lin.", str(cm.exception))
            self.assertIn("accumulation_steps=2", str(cm.exception))
            self.assertIn("mode='exact'", str(cm.exception))
        finally:
            opt.close()

    def test_bad_options(self):
        p = [nn.Parameter(torch.zeros(2))]
        with self.assertRaises(ValueError):
            OffloadAdamW(p, max_grad_norm=1.0, socket=self.d.control)  # needs exact mode
        with self.assertRaises(ValueError):
            OffloadAdamW(p, tier="gpu", socket=self.d.control)
        with self.assertRaises(ValueError):
            OffloadAdamW(p, lr=-1.0, socket=self.d.control)


if __name__ == "__main__":
    unittest.main(verbosity=2)
