"""Rasterizes an SVG figure with rsvg-convert and checks that the image is not blank.

    svg_rasterize.py --normcheck EXE --demo NAME --work DIR   draw the demo's figure, then check it
    svg_rasterize.py --check FILE --expect-blank --work DIR    check a given SVG and require it to be blank

A pixel counts as drawn when it differs from white after compositing over white. A figure passes when
more than 1% of its pixels are drawn and both series colours of the figures appear. Exit status 77
means rsvg-convert is not installed: CTest reports the test as skipped, never as passed.
"""

import argparse
import os
import shutil
import struct
import subprocess
import sys
import zlib

SKIP = 77
SERIES = {"mistake": (0xC0, 0x39, 0x2B), "objective": (0x1F, 0x6F, 0x8B)}


def read_png(path):
    """Returns (width, height, rows of RGB tuples composited over white) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]:
            raise ValueError("bad CRC in chunk %r" % kind)
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        raise ValueError("unsupported PNG layout: depth %d colour type %d interlace %d" % (depth, colour, interlace))
    channels = 4 if colour == 6 else 3
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    previous = bytearray(stride)
    rows = []
    for y in range(height):
        start = y * (stride + 1)
        kind = raw[start]
        line = bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif kind == 2:
            for i in range(stride):
                line[i] = (line[i] + previous[i]) & 0xFF
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = previous[i]
                c = previous[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                predictor = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + predictor) & 0xFF
        elif kind != 0:
            raise ValueError("unknown filter type %d" % kind)
        pixels = []
        for x in range(width):
            px = line[x * channels:(x + 1) * channels]
            alpha = px[3] if channels == 4 else 255
            pixels.append(tuple((v * alpha + 255 * (255 - alpha)) // 255 for v in px[:3]))
        rows.append(pixels)
        previous = line
    return width, height, rows


def close(pixel, colour, tolerance=24):
    return all(abs(p - c) <= tolerance for p, c in zip(pixel, colour))


def examine(svg, work):
    """Returns (drawn fraction, {series: pixel count}) of the rasterized SVG."""
    png = os.path.join(work, os.path.basename(svg) + ".png")
    subprocess.run(["rsvg-convert", "-f", "png", "-o", png, svg], check=True)
    width, height, rows = read_png(png)
    drawn = 0
    series = {name: 0 for name in SERIES}
    for row in rows:
        for pixel in row:
            if pixel != (255, 255, 255):
                drawn += 1
                for name, colour in SERIES.items():
                    if close(pixel, colour):
                        series[name] += 1
    return drawn / float(width * height), series


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--normcheck")
    parser.add_argument("--demo")
    parser.add_argument("--check")
    parser.add_argument("--expect-blank", action="store_true")
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    if shutil.which("rsvg-convert") is None:
        print("rsvg-convert is not installed (Debian package librsvg2-bin): skipped")
        return SKIP
    os.makedirs(args.work, exist_ok=True)
    if args.demo:
        svg = os.path.join(args.work, args.demo + ".svg")
        if os.path.exists(svg):
            os.remove(svg)
        result = subprocess.run([args.normcheck, "demo", args.demo, "--svg", svg], capture_output=True, text=True)
        if result.returncode != 0:
            print("normcheck demo %s --svg failed with %d:\n%s%s" % (args.demo, result.returncode, result.stdout,
                                                                     result.stderr))
            return 1
    else:
        svg = args.check
    fraction, series = examine(svg, args.work)
    print("%s: %.2f%% of the pixels drawn, series pixels %s" % (svg, 100 * fraction, series))
    blank = fraction <= 0.01 or min(series.values()) == 0
    if args.expect_blank:
        return 0 if blank else 1
    return 1 if blank else 0


if __name__ == "__main__":
    sys.exit(main())
