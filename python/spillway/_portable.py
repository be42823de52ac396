# SPDX-License-Identifier: MIT
"""Portable checkpoints (docs/persistent.md, "Portable checkpoints"): a
spillway checkpoint directory to a torch file holding a torch.optim.AdamW
state_dict and the fp32 master weights (to_torch), and back (from_torch),
without a daemon. `python -m spillway.checkpoint` is the command line.

The torch file is a dict:

    {"format": "spillway-torch", "version": 1,
     "optimizer": AdamW state_dict: "state" {index: {"step", "exp_avg",
                  "exp_avg_sq"}} (fp32, the parameters' shapes) and
                  "param_groups" (hyperparameters, "params" indices),
     "params":    {torch name: fp32 master weights},
     "spillway":  {"manifest": the manifest less its CRCs,
                   "layout": the optimizer's layout record (parsed),
                   "raw": {tensor name: uint8 bytes} for the session's
                          tensors that are not p, m or v nor int8's scale
                          pages (the layout record, exact mode's gradient
                          store)}}

Reading a checkpoint checks every page's CRC-32C; a mismatch names the
tensor, the page and the file. from_torch(..., like=CKPT) also takes
torch's own {"optimizer": AdamW state_dict, "params": {name: tensor}},
with the "spillway" section of the checkpoint CKPT; given a to-torch file,
like= replaces its section: the state comes out in CKPT's settings (its
state dtype, say int8 moments from an fp32 run).
"""
import ctypes
import json
import os
import re
import struct

from . import _lib as L

FORMAT = "spillway-torch"
VERSION = 1
MANIFEST = "manifest.json"
LAYOUT = "spw.opt.layout"
LAYOUT_MAGIC = 0x4c575053
ROLES = ("param", "exp_avg", "exp_avg_sq")
DTYPES = {0: "fp32", 1: "bf16", 2: "int8"}  # enum spw_state_dtype, the layout's mode word's high half
Q8_BLOCK = 256
# torch.optim.AdamW's defaults: the param groups of a checkpoint that
# carries no hyperparameters (taken by spillwayctl rather than by
# OffloadAdamW.save_checkpoint).
ADAMW_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}


class CheckpointError(ValueError):
    """A checkpoint or torch file that cannot be converted, with the file
    and what is wrong with it."""


def crc32c(data, crc=0):
    """CRC-32C of a bytes-like object (libspillway's spw_crc32c)."""
    lib = L.load()
    fn = getattr(lib, "spw_crc32c", None)
    if fn is None:
        raise NotImplementedError("CRC-32C needs a libspillway with spw_crc32c (%s is older)" % L.library_path())
    fn.restype, fn.argtypes = ctypes.c_uint32, [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
    mv = memoryview(data).cast("B")
    if mv.readonly:
        buf = ctypes.c_char_p(bytes(mv))
        return fn(crc, ctypes.cast(buf, ctypes.c_void_p), len(mv))
    return fn(crc, ctypes.addressof(ctypes.c_char.from_buffer(mv)) if len(mv) else None, len(mv))


def page_crcs(data, page_size):
    return [crc32c(data[at:at + page_size]) for at in range(0, len(data), page_size)]


def read_manifest(directory, sizes=True):
    """directory's manifest when it is a spillway checkpoint (version 1),
    and, with sizes, each tensor's data file there holds its bytes (not
    their CRCs: read_checkpoint and a restore check those); else
    CheckpointError naming the file and what is wrong."""
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, "rb") as f:
            m = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise CheckpointError("%s: not a readable spillway checkpoint manifest (%s)" % (path, e)) from e
    if not isinstance(m, dict):
        raise CheckpointError("%s: not a spillway checkpoint manifest (a JSON %s)" % (path, type(m).__name__))
    if m.get("format") == "spillway-checkpoint" and m.get("version") == 2:
        # The save of an orphan whose trainer died inside a step's updates:
        # two steps' mix, which only a takeover's journal sorts out.
        raise CheckpointError("%s: a save in persist.state_dir of a session whose trainer died inside step %s's "
                              "updates (committed step %s): it mixes two steps and is no checkpoint; take the "
                              "session over (a persistent attach) and checkpoint it at its next commit"
                              % (path, m.get("opened_step"), m.get("committed_step")))
    if m.get("format") == "spillway-checkpoint" and m.get("version") == 3:
        # A stopping daemon's save: its swap pages stayed in the daemon's
        # swap files, hard-linked beside the manifest.
        raise CheckpointError("%s: a stopping spillwayd's save in its persist.state_dir (format version 3: the "
                              "session's swap files are linked into it, not copied), not a checkpoint; spillwayd "
                              "restores it at start: take a checkpoint of session %r once it is back"
                              % (path, m.get("session")))
    if m.get("format") != "spillway-checkpoint" or m.get("version") != 1:
        raise CheckpointError("%s: format %r version %r; this reads spillway-checkpoint version 1"
                              % (path, m.get("format"), m.get("version")))
    for t in m.get("tensors", []) if sizes else []:
        fp = _data_file(path, directory, t)
        try:
            n = os.stat(fp).st_size
        except OSError as e:
            raise CheckpointError("tensor %s: %s" % (t.get("name"), e)) from e
        if n != t.get("bytes"):
            raise CheckpointError("tensor %s: file %s holds %d bytes; the manifest says %s"
                                  % (t.get("name"), fp, n, t.get("bytes")))
    return m


def _data_file(path, directory, t):
    f = t.get("file")
    if not isinstance(f, str) or not f or "/" in f or f.startswith("."):
        raise CheckpointError("%s: tensor %s names the file %r" % (path, t.get("name"), f))
    return os.path.join(directory, f)


def read_checkpoint(directory):
    """(manifest, {tensor name: bytearray}) with every page's CRC checked."""
    path = os.path.join(directory, MANIFEST)
    m = read_manifest(directory, sizes=False)
    psz = m["page_size"]
    data = {}
    for t in m["tensors"]:
        fp = _data_file(path, directory, t)
        with open(fp, "rb") as fh:
            b = bytearray(fh.read())
        if len(b) != t["bytes"]:
            raise CheckpointError("tensor %s: file %s holds %d bytes; the manifest says %d"
                                  % (t["name"], fp, len(b), t["bytes"]))
        crcs = t["crc32c"]
        npages = -(-len(b) // psz)
        if len(crcs) != npages:
            raise CheckpointError("tensor %s: %d CRCs in %s for %d pages" % (t["name"], len(crcs), path, npages))
        mv = memoryview(b)
        for k in range(npages):
            got = crc32c(mv[k * psz:(k + 1) * psz])
            if got != crcs[k]:
                raise CheckpointError("tensor %s page %d (bytes %d..%d of %s): CRC-32C 0x%08x, the manifest says "
                                      "0x%08x: the file is damaged" % (t["name"], k, k * psz,
                                                                       min(len(b), (k + 1) * psz), fp, got, crcs[k]))
        data[t["name"]] = b
    return m, data


def parse_layout(rec):
    """The optimizer's layout record (client/persist.c) as a dict. Version
    1 is fp32's and bf16's (and int8's of an older spillway, refused);
    version 2 int8's with the scales in the optimizer's scale pages."""
    magic, ver, mode_word, tier, chunk_elems, ngroups = struct.unpack_from("<6I", rec, 0)
    if magic != LAYOUT_MAGIC or ver not in (1, 2):
        raise CheckpointError("the layout record %s is not one this version reads (magic 0x%x version %d)"
                              % (LAYOUT, magic, ver))
    at, entries = 24, []
    while at + 24 <= len(rec):
        count, group, ptype, frozen, nlen = struct.unpack_from("<Q4I", rec, at)
        if nlen == 0 or at + 24 + nlen > len(rec):
            break
        name = bytes(rec[at + 24:at + 24 + nlen]).decode("ascii")
        entries.append({"name": name, "count": count, "group": group, "ptype": ptype, "frozen": bool(frozen)})
        at += 24 + nlen
    # The mode word: the mode, the state dtype above it, a bf16 gradient
    # store's bit above that, then bf16 master weights' (client/persist.c).
    dtype, gstore, master = (mode_word >> 16) & 0xff, (mode_word >> 24) & 1, (mode_word >> 25) & 1
    if dtype not in DTYPES:
        raise CheckpointError("the layout record names state dtype %d, unknown here" % dtype)
    if mode_word >> 26:
        raise CheckpointError("the layout record's mode word 0x%x has bits this version does not know "
                              "(a newer spillway's settings)" % mode_word)
    if (DTYPES[dtype] == "int8") != (ver == 2):
        if ver == 1:
            raise CheckpointError("the layout record %s is version 1 with int8 moments: the layout of an older "
                                  "spillway (three chunks' codes and scales a page), which neither this converter "
                                  "nor this spillway's optimizer reads (four chunks' codes a page, the scales in "
                                  "spw.opt.q8_scales.N); convert it with the spillway that wrote it, to a torch "
                                  "file, and back with from-torch --like a checkpoint of this one" % LAYOUT)
        raise CheckpointError("the layout record %s is version 2 with %s moments; version 2 is int8's"
                              % (LAYOUT, DTYPES[dtype]))
    return {"version": ver, "mode": mode_word & 0xffff, "state_dtype": DTYPES[dtype], "tier": tier,
            "grad_store": "bf16" if gstore else "fp32", "master_dtype": "bf16" if master else "fp32",
            "chunk_elems": chunk_elems, "ngroups": ngroups,
            "tensors": entries}


# ---- moments (client/optimizer-private.h, role_at): chunk k's values of a
# moment start at element k * chunk_elems of its tensor in every state
# dtype (fp32 4 bytes an element, bf16 2, int8 codes 1), so a tensor's
# moments are one array. int8 blocks' scales are the optimizer's: chunk
# after chunk, in the order tensors were added (the layout's) and frozen
# ones skipped, each takes the next slot of the one-page tensors
# spw.opt.q8_scales.N, Q8_SLOTS a page; slot j holds exp_avg's scales at
# byte 2j * page_size / 256 and exp_avg_sq's right after.

Q8_SLOTS = 128
Q8_SCALES = "spw.opt.q8_scales.%d"
ELEM_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}


def moment_bytes(dtype, count):
    """role_bytes()."""
    return count * ELEM_BYTES[dtype]


def q8_slots(layout):
    """{spillway tensor name: its first chunk's slot (global, page
    slot // Q8_SLOTS)} of an int8 layout; the number of slots taken."""
    ce, at, out = layout["chunk_elems"], 0, {}
    for e in layout["tensors"]:
        if e["frozen"]:
            continue
        out[e["name"]] = at
        at += -(-e["count"] // ce)
    return out, at


def _q8_places(slot0, role, psz, chunk_elems, count):
    """(scale page index, byte there, blocks) for each chunk of a tensor
    whose first chunk has slot slot0."""
    sb = psz // 256  # scale bytes of a full chunk and moment: chunk_elems / 256 * 4
    for k, off in enumerate(range(0, count, chunk_elems)):
        g = slot0 + k
        n = min(chunk_elems, count - off)
        yield g // Q8_SLOTS, (2 * (g % Q8_SLOTS) + (role == "exp_avg_sq")) * sb, -(-n // Q8_BLOCK)


def q8_scales_of(data, role, psz, chunk_elems, count, slot0):
    """fp32 numpy array of a tensor's block scales (one per 256 elements
    from element 0: chunks hold whole blocks but the last) out of the
    scale pages in data."""
    import numpy as np
    parts = []
    for page, at, nb in _q8_places(slot0, role, psz, chunk_elems, count):
        buf = data.get(Q8_SCALES % page)
        if buf is None or len(buf) < at + 4 * nb:
            raise CheckpointError("the checkpoint lacks %s (or it is short): int8 moments keep their block scales "
                                  "there" % (Q8_SCALES % page))
        parts.append(np.frombuffer(buf, dtype="<f4", count=nb, offset=at))
    return np.concatenate(parts)


def q8_put_scales(pages, scales, role, psz, chunk_elems, count, slot0):
    """Writes a tensor's block scales into the scale pages ({index:
    bytearray(psz)}, made as needed)."""
    import numpy as np
    b = 0
    for page, at, nb in _q8_places(slot0, role, psz, chunk_elems, count):
        buf = pages.setdefault(page, bytearray(psz))
        buf[at:at + 4 * nb] = np.ascontiguousarray(scales[b:b + nb], dtype="<f4").tobytes()
        b += nb


def decode_moment(buf, role, dtype, count, scales=None):
    """fp32 numpy array of count values of a moment tensor's bytes; int8
    takes the tensor's block scales (q8_scales_of)."""
    import numpy as np
    if dtype == "fp32":
        return np.frombuffer(buf, dtype="<f4", count=count).copy()
    if dtype == "bf16":  # widening is exact: the bits in the high half
        h = np.frombuffer(buf, dtype="<u2", count=count).astype(np.uint32) << 16
        return h.view(np.float32)
    codes = np.frombuffer(buf, dtype=np.int8 if role == "exp_avg" else np.uint8, count=count)
    s = np.repeat(np.asarray(scales, dtype=np.float32), Q8_BLOCK)[:count]
    with np.errstate(all="ignore"):
        if role == "exp_avg":  # kernels/q8.h, spw_q8_dec_m and _dec_v, in fp32
            a = np.abs(codes.astype(np.int32)).astype(np.float32) * np.float32(1.0 / 127.0)
            mag = (a * a) * s
            return np.where(codes < 0, -mag, mag)
        a = codes.astype(np.float32) * np.float32(1.0 / 255.0)
        a2 = a * a
        return (a2 * a2) * s


def encode_moment(vals, role, dtype, count):
    """(bytes of a moment tensor holding vals (fp32), block scales or None)
    coded as the kernels store them: bf16 rounded to nearest even; int8 per
    block of 256 as kernels/q8.h does, operation for operation in fp32:
    the scale s the largest |value| by its bits, one multiplier per block
    k = 127 / sqrt(s) (exp_avg) or 255 / sqrt(sqrt(s)) (exp_avg_sq), the
    code round(sqrt(|m|) * k) with m's sign or round(sqrt(sqrt(v)) * k),
    ties to even, clamped, a nan coded 0. A code decoded and coded again
    is the same code, and a block's largest decodes to s exactly, so what
    decode_moment gives codes back to the same bytes."""
    import numpy as np
    x = np.ascontiguousarray(vals, dtype=np.float32).reshape(-1)
    if dtype == "fp32":
        return bytearray(x.astype("<f4").tobytes()), None
    if dtype == "bf16":
        u = x.view(np.uint32).astype(np.uint64)
        nan = np.isnan(x)
        r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # a quiet nan stays a nan
        return bytearray(r.astype("<u2").tobytes()), None
    nb = -(-count // Q8_BLOCK)
    absbits = x.view(np.uint32) & np.uint32(0x7fffffff)
    s = np.concatenate([absbits, np.zeros(nb * Q8_BLOCK - count, np.uint32)]).reshape(nb, Q8_BLOCK).max(axis=1)
    s = s.astype(np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        if role == "exp_avg":  # spw_q8_km, spw_q8_enc_m
            k = np.repeat(np.float32(127.0) / np.sqrt(s), Q8_BLOCK)[:count]
            f = np.rint(np.sqrt(absbits.view(np.float32)) * k)
            q = np.where(f >= 1.0, np.minimum(np.nan_to_num(f, nan=0.0), 127.0), 0.0).astype(np.int32)
            q = np.where(np.signbit(x), -q, q).astype(np.int8)
        else:  # spw_q8_kv, spw_q8_enc_v
            k = np.repeat(np.float32(255.0) / np.sqrt(np.sqrt(s)), Q8_BLOCK)[:count]
            f = np.rint(np.sqrt(np.sqrt(x)) * k)
            q = np.where(f >= 1.0, np.minimum(np.nan_to_num(f, nan=0.0), 255.0), 0.0).astype(np.uint8)
    return bytearray(q.tobytes()), s


# ---- to-torch

_IDX = re.compile(r"^(\d+):(.*)$")


def _params(layout):
    """The optimizer's parameters, each {"spw", "torch", "index", ...},
    in index order. OffloadAdamW names them "INDEX:torch name" and adds
    them last first; other trainers' come in the layout's order."""
    ps = [dict(e, spw=e["name"]) for e in layout["tensors"]]
    ms = [_IDX.match(p["spw"]) for p in ps]
    if ps and all(ms) and sorted(int(m.group(1)) for m in ms) == list(range(len(ps))):
        for p, m in zip(ps, ms):
            p["index"], p["torch"] = int(m.group(1)), m.group(2)
    else:
        for i, p in enumerate(ps):
            p["index"], p["torch"] = i, p["spw"]
    return sorted(ps, key=lambda p: p["index"])


def to_torch(directory, out=None):
    """Converts the checkpoint in directory into the dict the module's
    docstring describes; saves it to out (torch.save) when given."""
    import torch
    m, data = read_checkpoint(directory)
    if LAYOUT not in data:
        raise CheckpointError("%s: the checkpoint has no %s tensor: it is not an optimizer's (a session "
                              "whose tensors were registered by hand holds no AdamW state)" % (directory, LAYOUT))
    layout = parse_layout(data[LAYOUT])
    meta = (m.get("client") or {}).get("torch") or {}
    psz, ce, dt, mdt = m["page_size"], layout["chunk_elems"], layout["state_dtype"], layout["master_dtype"]
    if ce * 4 != psz or ce % Q8_BLOCK:
        raise CheckpointError("%s: chunks of %d elements in pages of %d bytes: not a layout this version reads"
                              % (directory, ce, psz))
    ps = _params(layout)
    slots = q8_slots(layout)[0] if dt == "int8" else {}
    names, shapes, steps = meta.get("names"), meta.get("shapes"), meta.get("steps")
    state, params, groups = {}, {}, {}
    for p in ps:
        i = p["index"]
        shape = tuple(shapes[i]) if shapes and i < len(shapes) else (p["count"],)
        name = names[i] if names and i < len(names) else p["torch"]
        key = "spw.opt.%s." % p["spw"]
        if len(data.get(key + "param", b"")) < moment_bytes(mdt, p["count"]):
            raise CheckpointError("%s: tensor %sparam is missing or shorter than %d %s master weights"
                                  % (directory, key, p["count"], mdt))
        # bf16 master weights are bf16 moments' bits: widened exactly.
        master = torch.from_numpy(decode_moment(data[key + "param"], "exp_avg", mdt, p["count"]))
        params[name] = master.view(shape)
        if p["frozen"]:
            continue
        groups.setdefault(p["group"], []).append(i)
        step = steps[i] if steps and i < len(steps) else m["committed_step"]
        st = {"step": torch.tensor(float(step))}
        for role in ("exp_avg", "exp_avg_sq"):
            if len(data.get(key + role, b"")) < moment_bytes(dt, p["count"]):
                raise CheckpointError("%s: tensor %s%s is missing or shorter than %d %s moments"
                                      % (directory, key, role, p["count"], dt))
            sc = q8_scales_of(data, role, psz, ce, p["count"], slots[p["spw"]]) if dt == "int8" else None
            v = decode_moment(data[key + role], role, dt, p["count"], sc)
            st[role] = torch.from_numpy(v).view(shape)
        if step > 0:
            state[i] = st
    hp = meta.get("param_groups") or []
    pg = []
    for g in range(layout["ngroups"]):
        d = dict(hp[g]) if g < len(hp) else dict(ADAMW_DEFAULTS)
        d.setdefault("amsgrad", False)
        d.setdefault("maximize", False)
        d.setdefault("foreach", None)
        d.setdefault("capturable", False)
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        d["params"] = groups.get(g, [])
        pg.append(d)
    man = {k: v for k, v in m.items() if k != "tensors"}
    man["tensors"] = [{k: v for k, v in t.items() if k != "crc32c"} for t in m["tensors"]]
    # The moments' tensors and int8's scale pages are made again from
    # the fp32 values; the rest goes as it is.
    roles = {"spw.opt.%s.%s" % (p["spw"], r) for p in ps for r in ROLES}
    if dt == "int8":
        roles |= {Q8_SCALES % i for i in range(-(-q8_slots(layout)[1] // Q8_SLOTS))}
    raw = {n: torch.frombuffer(b, dtype=torch.uint8).clone() for n, b in data.items() if n not in roles}
    doc = {"format": FORMAT, "version": VERSION,
           "optimizer": {"state": state, "param_groups": pg},
           "params": params,
           "spillway": {"manifest": man, "layout": layout, "raw": raw,
                        "hyperparameters": "checkpoint" if hp else "torch.optim.AdamW defaults"}}
    if out is not None:
        torch.save(doc, out)
    return doc


# ---- from-torch

def _fsync_write(dirfd, name, data):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dirfd)
    try:
        mv = memoryview(data)
        while mv:
            n = os.write(fd, mv)
            mv = mv[n:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _rename_noreplace(dirfd, old, new, shown):
    """renameat2(RENAME_NOREPLACE): a plain rename would replace an empty
    directory that appeared at new."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:  # a libc before 2.28: the check above is all there is
        os.rename(old, new, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        return
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(dirfd, old.encode(), dirfd, new.encode(), 1) != 0:  # RENAME_NOREPLACE
        e = ctypes.get_errno()
        raise OSError(e, "from-torch: renaming %s to %s: %s" % (old, shown, os.strerror(e)))


def _adopt_template(doc, like):
    """A torch file ({"optimizer": an AdamW state_dict, "params": {name:
    tensor}}, from torch itself, or to-torch's with its own "spillway"
    section, which is dropped) takes the section of the checkpoint like
    (one the same model and the wanted optimizer settings wrote, at any
    step), with the step of the torch state: committed_step the largest
    update count, each parameter's count its own."""
    import copy
    if not isinstance(doc.get("optimizer"), dict) or not isinstance(doc.get("params"), dict):
        raise CheckpointError("from-torch --like: the file must be a dict with \"optimizer\" (a torch.optim.AdamW "
                              "state_dict) and \"params\" ({name: tensor}, the fp32 weights)")
    sp = copy.deepcopy(to_torch(like)["spillway"])
    steps = {i: int(float(st["step"])) for i, st in doc["optimizer"].get("state", {}).items() if "step" in st}
    if not steps:
        raise CheckpointError("from-torch --like: the optimizer state holds no step: take one step first")
    man = sp["manifest"]
    man["committed_step"] = max(steps.values())
    man["scale_bits"], man["good_steps"] = 0, 0
    meta = (man.get("client") or {}).get("torch")
    if meta is not None and "steps" in meta:
        meta["steps"] = [steps.get(i, 0) for i in range(len(meta["steps"]))]
    hp = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
          for g in doc["optimizer"].get("param_groups", [])]
    if meta is not None and hp:
        meta["param_groups"] = hp
    return dict(doc, format=FORMAT, version=VERSION, spillway=sp)


def from_torch(doc, directory, like=None):
    """Writes the torch file's dict (or its path) as a spillway checkpoint
    into the new directory: data files and a manifest with every page's
    CRC-32C, each fsync'd, written as DIR.tmp-PID and renamed to DIR last.
    The state dtype, the geometry and the tensors are the ones the
    "spillway" section recorded (the optimizer that takes the restored
    session over must be the same); moments are coded in that dtype. With
    like (a checkpoint directory), the section is like's instead
    (_adopt_template): torch's own state, which has none, or a to-torch
    file converted to other settings. Returns the manifest."""
    import numpy as np
    import torch
    if not isinstance(doc, dict):
        doc = torch.load(doc, map_location="cpu")
    if like is not None:
        doc = _adopt_template(doc, like)
    if doc.get("format") != FORMAT or "spillway" not in doc:
        raise CheckpointError("from-torch needs a file made by to-torch (a dict with format %r and its "
                              "\"spillway\" section: the session's geometry and the optimizer's layout, which "
                              "a plain torch state_dict lacks); for torch's own {\"optimizer\": ..., \"params\": "
                              "...}, pass --like DIR, a spillway checkpoint of the same model and settings" % FORMAT)
    sp = doc["spillway"]
    man, layout, raw = dict(sp["manifest"]), sp["layout"], sp["raw"]
    if LAYOUT in raw:  # the record itself, not the parsed copy: an old int8 one is refused
        parse_layout(raw[LAYOUT].numpy().tobytes())
    psz, ce, dt = man["page_size"], layout["chunk_elems"], layout["state_dtype"]
    mdt = layout.get("master_dtype", "fp32")  # a to-torch file of an earlier version has none
    ps = _params(layout)
    meta = (man.get("client") or {}).get("torch") or {}
    names = meta.get("names")
    byname, slots, scale_pages = {}, {}, {}
    if dt == "int8":
        slots, nslots = q8_slots(layout)
        for i in range(-(-nslots // Q8_SLOTS)):  # zeros: slots no chunk has, a short chunk's last bytes
            scale_pages[i] = bytearray(psz)
    state = doc["optimizer"]["state"]
    for p in ps:
        i = p["index"]
        name = names[i] if names and i < len(names) else p["torch"]
        if name not in doc["params"]:
            raise CheckpointError("from-torch: \"params\" lacks %s (parameter %d)" % (name, i))
        master = doc["params"][name].detach().to("cpu", torch.float32).contiguous().view(-1)
        if master.numel() != p["count"]:
            raise CheckpointError("from-torch: params[%s] has %d elements; the layout says %d"
                                  % (name, master.numel(), p["count"]))
        key = "spw.opt.%s." % p["spw"]
        # Into bf16 master weights rounded to nearest even, as
        # spw_optimizer_write stores them.
        byname[key + "param"] = encode_moment(master.numpy(), "exp_avg", mdt, p["count"])[0]
        if p["frozen"]:
            continue
        st = state.get(i, {})
        for role in ("exp_avg", "exp_avg_sq"):
            v = st.get(role)
            v = (np.zeros(p["count"], np.float32) if v is None
                 else v.detach().to("cpu", torch.float32).contiguous().view(-1).numpy())
            if v.size != p["count"]:
                raise CheckpointError("from-torch: state[%d][%s] has %d elements; the layout says %d"
                                      % (i, role, v.size, p["count"]))
            byname[key + role], sc = encode_moment(v, role, dt, p["count"])
            if sc is not None:
                q8_put_scales(scale_pages, sc, role, psz, ce, p["count"], slots[p["spw"]])
    for n, t in raw.items():
        byname[n] = bytearray(t.numpy().tobytes())
    for i, b in scale_pages.items():
        byname[Q8_SCALES % i] = b
    man["uid"] = os.getuid()
    tensors = []
    for t in man["tensors"]:
        b = byname.get(t["name"])
        if b is None:
            raise CheckpointError("from-torch: nothing in the file for the session's tensor %s" % t["name"])
        if len(b) < t["bytes"]:
            b.extend(bytes(t["bytes"] - len(b)))
        if len(b) != t["bytes"]:
            raise CheckpointError("from-torch: tensor %s would take %d bytes; the session's takes %d"
                                  % (t["name"], len(b), t["bytes"]))
        tensors.append(dict(t, crc32c=page_crcs(memoryview(b), psz)))
    man["tensors"] = tensors
    directory = os.path.abspath(os.fspath(directory))
    parent, base = os.path.split(directory.rstrip("/"))
    if os.path.lexists(directory):
        raise CheckpointError("from-torch: %s exists; a checkpoint goes into a new directory" % directory)
    tmp = "%s.tmp-%d" % (base, os.getpid())
    pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.mkdir(tmp, 0o700, dir_fd=pfd)
        dfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        try:
            for t in tensors:
                _fsync_write(dfd, t["file"], byname[t["name"]])
            _fsync_write(dfd, MANIFEST, json.dumps(man, indent=1).encode())
            os.fsync(dfd)
            # Renamed last: a crash leaves no directory of that name, or
            # a complete one; never onto one made there meanwhile.
            _rename_noreplace(pfd, tmp, base, directory)
        except BaseException:
            for f in os.listdir(dfd):
                os.unlink(f, dir_fd=dfd)
            os.rmdir(tmp, dir_fd=pfd)
            raise
        finally:
            os.close(dfd)
        os.fsync(pfd)
    finally:
        os.close(pfd)
    return man
