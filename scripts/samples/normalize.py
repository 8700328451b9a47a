#!/usr/bin/env python3
"""Normalizes a CUDA sample's output so that two runs of the same program compare equal.

    normalize.py [--sample NAME] [FILE]      (FILE or stdin -> stdout)
    normalize.py --test                      (checks the rules on made-up sample lines)

What legitimately differs from run to run is masked: timings and the rates computed from them
(ms, sec, GFlop/s, GB/s, "Time=", throughput, latency, elapsed), the GPU's name, PCI ids, UUIDs,
process ids, host and device addresses printed in hex; for some samples (--sample) also values
that depend on the clock, on time-seeded inputs or on thread scheduling. Results stay as they
are: PASS/FAIL lines, "Result = PASS", checksums, residuals, errors, sizes and counts.
SAMPLES_GPU_NAMES (names separated by '|', e.g. from nvidia-smi) are masked wherever they occur.
"""
import os
import re
import sys

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
# Units of time and of rates: a number right before one of them is a measurement.
UNITS = (
    r"(?:ms|msec|msecs|milliseconds?|s|sec|secs|seconds?|us|usec|µs|ns|"
    r"[KMGT]B/s(?:ec)?|[KMGT]i?B/s|[KMGT]?[Ff]lop/?s|[KMGT]?FLOP/?S|[KMGT]?FLOPS|"
    r"G?Options/s|[KMG]Points/s|sims/s|[KMG]Numbers/s|M?Elements/s|MPixels/s(?:ec)?|M[Pp]ix/s|"
    r"Melems/sec|MegaElements/s|GOP/s|Mops/s|Gops/s|Mpix/s|elements/s|samples/s|options/s|"
    r"Mtexlookups/sec|Mpixels/sec|ms/frame)"
)
MEASURED = re.compile(rf"(?<![\w.]){NUM}(\s*\(?\s*{UNITS})(?![\w/])")
# A number after a timing word and '=' or ':' ("Time= 1.2", "time spent ...: 3.4",
# "Total time (ms.): 5.6", "Options per second : 7.8").
KEYED = re.compile(
    rf"(?i)(\b(?:time|elapsed|throughput|bandwidth|performance|latency|per second|per sec\.?|speed|"
    rf"rate|options/sec)\b[^=:\n]{{0,40}}?[=:]\s*){NUM}"
)
# A rate named before its number: "TFLOPS: 10.2", "GFLOPS=0.03", "GOP/s: 344.9".
RATE_KEYED = re.compile(rf"(?<![\w/])((?:[KMGT]?FLOPS|[KMGT]?OPS|GOP/s|[KMG]samples/s)\s*[=:]\s*){NUM}")
# A unit in parentheses names what the line's numbers measure: "Bandwidth (GB/s) for pitch
# linear: 1.2e+03; for array: 2.1e+03", "Latency Matrix (us)".
PAREN_UNIT = re.compile(rf"\(\s*{UNITS}\s*\)")
FLOAT = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")
HEX = re.compile(r"\b0x[0-9a-fA-F]{5,}\b")
PCI_ADDR = re.compile(r"\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
PCI_IDS = re.compile(r"(?i)(\bpci\s*(?:bus|device|domain)\s*id\s*[:=]?\s*)[0-9a-fx]+")
PCI_LINE = re.compile(r"(?i)(PCI Domain ID / Bus ID / location ID:\s*)\d+ / \d+ / \d+")
UUID = re.compile(r"\bGPU-[0-9a-fA-F]{8}-[0-9a-fA-F-]{27}\b|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
PID = re.compile(r"(?i)(\b(?:pid|process id)\b\s*[:=#]?\s*)\d+")
PADDED = re.compile(r"[ \t]+(<[tn]>)")
GPU_NAME = re.compile(r"NVIDIA (?:[A-Z][\w-]*)(?: [\w-]+)*?(?= with|[\"',()\[\]<>\n]|$)")

# Per sample: (pattern, replacement) applied after the generic rules, and whether lines are sorted.
SAMPLE = {
    # The CPU polls while the GPU works: how often depends on timing.
    "asyncAPI": [(r"CPU executed \d+ iterations", "CPU executed <n> iterations")],
    # clock() differences.
    "clock": [(rf"Average clocks/block = {NUM}", "Average clocks/block = <n>")],
    "clock_nvrtc": [(rf"Average clocks/block = {NUM}", "Average clocks/block = <n>")],
    # Inputs seeded with time(NULL).
    "fp16ScalarProduct": [(rf"(Result (?:native operators|intrinsics)\s*:\s*){NUM}", r"\1<n>")],
    # Task sizes seeded with time(NULL), 4 OpenMP threads: which thread, the size and host or
    # device all vary; the number of tasks does not.
    "UnifiedMemoryStreams": [(r"^Task \[\d+\], thread \[\d+\] executing on (?:host|device) \(\d+\)$", "Task executing")],
    # Shared-memory names carry the parent's process id.
    "simpleIPC": [(r"(lshmName = \D*)\d+", r"\1<pid>")],
    "streamOrderedAllocationIPC": [(r"(lshmName = \D*)\d+", r"\1<pid>")],
    "memMapIPCDrv": [(r"(lshmName = \D*)\d+", r"\1<pid>")],
    # Tables of measurements without units on each number.
    "p2pBandwidthLatencyTest": [(r"(?<![\w.])-?\d+\.\d+(?![\w.])", "<n>")],
    "simpleStreams": [(rf"^((?:memcopy|kernel|non-streamed|\d+ streams):\s+){NUM}", r"\1<t>")],
    "UnifiedMemoryPerf": [(r"(?<![\w.])-?\d+\.\d+(?![\w.])", "<n>")],
    # Its columns include differences of timings, which can be negative.
    "cudaGraphsPerfScaling": [(r"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])", "<n>")],
    # Which child grid gets which block number depends on the order the parents' threads run.
    "cdpSimplePrint": [(r"BLOCK \d+ launched by thread \d+ of block \d+", "BLOCK <n> launched by thread <n> of block <n>")],
    # How much physical memory the graph memory pool holds depends on when the driver frees
    # (two native runs print 134217728 and 201326592 bytes).
    "graphMemoryFootprint": [(r"FOOTPRINT: \d+ bytes", "FOOTPRINT: <n> bytes")],
}
# Lines printed by concurrent host threads or device blocks, in an order that varies.
SORTED = {"UnifiedMemoryStreams", "cdpSimplePrint", "threadMigration", "simplePrintf", "cudaOpenMP"}


def normalize(text, sample=None):
    names = [n for n in os.environ.get("SAMPLES_GPU_NAMES", "").split("|") if n.strip()]
    rules = [(re.compile(p, re.M), r) for p, r in SAMPLE.get(sample or "", [])]
    out = []
    for line in text.split("\n"):
        for n in names:
            line = line.replace(n.strip(), "<gpu>")
        line = GPU_NAME.sub("<gpu>", line)
        line = UUID.sub("<uuid>", line)
        line = PCI_ADDR.sub("<pci>", line)
        line = PCI_LINE.sub(r"\1<pci>", line)
        line = PCI_IDS.sub(r"\1<pci>", line)
        line = PID.sub(r"\1<pid>", line)
        line = HEX.sub("0x<hex>", line)
        line = MEASURED.sub(r"<t>\1", line)
        line = KEYED.sub(r"\1<t>", line)
        line = RATE_KEYED.sub(r"\1<t>", line)
        if PAREN_UNIT.search(line):
            line = FLOAT.sub("<t>", line)
        for rx, rep in rules:
            line = rx.sub(rep, line)
        # A masked number's padding depends on its width ("%8.2f").
        line = PADDED.sub(r" \1", line)
        out.append(line.rstrip())
    if sample in SORTED:
        out.sort()
    return "\n".join(out)


TESTS = [
    # (sample, line, expected)
    (None, "Performance= 2853.25 GFlop/s, Time= 0.046 msec, Size= 131072000 Ops, WorkgroupSize= 1024 threads/block",
     "Performance= <t> GFlop/s, Time= <t> msec, Size= 131072000 Ops, WorkgroupSize= 1024 threads/block"),
    (None, "Checking computed result for correctness: Result = PASS", "Checking computed result for correctness: Result = PASS"),
    (None, "GPU Device 0: \"Hopper\" with compute capability 9.0", "GPU Device 0: \"Hopper\" with compute capability 9.0"),
    (None, "Device 0: \"NVIDIA H100 80GB HBM3\"", "Device 0: \"<gpu>\""),
    (None, "CUDA device [NVIDIA H200]", "CUDA device [<gpu>]"),
    (None, "> Using CUDA Device [0]: NVIDIA H100 80GB HBM3", "> Using CUDA Device [0]: <gpu>"),
    (None, "  Device PCI Domain ID / Bus ID / location ID:   0 / 27 / 0", "  Device PCI Domain ID / Bus ID / location ID:   <pci>"),
    (None, "Device: 0, NVIDIA H100 80GB HBM3, pciBusID: 1b, pciDeviceID: 0, pciDomainID:0",
     "Device: 0, <gpu>, pciBusID: <pci>, pciDeviceID: <pci>, pciDomainID:<pci>"),
    (None, "BlackScholes, Throughput = 60.5342 GOptions/s, Time = 0.00013 s, Size = 8000000 options, NumDevsUsed = 1, Workgroup = 128",
     "BlackScholes, Throughput = <t> GOptions/s, Time = <t> s, Size = 8000000 options, NumDevsUsed = 1, Workgroup = 128"),
    (None, "time spent executing by the GPU: 5.43", "time spent executing by the GPU: <t>"),
    (None, "Total time (ms.): 12.345678", "Total time (ms.): <t>"),
    (None, "Options per second       : 4521234.123456     ", "Options per second       : <t>"),
    (None, "MonteCarloEstimatePiP, Performance = 123456.78 sims/s, Time = 12.34(ms), NumDevsUsed = 1, Blocksize = 128",
     "MonteCarloEstimatePiP, Performance = <t> sims/s, Time = <t>(ms), NumDevsUsed = 1, Blocksize = 128"),
    (None, "CUDA Link Completed in 0.123000ms. Linker Output:", "CUDA Link Completed in <t>ms. Linker Output:"),
    (None, "Avg. time: 0.012345 ms / Copy throughput: 1234.5678 GB/s.", "Avg. time: <t> ms / Copy throughput: <t> GB/s."),
    (None, "262144 elements scanned in 0.012 ms -> 21845.33 MegaElements/s", "262144 elements scanned in <t> ms -> <t> MegaElements/s"),
    (None, "GPU Final, residual = 1.234567e-06, kernel execution time = 12.3 ms",
     "GPU Final, residual = 1.234567e-06, kernel execution time = <t> ms"),
    (None, "histogram256() time (average) : 0.00012 sec, 123456.7890 MB/sec", "histogram256() time (average) : <t> sec, <t> MB/sec"),
    (None, "%f MPix/s (%f ms)".replace("%f", "12.5"), "<t> MPix/s (<t> ms)"),
    (None, "  Processing time (CUDA 1)    : 0.123 ms ", "  Processing time (CUDA 1)    : <t> ms"),
    (None, "Sorted 1048576 elems in 3.210 ms (326.655 Melems/sec)", "Sorted 1048576 elems in <t> ms (<t> Melems/sec)"),
    (None, "Check verified that d_negSquare and d_input share a virtual address 0x7f1234500000", "Check verified that d_negSquare and d_input share a virtual address 0x<hex>"),
    (None, "RMS(reference, result) = 0.000000", "RMS(reference, result) = 0.000000"),
    (None, "Processing 4 streams with 10 elements each", "Processing 4 streams with 10 elements each"),
    (None, "sum = 1.00000e+00, 32 iterations", "sum = 1.00000e+00, 32 iterations"),
    (None, "child pid 4242 done", "child pid <pid> done"),
    (None, "FP64 TFLOPS: 17.06", "FP64 TFLOPS: <t>"),
    (None, "^^^^ elapsed = 0.00012 sec  GFLOPS=0.0302899", "^^^^ elapsed = <t> sec  GFLOPS=<t>"),
    (None, "GPU time: 0.12 ms; GOP/s: 344.942766", "GPU time: <t> ms; GOP/s: <t>"),
    (None, "Gsamples/s: 58.1395", "Gsamples/s: <t>"),
    (None, "Bandwidth (GB/s) for pitch linear: 2.1e+03; for array: 2.15e+03", "Bandwidth (GB/s) for pitch linear: <t>; for array: <t>"),
    (None, "1755.43 Mtexlookups/sec", "<t> Mtexlookups/sec"),
    (None, "Device: <NVIDIA H100 80GB HBM3> canMapHostMemory: Yes", "Device: <<gpu>> canMapHostMemory: Yes"),
    ("simpleStreams", "non-streamed:\t1.44", "non-streamed: <t>"),
    ("UnifiedMemoryPerf", "1024\t  12.34\t 123.45", "1024 <n> <n>"),
    ("p2pBandwidthLatencyTest", "     0 2849.81 ", "     0 <n>"),
    ("p2pBandwidthLatencyTest", "     0\t     1", "     0\t     1"),
    ("asyncAPI", "CPU executed 51234 iterations while waiting for GPU to finish", "CPU executed <n> iterations while waiting for GPU to finish"),
    ("clock", "Average clocks/block = 3073.437500", "Average clocks/block = <n>"),
    ("fp16ScalarProduct", "Result native operators\t: 1234567.000000 ", "Result native operators\t: <n>"),
    ("fp16ScalarProduct", "&&&& fp16ScalarProduct PASSED", "&&&& fp16ScalarProduct PASSED"),
    ("simpleIPC", "PP: lshmName = simpleIPCshm123456", "PP: lshmName = simpleIPCshm<pid>"),
    ("UnifiedMemoryStreams", "Task [3], thread [1] executing on device (512)", "Task executing"),
    ("cudaGraphsPerfScaling", "20, 1, 0, 1.25, -0.03, 2.5e-05,", "20, 1, 0, <n>, <n>, <n>,"),
    ("cdpSimplePrint", "|  BLOCK 6 launched by thread 1 of block 0", "|  BLOCK <n> launched by thread <n> of block <n>"),
    ("graphMemoryFootprint", "03:     FOOTPRINT: 201326592 bytes", "03:     FOOTPRINT: <n> bytes"),
]


def self_test():
    bad = 0
    for sample, line, want in TESTS:
        got = normalize(line, sample)
        if got != want:
            bad += 1
            print(f"FAIL [{sample}] {line!r}\n  got  {got!r}\n  want {want!r}")
    print(f"{len(TESTS) - bad} of {len(TESTS)} normalizations as expected")
    return 1 if bad else 0


def main(argv):
    if argv[1:2] == ["--test"]:
        return self_test()
    sample = None
    args = argv[1:]
    if args[:1] == ["--sample"]:
        sample, args = args[1], args[2:]
    text = open(args[0], errors="replace").read() if args else sys.stdin.read()
    sys.stdout.write(normalize(text, sample))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
