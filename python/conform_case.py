"""Write conform test cases from NumPy arrays (or PyTorch tensors via NumPy).

    import numpy as np
    import conform_case as cc

    cc.write_case("rms.safetensors", "rms_norm",
                  inputs={"x": x, "weight": cc.bf16(w)},   # x: float32 array
                  outputs={"y": cc.bf16(y)},               # written as "out.y"
                  params={"eps": 1e-6}, impl="my-kernel 1.2")

Element types: float64, float32, float16, int8, int32 arrays are stored as
they are; bfloat16 is written through bf16(), from float32 values (rounded to
nearest, ties to even) or from uint16 bit patterns.  A PyTorch bf16 tensor t
becomes cc.bf16(t.float().numpy()) (exact: every bf16 value is a float32).
FP8 (OCP E4M3 or E5M2) is written through fp8(), from uint8 bit patterns or
ml_dtypes float8_e4m3fn / float8_e5m2 arrays (which are also taken as they
are), and read back as FP8 objects holding the bits.

fmt="safetensors" writes one file; fmt="npy" writes a directory of .npy files
with a case.json manifest.  docs/dumps.md describes both.  Standard library
and NumPy only.  `python3 conform_case.py --self-test` checks this module.
"""

import json
import os
import struct
import sys
import tempfile

import numpy as np

FORMAT = "case/1"
OUTPUT_PREFIX = "out."

# (dtype kind, itemsize) -> (safetensors dtype, case.json dtype)
_DTYPES = {
    ("f", 8): ("F64", "f64"),
    ("f", 4): ("F32", "f32"),
    ("f", 2): ("F16", "f16"),
    ("i", 1): ("I8", "i8"),
    ("i", 4): ("I32", "i32"),
}


# ml_dtypes' FP8 types (by dtype name) -> case.json dtype; stored as bit patterns.
_FP8_NAMES = {"float8_e4m3fn": "f8_e4m3", "float8_e5m2": "f8_e5m2"}
_FP8_STORED = {"f8_e4m3": "F8_E4M3", "f8_e5m2": "F8_E5M2"}


class FP8:
    """OCP FP8 data held as uint8 bit patterns, with its format ("f8_e4m3" or
    "f8_e5m2"; docs/numerics.md, "FP8"); made by fp8()."""

    def __init__(self, bits, fmt):
        if fmt not in _FP8_STORED:
            raise ValueError("FP8 format must be f8_e4m3 or f8_e5m2, not %r" % (fmt,))
        self.bits = np.array(bits, dtype="|u1", order="C")
        self.fmt = fmt


def fp8(values, fmt="f8_e4m3"):
    """Mark data as FP8: uint8 arrays are taken as bits of `fmt`; ml_dtypes
    float8_e4m3fn / float8_e5m2 arrays as their own bits and format."""
    a = np.asarray(values)
    if a.dtype.name in _FP8_NAMES:
        return FP8(a.view(np.uint8), _FP8_NAMES[a.dtype.name])
    if (a.dtype.kind, a.dtype.itemsize) != ("u", 1):
        raise TypeError("fp8() takes uint8 bit patterns or ml_dtypes float8 arrays, not %s" % a.dtype)
    return FP8(a, fmt)


class BF16:
    """bfloat16 data held as uint16 bit patterns; made by bf16()."""

    def __init__(self, bits):
        self.bits = bits


def bf16_bits(values):
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest even.

    NaN stays NaN (sign kept, made quiet); values beyond bf16's range round to
    infinity like any other rounding overflow.
    """
    a = np.array(values, dtype="<f4", order="C")  # a copy that keeps 0-d shapes
    flat = a.reshape(-1)  # arrays, not NumPy scalars, so uint64 arithmetic stays uint64
    u = flat.view("<u4").astype(np.uint64)
    sixteen = np.uint64(16)
    bits = ((u + np.uint64(0x7FFF) + ((u >> sixteen) & np.uint64(1))) >> sixteen).astype(np.uint16)
    nan = np.isnan(flat)
    bits[nan] = ((u[nan] >> sixteen) | np.uint64(0x0040)).astype(np.uint16)
    return bits.reshape(a.shape)


def bf16(values):
    """Mark data as bfloat16: float32 values are rounded, uint16 arrays are taken as bits."""
    a = np.asarray(values)
    if (a.dtype.kind, a.dtype.itemsize) == ("u", 2):
        return BF16(np.array(a, dtype="<u2", order="C"))
    if (a.dtype.kind, a.dtype.itemsize) != ("f", 4):
        raise TypeError("bf16() takes float32 values or uint16 bit patterns, not %s" % a.dtype)
    return BF16(bf16_bits(a))


def _prepare(name, value):
    """-> (safetensors dtype, case.json dtype, little-endian C-order array)."""
    if isinstance(value, BF16):
        return "BF16", "bf16", np.array(value.bits, dtype="<u2", order="C")
    if isinstance(value, FP8) or np.asarray(value).dtype.name in _FP8_NAMES:
        v = value if isinstance(value, FP8) else fp8(value)
        return _FP8_STORED[v.fmt], v.fmt, v.bits
    a = np.asarray(value)
    if (a.dtype.kind, a.dtype.itemsize) == ("u", 2):
        raise TypeError("tensor %r: uint16 data must be wrapped as bf16(bits)" % name)
    key = (a.dtype.kind, a.dtype.itemsize)
    if key not in _DTYPES:
        raise TypeError("tensor %r: dtype %s is not one of float64, float32, float16, int8, int32 "
                        "(or bfloat16 through bf16())" % (name, a.dtype))
    st_dtype, case_dtype = _DTYPES[key]
    return st_dtype, case_dtype, np.array(a, dtype=a.dtype.newbyteorder("<"), order="C")


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()  # NumPy scalars in params, e.g. np.float32(1e-6)
    raise TypeError("%r is not JSON serializable" % (value,))


def _json_text(value, **kwargs):
    return json.dumps(value, sort_keys=True, allow_nan=False, default=_json_default, **kwargs)


def _tensors(inputs, outputs):
    """Stored name -> prepared tensor; outputs are stored as out.<name>."""
    tensors = {}
    for name, value in inputs.items():
        if not name or name.startswith(OUTPUT_PREFIX) or name == "__metadata__":
            raise ValueError("input name %r is empty, starts with 'out.' or is '__metadata__'" % name)
        tensors[name] = _prepare(name, value)
    for name, value in outputs.items():
        if not name:
            raise ValueError("empty output name")
        tensors[OUTPUT_PREFIX + name] = _prepare(name, value)
    return tensors


def _replace_file(path, data):
    """Write a temporary file next to path, fsync it and rename it over path, so
    no reader sees half a file (even after a crash)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".tmp.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _write_safetensors(path, metadata, tensors):
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        st_dtype, _, a = tensors[name]
        raw = a.tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = _json_text(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # 8-byte aligned data block, as the safetensors library writes
    _replace_file(path, struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _write_npy_dir(path, manifest, tensors):
    os.makedirs(path, exist_ok=True)
    entries = {}
    for name, (_, case_dtype, a) in sorted(tensors.items()):
        if any(c in name for c in "/\\\0"):
            raise ValueError("tensor name %r cannot be a file name" % name)
        np.save(os.path.join(path, name + ".npy"), a, allow_pickle=False)
        entries[name] = {"file": name + ".npy", "dtype": case_dtype}
    manifest = dict(manifest, tensors=entries)
    _replace_file(os.path.join(path, "case.json"), (_json_text(manifest, indent=2) + "\n").encode("utf-8"))


def write_case(path, op, inputs, outputs, params=None, impl="", conventions=None, fmt="safetensors", profile=None):
    """Write one case.

    path: the .safetensors file (fmt="safetensors") or the directory (fmt="npy").
    op: the registry op name, e.g. "rms_norm".
    inputs, outputs: name -> array (or bf16(...)); outputs are stored as out.<name>.
    params: the op's parameters (a dict, JSON-serializable); impl: who produced the
    outputs; conventions: declared conventions (a dict) or None; profile: the
    accuracy profile the outputs claim (docs/numerics.md, "Accuracy profiles"),
    e.g. "ulp:4+ftz", or None for strict.
    """
    if not op:
        raise ValueError("empty op name")
    params = {} if params is None else params
    if not isinstance(params, dict) or (conventions is not None and not isinstance(conventions, dict)):
        raise TypeError("params and conventions must be dicts")
    if profile is not None and not isinstance(profile, str):
        raise TypeError("profile must be a string such as 'ulp:4' or 'faithful+ftz'")
    tensors = _tensors(inputs, outputs)
    if fmt == "safetensors":
        metadata = {"conform.format": FORMAT, "conform.op": op, "conform.impl": impl,
                    "conform.params": _json_text(params, separators=(",", ":"))}
        if conventions is not None:
            metadata["conform.conventions"] = _json_text(conventions, separators=(",", ":"))
        if profile is not None:
            metadata["conform.profile"] = profile
        _write_safetensors(os.fspath(path), metadata, tensors)
    elif fmt == "npy":
        manifest = {"format": FORMAT, "op": op, "params": params, "impl": impl}
        if conventions is not None:
            manifest["conventions"] = conventions
        if profile is not None:
            manifest["profile"] = profile
        _write_npy_dir(os.fspath(path), manifest, tensors)
    else:
        raise ValueError("fmt must be 'safetensors' or 'npy', not %r" % (fmt,))


_FROM_STORED = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I8": "|i1", "I32": "<i4", "BF16": "<u2",
                "F8_E4M3": "|u1", "F8_E5M2": "|u1"}


def _read_safetensors(path):
    """Header and raw tensor bytes (the C++ reader checks untrusted files; this one reads conform's own)."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    block = data[8 + length:]
    return header, {name: block[e["data_offsets"][0]:e["data_offsets"][1]]
                    for name, e in header.items() if name != "__metadata__"}


def _stored_array(st_dtype, shape, raw):
    a = np.frombuffer(raw, dtype=_FROM_STORED[st_dtype]).reshape(shape).copy()
    for fmt, stored in _FP8_STORED.items():
        if st_dtype == stored:
            return FP8(a, fmt)
    return BF16(a) if st_dtype == "BF16" else a


def read_case(path):
    """Read a case written by write_case or `conform cases` (either form).

    Returns a dict: op, params, impl, conventions (None when absent), profile
    (None when absent), inputs and outputs (name -> NumPy array, bfloat16 as
    BF16 holding the bit patterns; outputs without "out.").  For conform's own
    files; untrusted ones are for the C++ reader (conform validate).
    """
    path = os.fspath(path)
    tensors = {}
    if os.path.isdir(path):
        with open(os.path.join(path, "case.json")) as f:
            manifest = json.load(f)
        meta = {"op": manifest["op"], "params": manifest.get("params") or {}, "impl": manifest.get("impl") or "",
                "conventions": manifest.get("conventions"), "profile": manifest.get("profile")}
        for name, entry in manifest.get("tensors", {}).items():
            a = np.load(os.path.join(path, entry.get("file", name + ".npy")), allow_pickle=False)
            dtype = entry.get("dtype")
            tensors[name] = BF16(a) if dtype == "bf16" else FP8(a, dtype) if dtype in _FP8_STORED else a
    else:
        header, raw = _read_safetensors(path)
        md = header.get("__metadata__", {})
        if md.get("conform.format") != FORMAT:
            raise ValueError("%s: __metadata__ conform.format: not %s" % (path, FORMAT))
        meta = {"op": md["conform.op"], "params": json.loads(md.get("conform.params", "{}")),
                "impl": md.get("conform.impl", ""),
                "conventions": json.loads(md["conform.conventions"]) if "conform.conventions" in md else None,
                "profile": md.get("conform.profile")}
        for name, e in header.items():
            if name != "__metadata__":
                tensors[name] = _stored_array(e["dtype"], e["shape"], raw[name])
    meta["inputs"] = {n: t for n, t in tensors.items() if not n.startswith(OUTPUT_PREFIX)}
    meta["outputs"] = {n[len(OUTPUT_PREFIX):]: t for n, t in tensors.items() if n.startswith(OUTPUT_PREFIX)}
    return meta


def _self_test():
    f32 = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -1 - 2**-8, -0.0, np.inf, -np.inf, np.nan,
                    3.3895314e38, 3.4028235e38, 2**-133, 2**-134, 1.5 * 2**-134], dtype=np.float32)
    want = [0x3F80, 0x3F80, 0x3F82, 0xBF80, 0x8000, 0x7F80, 0xFF80, 0x7FC0,
            0x7F7F, 0x7F80, 0x0001, 0x0000, 0x0001]
    got = bf16_bits(f32).tolist()
    assert got == want, "bf16 rounding: %s" % [hex(b) for b in got]
    assert bf16(np.float32(2.0)).bits.shape == (), "0-d arrays keep their shape"
    assert bf16(np.array([0x7FC1], dtype=np.uint16)).bits.tolist() == [0x7FC1]
    for bad in (np.zeros(2, dtype=np.uint16), np.zeros(2, dtype=bool), np.zeros(2, dtype=np.int64)):
        try:
            _prepare("x", bad)
            raise AssertionError("accepted %s" % bad.dtype)
        except TypeError:
            pass

    x = np.arange(6, dtype=">f4").reshape(2, 3).T  # big-endian, not C-contiguous
    with tempfile.TemporaryDirectory() as tmp:
        st = os.path.join(tmp, "c.safetensors")
        write_case(st, "silu", {"x": x}, {"y": bf16(x)}, params={"n": np.int32(3)}, impl="self-test")
        header, raw = _read_safetensors(st)
        meta = header["__metadata__"]
        assert meta["conform.format"] == FORMAT and meta["conform.op"] == "silu", meta
        assert json.loads(meta["conform.params"]) == {"n": 3}, meta
        assert "conform.conventions" not in meta and "conform.profile" not in meta
        assert header["x"]["shape"] == [3, 2] and header["x"]["dtype"] == "F32", header
        assert np.array_equal(np.frombuffer(raw["x"], dtype="<f4").reshape(3, 2), x)
        assert (8 + len(json.dumps(header, separators=(",", ":")))) <= os.path.getsize(st)
        back = read_case(st)
        assert back["op"] == "silu" and back["params"] == {"n": 3} and back["impl"] == "self-test", back
        assert np.array_equal(back["inputs"]["x"], x) and back["inputs"]["x"].dtype == np.dtype("<f4")
        assert np.array_equal(back["outputs"]["y"].bits, bf16(x).bits), "bf16 outputs read back as bits"

        d = os.path.join(tmp, "c")
        write_case(d, "silu", {"x": x}, {"y": bf16(x)}, conventions={"a": "b"}, fmt="npy", profile="ulp:4+ftz")
        with open(os.path.join(d, "case.json")) as f:
            manifest = json.load(f)
        assert manifest["profile"] == "ulp:4+ftz", manifest
        write_case(st, "silu", {"x": x}, {"y": bf16(x)}, profile="faithful")
        assert _read_safetensors(st)[0]["__metadata__"]["conform.profile"] == "faithful"
        assert manifest["tensors"]["out.y"] == {"file": "out.y.npy", "dtype": "bf16"}, manifest
        assert manifest["conventions"] == {"a": "b"}
        assert np.array_equal(np.load(os.path.join(d, "x.npy")), x)
        assert np.load(os.path.join(d, "out.y.npy")).dtype == np.dtype("<u2")
        back = read_case(d)
        assert back["conventions"] == {"a": "b"} and back["profile"] == "ulp:4+ftz", back
        assert np.array_equal(back["outputs"]["y"].bits, bf16(x).bits) and np.array_equal(back["inputs"]["x"], x)
        for bad_name in ({"out.x": x}, {"": x}):
            try:
                write_case(d, "silu", bad_name, {}, fmt="npy")
                raise AssertionError("accepted input names %s" % list(bad_name))
            except ValueError:
                pass
    _fp8_self_test()
    print("conform_case self-test: ok")


def _fp8_self_test():
    codes = fp8(np.array([[0x00, 0x7E], [0x80, 0x7F]], dtype=np.uint8))
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, path in (("safetensors", os.path.join(tmp, "q.safetensors")), ("npy", os.path.join(tmp, "q"))):
            write_case(path, "fp8_gemm", {"a": codes, "b": fp8(codes.bits, "f8_e5m2")}, {}, fmt=fmt)
            back = read_case(path)["inputs"]
            assert isinstance(back["a"], FP8) and back["a"].fmt == "f8_e4m3", back
            assert back["b"].fmt == "f8_e5m2" and np.array_equal(back["a"].bits, codes.bits), back
    try:
        fp8(np.zeros(2, dtype=np.int8))
        raise AssertionError("fp8() accepted int8 values")
    except TypeError:
        pass


def command_line(doc, self_test):
    """The scripts' command line: --self-test runs self_test, no argument or -h prints doc."""
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        print(doc)
        sys.exit(0 if sys.argv[1:] in ([], ["-h"], ["--help"]) else 2)


if __name__ == "__main__":
    command_line(__doc__, _self_test)
