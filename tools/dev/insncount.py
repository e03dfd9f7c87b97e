#!/usr/bin/env python3
"""Per-message guest kernel instructions by function, from insncount
snapshots (tools/dev/insncount.md).

usage: insncount.py KALLSYMS[,KALLSYMS...] A B C N1 N2 [--top K] [--only REGEX]
                      [--lines KO]

With --lines KO (the kiwarp.ko that ran), the kiwarp.ko functions listed
are followed by their source lines (addr2line over each translation
block's start; a block's instructions all go to its first line).

A, B, C are snapshots taken before a run of N1 messages, between it and a
run of N2 messages, and after it: (C - B) - (B - A), divided by N2 - N1,
is what one more message costs, set-up and tear-down cancelled out.
"""
import bisect
import re
import subprocess
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


def ko_symbols(ko, cache={}):
    if ko not in cache:
        out = subprocess.run(['nm', ko], capture_output=True, text=True).stdout
        cache[ko] = {f[2]: int(f[0], 16) for f in (l.split() for l in out.splitlines())
                     if len(f) == 3 and f[1] in 'tT'}
    return cache[ko]


def print_lines(ko, name, start, blocks):
    """Each block's count under its first source line (file:line)."""
    base = ko_symbols(ko).get(name.split()[0])
    if base is None:
        return
    addrs = sorted(blocks)
    out = subprocess.run(['addr2line', '-e', ko] + [hex(base + a - start) for a in addrs],
                         capture_output=True, text=True).stdout.splitlines()
    lines = {}
    for a, where in zip(addrs, out):
        where = re.sub(r' \(discriminator \d+\)', '', where.split('/')[-1])
        lines[where] = lines.get(where, 0) + blocks[a]
    for where, v in sorted(lines.items(), key=lambda kv: -kv[1])[:12]:
        if v >= 1:
            print(f'{"":12}{v:8.1f}  {where}')


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
    ko = None
    if '--lines' in args:
        i = args.index('--lines')
        ko = args[i + 1]
        del args[i:i + 2]
    if len(args) != 6:
        sys.exit(__doc__)
    addrs, names = load_syms(args[0].split(','))
    a, b, c = (load_snap(p) for p in args[1:4])
    n1, n2 = int(args[4]), int(args[5])
    per = {}
    blocks = {}		# name -> {block address: insns per message}
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
        if key[0] and ko and name.endswith('[kiwarp]'):
            d = blocks.setdefault(name, {})
            d[key[0]] = d.get(key[0], 0) + insns / (n2 - n1)
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
        if ko and name in blocks:
            print_lines(ko, name, addrs[bisect.bisect_right(addrs, min(blocks[name])) - 1],
                        blocks[name])
        shown += 1
        if shown >= top:
            break


main()
