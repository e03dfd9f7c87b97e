#!/usr/bin/env python3
"""Per-message guest kernel instructions by function, from insncount
snapshots (tools/dev/insncount.md).

usage: insncount.py KALLSYMS[,KALLSYMS...] A B C N1 N2 [--top K] [--only REGEX]

A, B, C are snapshots taken before a run of N1 messages, between it and a
run of N2 messages, and after it: (C - B) - (B - A), divided by N2 - N1,
is what one more message costs, set-up and tear-down cancelled out.
"""
import bisect
import re
import sys


def load_syms(paths):
    syms = []
    for p in paths:
        for line in open(p):
            f = line.split()
            if len(f) < 3 or f[1] not in 'tTwW':
                continue
            name = f[2] + (' ' + f[3] if len(f) > 3 else '')
            syms.append((int(f[0], 16), name))
    syms.sort()
    return [a for a, _ in syms], [n for _, n in syms]


def load_snap(path):
    d = {}
    for line in open(path):
        v, n, e = line.split()
        d[(int(v, 16), int(n))] = int(e)
    return d


def main():
    args = sys.argv[1:]
    top, only = 40, None
    if '--top' in args:
        i = args.index('--top')
        top = int(args[i + 1])
        del args[i:i + 2]
    if '--only' in args:
        i = args.index('--only')
        only = re.compile(args[i + 1])
        del args[i:i + 2]
    if len(args) != 6:
        sys.exit(__doc__)
    addrs, names = load_syms(args[0].split(','))
    a, b, c = (load_snap(p) for p in args[1:4])
    n1, n2 = int(args[4]), int(args[5])
    per = {}
    for key in set(a) | set(b) | set(c):
        va, vb, vc = a.get(key, 0), b.get(key, 0), c.get(key, 0)
        insns = ((vc - vb) - (vb - va)) * key[1]
        if not insns:
            continue
        if key[0] == 0:
            name = '(user)'
        else:
            i = bisect.bisect_right(addrs, key[0]) - 1
            name = names[i] if i >= 0 else '?'
        per[name] = per.get(name, 0) + insns / (n2 - n1)
    kern = sum(v for k, v in per.items() if k != '(user)')
    kw = sum(v for k, v in per.items() if k.endswith('[kiwarp]'))
    print(f'kernel {kern:.0f} insns/message, kiwarp.ko {kw:.0f}, '
          f'user {per.get("(user)", 0):.0f}')
    rows = sorted(per.items(), key=lambda kv: -kv[1])
    shown = 0
    for name, v in rows:
        if name == '(user)' or (only and not only.search(name)):
            continue
        print(f'{v:10.1f}  {name}')
        shown += 1
        if shown >= top:
            break


main()
