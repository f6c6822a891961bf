#!/usr/bin/env python3
"""Folds `perf script` output into stacks and draws them as a flame graph (SVG), with no
dependencies beyond Python 3. Used by scripts/profile.sh; usable on its own:

    perf script -i perf.data | scripts/flamegraph.py --title "kassa, SQLite spread" \
        --folded out.folded > out.svg

Each stack's root is the thread's name (kassa-sqlite-wr, sandbox-writer, tokio-rt-worker, …), so
the graph shows first who spends the CPU, then on what. Frames are the functions perf resolved;
of the inlined ones only kassa's own are kept (`--inlined` keeps all: the async runtime's and the
standard library's plumbing, dozens a stack), kernel frames are marked `[k]`, and long Rust
generic argument lists are shortened to keep names readable (each frame's tooltip has more). `--folded` also writes the folded stacks (one line per
stack: frames separated by `;`, then the sample count), the format other flame graph tools read.
"""

import argparse
import collections
import html
import re
import sys
import zlib

OFFSET = re.compile(r"\+0x[0-9a-f]+$")
HEADER = re.compile(r"^(.+?)\s+\d+(?:/\d+)?\s+(?:\[\d+\]\s+)?\d+\.\d+:")


def short(name, limit=100):
    """A Rust symbol with its generic arguments collapsed to `<…>` when it is long."""
    if len(name) <= limit:
        return name
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
            if depth == 1:
                out.append("<…")
            continue
        if ch == ">" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(">")
            continue
        if depth == 0:
            out.append(ch)
    s = "".join(out)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def fold(lines, keep_inlined=False):
    """Counts of stacks (root first) from perf script's text."""
    stacks = collections.Counter()
    thread, frames = None, []

    def flush():
        if thread is not None:
            stacks[";".join([thread] + [f.replace(";", ":") for f in reversed(frames)])] += 1

    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            thread, frames = None, []
        elif not line[0].isspace():
            flush()
            # "comm  tid [cpu] time: period event:" (tid may be pid/tid). The thread's name may
            # hold spaces, digits and slashes (kworker/1:1H), so it is whatever comes before the
            # last tid-shaped field that a timestamp follows.
            head = HEADER.match(line)
            thread, frames = (head.group(1) if head else line.split()[0]) or "?", []
        else:
            parts = line.strip().split(None, 1)
            if len(parts) < 2:
                continue
            sym, inlined = parts[1], parts[1].endswith(" (inlined)")
            kernel = sym.endswith("([kernel.kallsyms])")
            if sym.endswith(")") and " (" in sym:
                sym = sym[: sym.rindex(" (")]
            sym = OFFSET.sub("", sym) or "[unknown]"
            # Inlined frames are mostly the async runtime's and the standard library's plumbing
            # (poll, call_once, catch_unwind, …), dozens per stack; kassa's own stay.
            if inlined and not keep_inlined and not sym.startswith(("kassa::", "<kassa::")):
                continue
            frames.append("[k] " + sym if kernel else sym)
    flush()
    return stacks


def tree(stacks):
    """A nested dict of frames: name -> [count, children]."""
    root = [0, {}]
    for stack, n in stacks.items():
        root[0] += n
        node = root
        for frame in stack.split(";"):
            node = node[1].setdefault(frame, [0, {}])
            node[0] += n
    return root


def colour(name):
    h = zlib.crc32(name.encode())
    if name.startswith(("sqlite3", "sqlite", "btree", "pager", "wal", "vdbe")):
        return "rgb(%d,%d,%d)" % (80 + h % 40, 150 + h % 60, 220)  # SQLite: blue
    if name.startswith("kassa::") or "kassa::" in name[:40]:
        return "rgb(%d,%d,%d)" % (90 + h % 50, 200 + h % 40, 90)  # kassa: green
    if name.startswith("[k] "):
        return "rgb(%d,%d,%d)" % (220, 140 + h % 50, 60)  # the kernel: orange
    return "rgb(%d,%d,%d)" % (225, 80 + h % 110, 50 + h % 40)  # the rest: warm


def svg(root, title, width=1600, row=16, min_width=0.5):
    total = root[0] or 1
    rects = []
    max_depth = 0

    def walk(node, name, x, depth):
        nonlocal max_depth
        w = node[0] / total * width
        if w < min_width:
            return
        max_depth = max(max_depth, depth)
        rects.append((x, depth, w, name, node[0]))
        cx = x
        for child, sub in sorted(node[1].items(), key=lambda kv: kv[0]):
            walk(sub, child, cx, depth + 1)
            cx += sub[0] / total * width

    walk(root, "all", 0.0, 0)
    height = (max_depth + 1) * row + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace" font-size="11">',
        f'<text x="4" y="16" font-size="14">{html.escape(title, quote=True)} '
        f"({total} samples; hover a frame for its name and share)</text>",
    ]
    for x, depth, w, name, n in rects:
        y = height - (depth + 1) * row
        label = short(name)
        tip = html.escape(f"{short(name, 240)} — {n} samples, {100.0 * n / total:.2f} %", quote=True)
        out.append(
            f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" '
            f'fill="{colour(name)}" rx="2"/>'
        )
        chars = int(w / 6.6)
        if chars >= 3:
            text = label if len(label) <= chars else label[: chars - 1] + "…"
            out.append(f'<text x="{x + 2:.1f}" y="{y + row - 4}">{html.escape(text, quote=True)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input", nargs="?", help="perf script output (default: standard input)")
    p.add_argument("--title", default="flame graph")
    p.add_argument("--folded", help="also write the folded stacks here")
    p.add_argument("--min-width", type=float, default=0.5, help="leave out frames narrower than this (pixels)")
    p.add_argument("--inlined", action="store_true", help="keep every inlined frame (deep stacks)")
    p.add_argument("--top", type=int, default=0, help="print the N largest threads and self-time frames to stderr")
    a = p.parse_args()
    src = open(a.input, encoding="utf-8", errors="replace") if a.input else sys.stdin
    stacks = fold(src, a.inlined)
    if not stacks:
        sys.exit("flamegraph.py: no samples in the input")
    if a.folded:
        with open(a.folded, "w", encoding="utf-8") as f:
            for stack, n in sorted(stacks.items()):
                f.write(f"{stack} {n}\n")
    if a.top:
        total = sum(stacks.values())
        by_thread, by_leaf = collections.Counter(), collections.Counter()
        for stack, n in stacks.items():
            frames = stack.split(";")
            by_thread[frames[0]] += n
            by_leaf[frames[-1]] += n
        for label, counter in (("thread", by_thread), ("self time", by_leaf)):
            print(f"-- by {label}", file=sys.stderr)
            for name, n in counter.most_common(a.top):
                print(f"{100.0 * n / total:6.2f} %  {short(name, 110)}", file=sys.stderr)
    sys.stdout.write(svg(tree(stacks), a.title, min_width=a.min_width))


if __name__ == "__main__":
    main()
