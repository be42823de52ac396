# SPDX-License-Identifier: MIT
"""spillway.torch.offload_parameters: a model whose parameters live in
spillway trains bit for bit as the same model without offload (both with
OffloadAdamW, exact mode, host device): outputs, losses, gradients and
updated parameters compared with torch.equal after every step, for an MLP,
a GPT-shaped decoder with a tied lm head, activation checkpointing
(reentrant and not), a module called twice per forward, frozen layers,
no_grad evaluation between steps and train/eval switches; on the cpu and
nvme tiers."""
import copy
import unittest

import spwtest
import torch

import offload_models as om
import spillway.torch as st
from spillway.torch import OffloadAdamW


class ParamOffload(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_mlp(self):
        b, _ = om.pair(self, om.MLP, "mlp")
        # the module keeps empty placeholders, spillway the values
        self.assertTrue(all(p.numel() == 0 for p in b.parameters()))

    def test_mlp_twice(self):
        om.pair(self, lambda: om.MLP(twice=True), "mlp")

    def test_mlp_frozen(self):
        om.pair(self, lambda: om.MLP(frozen=True), "mlp")

    def test_mlp_bfloat16(self):
        # bfloat16 parameters: fetched as the bf16 cast of the fp32 master,
        # bf16 gradients summed into spillway's fp32 store
        om.pair(self, lambda: om.MLP().to(torch.bfloat16), "mlp", dtype=torch.bfloat16,
                max_live_bytes=2048)

    def test_gpt_tied(self):
        om.pair(self, om.GPT, "gpt")

    def test_gpt_checkpoint_reentrant(self):
        om.pair(self, lambda: om.GPT(checkpoint="reentrant"), "gpt")

    def test_gpt_checkpoint_non_reentrant(self):
        om.pair(self, lambda: om.GPT(checkpoint="non-reentrant"), "gpt")

    def test_gpt_eval_between_steps(self):
        om.pair(self, lambda: om.GPT(dropout=0.1), "gpt", eval_every=1)

    def test_gpt_train_eval_switch(self):
        om.pair(self, lambda: om.GPT(dropout=0.1), "gpt", switch=True)

    def tight(self, **kw):
        """A live budget of about a fifth of the parameters: backward
        fetches again what forward dropped, prefetch runs ahead."""
        b, _ = om.pair(self, lambda: om.GPT(layers=4, **kw), "gpt", steps=4,
                       max_live_bytes=40000, prefetch_layers=2)
        f = st.offload_stats(b)
        total = sum(e.nbytes for e in b.__dict__["_spillway_offload"].store.entries)
        self.assertGreater(total, 5 * 40000)
        self.assertGreater(f["evictions"], 0)
        self.assertGreater(f["prefetch_hits"], 0)
        self.assertLessEqual(f["peak_live_bytes"], 40000 + f["largest_param_bytes"])
        # a block's largest Linear (weight and bias) is the most one module holds
        self.assertLessEqual(f["peak_materialised_bytes"], 40000 + 16384 + 512)
        return f

    def test_gpt_tight_budget(self):
        self.tight()

    def test_gpt_tight_budget_checkpoint_reentrant(self):
        self.tight(checkpoint="reentrant")

    def test_gpt_tight_budget_checkpoint_non_reentrant(self):
        self.tight(checkpoint="non-reentrant")

    def test_gpt_clip_grad_norm(self):
        _, r = om.pair(self, om.GPT, "gpt", clip=0.05, max_live_bytes=40000)
        self.assertEqual(len(r["norm"]), 4)
        self.assertTrue(all(float(n) > 0.05 for n in r["norm"]))  # it did clip

    def test_gpt_accumulation(self):
        # two backwards per step: spillway sums them in its gradient store
        om.pair(self, om.GPT, "gpt", accum=2, max_live_bytes=40000)

    def test_accumulation_refusals(self):
        m = st.offload_parameters(om.MLP(), socket=self.d.control)
        with self.assertRaisesRegex(ValueError, "accumulation_steps=2, but the parameters were "
                                    "offloaded with accumulation_steps=1"):
            OffloadAdamW(m.named_parameters(), mode="exact", accumulation_steps=2,
                         socket=self.d.control)
        opt = OffloadAdamW(m.named_parameters(), mode="exact", socket=self.d.control)
        x, y = om.batches("mlp", 1)[0]
        om.loss_of("mlp", m(x), y).backward()
        with self.assertRaisesRegex(RuntimeError, "got a gradient in backward 2 before step"):
            om.loss_of("mlp", m(x), y).backward()
        opt.close()

    def test_gpt_overlapped(self):
        # Adam runs as each gradient arrives, during backward
        om.pair(self, om.GPT, "gpt", mode="overlapped", max_live_bytes=40000)

    def offloaded_with(self, make_scaler):
        """An MLP with offloaded parameters, its OffloadAdamW (exact, cpu)
        and make_scaler's GradScaler at scale 2^10."""
        m = om.MLP()
        st.offload_parameters(m, socket=self.d.control)
        opt = OffloadAdamW(m.parameters(), lr=1e-2, tier="cpu", mode="exact", socket=self.d.control)
        return m, opt, make_scaler(init_scale=2.0 ** 10)

    def test_grad_scaler_unscale_refused(self):
        # An offloaded parameter's gradient goes to spillway in backward and
        # never into .grad: GradScaler.unscale_ could not reach it, and the
        # step would apply it scaled. Refused; scaler.step(opt) alone (spillway
        # unscales in its pass) still works.
        from test_amp import CpuGradScaler
        m, opt, s = self.offloaded_with(CpuGradScaler)
        try:
            x, y = torch.randn(4, 12), torch.randn(4, 5)
            s.scale(torch.nn.functional.mse_loss(m(x), y)).backward()
            with self.assertRaises(RuntimeError) as cm:
                s.unscale_(opt)
            self.assertIn("cannot unscale the gradients of offloaded parameters", str(cm.exception))
            s.step(opt)
            s.update()
            self.assertFalse(opt.last_result.skipped)
            self.assertEqual(opt.last_result.loss_scale, 2.0 ** 10)
            # step() wrapped (as accelerate does): the scaler checks only
            # .grad and sets found_inf; it would miss an inf of an offloaded
            # parameter and never back off. Refused.
            step = opt.step
            opt.step = lambda *a, **k: step(*a, **k)
            opt.zero_grad()
            s.scale(torch.nn.functional.mse_loss(m(x), y)).backward()
            with self.assertRaises(RuntimeError) as cm:
                s.step(opt)
            self.assertIn("checked only .grad", str(cm.exception))
        finally:
            opt.close()

    def test_grad_scaler_own_unscale_refused(self):
        # A GradScaler subclass with its own unscale_ (as FSDP's
        # ShardedGradScaler has), which the library's wrapper does not see:
        # step() finds the stage unscaled and refuses for offloaded parameters.
        from test_amp import OwnUnscaleScaler
        m, opt, s = self.offloaded_with(OwnUnscaleScaler)
        try:
            s.scale(torch.nn.functional.mse_loss(m(torch.randn(4, 12)), torch.randn(4, 5))).backward()
            s.unscale_(opt)
            with self.assertRaises(RuntimeError) as cm:
                s.step(opt)
            self.assertIn("cannot unscale the gradients of offloaded parameters", str(cm.exception))
        finally:
            opt.close()

    def test_prefetch_bytes(self):
        b, _ = om.pair(self, lambda: om.GPT(layers=4), "gpt", max_live_bytes=60000,
                       prefetch_bytes=30000)
        f = st.offload_stats(b)
        self.assertGreater(f["prefetch_hits"], 0)
        self.assertLessEqual(f["peak_live_bytes"], 60000 + f["largest_param_bytes"])

    def test_gpt_nvme(self):
        ok, why = spwtest.swappable_supported(self.d)
        if not ok:
            self.skipTest(why)
        b, _ = om.pair(self, lambda: om.GPT(layers=2), "gpt", tier="nvme", max_live_bytes=40000)
        f = st.offload_stats(b)
        # libspillway turned its record of the fetch order into read-ahead
        # hints for the daemon's NVMe tier
        self.assertGreater(f["spw_read_ahead_hints"], 0, f)
        self.assertEqual(f["spw_fetches"], f["fetches"])

    def test_kept_tensor_keeps_its_values(self):
        # A tensor over a parameter's buffer that someone keeps (here a hook
        # keeps fc1's weight as the module saw it) is never refilled with
        # another fetch, though the step made its buffer stale.
        m = st.offload_parameters(om.MLP(), socket=self.d.control)  # stale buffers are pooled
        kept = []
        m.fc1.register_forward_pre_hook(lambda mod, i: kept.append(mod.weight))
        opt = OffloadAdamW(m.named_parameters(), mode="exact", lr=0.1, socket=self.d.control)
        try:
            for x, y in om.batches("mlp", 3):
                opt.zero_grad(set_to_none=True)
                om.loss_of("mlp", m(x), y).backward()
                if len(kept) == 1:
                    first = kept[0].detach().clone()
                opt.step()
        finally:
            opt.close()
        self.assertTrue(torch.equal(kept[0].detach(), first))
        self.assertFalse(torch.equal(kept[-1].detach(), first))  # the weights did change

    def test_backward_after_a_step_refused(self):
        m = st.offload_parameters(om.MLP(), socket=self.d.control)
        opt = OffloadAdamW(m.named_parameters(), mode="exact", socket=self.d.control)
        try:
            (x, y), (x2, y2) = om.batches("mlp", 2)
            old = om.loss_of("mlp", m(x), y)   # its graph wants today's weights
            om.loss_of("mlp", m(x2), y2).backward()
            opt.step()
            with self.assertRaisesRegex(RuntimeError, "optimizer has stepped since"):
                old.backward()
        finally:
            opt.close()

    def test_many_tensors(self):
        # one spillway param group per trainable tensor: more than 1024 (on
        # the nvme tier, where 1025 x 4 pages need not fit in the region)
        ok, why = spwtest.swappable_supported(self.d)
        if not ok:
            self.skipTest(why)
        m = torch.nn.Sequential(*(torch.nn.Linear(2, 2, bias=False) for _ in range(1025)))
        with torch.no_grad():
            for f in m:
                f.weight.copy_(torch.eye(2) + 0.01 * f.weight)
        ref = copy.deepcopy(m)
        st.offload_parameters(m, tier="nvme", socket=self.d.control, max_live_bytes=4096)
        opt = OffloadAdamW(m.named_parameters(), mode="exact", tier="nvme", lr=0.01,
                           socket=self.d.control)
        ropt = OffloadAdamW(ref.named_parameters(), mode="exact", tier="nvme", lr=0.01,
                            socket=self.d.control)
        try:
            x = torch.randn(3, 2)
            for o, net in ((opt, m), (ropt, ref)):
                net(x).square().sum().backward()
                o.step()
            with torch.no_grad():
                self.assertTrue(torch.equal(m(x), ref(x)))
        finally:
            opt.close()
            ropt.close()

    def test_optimizer_state_dict_round_trip(self):
        m = st.offload_parameters(om.GPT(layers=1), socket=self.d.control, max_live_bytes=30000)
        opt = OffloadAdamW(m.named_parameters(), mode="exact", lr=0.01, socket=self.d.control)
        data = om.batches("gpt", 3)
        for x, y in data[:2]:
            opt.zero_grad(set_to_none=True)
            om.loss_of("gpt", m(x), y).backward()
            opt.step()
        sd = opt.state_dict()
        opt.close()
        opt2 = OffloadAdamW(m.named_parameters(), mode="exact", lr=0.01, socket=self.d.control)
        try:
            # moments changed on the way: load_state_dict writes them into spillway
            sd = copy.deepcopy(sd)
            for s in sd["state"].values():
                s["exp_avg"].mul_(2.0)
            opt2.load_state_dict(sd)
            sd2 = opt2.state_dict()
            self.assertEqual(sorted(sd2["state"]), sorted(sd["state"]))
            for i, s in sd["state"].items():
                for k in ("step", "exp_avg", "exp_avg_sq"):
                    self.assertTrue(torch.equal(sd2["state"][i][k], s[k]), (i, k))
            x, y = data[2]  # and it trains on from there
            om.loss_of("gpt", m(x), y).backward()
            opt2.step()
            self.assertEqual(float(opt2.state_dict()["state"][0]["step"]), 3.0)
        finally:
            opt2.close()

    def test_forward_that_raises(self):
        torch.manual_seed(4)
        ref = om.MLP()
        m = st.offload_parameters(copy.deepcopy(ref), socket=self.d.control)
        with self.assertRaises(RuntimeError):
            m(torch.randn(8, 13))  # fc1 raises with its weights materialised
        x = torch.randn(8, 12)
        self.assertTrue(torch.equal(m(x), ref(x)))
        for mod in (m.fc1, m.fc2, m.head):
            self.assertEqual(mod._parameters["weight"].numel(), 0)


class Memory(unittest.TestCase):
    """Peak materialised parameters of a model 8x the budget: the store's
    counter and the bytes really alive (buffers not yet freed) both stay
    within max_live_bytes plus one layer, in training bit for bit as the
    resident model, with prefetch hits after the first step."""

    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def test_memory_8x_budget(self):
        layer = (128 * 128 + 128) * 4
        total = 32 * layer + (12 * 128 + 128) * 4
        budget = total // 8
        b, _ = om.pair(self, lambda: om.Deep(32, 128), "mlp", steps=3, max_live_bytes=budget,
                       prefetch_layers=2)
        f = st.offload_stats(b)
        self.assertEqual(f["max_live_bytes"], budget)
        self.assertEqual(f["largest_param_bytes"], 128 * 128 * 4)
        self.assertLessEqual(f["peak_live_bytes"], budget + layer)
        self.assertLessEqual(f["peak_materialised_bytes"], budget + layer)
        self.assertGreater(f["fetches"], 3 * 2 * 33)  # forward and backward fetch each layer
        # after the first step, prefetch along the recorded order
        h = b.__dict__["_spillway_offload"]
        opt = OffloadAdamW(b.named_parameters(), mode="exact", socket=self.d.control)
        try:
            data = om.batches("mlp", 5, seed=7)
            for i, (x, y) in enumerate(data):
                if i == 1:
                    h.store.reset_peaks()
                opt.zero_grad(set_to_none=True)
                om.loss_of("mlp", b(x), y).backward()
                opt.step()
        finally:
            opt.close()
        f = st.offload_stats(b)
        self.assertLessEqual(f["peak_live_bytes"], budget + layer)
        self.assertLessEqual(f["peak_materialised_bytes"], budget + layer)
        self.assertGreater(f["prefetches"], 0)
        self.assertGreaterEqual(f["prefetch_hit_rate"], 0.9, f)
        # the counter is the buffers the store holds, no more, no less
        st_ = h.store
        held = sum(e.buf.nbytes for e in st_.entries if e.buf is not None)
        held += sum(b.nbytes for bs in st_.pool.values() for b in bs)
        self.assertEqual(f["live_bytes"], held)


if __name__ == "__main__":
    unittest.main()
