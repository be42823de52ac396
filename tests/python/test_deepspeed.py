# SPDX-License-Identifier: MIT
"""spillway.from_deepspeed_config on configs shaped like DeepSpeed's own
(ZeRO-Offload to CPU, ZeRO-Infinity to NVMe, a HuggingFace "auto" config,
the old cpu_offload spelling) and on invalid ones, whose error must name
the key."""
import json
import os
import tempfile
import unittest

import spwtest  # noqa: F401  (import path)
import spillway
from spillway import DeepSpeedConfigError, from_deepspeed_config

INFINITY = {
    "train_batch_size": 16,
    "gradient_accumulation_steps": 4,
    "gradient_clipping": 1.0,
    "steps_per_print": 10,
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 3e-5, "betas": [0.8, 0.999], "eps": 1e-8, "weight_decay": 3e-7}},
    "scheduler": {"type": "WarmupLR",
                  "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-5, "warmup_num_steps": 500}},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": True,
                              "buffer_count": 4, "fast_init": False,
                              "pipeline_read": False, "pipeline_write": False},
        "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": True,
                          "buffer_count": 5, "buffer_size": 1e8, "max_in_cpu": 1e9},
        "overlap_comm": True,
        "contiguous_gradients": True,
        "stage3_max_live_parameters": 1e9,
        "stage3_prefetch_bucket_size": 5e8,
    },
    "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1,
            "single_submit": False, "overlap_events": True},
}

OFFLOAD_CPU = {
    "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "Adam", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-6}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "allgather_bucket_size": 2e8, "reduce_bucket_size": 2e8},
}

HF_AUTO = {
    "train_batch_size": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "offload_param": {"device": "cpu", "pin_memory": True},
                          "sub_group_size": 1e9,
                          "stage3_gather_16bit_weights_on_model_save": True},
}


def ignored_keys(s):
    return {k for k, _ in s.ignored}


class Read(unittest.TestCase):
    def test_infinity_from_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(INFINITY, f)
        try:
            s = from_deepspeed_config(f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual(s.tier, "nvme")
        self.assertEqual(s.mode, "exact")
        self.assertEqual(s.max_grad_norm, 1.0)
        self.assertEqual(s.accumulation_steps, 4)
        self.assertEqual(s.window, 4)
        self.assertEqual(s.swap_dirs, ["/local_nvme"])
        self.assertEqual(s.optimizer, {"lr": 3e-5, "betas": (0.8, 0.999), "eps": 1e-8,
                                       "weight_decay": 3e-7})
        self.assertEqual(s.param_offload["buffer_size"], 100000000)
        ig = ignored_keys(s)
        self.assertNotIn("fp16", ig)
        self.assertEqual((s.loss_scale, s.init_loss_scale, s.growth_interval),
                         ("dynamic", 65536.0, 1000))
        for k in ("train_batch_size", "steps_per_print", "scheduler", "aio",
                  "zero_optimization.stage", "zero_optimization.overlap_comm",
                  "zero_optimization.offload_optimizer.pipeline_read",
                  "zero_optimization.offload_optimizer.pipeline_write",
                  "zero_optimization.offload_optimizer.fast_init"):
            self.assertIn(k, ig)
        # offload_param and the ZeRO-3 live/prefetch limits are read, not ignored
        for k in ("zero_optimization.offload_param", "zero_optimization.offload_param.device",
                  "zero_optimization.stage3_max_live_parameters",
                  "zero_optimization.stage3_prefetch_bucket_size"):
            self.assertNotIn(k, ig)
        # fp16 on: 2 bytes a parameter; stage3_max_live_parameters 1e9 against
        # buffer_count 5 x buffer_size 1e8: the smaller, 5e8 parameters
        self.assertEqual(s.param_offload_kwargs(),
                         {"tier": "nvme", "mode": "exact", "max_live_bytes": 5 * 10 ** 8 * 2,
                          "prefetch_bytes": 5 * 10 ** 8 * 2, "region_bytes": 10 ** 9 * 4})
        self.assertEqual(s.param_offload_kwargs(param_bytes=4)["max_live_bytes"], 5 * 10 ** 8 * 4)
        for k, why in s.ignored:
            self.assertTrue(why, k)  # every ignored key says why
        dc = s.daemon_config(swap_max_bytes="200GiB")
        self.assertEqual(dc["swap"]["dirs"], [{"path": "/local_nvme/spillway", "max_bytes": "200GiB"}])
        kw = s.optimizer_kwargs()
        self.assertEqual(kw["tier"], "nvme")
        self.assertEqual(kw["max_grad_norm"], 1.0)
        self.assertEqual((kw["loss_scale"], kw["init_loss_scale"], kw["growth_interval"]),
                         ("dynamic", 65536.0, 1000))

    def test_daemon_config_accepted(self):
        # what daemon_config() gives, completed with a socket directory,
        # passes spillwayd's own validation (--check-config)
        drive = tempfile.mkdtemp(prefix="spw-py-ds-", dir="/var/tmp")
        try:
            cfg = dict(INFINITY)
            cfg["zero_optimization"] = dict(INFINITY["zero_optimization"])
            cfg["zero_optimization"]["offload_optimizer"] = dict(
                INFINITY["zero_optimization"]["offload_optimizer"], nvme_path=drive)
            s = from_deepspeed_config(cfg)
            dc = s.daemon_config()
            d = dc["swap"]["dirs"][0]
            self.assertEqual(d["path"], os.path.join(drive, "spillway"))
            self.assertGreaterEqual(d["max_bytes"], 64 << 10)
            self.assertLessEqual(d["max_bytes"], os.statvfs(drive).f_bavail * os.statvfs(drive).f_frsize)
            os.mkdir(d["path"])
            dc["socket"] = {"dir": os.path.join(drive, "sock")}
            dc["pool"]["require_locked"] = False
            path = os.path.join(drive, "spillwayd.json")
            with open(path, "w") as f:
                json.dump(dc, f)
            import subprocess
            r = subprocess.run([spwtest.daemon_binary(), "--config", path, "--check-config"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        finally:
            import shutil
            shutil.rmtree(drive, ignore_errors=True)

    def test_fp16_sections(self):
        off = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
        s = from_deepspeed_config(dict(off, fp16={"enabled": True, "loss_scale": 128, "hysteresis": 2}))
        self.assertEqual((s.loss_scale, s.mode), (128.0, "overlapped"))
        self.assertIn("fp16.hysteresis", ignored_keys(s))
        s = from_deepspeed_config(dict(off, fp16={"enabled": True, "initial_scale_power": 12,
                                                  "loss_scale_window": 50}))
        self.assertEqual((s.loss_scale, s.init_loss_scale, s.growth_interval, s.mode),
                         ("dynamic", 4096.0, 50, "exact"))
        self.assertIsNone(from_deepspeed_config(dict(off, fp16={"enabled": False})).loss_scale)
        with self.assertRaises(DeepSpeedConfigError) as cm:
            from_deepspeed_config(dict(off, fp16={"enabled": True, "loss_scal": 0}))
        self.assertIn("fp16.loss_scal", str(cm.exception))

    def test_zero_offload_cpu(self):
        s = from_deepspeed_config(OFFLOAD_CPU)
        self.assertEqual((s.tier, s.mode, s.max_grad_norm, s.accumulation_steps), ("cpu", "overlapped", None, 1))
        # DeepSpeed's Adam defaults to weight_decay 0 (torch's AdamW to 0.01)
        self.assertEqual(s.optimizer, {"lr": 1e-4, "betas": (0.9, 0.95), "eps": 1e-6, "weight_decay": 0.0})
        self.assertIsNone(s.param_offload)
        self.assertIn("zero_optimization.reduce_bucket_size", ignored_keys(s))

    def test_hf_auto(self):
        s = from_deepspeed_config(HF_AUTO)
        self.assertEqual(s.optimizer, {})
        self.assertEqual(s.accumulation_steps, 1)
        self.assertIsNone(s.max_grad_norm)
        ig = ignored_keys(s)
        for k in ("optimizer.params.lr", "gradient_accumulation_steps", "gradient_clipping"):
            self.assertIn(k, ig)
        self.assertEqual(s.param_offload, {"device": "cpu", "pin_memory": True})
        # no limits given: spillway's defaults (no budget, prefetch_layers)
        self.assertEqual(s.param_offload_kwargs(), {"tier": "cpu", "mode": "overlapped"})

    def test_param_offload_limits(self):
        cfg = {"zero_optimization": {
            "stage": 3, "offload_optimizer": {"device": "cpu"},
            "offload_param": {"device": "nvme", "nvme_path": "/tmp"},
            "stage3_max_live_parameters": 3e6, "stage3_prefetch_bucket_size": "auto"}}
        s = from_deepspeed_config(cfg)
        self.assertEqual(s.param_offload_kwargs(), {"tier": "cpu", "mode": "overlapped",
                                                    "max_live_bytes": 12 * 10 ** 6})
        ig = dict(s.ignored)
        self.assertIn("read as 'cpu'", ig["zero_optimization.offload_param.device"])
        self.assertIn("auto", ig["zero_optimization.stage3_prefetch_bucket_size"])
        self.assertNotIn("zero_optimization.stage3_max_live_parameters", ig)
        # without offload_param the limits are ignored, and say why
        s = from_deepspeed_config({"zero_optimization": {
            "offload_optimizer": {"device": "cpu"}, "stage3_max_live_parameters": 1e9}})
        self.assertIsNone(s.param_offload_kwargs())
        self.assertIn("offload_param is off",
                      dict(s.ignored)["zero_optimization.stage3_max_live_parameters"])
        with self.assertRaises(DeepSpeedConfigError) as cm:
            from_deepspeed_config({"zero_optimization": {
                "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"},
                "stage3_max_live_parameters": -1}})
        self.assertIn("stage3_max_live_parameters", str(cm.exception))

    def test_old_cpu_offload(self):
        s = from_deepspeed_config({"zero_optimization": {"stage": 2, "cpu_offload": True}})
        self.assertEqual(s.tier, "cpu")
        self.assertIn("zero_optimization.cpu_offload", ignored_keys(s))

    def test_exported_at_top(self):
        self.assertIs(spillway.from_deepspeed_config, from_deepspeed_config)


class Invalid(unittest.TestCase):
    def refuse(self, cfg, key, *words):
        with self.assertRaises(DeepSpeedConfigError) as cm:
            from_deepspeed_config(cfg)
        self.assertEqual(cm.exception.key, key)
        self.assertIn(key, str(cm.exception))
        for w in words:
            self.assertIn(w, str(cm.exception))

    def with_offload(self, **off):
        return {"zero_optimization": {"stage": 3, "offload_optimizer": off}}

    def test_bad_device(self):
        self.refuse(self.with_offload(device="gpu"), "zero_optimization.offload_optimizer.device", "gpu")

    def test_device_none(self):
        self.refuse(self.with_offload(device="none"), "zero_optimization.offload_optimizer.device")

    def test_no_offload(self):
        self.refuse({"zero_optimization": {"stage": 2}}, "zero_optimization.offload_optimizer")

    def test_nvme_without_path(self):
        self.refuse(self.with_offload(device="nvme"), "zero_optimization.offload_optimizer.nvme_path")

    def test_relative_path(self):
        self.refuse(self.with_offload(device="nvme", nvme_path="nvme0"),
                    "zero_optimization.offload_optimizer.nvme_path", "absolute")

    def test_typo(self):
        self.refuse(self.with_offload(device="cpu", buffer_cont=4),
                    "zero_optimization.offload_optimizer.buffer_cont", "buffer_count")

    def test_bad_types(self):
        self.refuse(self.with_offload(device="cpu", pin_memory="yes"),
                    "zero_optimization.offload_optimizer.pin_memory")
        self.refuse(self.with_offload(device="cpu", buffer_count=0),
                    "zero_optimization.offload_optimizer.buffer_count")
        cfg = self.with_offload(device="cpu")
        cfg["gradient_accumulation_steps"] = 2.5
        self.refuse(cfg, "gradient_accumulation_steps")

    def test_other_optimizer(self):
        cfg = self.with_offload(device="cpu")
        cfg["optimizer"] = {"type": "Lamb", "params": {"lr": 1e-3}}
        self.refuse(cfg, "optimizer.type", "Lamb")

    def test_adam_l2(self):
        cfg = self.with_offload(device="cpu")
        cfg["optimizer"] = {"type": "Adam", "params": {"lr": 1e-3, "adam_w_mode": False}}
        self.refuse(cfg, "optimizer.params.adam_w_mode")

    def test_betas(self):
        cfg = self.with_offload(device="cpu")
        cfg["optimizer"] = {"type": "AdamW", "params": {"betas": [0.9]}}
        self.refuse(cfg, "optimizer.params.betas")
        cfg["optimizer"]["params"]["betas"] = [0.9, 1.0]
        self.refuse(cfg, "optimizer.params.betas[1]")

    def test_param_offload_typo(self):
        cfg = self.with_offload(device="cpu")
        cfg["zero_optimization"]["offload_param"] = {"device": "cpu", "buffer_sz": 1}
        self.refuse(cfg, "zero_optimization.offload_param.buffer_sz")

    def test_not_json(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write("{ not json")
        try:
            with self.assertRaises(DeepSpeedConfigError) as cm:
                from_deepspeed_config(f.name)
            self.assertIn(f.name, str(cm.exception))
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
