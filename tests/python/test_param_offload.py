# SPDX-License-Identifier: MIT
"""spillway.torch.offload_parameters: a model whose parameters live in
spillway trains bit for bit as the same model without offload (both with
OffloadAdamW, exact mode, host device): outputs, losses, gradients and
updated parameters compared with torch.equal after every step, for an MLP,
a GPT-shaped decoder with a tied lm head, activation checkpointing
(reentrant and not), a module called twice per forward, frozen layers,
no_grad evaluation between steps and train/eval switches; on the cpu and
nvme tiers."""
import unittest

import spwtest
import torch

import offload_models as om


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


if __name__ == "__main__":
    unittest.main()
