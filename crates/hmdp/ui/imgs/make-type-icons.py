#!/usr/bin/env python3
"""Draws the shop-type icons in imgs/types/ (our own drawings, 96x96 PNG, no dependencies).

The file names are the ones the original pages and hmdp.sql refer to (`/types/ms.png` ...),
so a type row of either catalogue finds an icon. Run from anywhere:
    python3 crates/hmdp/ui/imgs/make-type-icons.py
Every shape is a signed distance function; a pixel's coverage is its distance clamped to one
pixel, which anti-aliases the edges without supersampling.
"""
import math
import os
import struct
import zlib

SIZE = 96
HERE = os.path.dirname(os.path.abspath(__file__))


def hexrgb(h):
    return tuple(int(h[i:i + 2], 16) for i in (1, 3, 5))


# ---- signed distance functions (negative inside), in pixels

def circle(cx, cy, r):
    return lambda x, y: math.hypot(x - cx, y - cy) - r


def ring(cx, cy, r, w):
    return lambda x, y: abs(math.hypot(x - cx, y - cy) - r) - w / 2


def box(x0, y0, x1, y1, r=0.0):
    cx, cy, hx, hy = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2 - r, (y1 - y0) / 2 - r

    def f(x, y):
        dx, dy = abs(x - cx) - hx, abs(y - cy) - hy
        out = math.hypot(max(dx, 0), max(dy, 0))
        return out + min(max(dx, dy), 0) - r
    return f


def segment(ax, ay, bx, by, w):
    def f(x, y):
        px, py, vx, vy = x - ax, y - ay, bx - ax, by - ay
        t = max(0.0, min(1.0, (px * vx + py * vy) / (vx * vx + vy * vy)))
        return math.hypot(px - vx * t, py - vy * t) - w / 2
    return f


def polygon(points):
    def f(x, y):
        d = (x - points[0][0]) ** 2 + (y - points[0][1]) ** 2
        s = 1.0
        n = len(points)
        j = n - 1
        for i in range(n):
            (xi, yi), (xj, yj) = points[i], points[j]
            ex, ey = xj - xi, yj - yi
            wx, wy = x - xi, y - yi
            t = max(0.0, min(1.0, (wx * ex + wy * ey) / (ex * ex + ey * ey)))
            bx, by = wx - ex * t, wy - ey * t
            d = min(d, bx * bx + by * by)
            c1, c2, c3 = y >= yi, y < yj, ex * wy > ey * wx
            if (c1 and c2 and c3) or (not c1 and not c2 and not c3):
                s = -s
            j = i
        return s * math.sqrt(d)
    return f


def intersect(a, b):
    return lambda x, y: max(a(x, y), b(x, y))


def union(*fs):
    return lambda x, y: min(f(x, y) for f in fs)


def star(cx, cy, r_out, r_in, n=5):
    pts = []
    for i in range(2 * n):
        r = r_out if i % 2 == 0 else r_in
        a = -math.pi / 2 + i * math.pi / n
        pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    return polygon(pts)


# ---- the icons: a coloured rounded square, a white glyph (and holes in the tile colour)

W = "#ffffff"
ICONS = {
    # 美食: a bowl of noodles with chopsticks
    "ms.png": ("#ff7a45", [
        (W, union(intersect(circle(48, 50, 28), box(10, 50, 86, 90)), box(18, 47, 78, 53, 3))),
        (W, segment(40, 16, 58, 44, 5)), (W, segment(54, 14, 66, 44, 5)),
        (None, box(36, 60, 60, 64, 2)),
    ]),
    # KTV: a microphone on a stand
    "KTV.png": ("#9254de", [
        (W, box(37, 14, 59, 54, 11)),
        (W, intersect(ring(48, 44, 19, 5), box(20, 44, 76, 70))),
        (W, segment(48, 63, 48, 78, 5)),
        (W, box(34, 76, 62, 82, 3)),
        (None, box(42, 24, 54, 27, 1.5)), (None, box(42, 31, 54, 34, 1.5)),
    ]),
    # 丽人·美发: scissors
    "lrmf.png": ("#f759ab", [
        (W, segment(30, 22, 62, 68, 6)), (W, segment(66, 22, 34, 68, 6)),
        (W, ring(30, 72, 9, 6)), (W, ring(66, 72, 9, 6)),
    ]),
    # 健身运动: a dumbbell
    "jsyd.png": ("#52c41a", [
        (W, box(20, 45, 76, 51, 2)),
        (W, box(20, 30, 30, 66, 3)), (W, box(66, 30, 76, 66, 3)),
        (W, box(12, 36, 20, 60, 3)), (W, box(76, 36, 84, 60, 3)),
    ]),
    # 按摩·足疗: a footprint
    "amzl.png": ("#13c2c2", [
        (W, union(circle(50, 52, 15), circle(46, 70, 12), box(36, 52, 62, 70, 6))),
        (W, circle(38, 30, 6)), (W, circle(50, 26, 5)), (W, circle(60, 28, 4.5)),
        (W, circle(68, 33, 4)), (W, circle(28, 38, 5)),
    ]),
    # 美容SPA: a flower
    "spa.png": ("#2f54eb", [
        (W, union(*[circle(48 + 16 * math.cos(a), 48 + 16 * math.sin(a), 11)
                   for a in [k * 2 * math.pi / 5 - math.pi / 2 for k in range(5)]])),
        (None, circle(48, 48, 8)),
    ]),
    # 亲子游乐: a balloon on a string
    "qzyl.png": ("#faad14", [
        (W, circle(48, 38, 20)),
        (W, polygon([(48, 56), (42, 64), (54, 64)])),
        (W, segment(48, 64, 44, 84, 3)),
    ]),
    # 酒吧: a cocktail glass
    "jiuba.png": ("#f5222d", [
        (W, polygon([(22, 24), (74, 24), (48, 54)])),
        (W, segment(48, 52, 48, 74, 5)),
        (W, box(34, 72, 62, 78, 3)),
        (None, polygon([(34, 30), (62, 30), (48, 46)])),
    ]),
    # 轰趴馆: a party star
    "hpg.png": ("#eb2f96", [
        (W, star(48, 50, 30, 13)),
        (None, star(48, 52, 12, 5)),
    ]),
    # 美睫·美甲: a nail polish bottle
    "mjmj.png": ("#c41d7f", [
        (W, box(40, 14, 56, 38, 3)),
        (W, box(28, 40, 68, 82, 10)),
        (None, box(36, 52, 60, 70, 4)),
    ]),
}


def render(bg, shapes):
    tile = box(2, 2, SIZE - 2, SIZE - 2, 20)
    bgc = hexrgb(bg)
    rows = []
    for py in range(SIZE):
        row = bytearray([0])
        for px in range(SIZE):
            x, y = px + 0.5, py + 0.5
            a = max(0.0, min(1.0, 0.5 - tile(x, y)))
            c = list(bgc)
            for colour, f in shapes:
                cov = max(0.0, min(1.0, 0.5 - f(x, y)))
                if cov <= 0:
                    continue
                target = hexrgb(colour) if colour else bgc
                c = [c[i] + (target[i] - c[i]) * cov for i in range(3)]
            row += bytes([round(c[0]), round(c[1]), round(c[2]), round(255 * a)])
        rows.append(bytes(row))
    return b"".join(rows)


def png(raw):
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    head = struct.pack(">IIBBBBB", SIZE, SIZE, 8, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head)
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


if __name__ == "__main__":
    out = os.path.join(HERE, "types")
    os.makedirs(out, exist_ok=True)
    for name, (bg, shapes) in ICONS.items():
        data = png(render(bg, shapes))
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print(name, len(data), "bytes")
