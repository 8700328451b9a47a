"""Recording cost inside one process: ResNet-50 inferences in blocks, recording and paused
(calls passed through) in turn, ABBA order. Run under `GPULESS_DIAG=pause gpuless record`.

Between processes the hot latency of the same program moves by up to a quarter on the device
hosts; within one process it is steady, so this isolates what recording costs over the hooks.
Prints one JSON line: block medians and the median ratio recording / paused.
"""
import json, statistics as st

import ab_blocks as blocks

out = blocks.run()
ratios = [a / b for a, b in zip(out["rec"], out["pass"])]
print(json.dumps({"rec_ms": [round(v, 4) for v in out["rec"]], "pass_ms": [round(v, 4) for v in out["pass"]],
                  "ratio_median": round(st.median(ratios), 4), "ratios": [round(r, 4) for r in ratios]}))
