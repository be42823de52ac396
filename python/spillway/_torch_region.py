# SPDX-License-Identifier: MIT
"""The session OffloadAdamW opens for itself (spillway.torch): its page
size, the region the pipeline needs (and on the nvme tier read-ahead
beyond it when the daemon's caps allow), the swap the state takes."""

import errno
import os

from . import Session, SpillwayError, _state_dtype, _torch_persist as _persist

# Read-ahead on the NVMe tier: overlapped mode updates during backward, so
# the disk would sit idle through forward unless the region can take what
# backward reads first. Half the state, at most 1 GiB (spillway-bench torch,
# 162M GPT, overlapped nvme: 32 MiB of region 1.01-1.10x torch's step, 1 GiB
# 0.80-0.86x, for 0.90x torch's memory instead of 0.60x).
READAHEAD_MAX = 1 << 30


# Spare swap of a persistent session on the NVMe tier, a fraction of its
# state: while a checkpoint copies, a page the trainer writes back over a
# swap home the copy still owes goes to a spare page instead of waiting for
# the copy (docs/persistent.md, "copy-on-write"; spillway-bench checkpoint
# --spare, whose default is the same eighth). Asked for only where the
# daemon's caps allow it.
CHECKPOINT_SPARE = 0.125


def spare_swap_bytes(opt, swap, psz):
    """The spare swap to ask for beside swap (the state's): an eighth of
    it in whole pages on a persistent nvme session, else none."""
    if opt.tier != "nvme" or not opt._persistent or swap == 0:
        return 0
    return -(-int(swap * CHECKPOINT_SPARE) // psz) * psz


def readahead_bytes(state, psz):
    """The region to ask for on the nvme tier: half of the state's bytes,
    at most READAHEAD_MAX, in whole pages."""
    return min(state // 2, READAHEAD_MAX) // psz * psz


def layout(opt, entries):
    """(page size, the region the pipeline needs) for opt's entries: the
    whole state on the cpu tier; the window's pages of state on the nvme
    tier; staging, slack and a persistent session's journal on either."""
    k = _persist.state_roles(opt)
    numels = [e.numel for e in entries]
    psz = opt._page_size or _state_dtype.page_size(numels, k, opt.state_dtype, opt.tier, opt.master_dtype)
    win = opt._window or 4
    if opt.tier == "cpu":
        pages = _state_dtype.state_pages(numels, psz, k, opt.state_dtype, opt.master_dtype)
    else:
        pages = 4 * win * k
    pages += (1 if opt._grad_ref else 2) * win + 8 + _persist.journal_pages(opt, psz)
    return psz, pages * psz


def swap_bytes(opt, entries, psz):
    """The swap the state needs on the NVMe tier (every page of p, m, v
    and, in exact mode, the gradient store, or the undo copy of an
    overlapped persistent one); none on the cpu tier."""
    if opt.tier != "nvme":
        return 0
    k = _persist.state_roles(opt)
    swap = _state_dtype.state_pages([e.numel for e in entries], psz, k, opt.state_dtype,
                                     opt.master_dtype) * psz
    if opt._persistent:  # the layout record and the journal's done bitmaps live on this tier too
        swap += -(-(24 + sum(24 + len(e.name) + 8 for e in entries) + 256) // psz) * psz
        swap += _persist.done_pages(entries, psz) * psz
    return swap


def open_session(opt, region, minimum, psz, swap, spare=0):
    """opt's session, with region bytes and swap + spare if the daemon's
    caps allow them, else with less: the minimum region the pipeline
    needs, the swap the state needs. Read-ahead and spare swap are worth
    having, not worth failing for."""
    def attach(r, w):
        return Session(opt._session_name, region_bytes=r, page_size=psz, socket=opt._socket,
                       reply_timeout_ms=opt._timeout_ms(), swap_bytes=w, **_persist.session_args(opt))
    tries = [(r, w) for w in (swap + spare, swap) for r in (region, minimum)]
    tries = [t for i, t in enumerate(tries) if t not in tries[:i]]
    for r, w in tries[:-1]:
        try:
            return attach(r, w)
        except SpillwayError as e:
            if e.errno not in (errno.EDQUOT, errno.ENOSPC, errno.ENOMEM):
                raise
    return attach(*tries[-1])


def own_session(opt, entries):
    """Keeps opt's own session where it holds what entries need, else
    closes it and opens one that does."""
    psz, region = layout(opt, entries)
    swap = swap_bytes(opt, entries, psz)
    minimum = region  # what the pipeline needs; more is read-ahead
    if opt._region_bytes:
        region = minimum = opt._region_bytes
    elif os.environ.get("SPILLWAY_REGION_BYTES"):  # a fixed choice (benchmarks, tuning)
        region = minimum = int(os.environ["SPILLWAY_REGION_BYTES"])
    elif opt.tier == "nvme" and not opt._persistent:
        region = max(region, readahead_bytes(swap, psz))
    if opt._session is not None:
        info = opt._session.info()
        if info["region_bytes"] < minimum or info["swap_bytes"] < swap:
            opt._session.close()
            opt._session = None
    if opt._session is None:
        opt._session = open_session(opt, region, minimum, psz, swap, spare_swap_bytes(opt, swap, psz))
