"""A small PyTorch model whose GPU work changes between inferences (cached-trace execution,
issue 20): results through `gpuless run --remote` must be identical to native while the server
captures repeated pieces as CUDA graphs and runs whatever differs eagerly.

What changes, inference by inference (48 by default):
- the input batch shape: batch 1, 3, 2, each for 4 inferences in a row, cycling — launches of
  the same kernels with other grids and arguments, so pieces captured for one shape must not be
  relaunched for another;
- the input: every inference makes a new tensor on the host (torch.Generator().manual_seed(i))
  and uploads it with `.cuda()` — the same records with new bytes, so a relaunched graph must
  read this upload, not the one of the inference it was captured from;
- the work itself: the mean of the first convolution's output is read back (`.item()`, a
  synchronization cutting the piece) and an extra convolution runs only when it is above 0.
  The first convolution has no bias, so the mean is a linear function of a standard normal input:
  symmetric around 0, so each inference (a new seed) takes either path with probability 1/2 and
  the chance that one path is taken fewer than 5 times in 48 is about 1e-9 (the JSON line
  counts both; a `--cpu` run prints the branches where there is no GPU).

Prints one line per inference, `i shape branch checksum` (checksum: the first 16 hex digits of
the SHA-256 of the output's float32 bytes, exact), then one JSON line like the other workloads
(_common.py): model, checksum (over all outputs' bytes), first_result_s, hot_ms_median (per
inference, upload to result, with a synchronization on each side; the first inference left out),
and the count of each branch. Environment: CHANGING_INFERENCES (default 48). `--cpu` runs it on
the CPU (a dry run where there is no GPU: the branches, not the checksums, match a GPU run).
"""
import hashlib, json, os, struct, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# cuBLAS is deterministic only with a fixed workspace configuration; set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
from _common import since_process_start
import torch
from torch import nn

CPU = "--cpu" in sys.argv[1:]
DEV = "cpu" if CPU else "cuda"
N = int(os.environ.get("CHANGING_INFERENCES", 48))
BATCHES = (1, 3, 2)   # batch size of inference i: BATCHES[(i // 4) % 3]
THRESHOLD = 0.0       # the extra convolution runs when mean(conv1(x)) > THRESHOLD

torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
try:
    torch.use_deterministic_algorithms(True, warn_only=True)
except Exception:
    pass


class Changing(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)   # its mean decides the branch
        self.body = nn.Sequential(nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.extra = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        z = self.conv1(x)
        take = z.mean().item() > THRESHOLD   # read back: the GPU work that follows depends on it
        h = self.body(z)
        if take:
            h = self.extra(h)
        return self.head(h), take


def sync():
    if not CPU:
        torch.cuda.synchronize()


def digest(t):
    t = t.detach().float().contiguous().cpu()
    return struct.pack(f"<{t.numel()}f", *t.flatten().tolist())


torch.manual_seed(0)
model = Changing().eval().to(DEV)
total = hashlib.sha256()
times, first, taken = [], None, 0
with torch.no_grad():
    for i in range(N):
        b = BATCHES[(i // 4) % len(BATCHES)]
        xh = torch.randn(b, 3, 32, 32, generator=torch.Generator().manual_seed(i))
        sync(); t0 = time.perf_counter()
        x = xh.to(DEV)                                   # a new upload every inference
        y, take = model(x)
        out = y.cpu()
        sync(); t1 = time.perf_counter()
        if i == 0:
            first = since_process_start()
        else:
            times.append((t1 - t0) * 1e3)
        raw = digest(out)
        total.update(raw)
        taken += take
        print(i, "x".join(map(str, x.shape)), "extra" if take else "plain",
              hashlib.sha256(raw).hexdigest()[:16])
times.sort()
print(json.dumps({"model": "changing", "checksum": total.hexdigest()[:16],
                  "first_result_s": round(first, 4) if first is not None else None,
                  "hot_ms_median": round(times[len(times) // 2], 4) if times else None,
                  "inferences": N, "extra": taken, "plain": N - taken}))
sys.stdout.flush()
