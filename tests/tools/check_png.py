#!/usr/bin/python3
"""Checks a screenshot: PNG of the expected width and height, not blank (a share of non-white
pixels, several distinct colours), and optionally that given colours occur (the charts' marks).
Reads the PNG with the standard library only (zlib, the PNG filters).
usage: check_png.py FILE WIDTH HEIGHT [--min-ink F] [--colour RRGGBB ...]"""
import struct
import sys
import zlib


def read_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise SystemExit(f"{path}: unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def main():
    args = sys.argv[1:]
    path, want_w, want_h = args[0], int(args[1]), int(args[2])
    min_ink, colours = 0.01, []
    i = 3
    while i < len(args):
        if args[i] == "--min-ink":
            min_ink = float(args[i + 1])
        elif args[i] == "--colour":
            colours.append(tuple(int(args[i + 1][k:k + 2], 16) for k in (0, 2, 4)))
        i += 2
    w, h, bpp, rows = read_png(path)
    errors = []
    if (w, h) != (want_w, want_h):
        errors.append(f"size {w}x{h}, expected {want_w}x{want_h}")
    ink, seen = 0, {}
    for row in rows[::2]:
        for x in range(0, w * bpp, bpp * 2):
            px = tuple(row[x:x + 3])
            seen[px] = seen.get(px, 0) + 1
            if sum(px) < 720:
                ink += 1
    total = sum(seen.values())
    share = ink / total
    if share < min_ink:
        errors.append(f"only {share:.4f} of the pixels are not white (blank page?), expected >= {min_ink}")
    if len(seen) < 8:
        errors.append(f"only {len(seen)} distinct colours")
    for c in colours:  # allow a little antialiasing drift
        if not any(abs(p[0] - c[0]) <= 6 and abs(p[1] - c[1]) <= 6 and abs(p[2] - c[2]) <= 6 and n >= 4
                   for p, n in seen.items()):
            errors.append("colour #%02x%02x%02x not found" % c)
    print(f"{path.split('/')[-1]}: {w}x{h}, {share:.3f} ink, {len(seen)} colours")
    if errors:
        print("FAILED: " + "; ".join(errors))
        sys.exit(1)


main()
