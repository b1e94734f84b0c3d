"""MPI tags: one per channel, matched by ``Iprobe``. MPI guarantees tags up to 32767."""
from __future__ import annotations

import enum


class Tag(enum.IntEnum):
    #: Batches of control messages (lists of tuples), both directions.
    CONTROL = 11
    #: Raw object bytes between ranks of different nodes (after an ObjectData header).
    OBJECT_DATA = 12
    #: Collective operations carried out by ranks on behalf of executors.
    COLLECTIVE = 13
    #: Start-up configuration broadcast.
    SETUP = 14
