# SPDX-License-Identifier: MIT
"""p.grad at step() is what OffloadAdamW applies, as torch.optim.AdamW does.

Each test trains a model with OffloadAdamW and a copy with
torch.optim.AdamW, doing the same thing to the gradients between backward
and step(), and compares the parameters after every step with the parity
budget of test_optimizer (torch.allclose(rtol=1e-5, atol=1e-6)):
clip_grad_norm_ by the user (exact mode: equal; overlapped mode: a clear
error), opt.clip_grad_norm_, .grad edited, masked and replaced, a hook
added after the optimizer was made, a DCGAN-style loop with two optimizers
(G's backward fills D's gradients, D.zero_grad() discards them), several
backwards per step, parameters frozen and unfrozen mid-run, and parameters
without a gradient on some steps. Prints the largest difference per test.
"""
import copy
import unittest

import spwtest  # noqa: F401  (import path)
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW

RTOL, ATOL = 1e-5, 1e-6


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 16)
        self.fc2 = nn.Linear(16, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


class Base(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=False)
        cls.figures = []

    @classmethod
    def tearDownClass(cls):
        for f in cls.figures:
            print("parity %-52s max |offload - torch| = %.3g" % f)
        assert cls.d.stop() == 0, "spillwayd did not shut down cleanly"

    def pair(self, seed=1, model=Net):
        torch.manual_seed(seed)
        a = model()
        return a, copy.deepcopy(a)

    def compare(self, a, b, what, worst=0.0):
        for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
            d = (pa.detach() - pb.detach()).abs().max().item()
            worst = max(worst, d)
            self.assertTrue(torch.allclose(pa, pb, rtol=RTOL, atol=ATOL),
                            "%s, %s: max abs diff %g" % (what, n, d))
        return worst

    def offload(self, params, **kw):
        kw.setdefault("socket", self.d.control)
        kw.setdefault("lr", 1e-2)
        return OffloadAdamW(params, **kw)


def batches(n, seed=2, shape=(8, 10), out=3):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g), torch.randn(shape[0], out, generator=g))
            for _ in range(n)]


class AfterBackward(Base):
    def run_loop(self, mode, between, steps=20, what=None, opt_kw=None):
        """Trains both with `between(model, step)` applied after backward."""
        a, b = self.pair()
        oa = self.offload(a.named_parameters(), mode=mode, **(opt_kw or {}))
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
        worst = 0.0
        try:
            for step, (x, y) in enumerate(batches(steps)):
                for m, o in ((a, oa), (b, ob)):
                    o.zero_grad(set_to_none=True)
                    nn.functional.mse_loss(m(x), y).backward()
                    between(m, step)
                    o.step()
                worst = self.compare(a, b, "step %d" % (step + 1), worst)
        finally:
            oa.close()
        self.figures.append((what or self.id().split(".")[-1], worst))
        return oa

    def test_user_clip_exact(self):
        norms = []

        def clip(m, step):
            norms.append(float(nn.utils.clip_grad_norm_(m.parameters(), 0.05)))
        oa = self.run_loop("exact", clip)
        self.assertTrue(any(n > 0.05 for n in norms), "clipping never cut: the test proves nothing")
        # every gradient changed after its early hand-over: handed over twice
        self.assertGreater(oa.last_result.grad_norm, 0.0)

    def test_user_clip_overlapped_refused(self):
        a, _ = self.pair()
        oa = self.offload(a.named_parameters(), mode="overlapped")
        try:
            x, y = batches(1)[0]
            nn.functional.mse_loss(a(x), y).backward()
            nn.utils.clip_grad_norm_(a.parameters(), 1e-3)
            with self.assertRaises(RuntimeError) as cm:
                oa.step()
            msg = str(cm.exception)
            self.assertIn("mode='exact'", msg)
            self.assertRegex(msg, r"parameter (fc1|fc2|head)\.(weight|bias)")
            self.assertIn("changed in place", msg)
            with self.assertRaises(RuntimeError):  # and it stays refused
                oa.step()
        finally:
            oa.close()

    def test_edit_mask_replace(self):
        def edit(m, step):
            mask = torch.arange(m.fc1.weight.numel()).view_as(m.fc1.weight) % 3 == step % 3
            m.fc1.weight.grad.masked_fill_(mask, 0.0)        # masking in place
            m.fc2.bias.grad = m.fc2.bias.grad * 4.0          # replaced
            m.head.weight.grad[0].mul_(-1.0)                  # a view edited
            if step % 4 == 1:
                m.fc1.bias.grad = None                        # dropped: skipped this step
        self.run_loop("exact", edit)

    def test_hook_added_later(self):
        for mode in ("exact", "overlapped"):
            a, b = self.pair(seed=3)
            oa = self.offload(a.named_parameters(), mode=mode)
            ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
            for m in (a, b):
                m.fc2.weight.register_hook(lambda g: g * 0.25)
                m.head.bias.register_hook(lambda g: g.clamp(-0.01, 0.01))
            worst = 0.0
            try:
                for step, (x, y) in enumerate(batches(10, seed=4)):
                    for m, o in ((a, oa), (b, ob)):
                        o.zero_grad()
                        nn.functional.mse_loss(m(x), y).backward()
                        o.step()
                    worst = self.compare(a, b, "%s step %d" % (mode, step + 1), worst)
            finally:
                oa.close()
            self.figures.append(("hook added later, %s" % mode, worst))

    def test_opt_clip_grad_norm(self):
        a, b = self.pair(seed=5)
        oa = self.offload(a.named_parameters(), mode="exact")
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
        worst, cut = 0.0, 0
        try:
            for step, (x, y) in enumerate(batches(20, seed=6)):
                oa.zero_grad()
                nn.functional.mse_loss(a(x), y).backward()
                na = oa.clip_grad_norm_(0.05)
                oa.step()
                ob.zero_grad()
                nn.functional.mse_loss(b(x), y).backward()
                nb = nn.utils.clip_grad_norm_(b.parameters(), 0.05)
                ob.step()
                self.assertIsInstance(na, torch.Tensor)
                self.assertTrue(torch.allclose(na, nb, rtol=1e-5), "norm %g vs torch %g" % (na, nb))
                cut += float(nb) > 0.05
                worst = self.compare(a, b, "step %d" % (step + 1), worst)
            self.assertGreater(cut, 0)
            with self.assertRaises(RuntimeError) as cm:
                OffloadAdamW(a.parameters(), socket=self.d.control).clip_grad_norm_(1.0)
            self.assertIn("mode='exact'", str(cm.exception))
        finally:
            oa.close()
        self.figures.append(("opt.clip_grad_norm_", worst))

    def test_changed_after_clip_refused(self):
        a, _ = self.pair()
        oa = self.offload(a.named_parameters(), mode="exact")
        try:
            x, y = batches(1)[0]
            nn.functional.mse_loss(a(x), y).backward()
            oa.clip_grad_norm_(1.0)
            a.fc1.bias.grad.zero_()
            with self.assertRaises(RuntimeError) as cm:
                oa.step()
            self.assertIn("fc1.bias", str(cm.exception))
        finally:
            oa.close()


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6))

    def forward(self, z):
        return torch.tanh(self.net(z))


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


class SeveralBackwards(Base):
    def gan(self, make_opt, set_to_none, steps=12):
        torch.manual_seed(7)
        G, D = Generator(), Discriminator()
        oG, oD = make_opt(G), make_opt(D)
        gen = torch.Generator().manual_seed(8)
        bce = nn.functional.binary_cross_entropy_with_logits
        try:
            for _ in range(steps):
                real = torch.randn(8, 6, generator=gen) * 0.5 + 1.0
                z = torch.randn(8, 4, generator=gen)
                # D: two backwards (real, then fake) accumulate
                oD.zero_grad(set_to_none=set_to_none)
                bce(D(real), torch.ones(8, 1)).backward()
                fake = G(z)
                bce(D(fake.detach()), torch.zeros(8, 1)).backward()
                oD.step()
                # G: its backward also fills D's gradients; D.zero_grad()
                # next round discards them
                oG.zero_grad(set_to_none=set_to_none)
                bce(D(fake), torch.ones(8, 1)).backward()
                oG.step()
            return [p.detach().clone() for p in list(G.parameters()) + list(D.parameters())]
        finally:
            for o in (oG, oD):
                if isinstance(o, OffloadAdamW):
                    o.close()

    def test_dcgan_two_optimizers_exact(self):
        for set_to_none in (False, True):
            ref = self.gan(lambda m: torch.optim.AdamW(m.parameters(), lr=2e-3, betas=(0.5, 0.999)),
                           set_to_none)
            got = self.gan(lambda m: self.offload(m.named_parameters(), lr=2e-3, betas=(0.5, 0.999),
                                                  mode="exact"), set_to_none)
            worst = 0.0
            for i, (pa, pb) in enumerate(zip(got, ref)):
                d = (pa - pb).abs().max().item()
                worst = max(worst, d)
                self.assertTrue(torch.allclose(pa, pb, rtol=RTOL, atol=ATOL),
                                "set_to_none=%s, parameter %d: %g" % (set_to_none, i, d))
            self.figures.append(("DCGAN two optimizers, set_to_none=%s" % set_to_none, worst))

    def test_dcgan_overlapped_refused(self):
        with self.assertRaises(RuntimeError) as cm:
            self.gan(lambda m: self.offload(m.named_parameters(), lr=2e-3, mode="overlapped"),
                     True, steps=2)
        self.assertIn("mode='exact'", str(cm.exception))
        self.assertIn("net.", str(cm.exception))

    def test_backwards_per_step_exact(self):
        # any number of backwards between steps, different per step
        a, b = self.pair(seed=9)
        oa = self.offload(a.named_parameters(), mode="exact", accumulation_steps=2)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
        worst = 0.0
        data = batches(30, seed=10)
        try:
            i = 0
            for step in range(10):
                n = 1 + step % 3
                for m, o in ((a, oa), (b, ob)):
                    o.zero_grad()
                    for x, y in data[i:i + n]:
                        nn.functional.mse_loss(m(x), y).backward()
                    o.step()
                i += n
                worst = self.compare(a, b, "step %d" % (step + 1), worst)
        finally:
            oa.close()
        self.figures.append(("1-3 backwards per step, exact", worst))


class Freezing(Base):
    def test_freeze_unfreeze(self):
        a, b = self.pair(seed=11)
        for m in (a, b):
            m.head.bias.requires_grad_(False)  # frozen from the start, unfrozen at step 6
        oa = self.offload(a.named_parameters(), mode="exact", weight_decay=0.1)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
        frozen_at = {}
        worst = 0.0
        try:
            for step, (x, y) in enumerate(batches(16, seed=12)):
                for m in (a, b):
                    if step == 4:
                        m.fc1.requires_grad_(False)
                    if step == 6:
                        m.head.bias.requires_grad_(True)
                    if step == 10:
                        m.fc1.requires_grad_(True)
                if step == 4:
                    frozen_at = {n: p.detach().clone() for n, p in a.fc1.named_parameters()}
                for m, o in ((a, oa), (b, ob)):
                    o.zero_grad(set_to_none=True)
                    nn.functional.mse_loss(m(x), y).backward()
                    o.step()
                worst = self.compare(a, b, "step %d" % (step + 1), worst)
                if 4 <= step < 10:
                    for n, p in a.fc1.named_parameters():
                        self.assertTrue(torch.equal(p, frozen_at[n]), "frozen fc1.%s moved" % n)
            self.assertEqual(float(oa.state[a.head.bias]["step"]), 10.0)
            self.assertEqual(float(oa.state[a.fc1.weight]["step"]), 10.0)
            self.assertEqual(float(oa.state[a.fc2.weight]["step"]), 16.0)
            # torch's state, with steps that differ per parameter, carries
            # over: the run resumed in a fresh OffloadAdamW goes on as torch
            c = copy.deepcopy(b)
            oc = self.offload(c.named_parameters(), mode="exact", weight_decay=0.1)
            try:
                oc.load_state_dict(ob.state_dict())
                for step, (x, y) in enumerate(batches(4, seed=15)):
                    for m, o in ((c, oc), (b, ob)):
                        o.zero_grad(set_to_none=True)
                        nn.functional.mse_loss(m(x), y).backward()
                        o.step()
                    worst = self.compare(c, b, "resumed step %d" % (step + 1), worst)
            finally:
                oc.close()
        finally:
            oa.close()
        self.figures.append(("freeze/unfreeze mid-run, then resumed", worst))

    def test_without_grad_some_steps(self):
        class Branchy(nn.Module):
            def __init__(self):
                super().__init__()
                self.trunk = nn.Linear(10, 16)
                self.expert = nn.ModuleList([nn.Linear(16, 3) for _ in range(3)])

            def forward(self, x, k):
                return self.expert[k](torch.tanh(self.trunk(x)))

        for mode in ("exact", "overlapped"):
            for set_to_none in (True, False):
                a, b = self.pair(seed=13, model=Branchy)
                oa = self.offload(a.named_parameters(), mode=mode, weight_decay=0.2)
                ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.2)
                worst = 0.0
                try:
                    for step, (x, y) in enumerate(batches(12, seed=14)):
                        k = [0, 1, 0, 2, 0, 0, 1][step % 7]
                        for m, o in ((a, oa), (b, ob)):
                            o.zero_grad(set_to_none=set_to_none)
                            nn.functional.mse_loss(m(x, k), y).backward()
                            o.step()
                        worst = self.compare(a, b, "%s set_to_none=%s step %d"
                                             % (mode, set_to_none, step + 1), worst)
                finally:
                    oa.close()
                self.figures.append(("no grad some steps, %s, set_to_none=%s"
                                     % (mode, set_to_none), worst))


if __name__ == "__main__":
    unittest.main(verbosity=2)
