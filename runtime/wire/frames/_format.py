"""The frames' format: the tag and version every frame carries, and the sizes
a body travels in.

Frames are msgpack maps tagged by ``t`` (the class name) and carry ``v``, the
format version of the writer. Decoders ignore fields they do not know and
fill defaults for fields an older writer lacked, so adding a field with a
default is always compatible; renaming or removing one is not.

Format history:
  1  release 1: MailInbound had no ``run_id`` (the run id was the address).
  2  release 2.
  3  MailBatch and AckBatch: several dispatches in one frame. A sidecar that
     lists 3 in ``Hello.formats`` gets them; the hub sends an older one single
     MailInbound frames. Every other frame is still written as format 2.
"""

from __future__ import annotations

import msgspec

FORMAT_VERSION = 2
BATCH_FORMAT = 3
SUPPORTED_FORMATS = (1, 2, BATCH_FORMAT)
INLINE_BODY_LIMIT = 64 * 1024
"""Bodies above this size travel as a claim check; the hub keeps the blob."""
BLOB_CHUNK_SIZE = 512 * 1024
"""Bytes per BlobChunk reply (NATS' default max_payload is 1 MiB)."""


class _Frame(msgspec.Struct, tag_field="t", kw_only=True, omit_defaults=False):
    v: int = FORMAT_VERSION
