# SPDX-License-Identifier: MIT
"""Full weights of an offloaded model: model.state_dict(),
spillway.torch.gather_parameters (reading, and changes written back), and
spillway.torch.load_into for a model built on the meta device (from a
state dict, a file, or a generator of (name, tensor) pairs)."""
import os
import tempfile
import unittest

import spwtest
import torch

import offload_models as om
import spillway
import spillway.torch as st


def reference():
    torch.manual_seed(3)
    return om.GPT(layers=2)


class Weights(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def offloaded(self, model, **kw):
        return st.offload_parameters(model, socket=self.d.control, **kw)

    def test_state_dict(self):
        ref = reference()
        want = ref.state_dict()
        m = self.offloaded(reference(), max_live_bytes=20000)
        got = m.state_dict()
        self.assertEqual(sorted(got), sorted(want))
        self.assertIn("lm_head.weight", got)  # the tied alias too
        for k in want:
            self.assertTrue(torch.equal(got[k], want[k]), k)
        # the module still holds placeholders
        self.assertTrue(all(p.numel() == 0 for p in m.parameters()))

    def test_gather_and_write_back(self):
        ref = reference()
        m = self.offloaded(reference())
        x = torch.randint(0, 64, (2, 16))
        with st.gather_parameters(m):
            self.assertEqual(m.blocks[0].fc.weight.shape, (128, 32))
            self.assertTrue(torch.equal(m.blocks[0].fc.weight, ref.blocks[0].fc.weight))
            with torch.no_grad():
                m.blocks[1].out.weight.mul_(2.0)
                m.wte.weight[3].fill_(0.5)
            m.blocks[0].proj.bias.data = torch.full((32,), 0.25)
        with torch.no_grad():
            ref.blocks[1].out.weight.mul_(2.0)
            ref.wte.weight[3].fill_(0.5)
            ref.blocks[0].proj.bias.fill_(0.25)
            self.assertTrue(torch.equal(m(x), ref(x)))
        self.assertEqual(m.blocks[1].out.weight.numel(), 0)
        # without write_back, changes are dropped
        with st.gather_parameters(m, write_back=False):
            with torch.no_grad():
                m.ln_f.weight.zero_()
        with torch.no_grad():
            self.assertTrue(torch.equal(m(x), ref(x)))

    def test_load_state_dict(self):
        ref = reference()
        m = self.offloaded(om.GPT(layers=2), max_live_bytes=20000)
        r = m.load_state_dict(ref.state_dict())
        self.assertEqual((r.missing_keys, r.unexpected_keys), ([], []))
        self.check_same(m, ref)
        self.assertTrue(all(p.numel() == 0 for p in m.parameters()))
        bad = dict(ref.state_dict(), **{"ln_f.bias": torch.zeros(5)})
        with self.assertRaisesRegex(RuntimeError, "ln_f.bias holds 32 elements"):
            m.load_state_dict(bad)

    def test_refused_offload_keeps_the_model(self):
        ref = reference()
        m = reference()
        # a bfloat16 parameter is fine, a float64 one is refused before anything moves
        m.ln_f.bias.data = m.ln_f.bias.data.double()
        with self.assertRaisesRegex(ValueError, "ln_f.bias is torch.float64"):
            self.offloaded(m)
        # the region fills up halfway through registering: every parameter
        # still holds its values
        m.ln_f.bias.data = m.ln_f.bias.data.float()
        with self.assertRaisesRegex(spillway.SpillwayError, "offload blocks.1.out.weight: .*refused"):
            st.offload_parameters(m, socket=self.d.control, region_bytes=1 << 20)
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            self.assertTrue(torch.equal(p, q), n)
        self.assertNotIn("_spillway_offload", m.__dict__)

    def meta_model(self, **kw):
        m = om.GPT(layers=2, device="meta")
        self.assertEqual(m.wte.weight.device.type, "meta")
        return self.offloaded(m, **kw)

    def check_same(self, m, ref):
        x = torch.randint(0, 64, (2, 16))
        with torch.no_grad():
            self.assertTrue(torch.equal(m(x), ref(x)))

    def test_refused_meta_offload_keeps_the_model(self):
        m = om.GPT(layers=2, device="meta")
        params = dict(m.named_parameters())
        with self.assertRaisesRegex(spillway.SpillwayError, "refused"):
            st.offload_parameters(m, socket=self.d.control, region_bytes=1 << 20)
        for n, p in m.named_parameters():
            self.assertIs(p, params[n])
            self.assertEqual(p.device.type, "meta")
        self.assertIs(m.lm_head.weight, m.wte.weight)

    def test_load_into_meta_from_state_dict(self):
        ref = reference()
        m = self.meta_model(max_live_bytes=30000)
        sd = dict(ref.state_dict())
        del sd["lm_head.weight"]  # tied: one name is enough
        done = st.load_into(m, sd)
        self.assertIn("lm_head.weight", done)
        self.check_same(m, ref)

    def test_load_into_meta_from_file_and_generator(self):
        ref = reference()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.pt")
            torch.save(ref.state_dict(), path)
            m = self.meta_model()
            st.load_into(m, path)
            self.check_same(m, ref)
        m2 = self.meta_model()
        st.load_into(m2, ((k, v.clone()) for k, v in ref.state_dict().items()))
        self.check_same(m2, ref)

    def test_load_into_refusals(self):
        ref = reference()
        m = self.meta_model()
        sd = dict(ref.state_dict())
        with self.assertRaisesRegex(KeyError, "no value for blocks.0.fc.bias"):
            st.load_into(m, {k: v for k, v in sd.items() if k != "blocks.0.fc.bias"})
        with self.assertRaisesRegex(KeyError, "nonsense"):
            st.load_into(m, dict(sd, nonsense=torch.zeros(1)))
        with self.assertRaisesRegex(ValueError, "holds 4096 elements"):
            st.load_into(m, dict(sd, **{"blocks.0.fc.weight": torch.zeros(3)}))


if __name__ == "__main__":
    unittest.main()
