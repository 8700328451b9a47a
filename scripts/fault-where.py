#!/usr/bin/env python3
"""Where a program died, without gdb (the GPU machines have none).

    scripts/fault-where.py REPORT      the stderr of a run with GPULESS_FAULT_REPORT=1
    scripts/fault-where.py --core CORE an ELF core file (ulimit -c unlimited; core_pattern "core")

From a report (recorder/src/fault_report.rs): the faulting instruction and the stack words that
point into code mappings, each resolved to a function. From a core: the signal and its code and
address (NT_SIGINFO), every thread's instruction and stack pointers (NT_PRSTATUS), the mapped
files (NT_FILE), and for the first threads the stack words that point into executable segments.
A fault whose si_code is SI_KERNEL (128) at a push or a call is often the kernel failing to
deliver the signal (a stack it cannot write): no handler ran.

Offsets in mappings are file offsets; they are turned into the object's addresses through its
program headers (a library linked by lld has its text 0x1000 above its file offset) and resolved
with addr2line, else with the nearest symbol `nm` lists. Stack words are candidates, not a
backtrace: stale return addresses show up too.
"""
import bisect
import re
import struct
import subprocess
import sys


def loads_of(path, cache={}):
    """(p_offset, p_filesz, p_vaddr) of the object's PT_LOAD segments ([] when unreadable)."""
    if path not in cache:
        out = []
        try:
            with open(path, "rb") as f:
                head = f.read(64)
                if head[:4] == b"\x7fELF" and head[4] == 2:
                    phoff, = struct.unpack_from("<Q", head, 0x20)
                    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
                    f.seek(phoff)
                    ph = f.read(phentsize * phnum)
                    for i in range(phnum):
                        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", ph, i * phentsize)
                        if p_type == 1:
                            out.append((p_offset, p_filesz, p_vaddr))
        except OSError:
            pass
        cache[path] = out
    return cache[path]


def vaddr(path, off):
    """The object's own address of file offset `off`."""
    for p_offset, p_filesz, p_vaddr in loads_of(path):
        if p_offset <= off < p_offset + max(p_filesz, 1):
            return off - p_offset + p_vaddr
    return off


def symbols(path, cache={}):
    if path not in cache:
        syms = []
        for flags in (["-D"], []):
            out = subprocess.run(["nm", *flags, "-C", "--defined-only", path], capture_output=True, text=True).stdout
            for line in out.splitlines():
                p = line.split(" ", 2)
                if len(p) == 3 and p[1] in "TtWw":
                    try:
                        syms.append((int(p[0], 16), p[2]))
                    except ValueError:
                        pass
        syms.sort()
        cache[path] = syms
    return cache[path]


def resolve(path, off):
    """'function (file:line) / nearest symbol+offset' of file offset `off` in `path`."""
    a = vaddr(path, off)
    a2l = subprocess.run(["addr2line", "-f", "-C", "-e", path, hex(a)], capture_output=True, text=True).stdout.split("\n")
    fn = a2l[0] if a2l and a2l[0] else "??"
    where = a2l[1] if len(a2l) > 1 else ""
    syms = symbols(path)
    i = bisect.bisect_right([s for s, _ in syms], a) - 1
    near = f"{syms[i][1]}+{a - syms[i][0]:#x}" if i >= 0 else "?"
    return f"{fn} ({where}) / {near}"


def from_report(lines):
    code = []  # (start, end, file offset, path) of executable mappings
    for l in lines:
        m = re.match(r"gpuless: code ([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s+(/\S+)", l)
        if m:
            code.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), m.group(4)))
    for l in lines:
        if l.startswith("gpuless: signal"):
            print(l.strip())
        m = re.search(r"gpuless: (\w+) at offset (0x[0-9a-f]+) of: .* (/\S+)$", l.strip())
        if m:
            print(f"{m.group(1)}: {m.group(3)}+{m.group(2)}: {resolve(m.group(3), int(m.group(2), 16))}")
    n = 0
    for l in lines:
        if not l.startswith("gpuless: stack words"):
            continue
        for w in l.split()[3:]:
            v = int(w, 16)
            for s, e, off, path in code:
                if s <= v < e:
                    print(f"stack[{n}]: {path}+{v - s + off:#x}: {resolve(path, v - s + off)}")
            n += 1


def from_core(path):
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF":
        sys.exit(f"{path}: not an ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, notes = [], []
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_memsz, p_offset, p_filesz, p_flags))
        elif p_type == 4:
            notes.append((p_offset, p_filesz))

    def mem(addr, n):
        for v, _, off, fs, _ in loads:
            if v <= addr and addr + n <= v + fs:
                return data[off + addr - v: off + addr - v + n]
        return None

    threads, files, siginfo = [], [], None
    for off, size in notes:
        o = off
        while o + 12 <= off + size:
            namesz, descsz, typ = struct.unpack_from("<III", data, o)
            o += 12 + ((namesz + 3) & ~3)
            desc = data[o:o + descsz]
            o += (descsz + 3) & ~3
            if typ == 1 and len(desc) >= 112 + 27 * 8:  # NT_PRSTATUS (x86-64)
                sig, = struct.unpack_from("<h", desc, 12)
                pid, = struct.unpack_from("<I", desc, 32)
                regs = struct.unpack_from("<27Q", desc, 112)
                threads.append((pid, sig, regs[16], regs[19]))
            elif typ == 0x53494749 and len(desc) >= 24:  # NT_SIGINFO
                signo, _, code = struct.unpack_from("<iii", desc, 0)
                addr, = struct.unpack_from("<Q", desc, 16)
                siginfo = (signo, code, addr)
            elif typ == 0x46494C45 and len(desc) >= 16:  # NT_FILE
                count, page = struct.unpack_from("<QQ", desc, 0)
                ents = [struct.unpack_from("<QQQ", desc, 16 + 24 * k) for k in range(count)]
                names = desc[16 + 24 * count:].split(b"\0")
                for (s, e, pg), name in zip(ents, names):
                    files.append((s, e, pg * page, name.decode(errors="replace")))
    if siginfo:
        print(f"signal {siginfo[0]}, si_code {siginfo[1]}, address {siginfo[2]:#x}")

    def where(a):
        for s, e, fo, name in files:
            if s <= a < e:
                return name, a - s + fo
        return None, None

    execs = [(v, v + ms) for v, ms, _, _, fl in loads if fl & 1]
    for t, (pid, sig, rip, rsp) in enumerate(threads):
        name, off = where(rip)
        at = f"{name}+{off:#x}: {resolve(name, off)}" if name else "(no file)"
        print(f"thread {pid} signal {sig}: instruction {rip:#x} {at}; stack {rsp:#x}")
        if t > 2:
            continue
        words = mem(rsp, 8 * 1024) or mem(rsp, 8 * 128) or b""
        shown = 0
        for k in range(len(words) // 8):
            w, = struct.unpack_from("<Q", words, 8 * k)
            name, off = where(w)
            if name and any(s <= w < e for s, e in execs):
                print(f"  stack[{k}]: {name}+{off:#x}: {resolve(name, off)}")
                shown += 1
            if shown >= 40:
                break


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--core":
        from_core(sys.argv[2])
    elif len(sys.argv) == 2:
        from_report(open(sys.argv[1], errors="replace").read().splitlines())
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
