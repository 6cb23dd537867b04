"""Dumps a GGUF file's header as JSON with the `gguf` PyPI package (an independent reader),
for tests/gguf_oracles.rs to compare with pocket's reader.

Output: {"alignment", "data_offset", "metadata": {key: {"type", "value"}}, "tensors": [...]}.
Every value is given in a canonical text form: strings as themselves (invalid UTF-8
replaced), integers in decimal, bools as true/false, floats as the decimal of their f64 bit
pattern. Arrays are summarised as {"len", "elem_type", "head", "hash"}, hash being sha256 over
each element's (u64 LE byte length, UTF-8 bytes) of that text, so long vocabularies compare
cheaply but completely.
"""
import hashlib
import json
import struct
import sys

from gguf import GGUFReader, GGUFValueType

TYPE_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array", GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}


def canon(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(struct.unpack("<Q", struct.pack("<d", v))[0])
    return str(v)


def scalar(field, part_index):
    t = field.types[-1]
    part = field.parts[part_index]
    if t == GGUFValueType.STRING:
        return bytes(part).decode("utf-8", errors="replace")
    v = part.tolist()[0]
    if t == GGUFValueType.BOOL:
        return bool(v)
    if t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return float(v)
    return int(v)


def field_json(field):
    t0 = field.types[0]
    if t0 != GGUFValueType.ARRAY:
        return {"type": TYPE_NAMES[t0], "value": canon(scalar(field, field.data[0]))}
    if len(field.types) > 2:
        return {"type": "array", "nested": True, "len": len(field.data)}
    elem_type = field.types[1] if len(field.types) > 1 else None
    items = [canon(scalar(field, i)) for i in field.data]
    h = hashlib.sha256()
    for it in items:
        b = it.encode("utf-8")
        h.update(struct.pack("<Q", len(b)))
        h.update(b)
    return {
        "type": "array",
        "elem_type": TYPE_NAMES.get(elem_type, "?"),
        "len": len(items),
        "head": items[:4],
        "hash": h.hexdigest(),
    }


def main(path):
    r = GGUFReader(path)
    meta = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue  # the package's pseudo-fields (version, counts)
        meta[name] = field_json(field)
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "type_id": int(t.tensor_type),
            "dims": [int(d) for d in t.shape],
            "offset": int(t.data_offset),
            "bytes": int(t.n_bytes),
        })
    align = r.alignment
    out = {"alignment": int(align), "metadata": meta, "tensors": tensors}
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
