# SPDX-License-Identifier: MIT
"""The region OffloadAdamW asks for on the nvme tier: what the pipeline
needs plus read-ahead (half the state, at most 1 GiB) so that the disk
works through forward too; the minimum where the daemon's caps refuse the
read-ahead; exactly region_bytes= when given; and no read-ahead on a
persistent session, whose takeover must ask for the same region again,
but spare swap for its checkpoints where the caps allow."""
import unittest

import spwtest
import torch
import torch.nn as nn
from spillway import _torch_region
from spillway.torch import OffloadAdamW


def model():
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(64, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 8))


def one_step(m, opt):
    x, y = torch.randn(4, 64), torch.randn(4, 8)
    opt.zero_grad()
    nn.functional.mse_loss(m(x), y).backward()
    opt.step()


class Region(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = spwtest.Daemon(swap=True)
        cls.small = spwtest.Daemon(swap=True, session_max="6MiB")

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0
        assert cls.small.stop() == 0

    def region(self, d, **kw):
        m = model()
        opt = OffloadAdamW(m.parameters(), tier="nvme", socket=d.control, **kw)
        try:
            one_step(m, opt)
            return opt.session.info()
        finally:
            opt.close()

    def test_readahead(self):
        info = self.region(self.d, session="region/readahead")
        want = _torch_region.readahead_bytes(info["swap_bytes"], info["page_size"])
        print("state %d bytes, region %d" % (info["swap_bytes"], info["region_bytes"]))
        self.assertGreater(want, 6 << 20)  # more than the small daemon's cap below
        self.assertEqual(info["region_bytes"], want)

    def test_capped_falls_back(self):
        info = self.region(self.small, session="region/capped")
        print("capped: region %d" % info["region_bytes"])
        self.assertLessEqual(info["region_bytes"], 6 << 20)
        full = self.region(self.d, session="region/full")
        self.assertLess(info["region_bytes"], full["region_bytes"])

    def test_given_and_persistent(self):
        info = self.region(self.d, session="region/given", region_bytes=5 << 20)
        self.assertEqual(info["region_bytes"], 5 << 20)
        ra = _torch_region.readahead_bytes(info["swap_bytes"], info["page_size"])
        info = self.region(self.d, session="region/persistent", persistent=True, lease=10)
        self.assertLess(info["region_bytes"], ra)

    def test_persistent_spare_swap(self):
        # A persistent session on the nvme tier asks for an eighth of spare
        # swap beyond its state (a checkpoint's rewritten pages go there
        # instead of waiting for the copy); where the daemon's caps leave
        # no room for it, just the state's.
        def swap_of(d, name):
            m = model()
            opt = OffloadAdamW(m.parameters(), tier="nvme", socket=d.control, session=name, persistent=True,
                               lease=10)
            try:
                one_step(m, opt)
                info = opt.session.info()
                need = _torch_region.swap_bytes(opt, opt._entries, info["page_size"])
                return info["swap_bytes"], need, _torch_region.spare_swap_bytes(opt, need, info["page_size"])
            finally:
                opt.close()
        got, need, spare = swap_of(self.d, "region/spare")
        print("persistent: state swap %d, spare %d, got %d" % (need, spare, got))
        self.assertGreaterEqual(spare, need // 8)
        self.assertEqual(got, need + spare)
        capped = spwtest.Daemon(swap=True, extra={"limits": {"swap_bytes_per_uid": need}})
        try:
            got, need2, _ = swap_of(capped, "region/spare-capped")
            self.assertEqual(need2, need)
            self.assertEqual(got, need)
        finally:
            self.assertEqual(capped.stop(), 0)

    def test_readahead_bytes(self):
        self.assertEqual(_torch_region.readahead_bytes(10 << 20, 1 << 20), 5 << 20)
        self.assertEqual(_torch_region.readahead_bytes((10 << 20) + 5, 1 << 20), 5 << 20)
        self.assertEqual(_torch_region.readahead_bytes(100 << 30, 4 << 20), 1 << 30)


if __name__ == "__main__":
    unittest.main()
