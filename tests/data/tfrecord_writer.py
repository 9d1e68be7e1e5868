#!/usr/bin/python3
"""An independent TFRecord writer for rn50's data-format tests (tests/test_data_formats.cpp),
standard library only: the framing and the tf.train.Example bytes are written here from their
specifications, not with rn50's code.

  tfrecord_writer.py IMAGE_ROOT OUT_DIR SHARDS

IMAGE_ROOT is an ImageFolder (train/<class>/*, val/<class>/*); classes sorted by name get labels
1..N (the standard ImageNet conversion's, build_imagenet_data.py). Writes OUT_DIR/
train-NNNNN-of-NNNNN and validation-NNNNN-of-NNNNN (samples in sorted path order, dealt into
SHARDS consecutive blocks) and OUT_DIR/idx/<shard>.idx in DALI's tfrecord2idx format (one
"offset size" line per record).

Framing (tensorflow/core/lib/io/record_writer.cc): uint64 length, uint32 masked CRC32C of the
length, the data, uint32 masked CRC32C of the data; mask = ((crc >> 15 | crc << 17) + 0xa282ead8).
Example (tensorflow/core/example/example.proto, feature.proto): Example{1: Features{1: map<string,
Feature>}}; Feature{1: BytesList{1: bytes*}, 2: FloatList, 3: Int64List{1: packed int64}}.
"""
import os
import struct
import sys


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, payload):  # length-delimited (wire type 2)
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def bytes_feature(values):
    return field(1, b"".join(field(1, v) for v in values))


def int64_feature(values):
    packed = b"".join(varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)
    return field(3, field(1, packed))


def example(features):
    entries = b""
    for key, feature in features.items():
        entries += field(1, field(1, key.encode()) + field(2, feature))
    return field(1, entries)


def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


def write_split(root, split, prefix, out_dir, shards):
    classes = sorted(os.listdir(os.path.join(root, split)))
    files = []
    for label, c in enumerate(classes, start=1):
        for f in sorted(os.listdir(os.path.join(root, split, c))):
            files.append((os.path.join(root, split, c, f), label, c))
    per = -(-len(files) // shards)
    os.makedirs(os.path.join(out_dir, "idx"), exist_ok=True)
    for s in range(shards):
        name = "%s-%05d-of-%05d" % (prefix, s, shards)
        blob, index = b"", []
        for path, label, synset in files[s * per:(s + 1) * per]:
            with open(path, "rb") as f:
                img = f.read()
            ex = example({
                "image/encoded": bytes_feature([img]),
                "image/format": bytes_feature([b"JPEG"]),
                "image/class/label": int64_feature([label]),
                "image/class/synset": bytes_feature([synset.encode()]),
                "image/filename": bytes_feature([os.path.basename(path).encode()]),
                "image/height": int64_feature([0]),
            })
            r = record(ex)
            index.append("%d %d" % (len(blob), len(r)))
            blob += r
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(blob)
        with open(os.path.join(out_dir, "idx", name + ".idx"), "w") as f:
            f.write("\n".join(index) + ("\n" if index else ""))


def main():
    root, out_dir, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
    write_split(root, "train", "train", out_dir, shards)
    write_split(root, "val", "validation", out_dir, shards)


if __name__ == "__main__":
    main()
