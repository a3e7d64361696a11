"""Integer columns of an SQLite table read straight from the file's table b-tree pages, vectorized with numpy.

An nsys event table (kernels, runtime calls, OS runtime calls, ...) holds integers only. SQLite decodes them
and :func:`tables.fetch_columns` moves them to numpy as ``group_concat`` text: ~90-125 ns per value, most of
a run's time on a large export. This module decodes the same values from the file's pages, a block of leaf
pages at a time, in ~20-35 ns per value (bench/RESULTS.md, sessions 7 and 8), following the documented file format
(https://www.sqlite.org/fileformat2.html, sections 1.3 "The Database Header", 1.6 "B-tree Pages" and 2.1
"Record Format"): leaf pages in b-tree order are the rows in rowid order; a leaf cell is a payload-size
varint, a rowid varint and a record; a record is a header of serial types (one byte each for integers)
followed by big-endian integers of 0-8 bytes.

Anything this decoder does not handle raises :class:`Unsupported`, and the caller reads the table with SQL
instead (which also reports corrupted values): a payload that spills to overflow pages, a float, text or
blob in an asked column (or before it, with a serial type of more than one byte), a NULL where the caller
wants none, a record with fewer fields than the asked column (a column added later), a page that is not a
table b-tree page where one is expected, or any position outside its page. The file is opened through
``open.open_input`` (read-only, never blocking) and read with ``pread``; never mapped or written.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

import numpy as np

from .open import open_input

HEADER_BYTES = 100
LEAF, INTERIOR = 13, 5          # table b-tree page types
LEAF_HEADER, INTERIOR_HEADER = 8, 12
CHUNK_BYTES = 4 << 20           # leaf pages decoded at a time: ~4 MB of pages, ~50k-130k nsys rows
# Record serial types 0-127 (one-byte varints): the value's size in bytes. 0 NULL, 1-6 integers of
# 1, 2, 3, 4, 6, 8 bytes, 7 a float, 8 and 9 the integers 0 and 1, 10-11 reserved, 12+ blobs and text.
SERIAL_SIZE = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0] + [(t - 12) // 2 for t in range(12, 128)], dtype=np.int64)
INTEGER_TYPE = np.zeros(128, dtype=bool)
INTEGER_TYPE[[0, 1, 2, 3, 4, 5, 6, 8, 9]] = True  # NULL counts: the caller's default or filter decides
# An integer of w bytes read as the 8-byte big-endian word at its offset, shifted right by 64 - 8w
# (arithmetic: the sign comes with it); types 0, 8 and 9 read a word of the padding that holds 0 or 1.
VALUE_SHIFT = np.array([0, 56, 48, 40, 32, 16, 0, 0, 0, 0] + [0] * 118, dtype=np.int64)
PADDING = 24                    # zero bytes after a block's pages: 8-byte words read past the last field stay inside
SWAP = sys.byteorder == "little"  # the file's integers are big-endian: a word gathered natively is byte-swapped


_WALKS: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # a table's leaves and bounds, by file identity and root
_WALKS_LOCK = threading.Lock()
WALKS_KEPT = 4  # tables whose walk is kept (a reader of rowid ranges opens the same table again and again)


class Unsupported(Exception):
    """The table (or one of its pages) is not something this decoder reads: read it with SQL instead."""


class TablePages:
    """The leaf pages of one table b-tree (rowid order) of the SQLite file at ``path``; ``root``: its root page."""

    def __init__(self, path: str | os.PathLike, root: int):
        if not hasattr(os, "pread"):  # Windows: positioned reads are what lets reader threads share the file
            raise Unsupported("no pread on this platform")
        self.file = open_input(path)  # the one gate of every input: a regular file, opened without blocking
        self.fd = self.file.fileno()
        try:
            st = os.fstat(self.fd)
            head = os.pread(self.fd, HEADER_BYTES, 0)
            if len(head) < HEADER_BYTES:
                raise Unsupported("short header")
            size = int.from_bytes(head[16:18], "big")
            self.page_size = 65536 if size == 1 else size
            self.usable = self.page_size - head[20]
            if self.page_size < 512 or self.page_size & (self.page_size - 1) or self.usable < 480:
                raise Unsupported("page size")
            self.pages = st.st_size // self.page_size
            self.leaves, self.upper = self._walked(st, int(root))
        except BaseException:
            self.file.close()
            raise

    def close(self) -> None:
        self.file.close()

    def _walked(self, st: os.stat_result, root: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_leaves`, walked once per table of an unchanged file (same device, inode, size and mtime): a
        reader of rowid ranges (the OS runtime calls, a block at a time) opens one table ~50 times at 50M calls."""
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, self.page_size, root)
        with _WALKS_LOCK:
            walked = _WALKS.get(key)
        if walked is None:
            walked = self._leaves(root)
            for values in walked:
                values.setflags(write=False)
            with _WALKS_LOCK:
                _WALKS[key] = walked
                while len(_WALKS) > WALKS_KEPT:
                    _WALKS.pop(next(iter(_WALKS)))
        return walked

    def blocks(self, chunk_bytes: int | None = None, rowids: tuple[int, int] | None = None) -> list[np.ndarray]:
        """The leaf pages in blocks of about ``chunk_bytes`` (default CHUNK_BYTES), in rowid order; ``rowids``
        (lo, hi): only the pages that can hold a rowid in [lo, hi) (by their parents' keys)."""
        leaves = self.leaves
        if rowids is not None:  # leaf j holds rowids in (upper[j - 1], upper[j]]
            first = int(np.searchsorted(self.upper, rowids[0], side="left"))
            last = int(np.searchsorted(self.upper, rowids[1] - 1, side="left"))
            leaves = leaves[first:last + 1] if rowids[1] > rowids[0] else leaves[:0]
        per = max(1, (chunk_bytes or CHUNK_BYTES) // self.page_size)
        return [leaves[a:a + per] for a in range(0, leaves.size, per)]

    def _read(self, numbers: np.ndarray) -> np.ndarray:
        """These pages' bytes, concatenated in the given order, then PADDING zero bytes; contiguous runs of
        page numbers are read with one ``pread`` each."""
        ps = self.page_size
        out = np.empty(numbers.size * ps + PADDING, dtype=np.uint8)
        out[-PADDING:] = 0
        view = memoryview(out)
        cut = np.flatnonzero(np.diff(numbers) != 1) + 1
        for a, b in zip(np.concatenate(([0], cut)).tolist(), np.concatenate((cut, [numbers.size])).tolist()):
            want = (b - a) * ps
            if _pread_into(self.fd, view[a * ps:b * ps], (int(numbers[a]) - 1) * ps) != want:
                raise Unsupported("short read")
        return out

    def _check_pages(self, numbers: np.ndarray) -> None:
        if numbers.size and (numbers.min() < 2 or numbers.max() > self.pages):  # page 1 is the schema's
            raise Unsupported("page number out of range")

    def _leaves(self, root: int) -> tuple[np.ndarray, np.ndarray]:
        """Leaf page numbers in b-tree (rowid) order, the interior levels walked a level at a time, and the
        largest rowid each can hold (its parent's key for it; the last: the largest int64)."""
        level = np.array([root], dtype=np.int64)
        upper = np.array([np.iinfo(np.int64).max], dtype=np.int64)
        seen = 0
        while True:
            self._check_pages(level)
            seen += level.size
            if seen > self.pages:
                raise Unsupported("b-tree loops")
            head = self._read(level[:1])[0]
            if head == LEAF:
                return level, upper
            if head != INTERIOR:
                raise Unsupported("not a table b-tree")
            buf = self._read(level)
            base = np.arange(level.size, dtype=np.int64) * self.page_size
            if (buf[base] != INTERIOR).any():
                raise Unsupported("unbalanced b-tree")
            cells, cell_page = _cell_offsets(buf, base, INTERIOR_HEADER, self.usable)
            children = _be(buf, cells, 4)
            words = _words(buf)
            keys = _varint_value(buf, cells + 4, _varint_len(words, cells + 4))  # the largest rowid left of it
            right = _be(buf, base + 8, 4)
            # each page's children in cell order, then its right-most child (bounded by the page's own bound)
            order = np.argsort(np.concatenate((cell_page * 2, np.arange(level.size) * 2 + 1)), kind="stable")
            level = np.concatenate((children, right))[order]
            upper = np.concatenate((keys, upper))[order]

    def decode(self, pages: np.ndarray, fields: list[int], rowids: tuple[int, int] | None = None,
               early: tuple[tuple[int, ...], Callable[..., np.ndarray]] | None = None,
               ) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
        """Per asked field (record field index, i.e. the column's position in the table), the int64 values
        of every row of these leaf pages (a read-only broadcast view where every row holds one value that is stored
        in no bytes: 0, 1 or NULL), and a bool mask of the rows where it is NULL (0 in the values; None: none is);
        ``rowids`` (lo, hi): only the rows with lo <= rowid < hi. ``early`` (test fields, test: their
        values -> row mask; the fields among ``fields``): only the rows the test keeps are decoded past those
        fields (and returned)."""
        self._check_pages(pages)
        buf = self._read(pages)
        base = np.arange(pages.size, dtype=np.int64) * self.page_size
        if (buf[base] != LEAF).any():
            raise Unsupported("not a leaf page")
        cells, cell_page = _cell_offsets(buf, base, LEAF_HEADER, self.usable)
        words = _words(buf)
        payload, record, rowid_len = _cell_heads(buf, words, cells)
        inside = None
        if rowids is not None:
            rowid = _varint_value(buf, record, rowid_len)
            inside = (rowid >= rowids[0]) & (rowid < rowids[1])
        record += rowid_len
        record_end = record + payload
        if (payload > self.usable - 35).any() or (record_end > base[cell_page] + self.usable).any():
            raise Unsupported("overflow pages or a cell past its page")
        types = _be_words(words, record)  # the header's size (a one-byte varint), then 7 fields' serial types
        header = (types >> np.uint64(56)).astype(np.int64)
        need = max(fields) + 1
        if (header >= 0x80).any() or (header - 1 < need).any() or (header > payload).any():
            raise Unsupported("long record header, or fewer fields than asked")
        offset = record + header  # first field's value
        # serial types 0, 8 and 9 store no bytes: their rows read a word of the padding, 8 zero bytes at ``zero``
        # and the big-endian integer 1 at ``one`` (8 bytes read at a field inside a cell end before both)
        zero, one = buf.size - PADDING, buf.size - 16
        buf[-9] = 1
        got: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        test_after = max(early[0]) if early is not None else -1
        # asked fields before the test's last that it does not read: gathered after it, for its rows only
        later = {f: None for f in fields if f < test_after and f not in early[0]} if early is not None else {}
        lanes = None  # per field of this header word: its serial type where every row has the same one (:func:`_lanes`)
        for j in range(need):
            lane = (j + 1) % 8  # field j's serial type: header byte j + 1
            if lane == 0:  # the next 8 fields' serial types: one gather
                types = _be_words(words, record + 1 + j)
            if j == 0 or lane == 0:
                first_lane, lanes = lane, _lanes(types, lane, min(need - j, 8 - lane))
                sized = lanes is not None and bool((lanes != VARIES).all())  # every row's fields lie alike
                if sized and (offset + int(SERIAL_SIZE[np.maximum(lanes, 0)].sum()) > record_end).any():
                    raise Unsupported("a field past its record")  # the word's fields, checked before their reads
            if not sized and (offset > record_end).any():  # else checked before each field's read
                raise Unsupported("a field past its record")  # no position leaves its cell
            same = int(lanes[lane - first_lane]) if lanes is not None else VARIES
            if same >= 0 or (same == ZERO_OR_ONE and j not in fields):  # scalar size and shift (the usual case)
                low = high = max(same, 0)  # a 0-or-1 field no one asks for: its size, 0, is all that matters
            else:
                kind = (types >> np.uint64(56 - 8 * lane)).astype(np.uint8)  # keeps the low byte
                low, high = int(kind.min()) if kind.size else 0, int(kind.max()) if kind.size else 0
                if high >= 0x80:
                    raise Unsupported("multi-byte serial type")
            if low == high:  # one serial type in every row: scalar size and shift
                size, kind = int(SERIAL_SIZE[low]), low
                if j in fields and not INTEGER_TYPE[low]:
                    raise Unsupported("not an integer")
            else:
                if j in fields and not INTEGER_TYPE[kind].all():
                    raise Unsupported("not an integer")
                size = SERIAL_SIZE[kind]
            if j in later:  # its values only for the rows the test keeps: where they are, for then
                later[j] = offset.copy(), kind
            elif j in fields:
                got[j] = _values(words, offset, kind, one, zero)
            offset += size
            if j == test_after:  # the rest only for the rows the test (and the rowid range) keeps
                rows = early[1](*(got[f][0] for f in early[0]))
                rows = np.flatnonzero(rows if inside is None else rows & inside)
                inside = None
                record, record_end, offset, types = record[rows], record_end[rows], offset[rows], types[rows]
                got = _rows_of(got, rows)
                for f, (at, kind) in later.items():
                    got[f] = _values(words, at[rows], kind if isinstance(kind, int) else kind[rows], one, zero)
        if (offset > record_end).any():
            raise Unsupported("a field past its record")
        if inside is not None:
            got = _rows_of(got, np.flatnonzero(inside))
        return [got[f][0] for f in fields], [got[f][1] for f in fields]


def _values(words: np.ndarray, offset: np.ndarray, kind, one: int, zero: int) -> tuple[np.ndarray, np.ndarray | None]:
    """One integer field's values at ``offset`` (per row) and its NULL mask (None: none is NULL); ``kind``: its
    serial type, one for every row (an int) or per row (an array); ``one``, ``zero``: where the padding holds the
    big-endian words 1 and 0 (types 0, 8 and 9 store no bytes)."""
    if isinstance(kind, int):
        value = (_shifted(words, offset, VALUE_SHIFT[kind]) if SERIAL_SIZE[kind] else
                 np.broadcast_to(np.int64(kind == 9), offset.shape))
        return value, (np.broadcast_to(np.True_, offset.shape) if kind == 0 else None)
    at = np.where(SERIAL_SIZE[kind] > 0, offset, np.where(kind == 9, one, zero))
    return _shifted(words, at, VALUE_SHIFT[kind]), kind == 0


VARIES, ZERO_OR_ONE = -1, -2  # :func:`_lanes`: a field whose serial type differs between rows; one that is 8 or 9


def _lanes(types: np.ndarray, lane: int, count: int) -> np.ndarray | None:
    """Per field in lanes ``lane`` .. ``lane + count - 1`` of the header words ``types`` (big-endian, one per row;
    lane k: bits 56 - 8k .. 63 - 8k): its serial type where every row has the same one-byte type, ZERO_OR_ONE where
    the rows hold only the integers 0 and 1 (types 8 and 9: no bytes either way), else VARIES; None for no rows.
    Two passes (which bits differ from the first row's) replace a min and a max per field."""
    if not types.size:
        return None
    differ = int(np.bitwise_or.reduce(types ^ types[0]))
    first = int(types[0])
    out = np.empty(count, dtype=np.int64)
    for k in range(count):
        shift = 56 - 8 * (lane + k)
        kind, bits = (first >> shift) & 0xFF, (differ >> shift) & 0xFF
        out[k] = (kind if kind < 0x80 else VARIES) if not bits else (ZERO_OR_ONE if bits == 1 and kind in (8, 9)
                                                                       else VARIES)
    return out


def _rows_of(got: dict[int, tuple[np.ndarray, np.ndarray | None]], rows: np.ndarray) -> dict:
    """The decoded fields (values, NULL mask or None) at these rows only."""
    return {f: (v[rows], None if z is None else z[rows]) for f, (v, z) in got.items()}


def _words(buf: np.ndarray) -> np.ndarray:
    """The 8-byte word starting at every byte of ``buf``, in the host's byte order (a view: no copy); gathered
    through :func:`_be_words`, they are the big-endian words the file holds."""
    return np.ndarray(shape=(buf.size - 7,), dtype=np.uint64, buffer=buf, strides=(1,))


def _be_words(words: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The unsigned big-endian 8-byte words at ``pos`` (``words``: :func:`_words`): gathered in the host's order
    and byte-swapped in place (twice as fast as gathering a big-endian dtype)."""
    value = words[pos]
    return value.byteswap(inplace=True) if SWAP else value


def _shifted(words: np.ndarray, pos: np.ndarray, shift) -> np.ndarray:
    """The big-endian words at ``pos`` as int64, shifted right (arithmetic) by ``shift`` bits (scalar or per row)."""
    value = _be_words(words, pos).view(np.int64)
    value >>= shift
    return value


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Bytes read into ``view`` from ``offset`` of ``fd``: ``os.preadv`` (no copy) where there is one (Linux, BSDs),
    else ``os.pread`` and a copy (macOS)."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)
    view[:len(data)] = data
    return len(data)


def _be(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Unsigned big-endian integers of ``width`` (2 or 4) bytes at ``pos``, as int64: one gather through a
    big-endian view of ``buf`` at every byte."""
    view = np.ndarray(shape=(max(buf.size - width + 1, 0),), dtype=f">u{width}", buffer=buf, strides=(1,))
    return view[pos].astype(np.int64)


def _cell_offsets(buf: np.ndarray, base: np.ndarray, header: int, usable: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (into ``buf``) of every cell of the pages at ``base``, in page then cell order, and each
    cell's page (index into ``base``); ``usable``: the page's bytes before its reserved tail."""
    count = _be(buf, base + 3, 2)
    if (header + 2 * count > usable).any():
        raise Unsupported("cell count past its page")
    page = np.repeat(np.arange(base.size), count)
    cell_base = base[page]
    # cell k's pointer: 2 bytes at its page's header end + 2 * (k - the page's first cell)
    at = np.repeat(base + header - 2 * (np.cumsum(count) - count), count) + 2 * np.arange(page.size)
    pointer = _be(buf, at, 2)
    if page.size and ((pointer < header) | (pointer > usable - 4)).any():
        raise Unsupported("cell pointer past its page")
    cell_base += pointer
    return cell_base, page


def _cell_heads(buf: np.ndarray, words: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per leaf cell at ``cells``: its payload size (bytes), the position of its rowid varint and that varint's
    length. One gather of the cell's first 8 bytes where every payload size is a one-byte varint (short
    records: the rowid is in the same word)."""
    head = _be_words(words, cells)
    first = head >> np.uint64(56)
    if (first < 0x80).all():
        rowid_len = _varint_len_of(head << np.uint64(8))
        if not (rowid_len == 8).any():  # 8 would count the zero byte shifted in: read the rowid's own word then
            return first.astype(np.int64), cells + 1, rowid_len
    length = _varint_len_of(head)
    record = cells + length
    return _varint_value(buf, cells, length), record, _varint_len(words, record)


def _varint_len(words: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Lengths in bytes (1-8) of the varints at ``pos`` (:func:`_varint_len_of` their words)."""
    return _varint_len_of(_be_words(words, pos))


def _varint_len_of(word: np.ndarray) -> np.ndarray:
    """Lengths in bytes (1-8; a 9-byte varint raises Unsupported) of the varints that start the big-endian 8-byte
    words ``word``: the position of the first byte without the high bit, found as the highest set bit of those
    bytes' markers (the exponent of its float: a sum of distinct powers of two below 2^57 rounds down to the
    largest one's)."""
    ends = ~(word >> np.uint64(7)) & np.uint64(0x0101010101010101)  # 1 in each lane that ends one
    if word.size and not ends.all():
        raise Unsupported("9-byte varint")
    top = (ends.astype(np.float64).view(np.int64) >> 52) - 1023  # the float's exponent: 56 - 8k, first end byte k
    return 8 - (top >> 3)


def _varint_value(buf: np.ndarray, pos: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Values of the varints at ``pos`` of the given lengths (1-8 bytes, 7 bits each)."""
    value = np.zeros(pos.shape, dtype=np.int64)
    for k in range(int(length.max()) if length.size else 0):
        live = k < length
        value = np.where(live, (value << 7) | (buf[pos + k] & 0x7F), value)
    return value
