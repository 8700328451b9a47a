"""What a tool asks NVML (through ctypes, no pynvml needed): the driver version, device count, and for device 0 its
name, UUID, PCI bus id, CUDA compute capability and total memory; then what PyTorch reports
from NVML (device count and UUIDs with PYTORCH_NVML_BASED_CUDA_CHECK=1). Prints one line each;
the GPU suite compares the lines of a native run with those of a run through the client.
"""
import ctypes, os, sys

nvml = ctypes.CDLL("libnvidia-ml.so.1")
def ok(r, what):
    if r != 0:
        print(f"{what} failed: {r}")
        sys.exit(1)
ok(nvml.nvmlInit_v2(), "nvmlInit_v2")
n = ctypes.c_uint()
ok(nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)), "nvmlDeviceGetCount_v2")
h = ctypes.c_void_p()
ok(nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)), "nvmlDeviceGetHandleByIndex_v2")
buf = ctypes.create_string_buffer(96)
ok(nvml.nvmlDeviceGetName(h, buf, 96), "nvmlDeviceGetName")
name = buf.value.decode()
ok(nvml.nvmlDeviceGetUUID(h, buf, 96), "nvmlDeviceGetUUID")
uuid = buf.value.decode()
class Pci(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]
pci = Pci()
ok(nvml.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(pci)), "nvmlDeviceGetPciInfo_v3")
major, minor = ctypes.c_int(), ctypes.c_int()
ok(nvml.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(major), ctypes.byref(minor)), "nvmlDeviceGetCudaComputeCapability")
class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
mem = Mem()
ok(nvml.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)), "nvmlDeviceGetMemoryInfo")
ok(nvml.nvmlSystemGetDriverVersion(buf, 96), "nvmlSystemGetDriverVersion")
print(f"driver {buf.value.decode()}")
print(f"count {n.value}")
print(f"device 0: {name}, {uuid}, bus {pci.busId.decode()}, sm_{major.value}{minor.value}, {mem.total} B total, "
      f"free <= total: {mem.free <= mem.total}")
ok(nvml.nvmlShutdown(), "nvmlShutdown")
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
import torch
print(f"torch: {torch.cuda.device_count()} devices, available {torch.cuda.is_available()}, "
      f"NVML UUIDs {torch.cuda._raw_device_uuid_nvml()}")
