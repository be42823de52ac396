# SPDX-License-Identifier: MIT
"""Reading a DeepSpeed JSON config into spillway settings.

    s = spillway.from_deepspeed_config("ds_config.json")
    opt = spillway.torch.OffloadAdamW(model.parameters(), **s.optimizer_kwargs())
    for key, why in s.ignored: print(key, why)

What is read: zero_optimization.offload_optimizer and .offload_param
(device, nvme_path, pin_memory, buffer_count, buffer_size, max_in_cpu,
pipeline_read, pipeline_write, ...), stage3_max_live_parameters and
stage3_prefetch_bucket_size (param_offload_kwargs() for
spillway.torch.offload_parameters), optimizer (Adam/AdamW and its params),
gradient_accumulation_steps and gradient_clipping. Every other key is
listed in .ignored with the reason. A key spillway must understand but
cannot honour raises DeepSpeedConfigError naming it.
"""
import json
import os

__all__ = ["from_deepspeed_config", "DeepSpeedConfigError", "SpillwaySettings"]


class DeepSpeedConfigError(ValueError):
    """A DeepSpeed config spillway cannot follow; .key is the dotted key."""

    def __init__(self, key, message, source=None):
        self.key = key
        where = "%s: " % source if source else ""
        super().__init__("%s%s: %s" % (where, key, message))


class SpillwaySettings:
    """What a DeepSpeed config asks of spillway.

    tier: 'cpu' or 'nvme'; mode: 'exact' when gradient clipping is on,
    else 'overlapped'; optimizer: lr/betas/eps/weight_decay (only those
    the config gives; "auto" values are left to the trainer);
    accumulation_steps, max_grad_norm, window (offload_optimizer.buffer_count);
    swap_dirs: NVMe directories for spillwayd's swap.dirs; pin_memory;
    param_offload: offload_param as read (None when off), with
    max_live_parameters, prefetch_bucket_size and param_bytes behind
    param_offload_kwargs(); loss_scale,
    init_loss_scale, growth_interval: from the fp16 section (None when
    off: dynamic loss scaling for loss_scale 0, else that fixed scale);
    ignored: a list of (key, reason)."""

    def __init__(self):
        self.tier = "cpu"
        self.mode = "overlapped"
        self.optimizer = {}
        self.accumulation_steps = 1
        self.max_grad_norm = None
        self.window = 0
        self.swap_dirs = []
        self.pin_memory = True
        self.param_offload = None
        self.max_live_parameters = None   # stage3_max_live_parameters
        self.prefetch_bucket_size = None  # stage3_prefetch_bucket_size
        self.param_bytes = 4              # 2 with fp16 or bf16 on
        self.loss_scale = None
        self.init_loss_scale = None
        self.growth_interval = None
        self.ignored = []

    def optimizer_kwargs(self):
        """Keyword arguments for spillway.torch.OffloadAdamW."""
        kw = dict(self.optimizer)
        kw.update(tier=self.tier, mode=self.mode, accumulation_steps=self.accumulation_steps,
                  max_grad_norm=self.max_grad_norm, window=self.window)
        if self.loss_scale is not None:
            kw["loss_scale"] = self.loss_scale
            if self.loss_scale == "dynamic":
                kw.update(init_loss_scale=self.init_loss_scale,
                          growth_interval=self.growth_interval)
        return kw

    def param_offload_kwargs(self, param_bytes=None):
        """Keyword arguments for spillway.torch.offload_parameters, or None
        when offload_param is off. The budget (max_live_bytes) is
        stage3_max_live_parameters elements, or else buffer_count buffers
        of buffer_size elements (the smaller when both are given), of
        param_bytes each (2 with fp16/bf16 on, else 4); the prefetch
        depth is stage3_prefetch_bucket_size elements ahead; max_in_cpu
        elements (fp32) size the pinned memory of the NVMe tier. tier and
        mode are the optimizer's: OffloadAdamW updates the parameters
        where they are."""
        po = self.param_offload
        if po is None:
            return None
        es = param_bytes or self.param_bytes
        kw = dict(tier=self.tier, mode=self.mode)
        live = []
        if self.max_live_parameters:
            live.append(self.max_live_parameters * es)
        if po.get("buffer_count") and po.get("buffer_size"):
            live.append(po["buffer_count"] * po["buffer_size"] * es)
        if live:
            kw["max_live_bytes"] = min(live)
        if self.prefetch_bucket_size:
            kw["prefetch_bytes"] = self.prefetch_bucket_size * es
        if self.tier == "nvme" and po.get("max_in_cpu"):
            kw["region_bytes"] = po["max_in_cpu"] * 4
        return kw

    def daemon_config(self, swap_max_bytes=None):
        """The part of spillwayd.json this config implies (swap.dirs for the
        NVMe tier; pool.require_locked from pin_memory), in a form spillwayd
        accepts. Each swap directory's max_bytes is swap_max_bytes (bytes,
        or a size string such as "200GiB") when given, else 90% of the free
        space of its drive now (DeepSpeed's config does not say); a drive
        that cannot be looked at raises DeepSpeedConfigError naming it."""
        cfg = {"pool": {"require_locked": bool(self.pin_memory)}}
        if self.swap_dirs:
            dirs = []
            for d in self.swap_dirs:
                dirs.append({"path": os.path.join(d, "spillway"),
                             "max_bytes": _swap_bytes(d, swap_max_bytes)})
            cfg["swap"] = {"dirs": dirs}
        return cfg

    def __repr__(self):
        lines = ["SpillwaySettings(tier=%r, mode=%r, optimizer=%r, accumulation_steps=%r, "
                 "max_grad_norm=%r, window=%r, swap_dirs=%r, pin_memory=%r, param_offload=%r)"
                 % (self.tier, self.mode, self.optimizer, self.accumulation_steps,
                    self.max_grad_norm, self.window, self.swap_dirs, self.pin_memory,
                    self.param_offload)]
        for k, why in self.ignored:
            lines.append("  ignored %s: %s" % (k, why))
        return "\n".join(lines)


_MIN_SWAP = 64 << 10


def _swap_bytes(d, given):
    key = "zero_optimization.offload_optimizer.nvme_path"
    if given is not None:
        if isinstance(given, str):
            return given
        if isinstance(given, bool) or not isinstance(given, int) or given < _MIN_SWAP:
            raise DeepSpeedConfigError("swap_max_bytes", "%r is not a byte count >= 64 KiB"
                                       % (given,))
        return int(given)
    probe = d
    while not os.path.exists(probe) and probe != "/":
        probe = os.path.dirname(probe)
    try:
        st = os.statvfs(probe)
    except OSError as e:
        raise DeepSpeedConfigError(key, "%s: cannot see its free space (%s); pass "
                                   "daemon_config(swap_max_bytes=...)" % (d, e)) from None
    free = st.f_bavail * st.f_frsize
    want = (free * 9 // 10) >> 20 << 20  # whole MiB
    if want < _MIN_SWAP:
        raise DeepSpeedConfigError(key, "%s: only %d bytes free; spillwayd needs at least 64 KiB "
                                   "of swap there (free space, or pass daemon_config("
                                   "swap_max_bytes=...))" % (d, free))
    return want


# Top-level keys that are the trainer's business, with why spillway leaves them.
_TOP_REASONS = {
    "train_batch_size": "batch sizes are the trainer's",
    "train_micro_batch_size_per_gpu": "batch sizes are the trainer's",
    "scheduler": "use a torch.optim.lr_scheduler on OffloadAdamW (it reads param_groups' lr each step)",
    "bf16": "mixed precision is the model's; OffloadAdamW takes fp16/bf16/fp32 parameters as they are",
    "amp": "mixed precision is the model's",
    "steps_per_print": "logging is the trainer's",
    "wall_clock_breakdown": "logging is the trainer's",
    "aio": "spillwayd does its own NVMe I/O (io_uring); see swap.queue_depth in its config",
    "activation_checkpointing": "activation checkpointing is the model's",
    "flops_profiler": "profiling is the trainer's",
    "tensorboard": "logging is the trainer's",
    "wandb": "logging is the trainer's",
    "csv_monitor": "logging is the trainer's",
    "comms_logger": "logging is the trainer's",
    "gradient_predivide_factor": "data-parallel reduction is torch.distributed's",
    "prescale_gradients": "data-parallel reduction is torch.distributed's",
    "communication_data_type": "data-parallel reduction is torch.distributed's",
    "sparse_gradients": "spillway refuses sparse gradients",
    "zero_allow_untested_optimizer": "OffloadAdamW is the optimizer",
    "zero_force_ds_cpu_optimizer": "OffloadAdamW is the optimizer",
    "data_types": "gradient accumulation in spillway is fp32",
}

_ZERO_REASONS = {
    "stage": "ZeRO partitioning is the trainer's; spillway offloads whatever each rank's optimizer holds",
    "overlap_comm": "communication is torch.distributed's",
    "contiguous_gradients": "spillway copies each gradient out as backward produces it",
    "reduce_bucket_size": "communication is torch.distributed's",
    "allgather_bucket_size": "communication is torch.distributed's",
    "allgather_partitions": "communication is torch.distributed's",
    "reduce_scatter": "communication is torch.distributed's",
    "round_robin_gradients": "communication is torch.distributed's",
    "sub_group_size": "spillway streams state in pages of the session's page size",
    "elastic_checkpoint": "checkpoints are taken with state_dict()",
    "load_from_fp32_weights": "checkpoints are taken with state_dict()",
    "ignore_unused_parameters": "parameters without a gradient get a zero gradient",
    "legacy_stage1": "ZeRO partitioning is the trainer's",
    "zero_hpz_partition_size": "ZeRO partitioning is the trainer's",
    "zero_quantized_weights": "ZeRO partitioning is the trainer's",
    "zero_quantized_gradients": "ZeRO partitioning is the trainer's",
    "mics_shard_size": "ZeRO partitioning is the trainer's",
}

_OFFLOAD_OPT_KEYS = {"device", "nvme_path", "pin_memory", "buffer_count", "fast_init",
                     "pipeline_read", "pipeline_write", "pipeline", "ratio"}
_OFFLOAD_PARAM_KEYS = {"device", "nvme_path", "pin_memory", "buffer_count", "buffer_size",
                       "max_in_cpu"}
_OPT_PARAM_KEYS = {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "torch_adam", "amsgrad",
                   "bias_correction", "fused"}


def _auto(v):
    return isinstance(v, str) and v == "auto"


def _num(src, key, v, lo=None, hi=None, integer=False, lo_open=False):
    if _auto(v):
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DeepSpeedConfigError(key, "%r is not a number" % (v,), src)
    if integer:
        if float(v) != int(v):
            raise DeepSpeedConfigError(key, "%r is not a whole number" % (v,), src)
        v = int(v)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise DeepSpeedConfigError(key, "%r must be %s %g" % (v, ">" if lo_open else ">=", lo), src)
    if hi is not None and v > hi:
        raise DeepSpeedConfigError(key, "%r must be <= %g" % (v, hi), src)
    return v


def _bool(src, key, v):
    if not isinstance(v, bool):
        raise DeepSpeedConfigError(key, "%r is not true or false" % (v,), src)
    return v


def _section(src, key, v):
    if not isinstance(v, dict):
        raise DeepSpeedConfigError(key, "must be a JSON object, not %s" % type(v).__name__, src)
    return v


def _device(src, key, v):
    if v is None:
        return "none"
    if not isinstance(v, str) or v.lower() not in ("cpu", "nvme", "none"):
        raise DeepSpeedConfigError(key, "%r is not one of \"cpu\", \"nvme\", \"none\"" % (v,), src)
    return v.lower()


def _nvme_path(src, key, v):
    if not isinstance(v, str) or not v.startswith("/"):
        raise DeepSpeedConfigError(key, "%r is not an absolute path (the NVMe drive's mount point)"
                                   % (v,), src)
    return v


def _unknown(src, section, d, allowed):
    for k in d:
        if k not in allowed:
            raise DeepSpeedConfigError("%s.%s" % (section, k), "unknown key (DeepSpeed takes: %s)"
                                       % ", ".join(sorted(allowed)), src)


def from_deepspeed_config(path_or_dict):
    """Reads a DeepSpeed config (a path to a JSON file, or the dict) and
    returns SpillwaySettings. Raises DeepSpeedConfigError (a ValueError)
    naming the key when the config is malformed or asks for something
    spillway cannot do."""
    if isinstance(path_or_dict, (str, os.PathLike)):
        src = os.fspath(path_or_dict)
        try:
            with open(src) as f:
                cfg = json.load(f)
        except json.JSONDecodeError as e:
            raise DeepSpeedConfigError("(file)", "not valid JSON: %s" % e, src) from None
    elif isinstance(path_or_dict, dict):
        src, cfg = None, path_or_dict
    else:
        raise TypeError("from_deepspeed_config takes a path or a dict, not %s"
                        % type(path_or_dict).__name__)
    if not isinstance(cfg, dict):
        raise DeepSpeedConfigError("(top level)", "must be a JSON object", src)

    s = SpillwaySettings()
    ign = s.ignored

    zero = _section(src, "zero_optimization", cfg.get("zero_optimization", {}))
    off = zero.get("offload_optimizer")
    if off is None and zero.get("cpu_offload") is True:
        off = {"device": "cpu"}
        ign.append(("zero_optimization.cpu_offload", "read as offload_optimizer.device \"cpu\" "
                    "(the old spelling)"))
    elif "cpu_offload" in zero:
        _bool(src, "zero_optimization.cpu_offload", zero["cpu_offload"])
        ign.append(("zero_optimization.cpu_offload", "offload_optimizer takes precedence"))
    if off is None:
        raise DeepSpeedConfigError("zero_optimization.offload_optimizer",
                                   "missing: spillway offloads the optimizer; set "
                                   "{\"device\": \"cpu\"} or {\"device\": \"nvme\", \"nvme_path\": ...}",
                                   src)
    K = "zero_optimization.offload_optimizer"
    _section(src, K, off)
    _unknown(src, K, off, _OFFLOAD_OPT_KEYS)
    dev = _device(src, K + ".device", off.get("device", "none"))
    if dev == "none":
        raise DeepSpeedConfigError(K + ".device", "\"none\" turns offload off; spillway needs "
                                   "\"cpu\" or \"nvme\"", src)
    s.tier = dev
    if dev == "nvme":
        if "nvme_path" not in off:
            raise DeepSpeedConfigError(K + ".nvme_path", "missing: device \"nvme\" needs the "
                                       "drive's mount point", src)
        s.swap_dirs = [_nvme_path(src, K + ".nvme_path", off["nvme_path"])]
        ign.append((K + ".nvme_path", "not opened by the trainer: give spillwayd swap.dirs "
                    "(see daemon_config()) on that drive"))
    elif "nvme_path" in off:
        _nvme_path(src, K + ".nvme_path", off["nvme_path"])
        ign.append((K + ".nvme_path", "device is \"cpu\""))
    if "pin_memory" in off:
        s.pin_memory = _bool(src, K + ".pin_memory", off["pin_memory"])
        if not s.pin_memory:
            ign.append((K + ".pin_memory", "spillwayd always shares page-locked memory when it "
                        "can; false only relaxes pool.require_locked"))
    if "buffer_count" in off:
        v = _num(src, K + ".buffer_count", off["buffer_count"], lo=1, hi=1024, integer=True)
        s.window = v or 0
    if "ratio" in off:
        r = _num(src, K + ".ratio", off["ratio"], lo=0.0, hi=1.0)
        if r is not None and r < 1.0:
            ign.append((K + ".ratio", "spillway offloads all of the optimizer state; %g read as 1"
                        % r))
    for k in ("pipeline_read", "pipeline_write", "pipeline"):
        if k in off:
            _bool(src, "%s.%s" % (K, k), off[k])
            ign.append(("%s.%s" % (K, k), "spillway always overlaps NVMe reads (prefetch in the "
                        "recorded order) and writes (write-behind) with the step"))
    if "fast_init" in off:
        _bool(src, K + ".fast_init", off["fast_init"])
        ign.append((K + ".fast_init", "state is initialised page by page as it is registered"))

    P = "zero_optimization.offload_param"
    par = zero.get("offload_param")
    if par is not None:
        _section(src, P, par)
        _unknown(src, P, par, _OFFLOAD_PARAM_KEYS)
        pdev = _device(src, P + ".device", par.get("device", "none"))
        if pdev != "none":
            po = {"device": pdev}
            if pdev == "nvme":
                if "nvme_path" not in par:
                    raise DeepSpeedConfigError(P + ".nvme_path", "missing: device \"nvme\" needs "
                                               "the drive's mount point", src)
                po["nvme_path"] = _nvme_path(src, P + ".nvme_path", par["nvme_path"])
                if po["nvme_path"] not in s.swap_dirs:
                    s.swap_dirs.append(po["nvme_path"])
            if "pin_memory" in par:
                po["pin_memory"] = _bool(src, P + ".pin_memory", par["pin_memory"])
            if "buffer_count" in par:
                po["buffer_count"] = _num(src, P + ".buffer_count", par["buffer_count"], lo=1,
                                          integer=True)
            if "buffer_size" in par:
                po["buffer_size"] = _num(src, P + ".buffer_size", par["buffer_size"], lo=1,
                                         integer=True)
            if "max_in_cpu" in par:
                po["max_in_cpu"] = _num(src, P + ".max_in_cpu", par["max_in_cpu"], lo=0,
                                        integer=True)
            s.param_offload = po
            if pdev != s.tier:
                ign.append((P + ".device", "%r read as %r: parameters and optimizer state are one "
                            "page set in spillway, on offload_optimizer's tier" % (pdev, s.tier)))
    for k in ("stage3_max_live_parameters", "stage3_prefetch_bucket_size"):
        if k in zero:
            v = _num(src, "zero_optimization." + k, zero[k], lo=1, integer=True)
            if v is None:
                ign.append(("zero_optimization." + k, "\"auto\": left to spillway's default"))
            elif s.param_offload is None:
                ign.append(("zero_optimization." + k, "offload_param is off"))
            else:
                setattr(s, k[len("stage3_"):], v)

    for k in zero:
        if k in ("offload_optimizer", "offload_param", "cpu_offload", "stage3_max_live_parameters",
                 "stage3_prefetch_bucket_size"):
            continue
        why = _ZERO_REASONS.get(k)
        if why is None:
            why = ("a ZeRO-3 partitioning setting; partitioning is the trainer's" if k.startswith("stage3_")
                   else "not an offload setting")
        ign.append(("zero_optimization." + k, why))

    opt = cfg.get("optimizer")
    if opt is not None:
        _section(src, "optimizer", opt)
        typ = opt.get("type")
        if not isinstance(typ, str) or typ.lower() not in ("adam", "adamw"):
            raise DeepSpeedConfigError("optimizer.type", "%r: spillway runs Adam/AdamW only" % (typ,),
                                       src)
        prm = _section(src, "optimizer.params", opt.get("params", {}))
        _unknown(src, "optimizer.params", prm, _OPT_PARAM_KEYS)
        for k in opt:
            if k not in ("type", "params"):
                ign.append(("optimizer." + k, "not an optimizer parameter"))
        if typ.lower() == "adam":
            if prm.get("adam_w_mode", True) is False:
                raise DeepSpeedConfigError("optimizer.params.adam_w_mode",
                                           "false asks for L2 regularisation folded into the "
                                           "gradient; spillway runs AdamW (decoupled weight decay) only",
                                           src)
        if "adam_w_mode" in prm:
            _bool(src, "optimizer.params.adam_w_mode", prm["adam_w_mode"])
        if prm.get("amsgrad", False) is not False:
            raise DeepSpeedConfigError("optimizer.params.amsgrad", "spillway has no AMSGrad", src)
        if prm.get("bias_correction", True) is not True:
            raise DeepSpeedConfigError("optimizer.params.bias_correction",
                                       "spillway always applies Adam's bias correction", src)
        for k in ("torch_adam", "fused"):
            if k in prm:
                ign.append(("optimizer.params." + k, "spillway runs its own fused CPU kernels"))
        if "lr" in prm:
            v = _num(src, "optimizer.params.lr", prm["lr"], lo=0.0)
            if v is not None:
                s.optimizer["lr"] = float(v)
        if "betas" in prm and not _auto(prm["betas"]):
            b = prm["betas"]
            if not isinstance(b, (list, tuple)) or len(b) != 2:
                raise DeepSpeedConfigError("optimizer.params.betas", "%r is not a pair [beta1, beta2]"
                                           % (b,), src)
            s.optimizer["betas"] = (
                float(_num(src, "optimizer.params.betas[0]", b[0], lo=0.0, hi=1.0)),
                float(_num(src, "optimizer.params.betas[1]", b[1], lo=0.0, hi=1.0)))
            for i, x in enumerate(s.optimizer["betas"]):
                if x >= 1.0:
                    raise DeepSpeedConfigError("optimizer.params.betas[%d]" % i, "%g must be < 1" % x, src)
        if "eps" in prm:
            v = _num(src, "optimizer.params.eps", prm["eps"], lo=0.0)
            if v is not None:
                s.optimizer["eps"] = float(v)
        if "weight_decay" in prm:
            v = _num(src, "optimizer.params.weight_decay", prm["weight_decay"], lo=0.0)
            if v is not None:
                s.optimizer["weight_decay"] = float(v)
        elif typ.lower() == "adam":
            # DeepSpeed's Adam defaults weight_decay to 0, torch's AdamW to 0.01.
            s.optimizer["weight_decay"] = 0.0
        for k in ("lr", "betas", "eps", "weight_decay"):
            if _auto(prm.get(k)):
                ign.append(("optimizer.params." + k, "\"auto\": left to the trainer"))

    if "fp16" in cfg:
        _fp16(src, s, _section(src, "fp16", cfg["fp16"]))
    for k in ("fp16", "bf16"):
        if isinstance(cfg.get(k), dict) and cfg[k].get("enabled") is True:
            s.param_bytes = 2

    if "gradient_accumulation_steps" in cfg:
        v = _num(src, "gradient_accumulation_steps", cfg["gradient_accumulation_steps"], lo=1,
                 integer=True)
        if v is None:
            ign.append(("gradient_accumulation_steps", "\"auto\": left to the trainer (default 1)"))
        else:
            s.accumulation_steps = v
    if "gradient_clipping" in cfg:
        v = _num(src, "gradient_clipping", cfg["gradient_clipping"], lo=0.0)
        if v is None:
            ign.append(("gradient_clipping", "\"auto\": left to the trainer (default off)"))
        elif v > 0:
            s.max_grad_norm = float(v)
            s.mode = "exact"

    for k in cfg:
        if k in ("zero_optimization", "optimizer", "gradient_accumulation_steps", "gradient_clipping",
                 "fp16"):
            continue
        ign.append((k, _TOP_REASONS.get(k, "not an offload setting")))
    return s


_FP16_KEYS = {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
              "consecutive_hysteresis", "min_loss_scale", "auto_cast", "fp16_master_weights_and_grads"}


def _fp16(src, s, f):
    """fp16: {enabled, loss_scale (0: dynamic), initial_scale_power,
    loss_scale_window, ...} -> OffloadAdamW's loss_scale options. Dynamic
    scaling skips inf/nan steps before Adam runs: exact mode."""
    _unknown(src, "fp16", f, _FP16_KEYS)
    en = f.get("enabled", False)
    if _auto(en):
        s.ignored.append(("fp16.enabled", "\"auto\": left to the trainer (no loss scaling)"))
        return
    if not _bool(src, "fp16.enabled", en):
        return
    ls = _num(src, "fp16.loss_scale", f.get("loss_scale", 0), lo=0.0)
    if ls:
        s.loss_scale = float(ls)
    else:
        power = _num(src, "fp16.initial_scale_power", f.get("initial_scale_power", 16), lo=0,
                     hi=126, integer=True)
        window = _num(src, "fp16.loss_scale_window", f.get("loss_scale_window", 1000), lo=1,
                      integer=True)
        s.loss_scale = "dynamic"
        s.init_loss_scale = float(2 ** (16 if power is None else power))
        s.growth_interval = 1000 if window is None else window
        s.mode = "exact"
    for k, why in (("hysteresis", "spillway halves the scale at every overflow (GradScaler's "
                                  "policy, hysteresis 1)"),
                   ("consecutive_hysteresis", "spillway halves the scale at every overflow"),
                   ("min_loss_scale", "spillway's scale has no floor"),
                   ("auto_cast", "casting is the model's"),
                   ("fp16_master_weights_and_grads", "spillway's master weights are fp32")):
        if k in f:
            s.ignored.append(("fp16." + k, why))
