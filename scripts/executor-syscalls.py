#!/usr/bin/env python3
"""Regenerates replayer/src/server/confine/syscalls.rs, the executors' seccomp allow-list, from
measurements: `strace -ff -ttt -o DIR/x` of executors serving sessions (run the server with
GPULESS_EXECUTOR_WRAPPER="strace -ff -qq -ttt -o DIR/x" and the filter off, confine.seccomp =
false), on a GPU. Counts the system calls each executor made after it told the server it was
ready (its first write on the control channel, fd 3): the filter is installed at that point.

    scripts/executor-syscalls.py summarize DIR... > summary.json   (on the GPU machine)
    scripts/executor-syscalls.py generate summary.json... [--replace]

`generate` adds the measured calls to those already in the module (unless --replace), keeps the
BASE calls, leaves out the DENIED ones (said on stderr), and rewrites the module."""
import collections, json, os, re, sys

MODULE = os.path.join(os.path.dirname(__file__), "..", "replayer", "src", "server", "confine", "syscalls.rs")
# Calls the executor needs however it was measured: its own exit and signal paths.
BASE = ["exit", "exit_group", "rt_sigreturn", "restart_syscall", "write", "futex", "sched_yield",
        "rt_sigprocmask", "clock_gettime", "clock_nanosleep", "nanosleep", "getpid", "gettid",
        "munmap", "madvise", "mmap", "mprotect", "close", "read", "brk", "sigaltstack",
        # files inside the executor's view (the cache's blobs, its private /tmp), memory, time,
        # polling and its own identity: nothing reaches beyond its process and its view.
        "openat", "lseek", "pread64", "pwrite64", "readv", "writev", "fstat", "newfstatat", "statx",
        "getdents64", "unlink", "unlinkat", "mkdir", "mkdirat", "rename", "renameat", "renameat2",
        "ftruncate", "fsync", "fdatasync", "fallocate", "readlink", "readlinkat", "getcwd", "access",
        "faccessat", "faccessat2", "fcntl", "dup", "dup2", "dup3", "pipe2", "flock", "mremap", "msync",
        "mlock", "munlock", "memfd_create", "uname", "sysinfo", "prlimit64", "getrusage", "times",
        "getuid", "geteuid", "getgid", "getegid", "getppid", "gettimeofday", "clock_getres",
        "poll", "ppoll", "select", "pselect6", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
        "eventfd2", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
        "set_robust_list", "rseq", "rt_sigaction", "rt_sigtimedwait", "getrandom", "prctl",
        "recvmsg", "sendmsg", "recvfrom", "sendto", "shutdown", "getsockopt", "setsockopt", "ioctl",
        "wait4", "membarrier", "get_mempolicy", "set_mempolicy", "mbind"]
# Never allowed after the driver's start, measured or not (kill and tgkill are allowed to the
# executor itself only, by the module's rules).
DENIED = {"execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2",
          "pivot_root", "chroot", "unshare", "setns", "bpf", "perf_event_open", "kexec_load",
          "kexec_file_load", "init_module", "finit_module", "delete_module", "keyctl", "add_key",
          "request_key", "userfaultfd", "kill", "tgkill", "tkill", "setuid", "setgid", "setreuid",
          "setregid", "setresuid", "setresgid", "setgroups", "capset", "reboot", "swapon", "swapoff",
          "acct", "quotactl", "mount_setattr", "open_tree", "move_mount", "fsopen", "fsmount",
          "fsconfig", "fspick", "personality", "seccomp", "iopl", "ioperm", "lookup_dcookie",
          "name_to_handle_at", "open_by_handle_at", "vhangup", "syslog", "clone"}
LINE = re.compile(r"^(\d+\.\d+) ([a-z_0-9]+)\(")


def summarize(dirs):
    after, before = collections.Counter(), collections.Counter()
    executors = 0
    for d in dirs:
        files = {}
        for f in os.listdir(d):
            m = re.match(r".*\.(\d+)$", f)
            if m:
                files[int(m.group(1))] = os.path.join(d, f)
        children, calls, roots, ready = collections.defaultdict(list), {}, [], {}
        for tid, path in files.items():
            seq = []
            for ln in open(path, errors="replace"):
                m = LINE.match(ln)
                if not m:
                    continue
                t, name = float(m.group(1)), m.group(2)
                seq.append((t, name))
                if name in ("clone", "clone3", "fork", "vfork"):
                    r = re.search(r"= (\d+)\s*$", ln.strip())
                    if r:
                        children[tid].append(int(r.group(1)))
                if name == "execve" and "__executor" in ln:
                    roots.append(tid)
                if tid in roots and tid not in ready and re.match(r"^\S+ (sendmsg|sendto|write|writev)\(3,", ln):
                    ready[tid] = t
            calls[tid] = seq
        owner = {}
        stack = [(r, r) for r in roots]
        while stack:
            root, tid = stack.pop()
            owner[tid] = root
            stack.extend((root, c) for c in children.get(tid, []))
        executors += len(roots)
        for tid, seq in calls.items():
            r = owner.get(tid)
            if r is None:
                continue
            cut = ready.get(r, float("inf"))
            for t, n in seq:
                (after if t > cut else before)[n] += 1
    json.dump({"executors": executors, "after_ready": after, "before_ready": before}, sys.stdout, indent=1, sort_keys=True)


def current():
    try:
        return set(re.findall(r'\("([a-z_0-9]+)", libc::SYS_', open(MODULE).read()))
    except FileNotFoundError:
        return set()


def generate(summaries, replace):
    names = set() if replace else current()
    names |= set(BASE)
    measured = set()
    for s in summaries:
        measured |= set(json.load(open(s))["after_ready"])
    for n in sorted(measured & DENIED):
        print(f"left out (denied): {n}", file=sys.stderr)
    names |= measured - DENIED
    names -= DENIED
    body = "".join(f'    ("{n}", libc::SYS_{n}),\n' for n in sorted(names))
    text = (
        "//! Generated by scripts/executor-syscalls.py from measurements of executors serving\n"
        "//! sessions on GPUs (docs/SECURITY.md); do not edit: regenerate.\n\n"
        "/// The system calls an executor may make once its GPU is initialized, by name and number\n"
        "/// (x86_64).\n"
        "#[cfg(target_arch = \"x86_64\")]\n"
        "pub(crate) const ALLOWED: &[(&str, i64)] = &[\n" + body + "];\n\n"
        "/// No allow-list on other architectures.\n"
        "#[cfg(not(target_arch = \"x86_64\"))]\n"
        "pub(crate) const ALLOWED: &[(&str, i64)] = &[];\n"
    )
    open(MODULE, "w").write(text)
    print(f"{len(names)} system calls allowed", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("summarize", "generate"):
        sys.exit(__doc__)
    if sys.argv[1] == "summarize":
        summarize(sys.argv[2:])
    else:
        generate([a for a in sys.argv[2:] if a != "--replace"], "--replace" in sys.argv)
