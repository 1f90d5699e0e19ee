# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: Volume: a URI opened as files (gpunvme_volume_open in the library)."""
import atexit
import os
import stat
import threading

from . import _gpunvme
from ._gpunvme import Error


# ---- the volume ---------------------------------------------------------------------


class Volume(_gpunvme.Volume):
    """An opened controller, namespace and file system.

    Volume(uri, nsid=1, partition=None, offset=None). uri: "emu:/path/ext4.img",
    "emu:ram:1G", "vfio:0000:01:00.0", ... The file system is found at byte 0
    of the namespace or, on a disk with a GPT or MBR partition table, in the
    one partition that holds one; partition=N picks partition N, offset= a
    byte offset. Many loads can share one volume.
    close() (or leaving a `with` block) stops new use; the controller is shut
    down when the last tensor loaded from it is gone.
    """

    def __init__(self, uri, nsid=1, partition=None, offset=None):
        if not isinstance(uri, str):
            raise TypeError("uri must be a str (e.g. \"emu:/path/ext4.img\"), not %s" % type(uri).__name__)
        if partition is not None and offset is not None:
            raise Error(22, "give partition= or offset=, not both")
        if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)
                                      or not 1 <= partition <= 0xffffffff):
            raise Error(22, "partition=%r: expected a partition number >= 1 (as Linux numbers them)"
                        % (partition,))
        if not isinstance(nsid, int) or nsid < 1 or nsid > 0xfffffffe:
            raise Error(22, "nsid=%r: expected a namespace id 1..4294967294" % (nsid,))
        if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int) or offset < 0):
            raise Error(22, "offset=%r: expected a byte offset >= 0" % (offset,))
        try:
            # the URI grammar is the library's (gpunvme_uri_check)
            super().__init__(uri, nsid, -1 if offset is None else offset, partition or 0)
        except Error as e:
            # a path given where a URI belongs: say how to name it
            if ":" not in uri and os.path.exists(uri) and e.args and e.args[0] == 22:
                raise Error(22, "%s (an image file: emu:%s)" % (e.args[-1], uri)) from None
            raise

    def __repr__(self):
        return "<gpunvme.Volume %s%s>" % (self.uri, " closed" if self.closed else "")

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except Error:
            return False


def _path(path, what="path"):
    """A path inside the volume: str, bytes or os.PathLike -> str or bytes.
    The extension encodes a str as os.fsencode does (surrogateescape), so a
    non-UTF-8 name that listdir() gave back ('caf\\udce9') finds its file."""
    try:
        return os.fspath(path)
    except TypeError:
        raise TypeError("%s must be a str, bytes or os.PathLike, not %s" % (what, type(path).__name__)) from None


def _shown(path):
    """a path for messages and progress labels: always a str"""
    return os.fsdecode(path)


def _volume(uri, nsid, partition, offset):
    """-> (volume, opened_here). A volume opened here goes back through
    _done(): load_file's kind of caller lets the volume cache keep it."""
    if isinstance(uri, _gpunvme.Volume):
        if partition is not None or offset is not None or nsid != 1:
            raise Error(22, "nsid/partition/offset are the Volume's: give them to gpunvme.Volume()")
        return uri, False
    if not isinstance(uri, str):
        return Volume(uri, nsid=nsid, partition=partition, offset=offset), True
    _cache_seconds()  # a bad GPUNVME_VOLUME_CACHE_S is refused before anything opens
    key = (uri, nsid, partition, offset)
    vol = _cache_take(key)
    if vol is None:
        # the file as it was before the open: if it changes from here on,
        # the volume is never taken again (what it read may be older)
        ident = _image_identity(uri)
        vol = Volume(uri, nsid=nsid, partition=partition, offset=offset)
        vol._cache_key = key
        vol._cache_ident = ident
    return vol, True


# ---- volumes opened from a URI string, kept a few seconds for the next call ---------------
#
# A URI string makes each load_file / load_pretrained / safe_open open a
# volume and close it after. Against an image file that costs each call the
# controller's and the loader's set-up and, through the emulator's DMA
# process, mapping every new allocation into it (about 6 ms a GB): 25 GB/s
# for a 9 GB checkpoint against 30 with a Volume opened once
# (bench/results/emu-2026-11-29-s18). So a volume opened here from an image
# file is kept idle for GPUNVME_VOLUME_CACHE_S seconds (default 10; 0: close
# at once) and the next call with the same URI and options takes it, with
# its parked loader and the memory that loader kept (docs/python.md). Only
# emu: URIs of one regular file are kept: a RAM namespace is new at every
# open, and a real controller (vfio:, uio:, kmod:, tcp://) must not stay
# claimed by a process that no longer uses it. The file's identity (device,
# inode, size, modification and change time) as it was before the volume
# opened is checked when the volume is taken: a file rewritten or replaced
# since (even during the call that opened it) gets a new volume.

_CACHE_S = 10.0
_CACHE_MAX = 4  # idle volumes at most (each has its emulator's threads): the oldest goes first
_cache_lock = threading.Lock()
_idle = {}      # key -> (volume, timer); a volume in use is in no table
_orphans = []   # in a forked child: the parent's idle volumes, never used nor freed there


def _cache_seconds():
    v = os.environ.get("GPUNVME_VOLUME_CACHE_S")
    if v is None or v == "":
        return _CACHE_S
    try:
        s = float(v)
    except ValueError:
        s = -1.0
    if not 0 <= s <= 86400:  # also NaN
        raise Error(22, "GPUNVME_VOLUME_CACHE_S=%r: expected seconds to keep a volume opened from a URI "
                    "(0 to 86400; 0 closes it after each call)" % v)
    return s


def _image_identity(uri):
    """emu:<regular file>[?options] -> the file's identity; None for any other URI"""
    if not uri.startswith("emu:"):
        return None
    path, _, query = uri[4:].partition("?")
    # several namespaces (ns=), md arrays (;) and picks (#) name more than one file
    if not path or path.startswith("ram:") or "ns=" in query or ";" in uri or "#" in uri:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    # ctime too: it moves on every write and on a change of the inode that
    # keeps mtime (touch -d, a restore that sets it back)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _cache_take(key):
    """an idle volume for key whose file is unchanged, now the caller's; else None"""
    with _cache_lock:
        ent = _idle.pop(key, None)
    if ent is None:
        return None
    vol, timer = ent
    timer.cancel()
    if vol.closed or _image_identity(key[0]) != vol._cache_ident:
        vol.close()
        return None
    return vol


def _expire(key, vol):
    with _cache_lock:
        ent = _idle.get(key)
        if ent is None or ent[0] is not vol:
            return  # taken again, or replaced
        del _idle[key]
    vol.close()


def _done(vol, own, ok):
    """the end of a call that had vol from _volume(): a volume opened from a
    URI string is closed, or kept idle for the next call when the call
    succeeded, the cache is on and the URI names one image file"""
    if not own:
        return
    key = getattr(vol, "_cache_key", None)
    secs = 0.0
    # a file changed since the open is not worth keeping: never taken again
    if ok and key is not None and vol._cache_ident is not None and not vol.closed \
            and _image_identity(key[0]) == vol._cache_ident:
        try:
            secs = _cache_seconds()
        except Error:
            secs = 0.0  # changed during the call: the next _volume() says so
    if secs <= 0:
        vol.close()
        return
    timer = threading.Timer(secs, _expire, (key, vol))
    timer.daemon = True
    # in the table before the timer runs, so a short time cannot expire
    # it before it is there (and leave it kept for ever)
    gone = []
    with _cache_lock:
        prev = _idle.pop(key, None)
        if prev is not None:  # two calls at once each opened one: keep the newer
            gone.append(prev)
        while len(_idle) >= _CACHE_MAX:  # dicts keep their order: the first filed is the oldest
            gone.append(_idle.pop(next(iter(_idle))))
        _idle[key] = (vol, timer)
    for v, t in gone:
        t.cancel()
        v.close()
    try:
        timer.start()
    except RuntimeError:  # no new threads (the interpreter is exiting): nothing is kept
        _expire(key, vol)


def release_volumes():
    """close every volume kept from an earlier call's URI string now (their
    controllers, and the GPU memory their loaders kept, go with the last
    tensor loaded from them)"""
    with _cache_lock:
        ents = list(_idle.values())
        _idle.clear()
    for vol, timer in ents:
        timer.cancel()
        vol.close()


def _after_fork():
    # the child has the parent's objects but not its CUDA context or
    # emulator threads: it must neither use nor free them; and a lock
    # another thread of the parent held is held forever here
    global _cache_lock
    _cache_lock = threading.Lock()
    _orphans.extend(_idle.values())
    _idle.clear()


atexit.register(release_volumes)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
