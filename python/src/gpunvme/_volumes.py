# SPDX-License-Identifier: BSD-2-Clause
"""gpunvme: Volume: a URI opened as files (gpunvme_volume_open in the library)."""
import os

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
    """-> (volume, opened_here)"""
    if isinstance(uri, _gpunvme.Volume):
        if partition is not None or offset is not None or nsid != 1:
            raise Error(22, "nsid/partition/offset are the Volume's: give them to gpunvme.Volume()")
        return uri, False
    return Volume(uri, nsid=nsid, partition=partition, offset=offset), True
