"""torch_reader: what torch.save writes, read without PyTorch (numpy holds
the tensors), for the converters of this folder (torch_to_ckpt.py,
bert_to_safetensors.py).

    obj = read_torch(path)          # the saved object: dicts, lists, numbers, arrays
    sd = read_state_dict(path)      # name -> array, of a saved state dict or an .npz

Formats: the zip archive of PyTorch 1.6 and later (<name>/data.pkl, the
pickled object, and <name>/data/<key>, one file per storage) and the legacy
stream of earlier versions (five pickles: a magic number, the protocol, the
system's sizes, the object and the storage keys; then each storage as its
element count and bytes). Tensors may be fp32, fp16, bf16, fp64 or
integers, views with a storage offset or other strides. bf16 reads as fp32
(exactly), or with keep_bf16 as the record dtype BF16 (one uint16 field,
"bf16": the stored bits).

Security: Python's pickle can run any code that a file names, so a file
from an untrusted source is dangerous to torch.load. This reader unpickles
with an allow-list: collections.OrderedDict, torch._utils._rebuild_tensor_v2
(replaced by a numpy equivalent) and torch's storage types (markers naming a
dtype). Any other global stops the reading with an error naming it. The
allow-list is the point of this reader; do not widen it to get a file read.

Bad input raises InputError, whose message says what was wrong.
"""
import collections
import io
import pickle
import pickletools
import struct
import zipfile
import zlib

import numpy as np

# The storage types torch.save names, by their numpy dtype ("bf16": stored
# as uint16, widened exactly or kept as BF16).
STORAGES = {
    "FloatStorage": "<f4", "HalfStorage": "<f2", "BFloat16Storage": "bf16", "DoubleStorage": "<f8",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1",
    "ByteStorage": "u1", "BoolStorage": "?",
}
BF16 = np.dtype([("bf16", "<u2")])
LEGACY_MAGIC = 0x1950a86a20f9469cfc6c  # torch/serialization.py
LEGACY_PROTOCOL = 1001
PICKLE_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError,
                 IndexError, struct.error)


class InputError(Exception):
    """Bad input: the message names what was wrong (and the tensor)."""


class _Storage:
    """What an allowed torch.<Type>Storage global unpickles to: its dtype."""

    def __init__(self, dtype):
        self.dtype = dtype


def _rebuild_tensor(storage, offset, size, stride, *_ignored):
    """torch._utils._rebuild_tensor_v2 over a numpy storage: the view it
    describes (offset and strides in elements), read-only."""
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride) or min(size + stride + (offset,)) < 0:
        raise InputError("a tensor of size %s, stride %s, offset %d" % (size, stride, offset))
    if 0 in size:
        return np.zeros(size, storage.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= storage.size:
        raise InputError("a tensor of size %s, stride %s, offset %d past the end of its "
                         "storage of %d elements" % (size, stride, offset, storage.size))
    return np.lib.stride_tricks.as_strided(storage[offset:], size, [s * storage.itemsize for s in stride],
                                           writeable=False)


class _AllowListUnpickler(pickle.Unpickler):
    """Unpickles tensors, containers and numbers and nothing else (see the
    module's docstring). storage(kind, key, numel) gives the array of a
    storage (persistent id) of the zip or legacy format."""

    def __init__(self, data, storage=None):
        super().__init__(io.BytesIO(data))
        self.storage = storage

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGES:
            return _Storage(STORAGES[name])
        raise InputError("the pickle names the global '%s.%s', which a state dict does not "
                         "(only tensors are read: unpickling other globals can run code)"
                         % (module, name))

    def persistent_load(self, pid):
        # zip: ("storage", type, key, location, numel); legacy: the same and view metadata
        if not (self.storage and isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"
                and isinstance(pid[1], _Storage)):
            raise InputError("an unknown persistent id %r" % (pid,))
        if len(pid) == 6 and pid[5] is not None:
            raise InputError("a view of a storage (the format of PyTorch before 0.4): save it again "
                             "with a newer PyTorch")
        return self.storage(pid[1], str(pid[2]), pid[4])


def _unpickle(data, storage=None):
    try:
        return _AllowListUnpickler(data, storage).load()
    except PICKLE_ERRORS as e:
        raise InputError("not a readable pickle (%s)" % e) from None


def _storage_dtypes(kind, keep_bf16):
    """(dtype of the stored bytes, dtype of the array read)."""
    if kind.dtype == "bf16":
        return np.dtype("<u2"), BF16 if keep_bf16 else np.dtype(np.float32)
    return np.dtype(kind.dtype), np.dtype(kind.dtype)


def _fill(array, raw, stored):
    data = np.frombuffer(raw, stored)
    if array.dtype == np.float32 and stored == np.dtype("<u2"):  # bf16 widened
        data = (data.astype(np.uint32) << 16).view(np.float32)
    array.view(stored if array.dtype == BF16 else array.dtype)[:] = data


def _read_zip(archive, keep_bf16):
    pkls = [n for n in archive.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
    if len(pkls) != 1:
        raise InputError("a zip archive without one <name>/data.pkl: not what torch.save writes")
    prefix = pkls[0][:-len("data.pkl")]
    order = prefix + "byteorder"
    if order in archive.namelist() and archive.read(order) != b"little":
        raise InputError("a big-endian archive (byteorder %r)" % archive.read(order))

    def storage(kind, key, numel):
        path = "%sdata/%s" % (prefix, key)
        try:
            raw = archive.read(path)
        except KeyError:
            raise InputError("no storage '%s' in the archive" % path) from None
        stored, read = _storage_dtypes(kind, keep_bf16)
        if len(raw) != numel * stored.itemsize:
            raise InputError("storage '%s' holds %d bytes, not %d elements of %s"
                             % (path, len(raw), numel, stored))
        array = np.empty(numel, read)
        _fill(array, raw, stored)
        return array

    return _unpickle(archive.read(pkls[0]), storage)


def _pickle_end(data, at):
    """Where the pickle that starts at byte at ends (read, not run)."""
    f = io.BytesIO(data)
    f.seek(at)
    try:
        for _ in pickletools.genops(f):
            pass
    except PICKLE_ERRORS as e:
        raise InputError("not a readable pickle (%s)" % e) from None
    return f.tell()


def _read_legacy(data, keep_bf16):
    """The stream of torch.save before 1.6: the storages follow the object,
    so each is allocated when the object names it and filled after."""
    at, header = 0, []
    for _ in range(3):  # the magic number, the protocol, the system's sizes
        end = _pickle_end(data, at)
        header.append(_unpickle(data[at:end]))
        at = end
        if header[0] != LEGACY_MAGIC:
            raise InputError("a pickle, but not what torch.save writes (no magic number %#x)" % LEGACY_MAGIC)
    _, protocol, sys_info = header
    if protocol != LEGACY_PROTOCOL:
        raise InputError("torch.save's legacy format of protocol %r, not %d" % (protocol, LEGACY_PROTOCOL))
    if not isinstance(sys_info, dict) or not sys_info.get("little_endian", False):
        raise InputError("saved on a big-endian machine")
    storages = {}

    def storage(kind, key, numel):
        if key not in storages:
            stored, read = _storage_dtypes(kind, keep_bf16)
            storages[key] = (np.empty(numel, read), stored)
        return storages[key][0]

    end = _pickle_end(data, at)
    obj = _unpickle(data[at:end], storage)
    at = end
    end = _pickle_end(data, at)
    keys = _unpickle(data[at:end])
    at = end
    if not isinstance(keys, list) or sorted(keys) != sorted(storages):
        raise InputError("the storage keys %r do not match the object's storages" % (keys,))
    for key in keys:
        array, stored = storages[key]
        if at + 8 > len(data):
            raise InputError("storage '%s' cut off (a truncated file)" % key)
        (numel,) = struct.unpack_from("<q", data, at)
        nbytes = array.size * stored.itemsize
        if numel != array.size or at + 8 + nbytes > len(data):
            raise InputError("storage '%s' of %d elements: the file holds %d, or is truncated"
                             % (key, array.size, numel))
        _fill(array, memoryview(data)[at + 8:at + 8 + nbytes], stored)  # no copy of the bytes
        at += 8 + nbytes
    if at != len(data):
        raise InputError("%d bytes after the last storage" % (len(data) - at))
    return obj


def read_torch(path, keep_bf16=False):
    """The object torch.save wrote to path (its tensors numpy arrays)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError as e:
        raise InputError("cannot read: %s" % e.strerror) from None
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                return _read_zip(archive, keep_bf16)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
            raise InputError("a damaged zip archive (%s)" % e) from None
    if head[:1] == b"\x80":  # a pickle's PROTO opcode: the legacy format
        with open(path, "rb") as f:
            return _read_legacy(f.read(), keep_bf16)
    raise InputError("not what torch.save writes (a zip archive or a pickle stream): another format, "
                     "or a truncated file")


def is_state_dict(obj):
    """A dict of tensors (what module.state_dict() gives)."""
    return isinstance(obj, dict) and all(isinstance(v, np.ndarray) for v in obj.values())


def read_state_dict(path):
    """name -> numpy array, in the file's order, from a torch.save of a state
    dict or an .npz of one."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
            if names and all(n.endswith(".npy") for n in names):
                with np.load(path, allow_pickle=False) as npz:
                    return collections.OrderedDict((k, npz[k]) for k in npz.files)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as e:
            raise InputError("a damaged zip archive (%s)" % e) from None
    obj = read_torch(path)
    if not is_state_dict(obj):
        raise InputError("holds a %s, not a state dict (tensor name -> tensor)" % type(obj).__name__)
    return collections.OrderedDict(obj)
