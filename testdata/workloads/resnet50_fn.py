"""ResNet-50 as a GPU function (issue 20): the model and weights of resnet50.py
(torch.manual_seed(0); torchvision.models.resnet50(weights=None), eval, on the GPU), float32,
batch 1, 3 x 224 x 224. Used by scripts/gpu-suite-function.sh.

  resnet50_fn.py once SEED DIR
      One inference, nothing else (this is what `gpuless record` records, twice with other
      seeds, for `gpuless compile`): the input torch.randn(1, 3, 224, 224) of a generator seeded
      SEED is written to DIR/xSEED.bin (raw little-endian float32, 602112 bytes) before it goes
      to the GPU; the output (1 x 1000 float32) to DIR/ySEED.bin (4000 bytes). Prints one JSON
      line: model, seed, checksum, first_result_s (seconds from process start to the result).

  resnet50_fn.py graph ITERS
      PyTorch's own CUDA-graph replay of the same model, what `gpuless invoke --iterations` is
      compared with: static input on the GPU, pinned host input and output, 3 eager warm-up
      iterations on a side stream, the model captured in torch.cuda.graph under no_grad; ITERS
      timed iterations of (copy in, replay, copy out, synchronize), and ITERS eager iterations
      (copy in, model, copy out, synchronize) in the same process; the graph's output for seed 1
      compared with eager's (torch.equal). Prints one JSON line: model, graph_ms_median,
      graph_ms_min, eager_ms_median, eager_ms_min, graph_equal, iterations.
"""
import ctypes, json, os, statistics, sys, time

INPUT_SHAPE = (1, 3, 224, 224)
INPUT_BYTES = 1 * 3 * 224 * 224 * 4  # 602112
OUTPUT_BYTES = 1000 * 4


def since_process_start():
    # As _common.py (kept here so that this file runs from any folder).
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def usage():
    sys.exit("usage: resnet50_fn.py once SEED DIR | graph ITERS")


def raw_bytes(t):
    """A CPU float32 tensor's bytes as they lie in memory (little-endian on x86-64)."""
    t = t.contiguous()
    try:
        return t.numpy().tobytes()
    except Exception:  # torch without numpy
        return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def build():
    import torch, torchvision
    torch.backends.cudnn.benchmark = False  # the default, stated: the same kernels every run
    torch.manual_seed(0)
    return torchvision.models.resnet50(weights=None).eval().cuda()


def make_input(seed):
    import torch
    return torch.randn(*INPUT_SHAPE, generator=torch.Generator().manual_seed(seed))


def once(seed, d):
    import torch
    os.makedirs(d, exist_ok=True)
    model = build()
    x = make_input(seed)
    xb = raw_bytes(x)
    assert len(xb) == INPUT_BYTES, len(xb)
    with open(os.path.join(d, f"x{seed}.bin"), "wb") as f:
        f.write(xb)
    xc = x.cuda()
    with torch.no_grad():
        y = model(xc)
    out = y.float().cpu()
    first = since_process_start()
    yb = raw_bytes(out)
    assert len(yb) == OUTPUT_BYTES, len(yb)
    with open(os.path.join(d, f"y{seed}.bin"), "wb") as f:
        f.write(yb)
    print(json.dumps({"model": "resnet50_fn", "seed": seed, "checksum": float(out.double().abs().sum()),
                      "first_result_s": round(first, 4)}))
    sys.stdout.flush()


def graph(iters):
    import torch
    model = build()
    host_x = make_input(1).pin_memory()
    host_y = torch.empty((1, 1000), dtype=torch.float32).pin_memory()
    static_x = torch.empty(INPUT_SHAPE, dtype=torch.float32, device="cuda")
    static_x.copy_(host_x)
    # Warm-up on a side stream before capture (PyTorch's CUDA graphs documentation).
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    with torch.no_grad():
        # Eager: the reference output for seed 1, then ITERS timed iterations.
        eager_ref = model(static_x).float().cpu().clone()
        eager = []
        for _ in range(iters):
            t0 = time.perf_counter()
            static_x.copy_(host_x, non_blocking=True)
            y = model(static_x)
            host_y.copy_(y, non_blocking=True)
            torch.cuda.synchronize()
            eager.append((time.perf_counter() - t0) * 1e3)

        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_y = model(static_x)
    torch.cuda.synchronize()

    # The graph's output for seed 1 against eager's.
    static_x.copy_(host_x, non_blocking=True)
    g.replay()
    host_y.copy_(static_y, non_blocking=True)
    torch.cuda.synchronize()
    graph_equal = bool(torch.equal(host_y.clone(), eager_ref))
    for _ in range(3):  # untimed warm replays
        g.replay()
    torch.cuda.synchronize()

    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        static_x.copy_(host_x, non_blocking=True)
        g.replay()
        host_y.copy_(static_y, non_blocking=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)

    print(json.dumps({"model": "resnet50_fn", "iterations": iters,
                      "graph_ms_median": round(statistics.median(times), 4),
                      "graph_ms_min": round(min(times), 4),
                      "eager_ms_median": round(statistics.median(eager), 4),
                      "eager_ms_min": round(min(eager), 4),
                      "graph_equal": graph_equal}))
    sys.stdout.flush()


def main(argv):
    if len(argv) == 3 and argv[0] == "once":
        once(int(argv[1]), argv[2])
    elif len(argv) == 2 and argv[0] == "graph" and int(argv[1]) > 0:
        graph(int(argv[1]))
    else:
        usage()


if __name__ == "__main__":
    main(sys.argv[1:])
