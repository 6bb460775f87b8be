"""The GPU's bf16 matrix-product rate (GFLOP/s): the compute limit the profile and the rollout bench divide by."""
import time

import torch

n = 8192
a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(3):
    a @ b
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(10):
    a @ b
torch.cuda.synchronize()
rate = 10 * 2 * n ** 3 / (time.perf_counter() - t) / 1e9
print(torch.cuda.get_device_name(), f"bf16 {n}x{n}x{n} matmul")
print(f"{rate:.0f}")
