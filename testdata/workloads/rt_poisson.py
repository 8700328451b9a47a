"""Latency-critical client of the scheduling section (issue 36, REEF's scenario): ResNet-50
batch 1 inferences with Poisson arrivals, open loop.

The service time alone is measured first (median of 30 inferences); the arrival rate is
RT_UTIL (default 0.25) of what that service time allows, or RT_RATE requests per second. For RT_SECONDS (default 15) requests
arrive at exponential intervals; each starts when it arrives or when the previous one ended,
whichever is later, and its latency is from arrival to result (queueing included). Prints one
JSON line: the service time, the rate, the count, p50/p99/p99.9 latency in ms, the checksum of
the first output, and every latency (for a CDF). RT_READY names a file written when the warm-up
ends (the section starts best-effort load before timing). Random weights, a fixed seed.
"""
import json, os, random, sys, time

import torch
import torchvision


def main():
    util = float(os.environ.get("RT_UTIL", "0.25"))
    seconds = float(os.environ.get("RT_SECONDS", "15"))
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval().cuda()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        checksum = float(model(x).double().abs().sum().cpu())
        times = []
        for _ in range(30):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    times.sort()
    service = times[len(times) // 2]
    # RT_RATE (requests per second) fixes the arrival rate, so that a run beside best-effort
    # load gets the same arrivals as the run alone (whose rate came from its service time).
    rate = float(os.environ["RT_RATE"]) if os.environ.get("RT_RATE") else util / service
    ready = os.environ.get("RT_READY")
    if ready:
        with open(ready, "w") as f:
            f.write("ready\n")
    rng = random.Random(7)
    lat = []
    start = time.perf_counter()
    arrival = start
    free_at = start
    with torch.no_grad():
        while True:
            arrival += rng.expovariate(rate)
            if arrival - start > seconds:
                break
            now = time.perf_counter()
            if now < arrival:
                time.sleep(arrival - now)
            model(x)
            torch.cuda.synchronize()
            done = time.perf_counter()
            lat.append((done - arrival) * 1e3)
            free_at = done
    s = sorted(lat)
    q = lambda p: s[min(len(s) - 1, int(p * len(s)))] if s else None
    print(json.dumps({"model": "resnet50-b1", "util": util, "service_ms": round(service * 1e3, 4),
                      "rate_per_s": round(rate, 3), "count": len(lat), "p50_ms": q(0.5), "p99_ms": q(0.99),
                      "p999_ms": q(0.999), "checksum": checksum, "seconds": round(free_at - start, 3),
                      "latencies_ms": [round(v, 4) for v in lat]}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
