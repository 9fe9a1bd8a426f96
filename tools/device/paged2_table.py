#!/usr/bin/env python3
"""The decode-tile candidates of tools/device/paged2.sh side by side.

Reads the bench log (runs of `bench_cuda --suite serving`, each after a
line `## tiles paged=P stream=S ...`) and prints, per split setting, one
line per decode case with one cell per tile candidate: the median ms of the
runs, and in brackets the contiguous rows' share of the copy bandwidth or
the paged rows' speed against the contiguous row of the same batch and
split setting on the 64.3.2 tile (the decode tile before issue9-paged2).
"""
import re
import statistics
import sys


def main(path):
    rows, copy, tiles = {}, [], "?"
    for line in open(path):
        m = re.match(r"## tiles paged=(\S+) stream=(\S+)", line)
        if m:
            tiles = m.group(1) if m.group(1) == m.group(2) else m.group(1) + "/" + m.group(2)
            continue
        m = re.match(r"serving suite: device copy bandwidth ([0-9.]+) TB/s", line)
        if m:
            copy.append(float(m.group(1)))
            continue
        m = re.match(r"serving\s+cuda_sm80_tc\s+(decode .*?)\s+ms\s+([0-9.]+)\s+K\+V\s+([0-9.]+) TB/s", line)
        if m:
            case = m.group(1)
            sm = re.search(r" splits=(\d+)", case)
            split = sm.group(1) if sm else "auto"
            case = re.sub(r" splits=\d+", "", case)
            rows.setdefault((split, case, tiles), []).append((float(m.group(2)), float(m.group(3))))
    cp = statistics.median(copy) if copy else float("nan")
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in rows.items()}

    def batch(case):
        return re.split(r" (?:paged|contiguous|seqused_k)", case)[0]

    contig = {}
    for (split, case, t), (ms, _) in med.items():
        if " paged" not in case and t in ("64.3.2", "default"):
            contig.setdefault((split, batch(case)), ms)
    print(f"\ncandidate tiles (kBlockN.CTAs.stages): median ms [contiguous: of copy {cp:.2f} TB/s; "
          "paged: speed / 64.3.2 contiguous]")
    for split in sorted({k[0] for k in med}, key=lambda s: (s != "0", s != "auto", s)):
        ts = []
        for (s, _, t) in med:
            if s == split and t not in ts:
                ts.append(t)
        print(f"splits={split}: " + " | ".join(ts))
        for case in sorted({c for (s, c, _) in med if s == split}, key=lambda c: (batch(c), " paged" in c, c)):
            cells = []
            for t in ts:
                if (split, case, t) not in med:
                    cells.append("-")
                    continue
                ms, tb = med[(split, case, t)]
                ref = contig.get((split, batch(case)))
                if " paged" in case:
                    cells.append(f"{ms:.4f} [{ref / ms:.3f}]" if ref else f"{ms:.4f}")
                else:
                    cells.append(f"{ms:.4f} [{tb / cp:.3f}]")
            print(f"  {case}: " + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1])
