"""Large messages: a message above a size threshold lives in a file of its own, not in memory or the journal.

ActiveMQ Artemis stores an AMQP message at least ``amqpMinLargeMessageSize`` bytes long (an acceptor URI
parameter, default 102400; -1 turns it off) as a *large message*: its bytes go to a file of their own in
``large-messages-directory`` as they arrive, the journal keeps a small record that refers to the file, and
the message is read back from the file, a piece at a time, when it is delivered (Artemis documentation,
"Large Messages"; the broker-side handling of AMQP large messages is in Artemis'
``AMQPLargeMessage.java``). tdbroker does the same for durable messages bound for durable queues (see
docs/broker-configuration.md, "Large messages"):

* the file is ``<large-messages directory>/<id>.msg`` and holds the message exactly as it arrived;
* the queue and the journal hold a **reference** instead of the message: its *head* -- the sections before
  the body (header, delivery-annotations, message-annotations, properties, application-properties), all
  that routing, selectors, priority, expiry and redelivery read -- followed by a footer section
  (AMQP 1.0 §3.2.10) whose single entry names the file: ``x-opt-tdbroker-large`` ->
  binary(file id u64 | message size u64 | head length in the file u64 | :data:`MAGIC`). A reference is thus a
  well-formed AMQP message: everything that reads or splices head sections (delivery-count, dead-letter
  annotations, network bridges' annotations) works on it unchanged, and a reference journaled or paged by
  any part of the broker stays a reference. It is recognised by its last bytes (:func:`is_reference`).
* what is sent is the reference's head (as the broker changed it: delivery-count, annotations) followed by
  the file's bytes after its own head (:mod:`broker.largestream`).

The file lives while a journal record refers to it: :class:`LargeMessageStore` counts the live records of
each file (the journal reports them, :meth:`broker.journal.Journal.large_refs`) and removes a file when its
last record is acknowledged. At start-up files no record refers to (a message that was still arriving, or
whose last acknowledgement was written just before the file went) are removed, and a record whose file is
missing is dropped with an error.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time

log = logging.getLogger("broker.largemessage")

#: Artemis' default ``amqpMinLargeMessageSize`` (bytes): a message at least this long is a large message.
DEFAULT_MIN_LARGE_MESSAGE_SIZE = 102400
#: Where large message files go when ``<large-messages-directory>`` is absent: beside the journal directory
#: (the default journal-directory data/journal thus puts them in data/large-messages, Artemis' default).
DEFAULT_DIRECTORY_NAME = "large-messages"
FILE_SUFFIX = ".msg"
_FILE_NAME = re.compile(r"^(\d+)\.msg(\.tmp)?$")

#: The last 8 bytes of every reference.
MAGIC = b"TDLARGE1"
_ANNOTATION = b"x-opt-tdbroker-large"
_REF = struct.Struct(">QQQ8s")
# footer section: descriptor 0x00 0x53 0x78, map8 (0xc1) size count=2, sym8 key, vbin8 value
_MAP_BODY = 1 + (2 + len(_ANNOTATION)) + (2 + _REF.size)
_FOOTER_PREFIX = (b"\x00\x53\x78\xc1" + bytes((_MAP_BODY, 2)) + b"\xa3" + bytes((len(_ANNOTATION),))
                  + _ANNOTATION + b"\xa0" + bytes((_REF.size,)))
#: Bytes a reference adds after the head.
FOOTER_BYTES = len(_FOOTER_PREFIX) + _REF.size


def is_reference(payload) -> bool:
    """True when ``payload`` is a large message reference (one comparison of its last bytes)."""
    return payload[-8:] == MAGIC and len(payload) >= FOOTER_BYTES and \
        payload[-FOOTER_BYTES:-_REF.size] == _FOOTER_PREFIX


def make_reference(head: bytes, file_id: int, size: int, head_len: int) -> bytes:
    """The reference to file ``file_id`` holding a ``size``-byte message whose head is ``head_len`` bytes
    long in the file; ``head`` is the head as the broker keeps it."""
    return bytes(head) + _FOOTER_PREFIX + _REF.pack(file_id, size, head_len, MAGIC)


def parse_reference(payload) -> tuple[int, int, int]:
    """(file id, message size, head length in the file) of a reference."""
    file_id, size, head_len, _magic = _REF.unpack_from(payload, len(payload) - _REF.size)
    return file_id, size, head_len


def reference_head(payload) -> bytes:
    """The head sections of a reference (what is sent before the file's body)."""
    return payload[:-FOOTER_BYTES]


def stored_size(payload) -> int:
    """The bytes a message stands for: its length, or for a reference the size of the message in its file
    (what address limits and page files count, so that max-size-bytes bounds large messages too)."""
    if payload[-8:] == MAGIC and is_reference(payload):
        return _REF.unpack_from(payload, len(payload) - _REF.size)[1]
    return len(payload)


def split_reference(payload) -> tuple[bytes, bytes]:
    """(head, footer) of a reference, or (payload, b"") for any other message: a part that rewrites a
    message's head with a full decoder (proton) rewrites the head alone and appends the footer again."""
    if is_reference(payload):
        return payload[:-FOOTER_BYTES], payload[-FOOTER_BYTES:]
    return payload, b""


def file_id_of(tail) -> int | None:
    """The file id of a journal record's payload ``tail`` (its last bytes), or None when it is not a
    reference (the journal calls this for each message record it scans or appends)."""
    if tail[-8:] != MAGIC or len(tail) < FOOTER_BYTES or bytes(tail[-FOOTER_BYTES:-_REF.size]) != _FOOTER_PREFIX:
        return None
    return _REF.unpack_from(tail, len(tail) - _REF.size)[0]


class LargeMessageStore:
    """The large message files of one broker: naming, creating, counting the journal records that refer to
    each, removing them (see the module docstring). Its I/O is small and synchronous (create, unlink,
    directory listing); the bytes are written by :class:`LargeFileWriter` and read by
    :class:`broker.largestream.LargeSend`."""

    def __init__(self, directory: str, *, fsync: bool = True) -> None:
        self.directory = directory
        self.fsync = fsync
        self.next_id = 1
        self.records: dict[int, int] = {}  # file id -> live journal records referring to it
        self.writing: set[int] = set()     # files still being written (no record yet)
        self.files_removed = 0
        self.closed = False

    def path(self, file_id: int) -> str:
        return os.path.join(self.directory, f"{file_id}{FILE_SUFFIX}")

    def open(self, refs: dict[int, int]) -> set[int]:
        """Start-up: ``refs`` (journal record id -> file id) are the live references. Removes files nothing
        refers to; returns the record ids whose file is missing (the caller drops them)."""
        os.makedirs(self.directory, exist_ok=True)
        present: set[int] = set()
        top = 0
        for name in os.listdir(self.directory):
            m = _FILE_NAME.match(name)
            if m is None:
                continue
            fid = int(m.group(1))
            top = max(top, fid)
            if m.group(2) is None:
                present.add(fid)
            else:
                os.unlink(os.path.join(self.directory, name))
        missing = set()
        for rid, fid in refs.items():
            top = max(top, fid)
            if fid in present:
                self.records[fid] = self.records.get(fid, 0) + 1
            else:
                missing.add(rid)
        orphans = present - self.records.keys()
        for fid in orphans:
            os.unlink(self.path(fid))
        if orphans:
            log.info("%s: removed %d large message file(s) no journal record refers to", self.directory,
                     len(orphans))
        if missing:
            log.error("%s: %d journal record(s) refer to a large message file that is missing; dropped",
                      self.directory, len(missing))
        # Never a number a record may still name: a file removed with its record's acknowledgement still
        # in the journal's buffer when the broker crashed leaves that record live, naming the old number.
        # Microseconds since the epoch are above every number used before (unless the clock went back).
        self.next_id = max(top + 1, time.time_ns() // 1000)
        return missing

    def file_size(self, file_id: int, default: int) -> int:
        """The size of ``file_id``'s message (its file's), or ``default`` when it cannot be read."""
        try:
            return os.stat(self.path(file_id)).st_size
        except OSError:
            return default

    # -- the journal's reports (broker.journal.Journal.large) -------------------------------------------
    def referenced(self, file_id: int) -> None:
        """A journal record referring to ``file_id`` was appended."""
        self.records[file_id] = self.records.get(file_id, 0) + 1

    def unreferenced(self, file_id: int) -> None:
        """A journal record referring to ``file_id`` was acknowledged: the file goes with its last one."""
        n = self.records.get(file_id, 0) - 1
        if n > 0:
            self.records[file_id] = n
            return
        self.records.pop(file_id, None)
        self.release(file_id)

    def release(self, file_id: int) -> None:
        """Remove ``file_id``'s file unless a record refers to it or it is being written."""
        if self.closed or file_id in self.records or file_id in self.writing:
            return
        try:
            os.unlink(self.path(file_id))
            self.files_removed += 1
        except FileNotFoundError:
            pass
        except OSError as exc:  # left for the start-up clean-up
            log.error("large message file %s cannot be removed: %s", self.path(file_id), exc)

    # -- writing ---------------------------------------------------------------------------------------
    def create(self) -> LargeFileWriter:
        """A new file for a message arriving."""
        fid = self.next_id
        self.next_id += 1
        self.writing.add(fid)
        return LargeFileWriter(self, fid)

    def finished_writing(self, file_id: int) -> None:
        self.writing.discard(file_id)

    def read_all(self, payload) -> bytes:
        """BLOCKING: the whole message a reference stands for, its head as the broker keeps it (for the
        parts that cannot stream yet: mirrors, browsers). Raises OSError when the file is gone."""
        fid, size, head_len = parse_reference(payload)
        with open(self.path(fid), "rb") as f:
            f.seek(head_len)
            rest = f.read(size - head_len)
        if len(rest) != size - head_len:
            raise OSError(f"large message file {self.path(fid)} is shorter than its {size} bytes")
        return reference_head(payload) + rest

    def close(self) -> None:
        """The broker stops: files stay for the next start (their records are in the journal)."""
        self.closed = True


class LargeFileWriter:
    """One message arriving into its file: bytes written as they come (synchronous ``os.write`` of each
    chunk wire hands over, at most what one read of the socket brought), the head kept aside until its end
    is found, fsynced when complete (before any journal record refers to it)."""

    __slots__ = ("store", "file_id", "fd", "size", "head", "head_len", "error", "advised")

    def __init__(self, store: LargeMessageStore, file_id: int) -> None:
        self.store = store
        self.file_id = file_id
        self.fd = os.open(store.path(file_id) + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                          0o644)
        self.size = 0
        self.head = bytearray()  # the first bytes, until the head's end is known
        self.head_len: int | None = None
        self.error: str | None = None
        self.advised = 0  # bytes up to which the kernel was asked to write back (see WRITEBACK_BYTES)

    def write(self, chunk: bytes, head_end) -> None:
        """Append ``chunk``; ``head_end(prefix)`` finds the head's length in the first bytes (None: not yet)."""
        if self.error is not None:
            return
        if self.head_len is None:
            self.head += chunk
            try:
                self.head_len = head_end(bytes(self.head))
            except Exception as exc:  # a malformed head: refused once complete
                self.error = f"malformed message: {exc}"
            if self.head_len is None and len(self.head) > MAX_HEAD_BYTES:
                self.error = f"message head (the sections before the body) longer than {MAX_HEAD_BYTES} bytes"
            if self.head_len is not None:
                del self.head[self.head_len:]
        view = memoryview(chunk)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError as exc:
            self.error = f"large message file cannot be written: {exc.strerror or exc}"
            return
        self.size += len(chunk)
        if self.store.fsync and self.size - self.advised >= 2 * WRITEBACK_BYTES:
            # Start writing back the window before the last one (POSIX_FADV_DONTNEED: Linux starts the
            # write-back of dirty pages in the range and drops the clean ones), so the fsync at the end
            # waits for about the last two windows, not the whole message; and the page cache does not
            # fill with it.
            try:
                os.posix_fadvise(self.fd, self.advised, WRITEBACK_BYTES, os.POSIX_FADV_DONTNEED)
            except (OSError, AttributeError):  # advice only
                pass
            self.advised += WRITEBACK_BYTES

    def finish(self) -> bool:
        """BLOCKING: fsync, close and rename to its final name; False (and the file removed) on failure."""
        try:
            if self.error is None:
                if self.store.fsync:
                    os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
            if self.error is None:
                os.rename(self.store.path(self.file_id) + ".tmp", self.store.path(self.file_id))
                if self.store.fsync:
                    dfd = os.open(self.store.directory, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        os.fsync(dfd)
                    finally:
                        os.close(dfd)
                self.store.finished_writing(self.file_id)
                return True
        except OSError as exc:
            self.error = f"large message file cannot be written: {exc.strerror or exc}"
        self.discard()
        return False

    def discard(self) -> None:
        """The message will not be stored (aborted, refused, its link gone): remove the file."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for path in (self.store.path(self.file_id) + ".tmp", self.store.path(self.file_id)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("large message file %s cannot be removed: %s", path, exc)
        self.store.finished_writing(self.file_id)


#: While a large message is written, the kernel is asked to write back what arrived every this many bytes.
WRITEBACK_BYTES = 8 * 1024 * 1024
#: A message whose head (sections before the body) is longer than this is refused as a large message: the
#: head is kept in memory and journaled.
MAX_HEAD_BYTES = 1024 * 1024
