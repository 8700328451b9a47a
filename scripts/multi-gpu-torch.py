"""A PyTorch program of two GPUs (issue 37), compared natively and through the client
(`gpuless run --remote ADDR --gpus 2 -- python3 scripts/multi-gpu-torch.py`): tensors on each
device, computation on each, copies between them (`.to()`, peer), streams and events across
devices, `nn.DataParallel` forward and NCCL's all-reduce between the two devices of one
process. Every stage prints one line of results rounded to what
cuBLAS reproduces run to run; a stage that raises prints its exception instead, so that the
comparison says which stage differs. Exit 2 (waived) with fewer than two devices."""

import sys

import torch


def stage(name, fn):
    try:
        print(f"{name}: {fn()}", flush=True)
    except Exception as e:  # noqa: BLE001 - the stage's failure is its output
        text = " | ".join(line.strip() for line in str(e).splitlines() if line.strip())
        print(f"{name}: ERROR {type(e).__name__}: {text[:600]}", flush=True)


def r(t):
    return f"{t.double().sum().item():.6e}/{t.double().abs().max().item():.6e}"


def main():
    n = torch.cuda.device_count()
    print(f"devices: {n}")
    if n < 2:
        return 2
    stage("names", lambda: [torch.cuda.get_device_name(i) for i in range(2)])
    stage("capability", lambda: [torch.cuda.get_device_capability(i) for i in range(2)])
    stage("peer", lambda: (torch.cuda.can_device_access_peer(0, 1), torch.cuda.can_device_access_peer(1, 0)))
    torch.manual_seed(0)
    a = torch.randn(1024, 1024)
    b = torch.randn(1024, 1024)
    state = {}

    def on_each():
        state["c0"] = a.to("cuda:0") @ a.to("cuda:0")
        state["c1"] = b.to("cuda:1") @ b.to("cuda:1")
        return f"{r(state['c0'])} {r(state['c1'])} devices {state['c0'].device} {state['c1'].device}"

    stage("matmul on each", on_each)

    def between():
        x = state["c0"].to("cuda:1")
        y = state["c1"].to("cuda:0")
        z = (x + state["c1"]).to("cuda:0") + y
        return f"{r(z)} device {z.device}"

    stage("copies between", between)

    def copy_non_contiguous():
        t = state["c1"].t()[::2]  # strided on device 1
        u = t.to("cuda:0")
        return f"{r(u)} contiguous {u.is_contiguous()}"

    stage("strided copy 1->0", copy_non_contiguous)

    def streams_events():
        with torch.cuda.device(1):
            s1 = torch.cuda.Stream()
            with torch.cuda.stream(s1):
                w = state["c1"]
                for _ in range(8):
                    w = torch.tanh(w * 1e-2) @ torch.tanh(w.t() * 1e-2)
                e = torch.cuda.Event()
                e.record(s1)
        with torch.cuda.device(0):
            s0 = torch.cuda.Stream()
            s0.wait_event(e)
            with torch.cuda.stream(s0):
                v = w.to("cuda:0", non_blocking=True) * 2
            s0.synchronize()
        return r(v)

    stage("streams and events", streams_events)

    def memory():
        m = [torch.cuda.memory_allocated(i) > 0 for i in range(2)]
        free_total = [torch.cuda.mem_get_info(i) for i in range(2)]
        return f"allocated {m} sane {[0 < f <= t for f, t in free_total]}"

    stage("memory", memory)

    def data_parallel():
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda(0)
        inp = torch.randn(64, 256).cuda(0)
        ref = model(inp)
        out = torch.nn.DataParallel(model, device_ids=[0, 1])(inp)
        return f"{r(out)} matches one device {torch.allclose(out, ref, atol=1e-4)}"

    stage("DataParallel forward", data_parallel)

    def nccl_all_reduce():
        import torch.cuda.nccl as nccl

        ts = [torch.full((1 << 20,), float(i + 1), device=f"cuda:{i}") for i in range(2)]
        nccl.all_reduce(ts)
        return f"{[t[:4].tolist() for t in ts]} version {nccl.version()}"

    stage("NCCL all-reduce", nccl_all_reduce)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    print("multi-gpu-torch done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
