# SPDX-License-Identifier: MIT
"""state_dict round trips between OffloadAdamW and torch.optim.AdamW.

offload -> torch: 10 steps with OffloadAdamW next to a torch.optim.AdamW
twin, then OffloadAdamW's state_dict loaded into a fresh torch.optim.AdamW
on a copy of the model; both continue 10 steps and must agree (the moments
read out of spillway are the right ones), and the state read out must
equal the twin's state.
torch -> offload: the other way, pushing the moments into spillway with
spw_optimizer_write() (libspillway 0.4; the library built here has it, so
the test requires it rather than skipping).
"""
import copy
import unittest

import spwtest
import spillway._lib as L
import torch
import torch.nn as nn
from spillway.torch import OffloadAdamW


def model():
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3))


def groups(m):
    return [{"params": [m[0].weight, m[2].weight], "weight_decay": 0.1},
            {"params": [m[0].bias, m[2].bias], "weight_decay": 0.0, "lr": 2e-2}]


def train(m, opt, steps, gen):
    for _ in range(steps):
        x, y = torch.randn(8, 6, generator=gen), torch.randn(8, 3, generator=gen)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()


def close(test, a, b, what):
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        test.assertTrue(torch.allclose(pa, pb, rtol=1e-5, atol=1e-6),
                        "%s: %s differs by %g" % (what, n, (pa - pb).abs().max().item()))


class StateDict(spwtest.DaemonCase):
    def test_offload_to_torch(self):
        a = model()
        twin = copy.deepcopy(a)
        oa = OffloadAdamW(groups(a), lr=1e-2, socket=self.d.control)
        ot = torch.optim.AdamW(groups(twin), lr=1e-2)
        try:
            train(a, oa, 10, torch.Generator().manual_seed(1))
            train(twin, ot, 10, torch.Generator().manual_seed(1))
            sd = oa.state_dict()
            tsd = ot.state_dict()
            self.assertEqual(sorted(sd["state"]), sorted(tsd["state"]))
            for k in tsd["state"]:
                self.assertEqual(float(sd["state"][k]["step"]), 10.0)
                for key in ("exp_avg", "exp_avg_sq"):
                    self.assertTrue(torch.allclose(sd["state"][k][key], tsd["state"][k][key],
                                                   rtol=1e-5, atol=1e-7), key)
            self.assertEqual([g["lr"] for g in sd["param_groups"]], [1e-2, 2e-2])
            b = copy.deepcopy(a)
            ob = torch.optim.AdamW(groups(b), lr=1e-2)
            ob.load_state_dict(sd)
            gen1, gen2 = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
            for _ in range(10):
                train(a, oa, 1, gen1)
                train(b, ob, 1, gen2)
                close(self, a, b, "after loading into torch.optim.AdamW")
        finally:
            oa.close()

    def test_torch_to_offload(self):
        self.assertTrue(L.has("spw_optimizer_write"),
                        "libspillway (%s) lacks spw_optimizer_write()" % L.library_path())
        a = model()
        oa = torch.optim.AdamW(groups(a), lr=1e-2)
        train(a, oa, 10, torch.Generator().manual_seed(3))
        b = copy.deepcopy(a)
        ob = OffloadAdamW(groups(b), lr=1e-2, socket=self.d.control)
        try:
            ob.load_state_dict(oa.state_dict())
            gen1, gen2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
            for _ in range(10):
                train(a, oa, 1, gen1)
                train(b, ob, 1, gen2)
                close(self, a, b, "after loading into OffloadAdamW")
            # and back out again
            sd, tsd = ob.state_dict(), oa.state_dict()
            for k in tsd["state"]:
                self.assertTrue(torch.allclose(sd["state"][k]["exp_avg_sq"],
                                               tsd["state"][k]["exp_avg_sq"], rtol=1e-5, atol=1e-7))
        finally:
            ob.close()

    def test_load_without_moments(self):
        # A state_dict taken before any step holds no moments: loadable
        # whatever the library, and its hyperparameters take effect.
        a = model()
        ref = torch.optim.AdamW(groups(a), lr=1e-2)
        sd = ref.state_dict()
        sd["param_groups"][1]["lr"] = 5e-2
        b, c = copy.deepcopy(a), copy.deepcopy(a)
        ob = OffloadAdamW(groups(b), lr=1e-2, socket=self.d.control)
        oc = torch.optim.AdamW(groups(c), lr=1e-2)
        try:
            ob.load_state_dict(sd)
            oc.load_state_dict(sd)
            self.assertEqual(ob.param_groups[1]["lr"], 5e-2)
            train(b, ob, 5, torch.Generator().manual_seed(6))
            train(c, oc, 5, torch.Generator().manual_seed(6))
            close(self, b, c, "after loading a fresh state_dict")
        finally:
            ob.close()

    def test_model_reload_is_noticed(self):
        # model.load_state_dict() after the optimizer was made changes the
        # parameters in place; before the first step that is picked up.
        a = model()
        oa = OffloadAdamW(a.parameters(), lr=1e-2, socket=self.d.control)
        try:
            other = model()
            with torch.no_grad():
                for p in other.parameters():
                    p.add_(1.0)
            a.load_state_dict(other.state_dict())
            ref = copy.deepcopy(a)
            oref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
            train(a, oa, 3, torch.Generator().manual_seed(7))
            train(ref, oref, 3, torch.Generator().manual_seed(7))
            close(self, a, ref, "after model.load_state_dict")
        finally:
            oa.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
