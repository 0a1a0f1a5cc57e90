"""How long pinning host memory takes with torch's default allocator (cudaHostAlloc) and with cudaHostRegister from 8
threads, and how long `import torch` takes alone, six at once and with torchvision: what a workload's set-up costs.

    python3 hardware/pin_probe.py OUTDIR      (on a GPU machine; writes OUTDIR/pin_probe.json)

Last run: tests/data/results/pin-probe-h100-x1/.
"""
import json
import os
import subprocess
import sys
import time

out = sys.argv[1]
res = {}
child = r'''
import time, json, sys
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.zeros(1, device="cuda")
t2 = time.perf_counter()
r = {"import_s": t1 - t0, "cuda_init_s": t2 - t1}
for gib in (1, 8):
    s = time.perf_counter()
    x = torch.empty(gib << 30, dtype=torch.uint8, pin_memory=True)
    r[f"pin_{gib}gib_s"] = time.perf_counter() - s
    s = time.perf_counter()
    y = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
    y.copy_(x, non_blocking=True); torch.cuda.synchronize()
    r[f"h2d_{gib}gib_s"] = time.perf_counter() - s
    del x, y
print(json.dumps(r))
'''
REGISTER8 = "pinned_use_cuda_host_register:True,pinned_num_register_threads:8"
for name, conf in (("default", None), ("register8", REGISTER8), ("default2", None), ("register8b", REGISTER8)):
    env = dict(os.environ)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True)
    res[name] = {"wall_s": time.perf_counter() - t, "rc": p.returncode, "out": p.stdout.strip()[-2000:],
                 "err": p.stderr[-2000:]}
    print(name, res[name], flush=True)
for n in (1, 6):
    t = time.perf_counter()
    ps = [subprocess.Popen([sys.executable, "-c", "import torch"]) for _ in range(n)]
    for p in ps:
        p.wait()
    res[f"import_torch_x{n}_s"] = time.perf_counter() - t
    print(n, res[f"import_torch_x{n}_s"], flush=True)
t = time.perf_counter()
subprocess.run([sys.executable, "-c", "import torch, torchvision"])
res["import_torch_torchvision_s"] = time.perf_counter() - t
print(res["import_torch_torchvision_s"])
json.dump(res, open(os.path.join(out, "pin_probe.json"), "w"), indent=1)
