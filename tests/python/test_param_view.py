# SPDX-License-Identifier: MIT
"""OffloadAdamW(tier='cpu') on CPU fp32 parameters: the parameters' storage
is their master weights in spillway's region (spw_optimizer_param_view).

Each test trains a model with the view next to a copy of it with the view
off (SPILLWAY_PARAM_VIEW=0: today's copy-out) and compares them bit for bit:
- both modes, over steps; the Parameter objects, their grads and hooks
  stay; every eligible parameter lies in its view;
- what changes the parameters from outside: an in-place edit, p.data
  replaced, load_state_dict, add_param_group (a rebuild), freezing;
- after close() the parameters keep the last values in memory of their
  own, and a new optimizer on the same model goes on from them;
- not eligible, unchanged: the nvme tier, bf16 parameters, a persistent
  session, a parameter that is a slice of a bigger tensor.
"""
import contextlib
import copy
import os
import unittest

import spwtest  # noqa: F401  (import path)
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW


@contextlib.contextmanager
def no_view():
    old = os.environ.get("SPILLWAY_PARAM_VIEW")
    os.environ["SPILLWAY_PARAM_VIEW"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["SPILLWAY_PARAM_VIEW"]
        else:
            os.environ["SPILLWAY_PARAM_VIEW"] = old


def net(seed=5):
    torch.manual_seed(seed)
    # 70k+ weights: several 64 KiB pages per tensor, and tiny biases.
    return nn.Sequential(nn.Linear(24, 3000), nn.Tanh(), nn.Linear(3000, 4))


def data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 24, generator=g), torch.randn(8, 4, generator=g)) for _ in range(n)]


def train(m, opt, batches, clip=None):
    for x, y in batches:
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
        opt.step()


class ParamView(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon()
        cls.swap_ok, _ = spwtest.swappable_supported(cls.d)

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0

    def pair(self, mode="overlapped", **kw):
        a = net()
        b = copy.deepcopy(a)
        oa = OffloadAdamW(a.parameters(), lr=1e-2, mode=mode, socket=self.d.control, **kw)
        with no_view():
            ob = OffloadAdamW(b.parameters(), lr=1e-2, mode=mode, socket=self.d.control, **kw)
        self.addCleanup(oa.close)
        self.addCleanup(ob.close)
        return a, oa, b, ob

    def assertViewed(self, opt, m, viewed=True):
        entries = {id(e.p): e for e in opt._entries}
        for n, p in m.named_parameters():
            e = entries[id(p)]  # the optimizer holds the model's own Parameter objects
            self.assertEqual(e.view is not None and e.view == p.data_ptr(), viewed, n)

    def assertSame(self, a, b, what):
        for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
            self.assertTrue(torch.equal(pa, pb), "%s: %s differs" % (what, n))

    def test_modes_bit_for_bit(self):
        for mode in ("overlapped", "exact"):
            with self.subTest(mode=mode):
                a, oa, b, ob = self.pair(mode)
                params = list(a.parameters())
                seen = []
                params[0].register_hook(lambda g: seen.append(1) or g)
                self.assertViewed(oa, a)
                self.assertViewed(ob, b, viewed=False)
                for i, batch in enumerate(data(6, 1)):
                    train(a, oa, [batch], clip=1.0 if mode == "exact" else None)
                    with no_view():
                        train(b, ob, [batch], clip=1.0 if mode == "exact" else None)
                    self.assertSame(a, b, "%s step %d" % (mode, i + 1))
                self.assertEqual(len(seen), 6)
                self.assertEqual([id(p) for p in a.parameters()], [id(p) for p in params])
                self.assertTrue(all(p.grad is not None for p in a.parameters()))
                self.assertViewed(oa, a)
                sa, sb = oa.state_dict(), ob.state_dict()
                for k in sa["state"]:
                    for s in ("exp_avg", "exp_avg_sq"):
                        self.assertTrue(torch.equal(sa["state"][k][s], sb["state"][k][s]))
                oa.close()
                ob.close()

    def test_changes_from_outside(self):
        a, oa, b, ob = self.pair("exact")
        batches = data(8, 2)
        for m, o in ((a, oa), (b, ob)):
            with contextlib.ExitStack() as st:
                if o is ob:
                    st.enter_context(no_view())
                train(m, o, batches[:2])
                with torch.no_grad():
                    m[0].weight.mul_(0.5)                    # in place: the master itself
                train(m, o, batches[2:3])
                m[2].bias.data = m[2].bias.data.clone() + 1  # new storage: taken again
                train(m, o, batches[3:4])
                sd = o.state_dict()
                train(m, o, batches[4:5])
                o.load_state_dict(sd)                        # a rebuild
                m[0].bias.requires_grad_(False)              # frozen: skipped
                train(m, o, batches[5:6])
                m[0].bias.requires_grad_(True)
                extra = nn.Parameter(torch.linspace(-1, 1, 40000))
                m.register_parameter("extra", extra)
                o.add_param_group({"params": [extra], "lr": 3e-3})  # a rebuild, old views let go
                for x, y in batches[6:]:
                    o.zero_grad()
                    (nn.functional.mse_loss(m(x), y) + (m.extra ** 2).sum()).backward()
                    o.step()
        self.assertSame(a, b, "after outside changes")
        self.assertViewed(oa, a)

    def test_close_and_rebuild(self):
        a, oa, b, ob = self.pair()
        batches = data(6, 3)
        train(a, oa, batches[:3])
        with no_view():
            train(b, ob, batches[:3])
        params = list(a.parameters())
        oa.close()
        ob.close()
        self.assertSame(a, b, "after close")
        # Memory of their own now: writable, and untouched by a new
        # session reusing the region's slots.
        with torch.no_grad():
            for pa, pb in zip(a.parameters(), b.parameters()):
                pa.add_(1.0)
                pb.add_(1.0)
        oa = OffloadAdamW(a.parameters(), lr=1e-2, socket=self.d.control)
        self.addCleanup(oa.close)
        with no_view():
            ob = OffloadAdamW(b.parameters(), lr=1e-2, socket=self.d.control)
        self.addCleanup(ob.close)
        self.assertViewed(oa, a)
        train(a, oa, batches[3:])
        with no_view():
            train(b, ob, batches[3:])
        self.assertSame(a, b, "a new optimizer after close")
        self.assertEqual([id(p) for p in a.parameters()], [id(p) for p in params])

    def test_not_eligible(self):
        torch.manual_seed(3)
        half = nn.Linear(8, 8).to(torch.bfloat16)
        o = OffloadAdamW(half.parameters(), socket=self.d.control)
        self.assertViewed(o, half, viewed=False)
        o.close()
        flat = torch.zeros(100)
        p = nn.Parameter(flat[:40])  # a slice of a bigger tensor: swapping would cut it off
        o = OffloadAdamW([p], socket=self.d.control)
        self.assertIsNone(o._entries[0].view)
        o.close()
        # A persistent session's state outlives the daemon; a view of its
        # region would not (the daemon releases it when it goes).
        m = net()
        o = OffloadAdamW(m.parameters(), socket=self.d.control, session="pv/persist", persistent=True)
        self.assertViewed(o, m, viewed=False)
        o.close()
        if self.swap_ok:
            m = net()
            o = OffloadAdamW(m.parameters(), tier="nvme", socket=self.d.control)
            self.assertViewed(o, m, viewed=False)
            train(m, o, data(2, 4))
            o.close()


if __name__ == "__main__":
    unittest.main()
