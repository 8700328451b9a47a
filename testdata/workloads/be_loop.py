"""Best-effort load of the scheduling section (issue 36, REEF's scenario): one model run in a
loop, as fast as it goes, until the file BE_STOP exists or BE_SECONDS (default 20) pass after
its warm-up. Iterations count only while the file BE_GO exists, when it is given (the time the
latency-critical client is measured); without BE_GO, all of them.

BE_MODEL: `bert` (BERT-base inference, batch 32, sequence 128), `vgg19` (VGG19 inference,
batch 32) or `train` (a ResNet-18 training step, batch 32). Random weights, a fixed seed, no
download. BE_READY names a file written when the warm-up ends. Prints one JSON line: the model,
iterations counted, the seconds they took, iterations per second and the median iteration time
in ms.
"""
import json, os, sys, time

import torch
import torchvision


def build(name):
    torch.manual_seed(0)
    if name == "bert":
        import transformers
        cfg = transformers.BertConfig()
        model = transformers.BertModel(cfg).eval().cuda()
        ids = torch.randint(0, cfg.vocab_size, (32, 128), generator=torch.Generator().manual_seed(1)).cuda()
        return lambda: model(ids)
    if name == "vgg19":
        model = torchvision.models.vgg19(weights=None).eval().cuda()
        x = torch.randn(32, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
        return lambda: model(x)
    if name == "train":
        model = torchvision.models.resnet18(weights=None).train().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(32, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
        y = torch.randint(0, 1000, (32,), generator=torch.Generator().manual_seed(2)).cuda()
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        return step
    raise SystemExit(f"unknown BE_MODEL {name}")


def main():
    name = os.environ.get("BE_MODEL", "vgg19")
    seconds = float(os.environ.get("BE_SECONDS", "20"))
    step = build(name)
    grad = torch.enable_grad() if name == "train" else torch.no_grad()
    with grad:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        ready = os.environ.get("BE_READY")
        if ready:
            with open(ready, "w") as f:
                f.write("ready\n")
        go, stop = os.environ.get("BE_GO"), os.environ.get("BE_STOP")
        times = []
        start = time.perf_counter()
        counted = 0.0
        while time.perf_counter() - start < seconds and not (stop and os.path.exists(stop)):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            if not go or os.path.exists(go):
                dt = time.perf_counter() - t0
                times.append(dt)
                counted += dt
        total = counted
    times.sort()
    print(json.dumps({"model": name, "iterations": len(times), "seconds": round(total, 3),
                      "per_s": round(len(times) / total, 4) if total else None,
                      "iter_ms_median": round(times[len(times) // 2] * 1e3, 4) if times else None}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
