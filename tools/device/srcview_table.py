#!/usr/bin/env python3
"""Tables from Nsight Compute's source page (ncu --page source --csv
--print-source sass) of one kernel: where its warps' PC samples fall.

    srcview_table.py FILE.csv [--top N]

Prints the total of the sample column, then the samples by opcode, by loop
(each backward branch's [target, branch] range, innermost first), by CUDA
source line where the page carries one, every other numeric column's total
(per-reason stall columns when the page has them), and the top N
instructions. Column names differ between ncu versions, so they are matched
by pattern: the address ("Address"), the instruction ("Source"), the
samples ("Warp Stall Sampling (All Samples)", else the first column with
"Sampl" in its name).
"""
import argparse
import collections
import csv
import re
import sys


def number(text):
    t = text.replace(",", "").strip()
    try:
        return float(t)
    except ValueError:
        return None


def read_rows(path):
    with open(path, newline="", errors="replace") as f:
        lines = [line for line in f if not line.startswith("==")]
    rows = list(csv.reader(lines))
    for i, row in enumerate(rows):
        if any("Address" in c for c in row) and any("Source" in c for c in row):
            return row, rows[i + 1:]
    sys.exit(f"{path}: no header row with Address and Source columns")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    header, body = read_rows(a.csv)
    addr_i = next(i for i, n in enumerate(header) if "Address" in n)
    # The instruction column: "Source" itself, else the first that names it.
    src_i = next((i for i, n in enumerate(header) if n.strip() == "Source"),
                 next(i for i, n in enumerate(header) if "Source" in n))
    samp_i = next((i for i, n in enumerate(header) if "Stall Sampling (All" in n),
                  next((i for i, n in enumerate(header) if "Sampl" in n), None))
    if samp_i is None:
        sys.exit("no sample column; columns: " + ", ".join(header))
    line_i = next((i for i, n in enumerate(header) if re.search(r"\bLine\b|CUDA|File", n) and i not in (addr_i, src_i)), None)

    ins = []  # (address, text, samples, row)
    for row in body:
        if len(row) <= max(addr_i, src_i, samp_i):
            continue
        addr = row[addr_i].strip()
        try:
            address = int(addr, 16)
        except ValueError:
            continue
        ins.append((address, row[src_i].strip(), number(row[samp_i]) or 0.0, row))
    if not ins:
        sys.exit("no instruction rows")
    total = sum(x[2] for x in ins)
    print(f"{len(ins)} instructions, {total:.0f} samples ({header[samp_i]})")

    def opcode(text):
        t = text.split()
        if not t:
            return "?"
        op = t[1] if t[0].startswith("@") and len(t) > 1 else t[0]
        return op.split(".")[0]

    print("\nby opcode (samples, % of all, instructions):")
    by_op = collections.defaultdict(lambda: [0.0, 0])
    for _, text, s, _ in ins:
        by_op[opcode(text)][0] += s
        by_op[opcode(text)][1] += 1
    for op, (s, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:25]:
        print(f"  {op:12s} {s:9.0f} {100 * s / total:5.1f}%  {n}")

    print("\nloops (backward branches with no EXIT inside; samples in [target, branch]):")
    loops = []
    for address, text, _, _ in ins:
        m = re.search(r"\bBRA(?:\.\S+)?\s+(?:\S+,\s*)?(0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < address:
            loops.append((int(m.group(1), 16), address))
    exits = [x[0] for x in ins if opcode(x[1]) == "EXIT"]
    for lo, hi in sorted(set(loops), key=lambda r: r[1] - r[0]):
        # An out-of-line retry (a barrier wait's slow path after the EXITs)
        # branching back into the code is no loop.
        if any(lo <= e <= hi for e in exits):
            continue
        s = sum(x[2] for x in ins if lo <= x[0] <= hi)
        if s >= 0.005 * total:
            n = sum(1 for x in ins if lo <= x[0] <= hi)
            print(f"  {lo:#07x}-{hi:#07x} {n:5d} instructions {s:9.0f} {100 * s / total:5.1f}%")

    if line_i is not None:
        print(f"\nby {header[line_i]} (top 25):")
        by_line = collections.Counter()
        for _, _, s, row in ins:
            by_line[row[line_i].strip()] += s
        for key, s in by_line.most_common(25):
            print(f"  {100 * s / total:5.1f}%  {key}")

    extra = [i for i, n in enumerate(header) if i not in (addr_i, src_i, samp_i)]
    totals = []
    for i in extra:
        vals = [number(x[3][i]) for x in ins if i < len(x[3])]
        if vals and all(v is not None for v in vals):
            totals.append((header[i], sum(vals)))
    if totals:
        print("\nother numeric columns (totals):")
        for name, s in totals:
            print(f"  {s:14.0f}  {name}")

    print(f"\ntop {a.top} instructions (samples, % of all, address, instruction):")
    for address, text, s, _ in sorted(ins, key=lambda x: -x[2])[:a.top]:
        print(f"  {s:8.0f} {100 * s / total:5.1f}%  {address:#07x}  {text}")


if __name__ == "__main__":
    main()
