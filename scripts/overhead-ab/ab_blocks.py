"""What the overhead scripts share: the workload's model ([`resnet50`]), one timed inference
([`timed`]), and for ab.py and sample_thread.py ([`run`]) ResNet-50 inferences in blocks,
recording and paused (calls passed through the hooks) in turn, ABBA order, inside one process run
under `GPULESS_DIAG=pause gpuless record`: AB_BLOCKS pairs of blocks (12) of AB_ITERS
inferences (25)."""
import contextlib, ctypes, os, statistics as st, sys, time

MODES = ("rec", "pass")


def resnet50():
    """The workload's model and input (../shared/workloads/resnet50.py), on the GPU."""
    import torch, torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval().cuda()
    return model, torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()


def since_process_start():
    """Seconds from the process's start to now, as the workload's harness measures its time to
    first result (../shared/workloads/_common.py)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def timed(model, x):
    """One inference's latency in ms, the GPU idle before and after."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    model(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def inferences():
    """Inferences per mode that [`run`] times: AB_BLOCKS × AB_ITERS."""
    return int(os.environ.get("AB_BLOCKS", 12)) * int(os.environ.get("AB_ITERS", 25))


def run(around=None, native=False):
    """Each mode's block medians in ms. `around(mode)`, when given, returns a context manager
    entered for each block (a sampler). With `native`, a process without the recorder runs the
    same blocks in one mode, `native`."""
    import torch

    blocks = int(os.environ.get("AB_BLOCKS", 12))
    per = int(os.environ.get("AB_ITERS", 25))
    pause = getattr(ctypes.CDLL(None), "gpuless_diag_pause", None)
    if pause is None and not native:
        sys.exit("gpuless_diag_pause not found: run under GPULESS_DIAG=pause gpuless record")
    modes = MODES if pause else ("native",)
    model, x = resnet50()
    out = {m: [] for m in modes}
    with torch.no_grad():
        for _ in range(30):
            model(x)
        torch.cuda.synchronize()
        for b in range(blocks):
            for mode in modes if b % 2 == 0 else modes[::-1]:
                if pause:
                    pause(1 if mode == "pass" else 0)
                ts = []
                with around(mode) if around else contextlib.nullcontext():
                    for _ in range(per):
                        ts.append(timed(model, x))
                out[mode].append(st.median(ts))
        if pause:
            pause(0)
    return out
