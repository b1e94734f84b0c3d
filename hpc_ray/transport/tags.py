"""MPI tags: one per channel, matched by ``Iprobe``. MPI guarantees tags up to 32767."""
from __future__ import annotations

import enum


class Tag(enum.IntEnum):
    #: Batches of control messages (lists of tuples), both directions.
    CONTROL = 11
    #: Raw object bytes between ranks of different nodes, answering a FETCH.
    OBJECT_DATA = 12
    # Collectives run on their groups' own communicators and need no tag here.
