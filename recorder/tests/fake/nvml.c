/* NVML as PyTorch and pynvml use it (cli/tests/run_remote_nvml.rs runs it through
 * `gpuless run --remote` against a server on the stand-in driver): dlopen("libnvidia-ml.so.1")
 * — with the argument `global`, the symbols the process finds first (dlsym(RTLD_DEFAULT)) —
 * then init, count, handles, name, UUID, PCI info, compute capability, memory, processes,
 * MIG mode, shutdown. Prints `key status values...` lines and goes on after a failed call;
 * exits 1 when init fails, 2 when the library or a symbol is missing. Types as nvml.h. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

static void *lib;

static void *sym(const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    printf("missing %s\n", name);
    exit(2);
  }
  return p;
}

#define FN(ret, name, args) ret(*name) args = (ret(*) args)sym(#name)

int main(int argc, char **argv) {
  int global = argc > 1 && !strcmp(argv[1], "global");
  lib = global ? RTLD_DEFAULT : dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!global && !lib) {
    printf("dlopen %s\n", dlerror());
    return 2;
  }
  FN(nvmlReturn_t, nvmlInit_v2, (void));
  FN(nvmlReturn_t, nvmlShutdown, (void));
  FN(const char *, nvmlErrorString, (nvmlReturn_t));
  FN(nvmlReturn_t, nvmlDeviceGetCount_v2, (unsigned *));
  FN(nvmlReturn_t, nvmlDeviceGetHandleByIndex_v2, (unsigned, nvmlDevice_t *));
  FN(nvmlReturn_t, nvmlDeviceGetHandleByUUID, (const char *, nvmlDevice_t *));
  FN(nvmlReturn_t, nvmlDeviceGetHandleByPciBusId_v2, (const char *, nvmlDevice_t *));
  FN(nvmlReturn_t, nvmlDeviceGetName, (nvmlDevice_t, char *, unsigned));
  FN(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t, char *, unsigned));
  FN(nvmlReturn_t, nvmlDeviceGetIndex, (nvmlDevice_t, unsigned *));
  FN(nvmlReturn_t, nvmlDeviceGetPciInfo_v3, (nvmlDevice_t, nvmlPciInfo_t *));
  FN(nvmlReturn_t, nvmlDeviceGetCudaComputeCapability, (nvmlDevice_t, int *, int *));
  FN(nvmlReturn_t, nvmlDeviceGetMemoryInfo, (nvmlDevice_t, nvmlMemory_t *));
  FN(nvmlReturn_t, nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t, nvmlMemory_v2_t *));
  FN(nvmlReturn_t, nvmlDeviceGetComputeRunningProcesses, (nvmlDevice_t, unsigned *, void *));
  FN(nvmlReturn_t, nvmlDeviceGetMigMode, (nvmlDevice_t, unsigned *, unsigned *));
  FN(nvmlReturn_t, nvmlDeviceGetTemperature, (nvmlDevice_t, unsigned, unsigned *));
  FN(nvmlReturn_t, nvmlSystemGetCudaDriverVersion_v2, (int *));

  nvmlReturn_t r = nvmlInit_v2();
  printf("init %d %s\n", r, nvmlErrorString(r));
  if (r) return 1;
  unsigned count = 0;
  r = nvmlDeviceGetCount_v2(&count);
  printf("count %d %u\n", r, count);
  int version = 0;
  r = nvmlSystemGetCudaDriverVersion_v2(&version);
  printf("cuda_version %d %d\n", r, version);
  nvmlDevice_t dev = 0, other = 0;
  r = nvmlDeviceGetHandleByIndex_v2(0, &dev);
  printf("handle %d\n", r);
  printf("handle1 %d\n", nvmlDeviceGetHandleByIndex_v2(1, &other));
  char name[96] = "", uuid[96] = "";
  r = nvmlDeviceGetName(dev, name, sizeof name);
  printf("name %d %s\n", r, name);
  printf("name_short %d\n", nvmlDeviceGetName(dev, name, 4));
  r = nvmlDeviceGetUUID(dev, uuid, sizeof uuid);
  printf("uuid %d %s\n", r, uuid);
  other = 0;
  r = nvmlDeviceGetHandleByUUID(uuid, &other);
  printf("by_uuid %d %d\n", r, other == dev);
  printf("by_uuid_other %d\n", nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &other));
  unsigned index = 9;
  r = nvmlDeviceGetIndex(dev, &index);
  printf("index %d %u\n", r, index);
  nvmlPciInfo_t pci;
  memset(&pci, 0x55, sizeof pci);
  r = nvmlDeviceGetPciInfo_v3(dev, &pci);
  printf("pci %d %s %s %u %u %u\n", r, pci.busId, pci.busIdLegacy, pci.domain, pci.bus, pci.device);
  /* The bus id as PyTorch writes it from cudaDeviceProp (NVML_DEVICE_PCI_BUS_ID_FMT). */
  char bus[32];
  snprintf(bus, sizeof bus, "%08X:%02X:%02X.0", pci.domain, pci.bus, pci.device);
  other = 0;
  r = nvmlDeviceGetHandleByPciBusId_v2(bus, &other);
  printf("by_bus %d %d\n", r, other == dev);
  int major = -1, minor = -1;
  r = nvmlDeviceGetCudaComputeCapability(dev, &major, &minor);
  printf("cc %d %d %d\n", r, major, minor);
  nvmlMemory_t mem = {0, 0, 0};
  r = nvmlDeviceGetMemoryInfo(dev, &mem);
  printf("memory %d %llu %llu %llu\n", r, mem.total, mem.free, mem.used);
  nvmlMemory_v2_t mem2;
  memset(&mem2, 0, sizeof mem2);
  mem2.version = (unsigned)sizeof mem2 | 2u << 24;
  r = nvmlDeviceGetMemoryInfo_v2(dev, &mem2);
  printf("memory_v2 %d %llu %llu %llu %llu\n", r, mem2.total, mem2.reserved, mem2.free, mem2.used);
  unsigned procs = 8;
  char infos[8 * 24];
  r = nvmlDeviceGetComputeRunningProcesses(dev, &procs, infos);
  printf("processes %d %u\n", r, procs);
  unsigned current = 9, pending = 9;
  r = nvmlDeviceGetMigMode(dev, &current, &pending);
  printf("mig %d %u %u\n", r, current, pending);
  unsigned temp = 0;
  printf("temperature %d\n", nvmlDeviceGetTemperature(dev, 0, &temp));
  printf("shutdown %d\n", nvmlShutdown());
  r = nvmlDeviceGetCount_v2(&count);
  printf("after_shutdown %d %s\n", r, nvmlErrorString(r));
  printf("shutdown_again %d\n", nvmlShutdown());
  return 0;
}
