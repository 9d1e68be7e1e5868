#!/usr/bin/python3
"""PIL / torchvision reference outputs for the rn50 data-pipeline tests (tests/test_data_*.cpp).

Run with /usr/bin/python3 (Debian's python3-pil 9.4 and torchvision 0.14). Commands:

  fixtures DIR     write test images (JPEG/PNG variants and broken files) into DIR, and for each
                   the reference RGB pixels of PIL's Image.open(f).convert("RGB") as NAME.rgb;
                   DIR/manifest.txt lists "name ok width height" or "name fail" (PIL raised).
  resize SPEC      each line "in.raw iw ih ow oh x0 y0 x1 y1 out.raw" (box "- - - -" for none):
                   PIL Image.resize((ow, oh), BILINEAR, box) of the raw RGB image, written raw.
  transforms SPEC  each line "eval IN.raw iw ih resize crop OUT" (torchvision Resize +
                   CenterCrop) or "rrc IN.raw iw ih top left height width size flip OUT"
                   (F.resized_crop + F.hflip) on the raw RGB image; output written raw; or
                   "evalfile IMG resize crop OUT": the whole torchvision eval pipeline on a
                   file (ImageFolder's pil_loader, then Resize + CenterCrop).
"""
import os
import struct
import sys
import warnings
import zlib

import numpy as np
from PIL import Image


def write_png(path, width, height, bit_depth, color_type, rows, palette=None, trns=None):
    """Minimal PNG writer (filter 0, no interlace) for bit depths / colour types PIL can't save."""
    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n"
    out += chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0))
    if palette is not None:
        out += chunk(b"PLTE", palette)
    if trns is not None:
        out += chunk(b"tRNS", trns)
    out += chunk(b"IDAT", zlib.compress(raw))
    out += chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(out)


def natural_image(rng, w, h, channels=3):
    """Smooth gradients plus noise: exercises both the DCT and chroma subsampling."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = [128 + 100 * np.sin(x / (5 + 3 * c) + y / (7 + c)) for c in range(channels)]
    img = np.stack(base, axis=-1) + rng.normal(0, 25, (h, w, channels))
    return np.clip(img, 0, 255).astype(np.uint8)


def fixtures(d):
    rng = np.random.default_rng(1234)
    w, h = 61, 47  # odd sizes: partial MCUs and odd chroma widths
    rgb = natural_image(rng, w, h)
    files = {}

    def save(name, im, **kw):
        im.save(os.path.join(d, name), **kw)
        files[name] = True

    save("rgb_420.jpg", Image.fromarray(rgb), format="JPEG", quality=90, subsampling=2)
    save("rgb_422.jpg", Image.fromarray(rgb), format="JPEG", quality=75, subsampling=1)
    save("rgb_444.jpg", Image.fromarray(rgb), format="JPEG", quality=95, subsampling=0)
    save("progressive.jpg", Image.fromarray(rgb), format="JPEG", quality=85, progressive=True)
    save("big_odd.jpg", Image.fromarray(natural_image(rng, 333, 219)), format="JPEG", quality=80)
    save("gray.jpg", Image.fromarray(rgb[:, :, 0], "L"), format="JPEG", quality=90)
    cmyk = natural_image(rng, w, h, 4)
    save("cmyk.jpg", Image.fromarray(cmyk, "CMYK"), format="JPEG", quality=90)
    save("rgb.png", Image.fromarray(rgb), format="PNG")
    rgba = np.concatenate([rgb, rng.integers(0, 256, (h, w, 1), dtype=np.uint8)], axis=-1)
    save("rgba.png", Image.fromarray(rgba, "RGBA"), format="PNG")
    save("gray.png", Image.fromarray(rgb[:, :, 1], "L"), format="PNG")
    la = np.stack([rgb[:, :, 2], rgb[:, :, 0]], axis=-1)
    save("la.png", Image.fromarray(la, "LA"), format="PNG")
    pal = Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=200)
    pal.info["transparency"] = 3
    save("palette_trns.png", pal, format="PNG", transparency=3)
    save("bilevel.png", Image.fromarray(rgb[:, :, 0] > 128), format="PNG")
    # Bit depths PIL does not write: 2/4-bit gray, 4-bit palette, 16-bit gray/LA/RGB/RGBA.
    def pack(values, bits):  # one row of `bits`-bit samples, MSB first
        b = np.unpackbits(values[:, None], axis=1)[:, 8 - bits:]
        return np.packbits(b.reshape(-1)).tobytes()

    g2 = rng.integers(0, 4, (h, w), dtype=np.uint8)
    rows2 = [pack(r, 2) for r in g2]
    write_png(os.path.join(d, "gray2.png"), w, h, 2, 0, rows2)
    files["gray2.png"] = True
    p4 = rng.integers(0, 16, (h, w), dtype=np.uint8)
    rows4 = [pack(r, 4) for r in p4]
    palette = rng.integers(0, 256, 16 * 3, dtype=np.uint8).tobytes()
    write_png(os.path.join(d, "palette4.png"), w, h, 4, 3, rows4, palette=palette,
              trns=bytes([0, 128, 255]))
    files["palette4.png"] = True
    g16 = rng.integers(0, 65536, (h, w), dtype=np.uint16)
    g16[: h // 2] //= 200  # values below 256 too: PIL clamps 16-bit gray, keep both regimes
    write_png(os.path.join(d, "gray16.png"), w, h, 16, 0, [r.astype(">u2").tobytes() for r in g16])
    files["gray16.png"] = True
    for name, ct, ch in (("la16.png", 4, 2), ("rgb16.png", 2, 3), ("rgba16.png", 6, 4)):
        v = rng.integers(0, 65536, (h, w * ch), dtype=np.uint16)
        write_png(os.path.join(d, name), w, h, 16, ct, [r.astype(">u2").tobytes() for r in v])
        files[name] = True
    # A PNG with a JPEG name, and broken files.
    with open(os.path.join(d, "rgb.png"), "rb") as f:
        png_bytes = f.read()
    with open(os.path.join(d, "png_named.JPEG"), "wb") as f:
        f.write(png_bytes)
    files["png_named.JPEG"] = True
    with open(os.path.join(d, "big_odd.jpg"), "rb") as f:
        jpg = f.read()
    broken = {
        "empty.jpg": b"",
        "truncated.jpg": jpg[: len(jpg) * 6 // 10],
        "truncated_eoi.jpg": jpg[:-2],  # all image data, only the EOI marker missing
        "random.jpg": rng.integers(0, 256, 5000, dtype=np.uint8).tobytes(),
        "jpeg_header_only.jpg": jpg[:200],
        "truncated.png": png_bytes[: len(png_bytes) // 2],
        "trailing_garbage.jpg": jpg + b"\x00" * 100 + b"garbage",
    }
    for name, data in broken.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        files[name] = True

    with open(os.path.join(d, "manifest.txt"), "w") as m:
        for name in sorted(files):
            try:
                im = Image.open(os.path.join(d, name))
                im = im.convert("RGB")
                arr = np.asarray(im)
            except Exception:  # PIL rejects the file
                m.write(f"{name} fail\n")
                continue
            arr.tofile(os.path.join(d, name + ".rgb"))
            m.write(f"{name} ok {im.width} {im.height}\n")


def resize(spec):
    for line in open(spec):
        f = line.split()
        if not f:
            continue
        iw, ih, ow, oh = map(int, f[1:5])
        img = Image.fromarray(np.fromfile(f[0], dtype=np.uint8).reshape(ih, iw, 3))
        box = None if f[5] == "-" else tuple(float(v) for v in f[5:9])
        out = img.resize((ow, oh), Image.BILINEAR, box=box)
        np.asarray(out).tofile(f[9])


def transforms(spec):
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
    from torchvision.transforms import InterpolationMode

    for line in open(spec):
        f = line.split()
        if not f:
            continue
        if f[0] == "evalfile":
            with open(f[1], "rb") as fh:
                img = Image.open(fh).convert("RGB")  # torchvision.datasets.folder.pil_loader
            out = T.Compose([T.Resize(int(f[2])), T.CenterCrop(int(f[3]))])(img)
            np.asarray(out).tofile(f[4])
            continue
        iw, ih = int(f[2]), int(f[3])
        img = Image.fromarray(np.fromfile(f[1], dtype=np.uint8).reshape(ih, iw, 3))
        if f[0] == "eval":
            t = T.Compose([T.Resize(int(f[4])), T.CenterCrop(int(f[5]))])
            out = t(img)
        else:
            top, left, h, w, size, flip = map(int, f[4:10])
            out = F.resized_crop(img, top, left, h, w, [size, size], InterpolationMode.BILINEAR)
            if flip:
                out = F.hflip(out)
        np.asarray(out).tofile(f[-1])


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    {"fixtures": fixtures, "resize": resize, "transforms": transforms}[sys.argv[1]](sys.argv[2])
