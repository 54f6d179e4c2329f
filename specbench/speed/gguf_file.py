"""The tensor index of a GGUF file: names, shapes, types and offsets, read without the
metadata; and one gguf-py reader per file while transformers loads one (one_reader_per_file).

Why not gguf-py's GGUFReader: it turns every metadata value into numpy views, and a
tokenizer's 151k vocabulary strings take it seconds; a q4k target needs only where each
tensor's bytes are (gguf_blocks.py) and the architecture's name. The format is GGUF v2/v3
(github.com/ggml-org/ggml, docs/gguf.md): a header, key-value metadata, tensor infos, then
the tensor data at the next multiple of general.alignment (32 unless the file says).
"""

from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass

Q4_K = 12  # ggml type id of Q4_K
Q6_K = 14  # ggml type id of Q6_K
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type id -> bytes
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF order: the fastest-varying dimension first
    type: int  # ggml type id
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class TensorIndex:
    architecture: str  # general.architecture ("" when absent)
    tensors: list[TensorInfo]
    data_offset: int  # where the data section starts in the file


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        value = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return value[0]

    def string(self) -> str:
        size = self.take("Q")
        text = self.data[self.pos : self.pos + size].decode("utf-8", errors="replace")
        self.pos += size
        return text

    def value(self, kind: int):
        """A metadata value: a string or a scalar is returned, an array is skipped (None)."""
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.take("I"), self.take("Q")
            if item in _SCALAR:
                self.pos += _SCALAR[item] * count
            elif item == _STRING:  # a vocabulary: skipped, not decoded
                for _ in range(count):
                    size = self.take("Q")  # read before pos moves past it
                    self.pos += size
            else:
                for _ in range(count):
                    self.value(item)
            return None
        if kind not in _SCALAR:
            raise ValueError(f"unknown GGUF metadata type {kind}")
        fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}[kind]
        return self.take(fmt)


def read_tensor_index(path: str) -> TensorIndex:
    """The index of the GGUF file at path; ValueError for a file that is not GGUF v2 or v3."""
    with open(path, "rb") as handle:
        head = handle.read(24)
        if len(head) < 24 or head[:4] != b"GGUF" or struct.unpack_from("<I", head, 4)[0] not in (2, 3):
            raise ValueError(f"{path} is not a GGUF v2/v3 file")
        size = 8 << 20
        while True:  # read as much of the start as the metadata and tensor infos need
            handle.seek(0)
            data = handle.read(size)
            try:
                return _parse(data)
            except struct.error:
                if len(data) < size:
                    raise ValueError(f"{path} ends inside its header") from None
                size *= 4


def _parse(data: bytes) -> TensorIndex:
    reader = _Reader(data)
    reader.pos = 8
    n_tensors, n_kv = reader.take("Q"), reader.take("Q")
    architecture, alignment = "", 32
    for _ in range(n_kv):
        key, kind = reader.string(), reader.take("I")
        value = reader.value(kind)
        if key == "general.architecture" and isinstance(value, str):
            architecture = value
        elif key == "general.alignment" and isinstance(value, int):
            alignment = value
    tensors = []
    for _ in range(n_tensors):
        name = reader.string()
        dims = reader.take("I")
        shape = tuple(reader.take("Q") for _ in range(dims))
        tensors.append(TensorInfo(name, shape, reader.take("I"), reader.take("Q")))
    data_offset = -(-reader.pos // alignment) * alignment
    return TensorIndex(architecture, tensors, data_offset)


_readers: dict = {}  # while one_reader_per_file is active: (path, arguments) -> reader


@contextmanager
def one_reader_per_file():
    """Within the block, gguf-py's GGUFReader parses each GGUF file once: transformers opens a
    new reader for a GGUF model's config, its tokenizer and its weights, and each parses the
    whole vocabulary again (about ten seconds for the default target's 151k tokens). The
    readers only read; they are dropped when the block ends, or by release_readers. Without
    gguf-py installed there is nothing to share (transformers needs it to read a GGUF file)."""
    try:
        import gguf
    except ImportError:
        yield
        return

    original = gguf.GGUFReader
    fast = fast_reader_class(original)

    def shared(path, *args, **kwargs):
        key = (os.path.realpath(path), args, tuple(sorted(kwargs.items())))
        if key not in _readers:
            _readers[key] = fast(path, *args, **kwargs)
        return _readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original
        release_readers()


def fast_reader_class(base: type) -> type:
    """gguf-py's GGUFReader class `base`, with its metadata arrays parsed in one pass.

    Why: `base` parses an array one element at a time through its general field parser
    (an enum, a memory-map slice and two views an element), so the default target's
    vocabulary, merges and token types (about 450k elements) took it 10 s on a 2-core CPU,
    and the first run reads two such files. This
    subclass builds the very same fields (the same parts, as views of the same bytes, the
    same indices and types: tested against `base`) for arrays of strings or scalars in a
    file of this machine's byte order; anything else goes to `base`'s parser.
    """
    import sys

    import numpy as np
    from gguf import GGUFValueType

    class FastArrays(base):
        def _get_field_parts(self, orig_offs: int, raw_type: int):
            if raw_type != GGUFValueType.ARRAY or self.byte_order != "I" or sys.byteorder != "little":
                return super()._get_field_parts(orig_offs, raw_type)
            parts = [self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)]  # the item type, the count
            itype, count = int(parts[0][0]), int(parts[1][0])
            if itype == GGUFValueType.ARRAY or (
                itype != GGUFValueType.STRING and GGUFValueType(itype) not in self.gguf_scalar_to_np
            ):
                return super()._get_field_parts(orig_offs, raw_type)
            plain = self.data.view(np.ndarray)  # slicing a plain array is several times cheaper than a memmap
            types = [GGUFValueType.ARRAY] + ([GGUFValueType(itype)] if count else [])
            offs = orig_offs + 12
            if itype == GGUFValueType.STRING:
                memory, u64 = memoryview(plain), np.dtype(np.uint64).newbyteorder("I")
                for _ in range(count):
                    (length,) = struct.unpack_from("<Q", memory, offs)
                    parts.append(plain[offs : offs + 8].view(u64))
                    parts.append(plain[offs + 8 : offs + 8 + length])
                    offs += 8 + length
                return offs - orig_offs, parts, list(range(3, 2 + 2 * count, 2)), types
            dtype = np.dtype(self.gguf_scalar_to_np[GGUFValueType(itype)]).newbyteorder("I")
            values = plain[offs : offs + count * dtype.itemsize].view(dtype)
            parts.extend(values[i : i + 1] for i in range(count))
            return 12 + count * dtype.itemsize, parts, list(range(2, 2 + count)), types

    FastArrays.__name__ = FastArrays.__qualname__ = base.__name__
    return FastArrays


def release_readers() -> None:
    """Drop the readers kept so far: once a model's weights are read, a reader only holds
    memory (its parsed fields, and its memory map's pages of the whole file: 1.7 GB for the
    default target)."""
    _readers.clear()
