"""Which workloads may have been deleted: a Bloom filter over the keys of ``deleted_workloads``.

Why: a batch must know, for every workload it has not seen live, whether that workload was
deleted before (then a late or repeated record takes the writer's exact path).  Most of them
are new workloads, and asking DuckDB about each one is costly: its ART index answers quickly,
but the keys have to be given as literals (a join with the batch's keys scans the whole table,
which grows with the history), and binding thousands of literals was a noticeable part of the
writer's time (bench/RESULTS.md).  The filter answers "certainly not deleted" for nearly all of
them in memory, in a time that does not grow with the history; only the keys it cannot rule out
(the deleted ones, and a few false positives) are looked up in DuckDB.

It can only be wrong one way: a key added to it stays (a batch rolled back after adding its
deletions leaves a few bits set: more lookups, never a missed deletion), so every key in the
table is in the filter as long as the writer adds each key it inserts.  It is sized at 16 bits
a key (three hash positions) and built again from the table, twice as large, when it holds more
keys than that.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .scanning import arrow_over

_HASHES = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9)  # odd 64-bit multipliers
_BITS_PER_KEY = 16
_MIN_BITS_LOG2 = 20  # 128 KiB
_MASK64 = 2**64 - 1


class DeletedWorkloads:
    """A Bloom filter over the 64-bit keys of ``deleted_workloads`` (``writing.workload_key``), or of
    another table of keys with a column ``key`` (``ended_pods``: the pods that ended, allocating.py)."""

    def __init__(self, conn, table: str = "deleted_workloads", bits_per_key: int = _BITS_PER_KEY):
        self.table = table
        self.bits_per_key = bits_per_key
        self.load(conn)

    def load(self, conn) -> None:
        """Build the filter from the table, sized for twice its keys."""
        (count,), = conn.execute(f"SELECT count(*) FROM {self.table}").fetchall()
        log2 = max(_MIN_BITS_LOG2, (2 * count * self.bits_per_key - 1).bit_length())
        self._shift = 64 - log2
        self._capacity = (1 << log2) // self.bits_per_key
        bits = bytearray(1 << (log2 - 3))
        if count:
            # The positions by Arrow (the same arithmetic as _positions: its multiplication of unsigned
            # 64-bit integers wraps, as & _MASK64 does), OR-ed per byte by DuckDB.  Why not all in
            # DuckDB: its 64-bit multiplication refuses to overflow, and in 128-bit integers the
            # positions cost seconds of CPU at some hundred thousand keys: a restarted writer
            # (ended_pods grows with the history) and a rebuild mid-stream waited for them.
            keys = conn.sql(f"SELECT key FROM {self.table}").to_arrow_table().column("key")
            shift = pa.scalar(self._shift, pa.uint64())
            positions = pa.table({"p": pa.chunked_array(
                [chunk for a in _HASHES
                 for chunk in pc.shift_right(pc.multiply(keys, pa.scalar(a, pa.uint64())), shift).chunks],
                pa.uint64())})
            table = arrow_over(conn, "SELECT (p >> 3)::BIGINT AS byte, bit_or((1 << (p & 7)::INTEGER)::UTINYINT) "
                                     "AS mask FROM wm_rows GROUP BY 1", positions)
            for byte, mask in zip(table.column("byte").to_pylist(), table.column("mask").to_pylist()):
                bits[byte] = mask
        self._bits = bits
        self.count = count

    def _positions(self, key: int):
        shift = self._shift
        return [((key * a) & _MASK64) >> shift for a in _HASHES]

    def may_contain(self, key: int) -> bool:
        """False: the key is certainly not in the table; True: it may be (look it up)."""
        bits = self._bits
        for p in self._positions(key):
            if not bits[p >> 3] & (1 << (p & 7)):
                return False
        return True

    def add(self, key: int) -> None:
        bits = self._bits
        for p in self._positions(key):
            bits[p >> 3] |= 1 << (p & 7)
        self.count += 1

    @property
    def full(self) -> bool:
        """More keys than it was sized for: false positives grow; ``load`` it again."""
        return self.count > self._capacity
