"""Flow records: one JSON line per message event, written off the hot path.

Routers, brokers and clients (demos, ``tdbench``) share :class:`FlowRecorder`. The hot path only calls
:meth:`FlowRecorder.wants` (a sampling decision) and :meth:`FlowRecorder.record` (a list append of a
timestamp and the keyword fields); a Trio task (:meth:`FlowRecorder.run`) serialises and writes the
buffer in a worker thread every ``flush_interval`` seconds.

Files: ``<directory>/<node>-<start_ns>-<seq>.jsonl.part`` while open, renamed atomically to
``.jsonl`` when rotated (by size) or closed. Only whole lines are ever written, so a reader can take
every ``*.jsonl`` file as complete and the complete lines of a ``.part`` file. The schema is in
docs/flowrecords.md; ``tdflow`` reads these files.

Sampling is deterministic by message-id: every node decides the same way for the same message, so a
sampled message has its records on every node it crossed and the pipeline can join them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
import zlib

import trio

__all__ = ["FlowRecorder", "FlowRecordError", "EVENTS", "OUTCOMES", "message_id_str"]

log = logging.getLogger("tdflow.records")

# The event names the schema knows; record() does not check them (it must stay cheap), tdflow ignores others.
EVENTS = ("sent", "ingress", "egress", "settle", "store", "deliver", "received", "settled")
OUTCOMES = ("accepted", "rejected", "released", "modified")

# If the writer cannot keep up (a stalled disk), the buffer would grow without bound and take the daemon's
# memory with it; past this many pending records new ones are dropped and counted in ``dropped``.
MAX_BUFFERED_RECORDS = 2_000_000
# The sampling hash is a CRC-32: its 2**32 range is what ``sample`` scales.
_HASH_RANGE = 1 << 32
# Node ids go into file names; anything outside this set is replaced so an id cannot escape the directory.
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
_PART = ".part"
_quote = json.encoder.encode_basestring  # a quoted, escaped JSON string (the C version when available)
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
_KEY_PREFIX: dict = {}  # field name -> ',"name":', filled as names are seen
_SUFFIX = ".jsonl"


class FlowRecordError(ValueError):
    """Bad recorder configuration (directory, sample, sizes)."""


def message_id_str(mid) -> str | None:
    """The string form of an AMQP message-id used in records and for sampling.

    Strings are used as they are, binary ids as ``b:`` + hex, UUIDs in their canonical form, integers
    (ulong) in decimal. Every node must use this function so the same message hashes the same way.
    """
    if mid is None or type(mid) is str:
        return mid
    if isinstance(mid, (bytes, bytearray, memoryview)):
        return "b:" + bytes(mid).hex()
    if isinstance(mid, uuid.UUID):
        return str(mid)
    return str(mid)


class FlowRecorder:
    """Buffers flow records in memory and writes them as JSON lines to rotating files.

    ``sample`` is the fraction of messages recorded (1.0: all, no hashing); ``rotate_mb`` the size at
    which a file is finished and a new one begun; ``clock`` gives the records' ``ts`` (integer ns).
    Use :meth:`run` as a Trio task, or call :meth:`flush` yourself (non-Trio clients); always
    :meth:`close` at the end so the last file gets its final name.
    """

    def __init__(self, directory, node_id: str, *, sample: float = 1.0, rotate_mb: float = 64,
                 flush_interval: float = 0.5, clock=time.time_ns):
        if not node_id:
            raise FlowRecordError("flow records need a node id")
        try:
            sample = float(sample)
            rotate_mb = float(rotate_mb)
            flush_interval = float(flush_interval)
        except (TypeError, ValueError) as exc:
            raise FlowRecordError(f"flow records: bad number: {exc}") from None
        if not 0.0 <= sample <= 1.0:
            raise FlowRecordError(f"flow records: sample must be between 0 and 1, got {sample}")
        if rotate_mb <= 0:
            raise FlowRecordError(f"flow records: rotateMB must be positive, got {rotate_mb}")
        if flush_interval <= 0:
            raise FlowRecordError(f"flow records: flush interval must be positive, got {flush_interval}")
        self.directory = os.fspath(directory)
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise FlowRecordError(f"flow records: cannot create directory {self.directory!r}: {exc}") from None
        if not os.access(self.directory, os.W_OK):
            raise FlowRecordError(f"flow records: directory {self.directory!r} is not writable")
        self.node_id = str(node_id)
        self.sample = sample
        self.rotate_bytes = int(rotate_mb * 1024 * 1024)
        self.flush_interval = flush_interval
        self._clock = clock
        self._all = sample >= 1.0
        self._threshold = int(sample * _HASH_RANGE)
        # Records without a message-id: one in every ``_period`` is kept (sample 0 keeps none).
        self._period = max(1, round(1.0 / sample)) if sample > 0 else 0
        self._counter = 0
        self._buf: list = []
        self._closed = False
        self._lock = threading.Lock()  # one writer at a time: run()'s worker thread vs flush()/close()
        self._file = None
        self._path: str | None = None
        self._size = 0
        self._seq = 0
        self._file_prefix = _UNSAFE_NAME.sub("_", self.node_id)
        self.dropped = 0
        self.written = 0
        self.write_errors = 0
        self.files_finished: list[str] = []

    # -- hot path -------------------------------------------------------------------------------

    def wants(self, message_id) -> bool:
        """Whether a message with this id (None: no id) is to be recorded; the same answer on every node."""
        if self._all:
            return True
        if message_id is None:
            if not self._period:
                return False
            self._counter += 1
            return self._counter % self._period == 0
        if type(message_id) is not str:
            message_id = message_id_str(message_id)
        return zlib.crc32(message_id.encode("utf-8", "surrogatepass")) < self._threshold

    def record(self, event: str, **fields) -> None:
        """Buffer one record: ``ts`` from the clock now, the event name and the fields (None ones omitted)."""
        if self._closed:
            return
        if len(self._buf) >= MAX_BUFFERED_RECORDS:
            self.dropped += 1
            return
        self._buf.append((self._clock(), event, fields))

    # -- writing --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Every ``flush_interval``, write the buffer in a worker thread; returns only when cancelled."""
        try:
            while True:
                await trio.sleep(self.flush_interval)
                batch = self._take()
                if batch:
                    # Not abandoned on cancel: a batch taken from the buffer is always written.
                    await trio.to_thread.run_sync(self._write, batch)
        finally:
            # Cancelled (shutdown): what is still buffered is written now, synchronously.
            self.flush()

    def flush(self) -> None:
        """Write everything buffered now (blocking)."""
        batch = self._take()
        if batch:
            self._write(batch)

    def close(self) -> None:
        """Flush, finish the current file (rename to ``.jsonl``) and ignore later records."""
        self.flush()
        self._closed = True
        with self._lock:
            self._finish_file()

    def __enter__(self) -> "FlowRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _take(self) -> list:
        batch, self._buf = self._buf, []
        return batch

    def _serialise(self, batch: list) -> str:
        # Hand-assembled JSON: the worker thread still holds the GIL while it formats, so this is time taken
        # from the event loop; json.dumps of a dict per record was ~8 µs, this ~2 µs (measured).
        head = ',"node":' + _quote(self.node_id) + ',"event":'
        keys = _KEY_PREFIX
        lines = []
        append = lines.append
        for ts, event, fields in batch:
            parts = ['{"ts":', str(ts), head, _quote(event)]
            for key, value in fields.items():
                if value is None:
                    continue
                prefix = keys.get(key)
                if prefix is None:
                    prefix = keys[key] = "," + _quote(str(key)) + ":"
                kind = type(value)
                if kind is str:
                    parts += (prefix, _quote(value))
                elif kind is int:
                    parts += (prefix, str(value))
                elif key == "mid":
                    parts += (prefix, _quote(message_id_str(value)))
                elif key == "trace":
                    parts += (prefix, "[" + ",".join(_quote(str(v)) for v in value) + "]")
                else:
                    parts += (prefix, _dumps(value))
            parts.append("}\n")
            append("".join(parts))
        return "".join(lines)

    def _write(self, batch: list) -> None:
        try:
            # A lone surrogate in a string becomes a JSON \uXXXX escape rather than failing the batch.
            text = self._serialise(batch).encode("utf-8", "backslashreplace")
        except (TypeError, ValueError) as exc:  # a caller passed something JSON cannot hold
            self.write_errors += 1
            log.warning("flow records: %d records dropped, not serialisable: %s", len(batch), exc)
            return
        with self._lock:
            try:
                if self._file is None:
                    self._open_file()
                # One write of whole lines; a reader of the .part file sees complete lines plus at most
                # one unfinished last line, which it skips.
                self._file.write(text)
                self._file.flush()
                self._size += len(text)
                self.written += len(batch)
                if self._size >= self.rotate_bytes:
                    self._finish_file()
            except OSError as exc:
                self.write_errors += 1
                log.warning("flow records: %d records lost, write to %s failed: %s",
                            len(batch), self._path, exc)

    def _open_file(self) -> None:
        self._seq += 1
        name = f"{self._file_prefix}-{self._clock()}-{self._seq}{_SUFFIX}{_PART}"
        self._path = os.path.join(self.directory, name)
        self._file = open(self._path, "ab")
        self._size = 0

    def _finish_file(self) -> None:
        if self._file is None:
            return
        path = self._path
        self._file.close()
        self._file = None
        self._path = None
        final = path[: -len(_PART)]
        try:
            os.replace(path, final)  # atomic: readers see either the .part or the complete .jsonl
            self.files_finished.append(final)
        except OSError as exc:
            self.write_errors += 1
            log.warning("flow records: cannot rename %s: %s", path, exc)
