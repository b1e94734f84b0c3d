"""MPI tags: one per channel, matched by ``Iprobe``. MPI guarantees tags up to 32767."""
from __future__ import annotations

import enum


class Tag(enum.IntEnum):
    #: Batches of control messages (lists of tuples), both directions.
    CONTROL = 11
    #: Raw object bytes between ranks of different nodes, answering a FETCH.
    OBJECT_DATA = 12
    # Collectives run on their groups' own communicators and need no tag here.


#: Tags used on COMM_WORLD while a collective group's communicator is made
#: (``MPI_Comm_create_group``'s tag): a range of their own, above every ``Tag``.
GROUP_TAG_BASE = 1024
GROUP_TAG_SPAN = 30_000   # GROUP_TAG_BASE + GROUP_TAG_SPAN < 32767, MPI's guaranteed upper bound


def group_creation_tag(name: str) -> int:
    """The creation tag of group ``name``: never a ``Tag``. Two groups whose names
    hash alike get the same tag; that matters only if both are being created at
    the same moment by overlapping sets of ranks."""
    import zlib
    return GROUP_TAG_BASE + zlib.crc32(name.encode()) % GROUP_TAG_SPAN
