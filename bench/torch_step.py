#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""spillway-bench torch: a GPT training step with torch.optim.AdamW vs OffloadAdamW.

    spillway-bench torch [--json] [--quick] [--layers L] [--width W] [--heads H]
                         [--vocab V] [--seq T] [--batch B] [--steps S] [--warmup N]
                         [--tiers cpu,nvme] [--modes overlapped,exact]
                         [--device cpu|cuda] [--dtype float32|bfloat16]
                         [--spw-threads N] [--torch-threads N] [--socket PATH]
                         [--trainer-threads N|auto] [--variant LABEL[:K=V[;K=V]]]...
    spillway-bench torch --param-offload ...   (bench/torch_param_offload.py: the
                         model's parameters in spillway too, against the same model resident)

Each configuration (torch's AdamW, then OffloadAdamW for every tier and
mode asked for) trains the same model (same seed, same data) in a process
of its own, so that each one's resident memory is its own. The processes
stay alive for the whole run and step in turns, one at a time, round after
round, each round starting one configuration later: these machines drift by
tens of percent between runs, so A and B are compared inside one run.

--variant runs every OffloadAdamW configuration once per variant, each
trainer with the variant's environment, e.g. an older library against this
one in the same run: --variant base:SPILLWAY_LIB=/old/libspillway.so.0
--variant this. --trainer-threads sets $SPILLWAY_TRAINER_THREADS for the
OffloadAdamW trainers (auto: the cores this process may use for a CPU
model, 1 for a CUDA one), which libspillway's pool sizes itself by
(docs/pipeline.md, "Threading policy").

A step is zero_grad, forward, backward and optimizer.step(), timed on the
trainer (with device='cuda', up to a synchronize). Without --socket a
private spillwayd is started on a temporary directory (its NVMe-tier swap
under /var/tmp) and stopped at the end.

One JSON line per configuration (with --json):
  step_s              median step time over the measured rounds
  opt_s               median time spent inside optimizer.step()
  torch_step_s        the same median for torch.optim.AdamW in this run
  trainer_cpu_s       median CPU time (every thread of the trainer) per step
  daemon_cpu_s        median CPU time spillwayd spent during the step (a
                      private daemon only)
  cpu_ratio_vs_torch  (trainer_cpu_s + daemon_cpu_s) / torch's trainer_cpu_s:
                      less sensitive than the step time to other load on
                      the machine
  ratio_vs_torch      step_s / torch_step_s (< 1: faster than torch)
  trainer_rss_bytes   the trainer's VmRSS after the measured steps; it
                      includes the pages of the spillway region it maps
                      (trainer_shmem_bytes of it)
  torch_rss_bytes     the torch.optim.AdamW trainer's VmRSS
  daemon_region_bytes the session's pinned region in spillwayd
  daemon_region_held_bytes  what of it holds memory: a resident tensor's
                      last page keeps only its bytes (rounded up to 4 KiB)
  daemon_locked_bytes the same when the daemon could mlock it, else 0
  footprint_bytes     trainer_rss - trainer_shmem + daemon_region_held: the
                      memory the configuration holds, the shared region
                      counted once; compare with torch_rss_bytes
  trainer_heap_bytes  what of trainer_rss is glibc's brk heap (freed
                      blocks it keeps: the part that moves between runs)
  trainer_hwm_bytes   the trainer's VmHWM over the measured steps (reset
                      after the warm-up through /proc/self/clear_refs): the
                      most it held at once, in forward, backward or step
  torch_peak_bytes    the same for the torch.optim.AdamW trainer (its
                      step's temporaries included)
  footprint_peak_bytes  trainer_hwm - trainer_shmem + daemon_region_held
                      (the smaller of the shmem counts at the reset and at
                      the end: never an understatement); compare with
                      torch_peak_bytes in footprint_peak_vs_torch: what a
                      machine must have for the run, where footprint_bytes
                      is what stays held between steps
plus the configuration (model shape, params, threads, load average).

The default model is GPT-2 small's shape with an untied head (162M
parameters); --quick is a tiny one for a smoke run. Realistic figures on
CPU need OpenBLAS (Debian: apt-get install libopenblas0-pthread); without
it Debian's torch 1.13 uses the reference BLAS and a step takes minutes.
"""
import argparse
import json
import math
import os
import shutil
import signal
import socket as _socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

QUICK = dict(layers=2, width=64, heads=4, vocab=256, seq=32, batch=2, steps=2, warmup=1)
DEFAULT = dict(layers=12, width=768, heads=12, vocab=50257, seq=256, batch=1, steps=3, warmup=2)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="spillway-bench torch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="one JSON object per configuration")
    ap.add_argument("--quick", action="store_true", help="a tiny model, 1 warm-up and 2 steps")
    for k in ("layers", "width", "heads", "vocab", "seq", "batch", "steps", "warmup"):
        ap.add_argument("--" + k, type=int, default=None)
    ap.add_argument("--tiers", default="cpu,nvme", help="comma list of cpu, nvme")
    ap.add_argument("--modes", default="overlapped,exact", help="comma list of overlapped, exact")
    ap.add_argument("--no-torch", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="parameter dtype (bfloat16: with --device cuda)")
    ap.add_argument("--spw-threads", type=int, default=0,
                    help="OffloadAdamW(threads=); 0: libspillway's default")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch.set_num_threads in every trainer; 0: torch's default")
    ap.add_argument("--trainer-threads", default=None,
                    help="$SPILLWAY_TRAINER_THREADS for the OffloadAdamW trainers (N or auto)")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL[:KEY=VAL[;KEY=VAL]]: run the OffloadAdamW configurations again "
                         "with this environment (repeatable)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--socket", default=None, help="a running spillwayd's control socket")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    base = QUICK if a.quick else DEFAULT
    for k, v in base.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.tiers = [t for t in a.tiers.split(",") if t]
    a.modes = [m for m in a.modes.split(",") if m]
    for t in a.tiers:
        if t not in ("cpu", "nvme"):
            ap.error("--tiers: %r is neither cpu nor nvme" % t)
    for m in a.modes:
        if m not in ("overlapped", "exact"):
            ap.error("--modes: %r is neither overlapped nor exact" % m)
    if a.width % a.heads:
        ap.error("--width %d is not a multiple of --heads %d" % (a.width, a.heads))
    if min(a.layers, a.width, a.vocab, a.seq, a.batch, a.steps) < 1 or a.warmup < 0:
        ap.error("sizes and --steps must be >= 1, --warmup >= 0")
    if a.trainer_threads not in (None, "auto") and not a.trainer_threads.isdigit():
        ap.error("--trainer-threads: %r is neither a number nor auto" % a.trainer_threads)
    variants = []
    for v in a.variant or ["default"]:
        label, _, rest = v.partition(":")
        env = {}
        for kv in filter(None, rest.split(";")):
            k, eq, val = kv.partition("=")
            if not eq or not k:
                ap.error("--variant %r: %r is not KEY=VALUE" % (v, kv))
            env[k] = val
        variants.append((label or "default", env))
    a.variants = variants
    return a


def param_count(a):
    """Parameters of the model below, without building it."""
    w = a.width
    per_layer = 12 * w * w + 13 * w
    return a.layers * per_layer + 2 * a.vocab * w + a.seq * w + 2 * w


def proc_status(pid="self"):
    """Memory figures of /proc/PID/status in bytes."""
    out = {}
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "VmLck", "RssAnon", "RssFile", "RssShmem"):
                out[k] = int(v.split()[0]) * 1024
    return out


def heap_rss():
    """Bytes of the brk heap that are resident: where glibc keeps freed
    small and medium blocks (torch's large tensors are mmaps of their
    own), so where a trainer's RSS drifts from run to run."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                inside = line.rstrip().endswith("[heap]")
            elif inside and head == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


# ------------------------------------------------------------------ worker


def _threads_cpu():
    """CPU seconds of this process's threads so far, summed by thread name
    (libspillway names its pool workers spw-pool)."""
    out = {}
    tck = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        fields = st[st.rindex(")") + 2:].split()
        out[name] = round(out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tck, 2)
    return out


def _task_count():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def worker(a, cfg):
    """One trainer: reads commands on stdin, answers one JSON line each."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints from libraries must not corrupt the answers
    os.environ.update(cfg.get("env", {}))
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if a.torch_threads:
        torch.set_num_threads(a.torch_threads)
    device = torch.device(a.device)
    dtype = getattr(torch, a.dtype)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            w = a.width
            self.ln1 = nn.LayerNorm(w)
            self.qkv = nn.Linear(w, 3 * w)
            self.proj = nn.Linear(w, w)
            self.ln2 = nn.LayerNorm(w)
            self.fc = nn.Linear(w, 4 * w)
            self.out = nn.Linear(4 * w, w)

        def forward(self, x, mask):
            b, t, c = x.shape
            h = a.heads
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(a.vocab, a.width)
            self.pos = nn.Embedding(a.seq, a.width)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln = nn.LayerNorm(a.width)
            self.head = nn.Linear(a.width, a.vocab, bias=False)

        def forward(self, idx, mask):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x, mask)
            return self.head(self.ln(x))

    torch.manual_seed(0)
    model = GPT()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)
    model = model.to(device=device, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(a.vocab, (a.batch, a.seq + 1), generator=g).to(device)
    x, y = data[:, :-1], data[:, 1:]
    mask = ~torch.tril(torch.ones(a.seq, a.seq, dtype=torch.bool, device=device))

    opt = None
    socket = cfg.get("socket")
    session = "bench/torch-%s-%s-%d" % (cfg["tier"], cfg["mode"], os.getpid())
    spw_threads = None
    if cfg["kind"] == "torch":
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    else:
        try:
            from spillway.torch import OffloadAdamW
        except ImportError:
            sys.path.insert(0, os.path.join(HERE, "..", "python"))
            from spillway.torch import OffloadAdamW
        n0 = _task_count()
        opt = OffloadAdamW(model.named_parameters(), lr=a.lr, weight_decay=0.01,
                           tier=cfg["tier"], mode=cfg["mode"], socket=socket,
                           session=session, threads=a.spw_threads)
        # Threads libspillway started: the pool's workers, the engine and
        # the host backend's two copy streams.
        spw_threads = _task_count() - n0

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def answer(obj):
        out.write(json.dumps(obj) + "\n")

    answer({"ready": True, "params": sum(p.numel() for p in model.parameters()),
            "spw_threads": spw_threads,
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__})
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "step":
            sync()
            c0 = time.process_time()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            logits = model(x, mask)
            loss = F.cross_entropy(logits.reshape(-1, a.vocab).float(), y.reshape(-1))
            loss.backward()
            sync()
            t1 = time.perf_counter()
            opt.step()
            sync()
            t2 = time.perf_counter()
            answer({"step_s": t2 - t0, "opt_s": t2 - t1, "cpu_s": time.process_time() - c0,
                    "loss": float(loss)})
        elif cmd == "peak_reset":
            # The peak resident set (VmHWM) from now on: the measured
            # steps', not the model's construction or the first step's.
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            m = proc_status()
            answer({"shmem": m.get("RssShmem", 0), "rss": m.get("VmRSS", 0)})
        elif cmd == "mem":
            m = proc_status()
            res = {"rss": m.get("VmRSS", 0), "hwm": m.get("VmHWM", 0),
                   "threads_cpu_s": _threads_cpu(),
                   "shmem": m.get("RssShmem", 0), "heap": heap_rss(), "region": 0, "region_held": 0, "locked": False}
            if cfg["kind"] != "torch":
                import spillway
                st = spillway.status(socket) if socket else spillway.status()
                for s in st.get("sessions", []):
                    if s.get("name") == session:
                        res["region"] = int(s.get("region_bytes", 0))
                        # What of it holds memory (the unused tails of
                        # resident pages are given back).
                        res["region_held"] = int(s["region_resident_bytes"])
                        res["locked"] = bool(s.get("locked"))
                res["daemon_pid"] = st.get("pid")
            answer(res)
        elif cmd == "quit":
            break
        else:
            answer({"error": "unknown command %r" % cmd})
    if cfg["kind"] != "torch":
        opt.close()
    return 0


# ------------------------------------------------------------------ daemon


def find_daemon():
    """$SPILLWAYD (spillway-bench sets it to the daemon of its own build),
    the daemon beside the library in use, or PATH."""
    if os.environ.get("SPILLWAYD"):
        return os.environ["SPILLWAYD"]
    try:
        import spillway
        libdir = os.path.dirname(spillway.library_path() or "")
    except Exception:
        libdir = ""
    for rel in ("../daemon/spillwayd", "../sbin/spillwayd", "../../sbin/spillwayd"):
        cand = os.path.normpath(os.path.join(libdir, rel))
        if libdir and os.access(cand, os.X_OK):
            return cand
    found = shutil.which("spillwayd")
    if not found:
        sys.exit("spillway-bench torch: no spillwayd found (set SPILLWAYD=path/to/spillwayd, "
                 "or pass --socket of a running daemon)")
    return found


class Daemon:
    """A private spillwayd: sockets in a temp dir, swap under /var/tmp."""

    def __init__(self, pool_bytes, session_bytes, swap_bytes, swap_session_bytes):
        binary = find_daemon()
        self.dir = tempfile.mkdtemp(prefix="spw-bench-torch-")
        self.swap = tempfile.mkdtemp(prefix="spw-bench-torch-swap-", dir="/var/tmp")
        cfg = {"socket": {"dir": self.dir, "mode": "0600"},
               "pool": {"max_bytes": pool_bytes, "session_max_bytes": session_bytes,
                        "require_locked": False},
               "swap": {"dirs": [{"path": self.swap, "max_bytes": swap_bytes}],
                        "session_bytes": swap_session_bytes},
               "log": {"level": "warn"}}
        path = os.path.join(self.dir, "spillwayd.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.control = os.path.join(self.dir, "control.sock")
        self.proc = subprocess.Popen([binary, "--config", path], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                self.cleanup()
                sys.exit("spillway-bench torch: spillwayd (%s) exited with %s at start"
                         % (binary, self.proc.returncode))
            s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                s.connect(self.control)
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    sys.exit("spillway-bench torch: spillwayd did not come up in 20 s")
                time.sleep(0.02)
            finally:
                s.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.cleanup()

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.swap, ignore_errors=True)


# ------------------------------------------------------------------ parent


class Trainer:
    def __init__(self, argv, cfg):
        self.cfg = cfg
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg)] + argv,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.info = self.read()

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            raise RuntimeError("trainer %s exited (status %s); its error is above"
                               % (label(self.cfg), rc))
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError("trainer %s: %s" % (label(self.cfg), r["error"]))
        return r

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def label(cfg):
    if cfg["kind"] == "torch":
        return "torch.optim.AdamW"
    v = cfg.get("variant", "default")
    return "OffloadAdamW %s/%s%s" % (cfg["tier"], cfg["mode"], "" if v == "default" else " [%s]" % v)


def cpu_seconds(pid):
    """utime + stime of a process, from /proc/PID/stat; None if unreadable."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def progress(done, total):
    """'torch: step 3/20' on stderr, redrawn in place, only on a terminal
    (as spillway-bench's C benches do); done == total clears the line."""
    if not sys.stderr.isatty():
        return
    if done >= total:
        sys.stderr.write("\r\033[K")
    else:
        sys.stderr.write("\r\033[Ktorch: step %d/%d" % (done + 1, total))
    sys.stderr.flush()


def main(argv):
    if "--param-offload" in argv:  # parameters in spillway too: bench/torch_param_offload.py
        sys.path.insert(0, HERE)
        import torch_param_offload
        return torch_param_offload.main(argv)
    a = parse_args(argv)
    if a.worker:
        return worker(a, json.loads(a.worker))
    params = param_count(a)
    cfgs = [] if a.no_torch else [{"kind": "torch", "tier": "none", "mode": "none"}]
    tt = {}
    if a.trainer_threads == "auto":
        tt["SPILLWAY_TRAINER_THREADS"] = str(len(os.sched_getaffinity(0)) if a.device == "cpu" else 1)
    elif a.trainer_threads:
        tt["SPILLWAY_TRAINER_THREADS"] = a.trainer_threads
    cfgs += [{"kind": "spillway", "tier": t, "mode": m, "variant": label, "env": dict(tt, **env)}
             for t in a.tiers for m in a.modes for label, env in a.variants]
    if not cfgs:
        sys.exit("spillway-bench torch: no configuration to run")
    n_cpu = sum(1 for c in cfgs if c["tier"] == "cpu")
    n_nvme = sum(1 for c in cfgs if c["tier"] == "nvme")
    state = 16 * params  # p, m, v and a gradient store, fp32
    # OffloadAdamW rounds every tensor up to whole pages (up to 4 MiB), so
    # a model of many small tensors needs room beyond the state itself.
    session_bytes = 2 * state + (1 << 30)
    daemon = None
    socket = a.socket
    if socket is None and n_cpu + n_nvme:
        # Every session gets swap.session_bytes of swap (the cpu tier's
        # too, unused), so the directory holds one state per session.
        swap_session = session_bytes
        daemon = Daemon(pool_bytes=session_bytes * max(n_cpu, 1) + (512 << 20) * n_nvme,
                        session_bytes=session_bytes, swap_session_bytes=swap_session,
                        swap_bytes=swap_session * (n_cpu + n_nvme) + (256 << 20))
        socket = daemon.control
    trainers = []
    load0 = os.getloadavg()
    try:
        for c in cfgs:
            c["socket"] = socket
            trainers.append(Trainer(argv, c))
        times = [[] for _ in trainers]
        opt_times = [[] for _ in trainers]
        cpu_times = [[] for _ in trainers]
        daemon_times = [[] for _ in trainers]
        losses = [None] * len(trainers)
        total, done = (a.warmup + a.steps) * len(trainers), 0
        for _ in range(a.warmup):
            for t in trainers:
                progress(done, total)
                t.ask("step")
                done += 1
        resets = [t.ask("peak_reset") for t in trainers]
        for r in range(a.steps):
            for k in range(len(trainers)):
                i = (r + k) % len(trainers)
                progress(done, total)
                done += 1
                d0 = cpu_seconds(daemon.proc.pid) if daemon else None
                res = trainers[i].ask("step")
                d1 = cpu_seconds(daemon.proc.pid) if daemon else None
                times[i].append(res["step_s"])
                opt_times[i].append(res["opt_s"])
                cpu_times[i].append(res["cpu_s"])
                if d0 is not None and d1 is not None:
                    daemon_times[i].append(d1 - d0)
                losses[i] = res["loss"]
        progress(total, total)
        mems = [t.ask("mem") for t in trainers]
    finally:
        for t in trainers:
            t.close()
        if daemon:
            daemon.stop()
    load1 = os.getloadavg()

    base = None
    for i, c in enumerate(cfgs):
        if c["kind"] == "torch":
            base = i
    torch_step = median(times[base]) if base is not None else None
    torch_cpu = median(cpu_times[base]) if base is not None else None
    torch_rss = mems[base]["rss"] if base is not None else None
    torch_peak = mems[base]["hwm"] if base is not None else None
    for i, c in enumerate(cfgs):
        m = mems[i]
        step = median(times[i])
        footprint = m["rss"] - m["shmem"] + m["region_held"]
        # The region's pages the trainer maps count once, at the daemon:
        # taken off at the least the trainer mapped during the steps
        # (its count when the peak was reset), so that the peak of its
        # own memory is never understated.
        footprint_peak = m["hwm"] - min(resets[i]["shmem"], m["shmem"]) + m["region_held"]
        row = {
            "bench": "torch",
            "optimizer": "torch.optim.AdamW" if c["kind"] == "torch" else "OffloadAdamW",
            "tier": c["tier"], "mode": c["mode"], "device": a.device, "dtype": a.dtype,
            "variant": c.get("variant"), "env": c.get("env"),
            "layers": a.layers, "width": a.width, "heads": a.heads, "vocab": a.vocab,
            "seq": a.seq, "batch": a.batch, "params": trainers[i].info["params"],
            "warmup": a.warmup, "steps": a.steps,
            "torch_threads": trainers[i].info["torch_threads"],
            "spw_threads_arg": a.spw_threads if c["kind"] != "torch" else None,
            "spw_threads_started": trainers[i].info.get("spw_threads"),
            "step_s": round(step, 4),
            "step_s_each": [round(t, 4) for t in times[i]],
            "opt_s": round(median(opt_times[i]), 4),
            "trainer_cpu_s": round(median(cpu_times[i]), 4),
            "daemon_cpu_s": round(median(daemon_times[i]), 4) if daemon_times[i] else None,
            "cpu_ratio_vs_torch": round((median(cpu_times[i]) + (median(daemon_times[i])
                                         if daemon_times[i] else 0.0)) / torch_cpu, 3)
            if torch_cpu else None,
            "torch_step_s": round(torch_step, 4) if torch_step else None,
            "ratio_vs_torch": round(step / torch_step, 3) if torch_step else None,
            "trainer_threads_cpu_s": m.get("threads_cpu_s"),
            "trainer_rss_bytes": m["rss"],
            "trainer_hwm_bytes": m["hwm"],
            "trainer_shmem_bytes": m["shmem"],
            "trainer_heap_bytes": m["heap"],
            "torch_rss_bytes": torch_rss,
            "daemon_region_bytes": m["region"],
            "daemon_region_held_bytes": m["region_held"],
            "daemon_locked_bytes": m["region"] if m["locked"] else 0,
            "footprint_bytes": footprint,
            "footprint_vs_torch": round(footprint / torch_rss, 3) if torch_rss else None,
            "torch_peak_bytes": torch_peak,
            "footprint_peak_bytes": footprint_peak,
            "footprint_peak_vs_torch": round(footprint_peak / torch_peak, 3) if torch_peak else None,
            "loss": losses[i],
            "loadavg": [round(load0[0], 2), round(load1[0], 2)],
            "torch": trainers[i].info["torch"],
        }
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print("%-30s step %7.3f s (opt %6.3f s)  x%-5s vs torch  rss %6.0f MiB  "
                  "footprint %6.0f MiB" % (label(c), step, row["opt_s"],
                                           row["ratio_vs_torch"], m["rss"] / 2**20,
                                           footprint / 2**20))
    if not a.json:
        print("%d parameters, %d warm-up + %d measured steps each, load average %.2f -> %.2f"
              % (params, a.warmup, a.steps, load0[0], load1[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
