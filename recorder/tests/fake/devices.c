/* A session of two devices (cli/tests/run_remote_devices.rs runs it with
 * `gpuless run --remote ... --gpus 2` against a server on the stand-in driver that owns two
 * "GPUs"): the device count and ordinals, each device's name and UUID, peer access between them,
 * each device's primary context and the current device, allocations in each device's slice of
 * the client's arena (0x640000000000, 1 TiB split in two), an upload to device 1, a peer copy to
 * device 0 and a download round-tripping the bytes, and enabling and disabling peer access; then
 * NVML (`libnvidia-ml.so.1`): the same two devices, a handle each, found by index, UUID and PCI
 * bus id, peer reads between them.
 * With DEVICES_APART=1 the two devices are on different servers (cli/tests/run_remote_servers.rs,
 * `--remote A,B`): neither reaches the other (no peer access, NVML's P2P status not OK), the
 * peer copy goes through the client, and streams of each device are ordered by an event of the
 * other (`apart_streams`). Every function is looked up by its exported name in the
 * libcuda.so.1 and libnvidia-ml.so.1 the program loads (the client library, under `gpuless run`). Prints `ok NAME` or `FAIL NAME got X` per check,
 * `device K: NAME uuid[15]=B` per device, and `devices: done` at the end; exits 1 when a check
 * failed, 2 when a symbol is missing or cuInit fails. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

/* The client's arena (1 TiB) and device 1's slice of it: the second of DEVICES_SLICES (2 unless
 * set: a session across several servers cuts one slice per device each could give). */
#define ARENA 0x640000000000ull
static unsigned long long slice_bytes = 1ull << 39;
#define SLICE1 (ARENA + slice_bytes)
#define ARENA_END (ARENA + 2 * slice_bytes)

static void *lib;
static int failed;
/* The devices are on different servers (DEVICES_APART=1). */
static int apart;

static void *sym_in(void *from, const char *name) {
  void *p = dlsym(from, name);
  if (!p) {
    fprintf(stderr, "FAILED dlsym %s\n", name);
    exit(2);
  }
  return p;
}

static void *sym(const char *name) { return sym_in(lib, name); }

/* One check: `ok NAME` when `good`, else `FAIL NAME got GOT`. */
static void check(const char *name, int good, long long got) {
  if (good) printf("ok %s\n", name);
  else {
    printf("FAIL %s got %lld\n", name, got);
    failed = 1;
  }
}

typedef void *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

/* NVML's view of the session: two devices, device 1 named as CUDA names it (`cuda_name`);
 * `set_current` makes `ctx0` or `ctx1` current, as cuCtxSetCurrent. */
static void nvml_checks(const char *cuda_name, CUresult (*set_current)(CUcontext), CUcontext ctx0, CUcontext ctx1) {
  void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  check("nvml_dlopen", nv != NULL, 0);
  if (!nv) return;
  int (*init)(void) = sym_in(nv, "nvmlInit_v2");
  int (*shutdown)(void) = sym_in(nv, "nvmlShutdown");
  int (*count)(unsigned *) = sym_in(nv, "nvmlDeviceGetCount_v2");
  int (*by_index)(unsigned, nvmlDevice_t *) = sym_in(nv, "nvmlDeviceGetHandleByIndex_v2");
  int (*by_uuid)(const char *, nvmlDevice_t *) = sym_in(nv, "nvmlDeviceGetHandleByUUID");
  int (*by_bus)(const char *, nvmlDevice_t *) = sym_in(nv, "nvmlDeviceGetHandleByPciBusId_v2");
  int (*index)(nvmlDevice_t, unsigned *) = sym_in(nv, "nvmlDeviceGetIndex");
  int (*name)(nvmlDevice_t, char *, unsigned) = sym_in(nv, "nvmlDeviceGetName");
  int (*uuid)(nvmlDevice_t, char *, unsigned) = sym_in(nv, "nvmlDeviceGetUUID");
  int (*pci)(nvmlDevice_t, nvmlPciInfo_t *) = sym_in(nv, "nvmlDeviceGetPciInfo_v3");
  int (*memory)(nvmlDevice_t, nvmlMemory_t *) = sym_in(nv, "nvmlDeviceGetMemoryInfo");
  int (*p2p)(nvmlDevice_t, nvmlDevice_t, int, int *) = sym_in(nv, "nvmlDeviceGetP2PStatus");

  int r = init();
  check("nvml_init", r == 0, r);
  unsigned n = 0, at = 9;
  r = count(&n);
  check("nvml_count", r == 0 && n == 2, r ? r : (int)n);
  nvmlDevice_t h0 = NULL, h1 = NULL, h2 = NULL, found = NULL;
  r = by_index(0, &h0);
  if (!r) r = by_index(1, &h1);
  check("nvml_handles", r == 0 && h0 && h1 && h0 != h1, r);
  r = by_index(2, &h2);
  check("nvml_handle_2", r == 2, r); /* NVML_ERROR_INVALID_ARGUMENT */
  r = index(h1, &at);
  check("nvml_index_1", r == 0 && at == 1, r ? r : (int)at);
  char got[96] = "";
  r = name(h1, got, sizeof got);
  check("nvml_name_1", r == 0 && !strcmp(got, cuda_name), r);
  r = uuid(h1, got, sizeof got);
  if (!r) r = by_uuid(got, &found);
  check("nvml_by_uuid_1", r == 0 && found == h1, r);
  nvmlPciInfo_t bus;
  memset(&bus, 0, sizeof bus);
  found = NULL;
  r = pci(h1, &bus);
  if (!r) r = by_bus(bus.busId, &found);
  check("nvml_by_bus_1", r == 0 && found == h1, r);
  int st = -1;
  r = p2p(h0, h1, 0, &st); /* NVML_P2P_CAPS_INDEX_READ */
  check("nvml_p2p_read_0_1", r == 0 && (apart ? st != 0 : st == 0), r ? r : st);
  /* Free memory is the server's answer for the device: device 0's (the stand-in's cuMemAlloc
   * heap holds something there), then device 1's (nothing: all free). */
  nvmlMemory_t mem = {0, 0, 0};
  r = memory(h0, &mem);
  check("nvml_memory_0", r == 0 && mem.total > 0 && mem.free < mem.total, r ? r : (int)(mem.total - mem.free));
  r = set_current(ctx1);
  memset(&mem, 0, sizeof mem);
  if (!r) r = memory(h1, &mem);
  /* (Another server's stand-in keeps its own heap: device 1's there is its own business.) */
  check("nvml_memory_1", r == 0 && mem.total > 0 && (apart || mem.free == mem.total), r ? r : (int)(mem.total - mem.free));
  /* Another device's: asked of its server with it current there, as NVML answers any. */
  memset(&mem, 0, sizeof mem);
  r = memory(h0, &mem);
  check("nvml_memory_other", r == 0 && mem.total > 0 && mem.free < mem.total, r ? r : (int)(mem.total - mem.free));
  set_current(ctx0);
  r = shutdown();
  check("nvml_shutdown", r == 0, r);
}

typedef void *CUstream;
typedef void *CUevent;

/* Devices on different servers: an upload on device 1's stream, an event there that device 0's
 * stream waits for, an asynchronous copy to device 0 on that stream, the bytes back; an event
 * of device 0 recorded on device 1's stream is refused (nothing runs it). */
static void apart_streams(CUcontext ctx0, CUcontext ctx1, CUdeviceptr buf0, CUdeviceptr buf1) {
  CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
  CUresult (*stream_create)(CUstream *, unsigned) = sym("cuStreamCreate");
  CUresult (*event_create)(CUevent *, unsigned) = sym("cuEventCreate");
  CUresult (*event_record)(CUevent, CUstream) = sym("cuEventRecord");
  CUresult (*wait_event)(CUstream, CUevent, unsigned) = sym("cuStreamWaitEvent");
  CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream) = sym("cuMemcpyHtoDAsync_v2");
  CUresult (*copy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = sym("cuMemcpyAsync");
  CUresult (*stream_sync)(CUstream) = sym("cuStreamSynchronize");
  CUresult (*dtoh)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2");
  enum { N = 4096 };
  static unsigned char in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (unsigned char)(i * 13 + 5);
  CUstream s0 = NULL, s1 = NULL;
  CUevent e0 = NULL, e1 = NULL;
  CUresult r = set_current(ctx1);
  if (!r) r = stream_create(&s1, 1);
  if (!r) r = event_create(&e1, 0);
  if (!r) r = htod_async(buf1, in, N, s1);
  if (!r) r = event_record(e1, s1);
  check("apart_upload_1", r == 0, r);
  r = set_current(ctx0);
  if (!r) r = stream_create(&s0, 1);
  if (!r) r = event_create(&e0, 0);
  check("apart_stream_0", r == 0, r);
  r = wait_event(s0, e1, 0);
  check("apart_wait_event", r == 0, r);
  r = copy_async(buf0, buf1, N, s0);
  check("apart_copy_async", r == 0, r);
  r = stream_sync(s0);
  if (!r) r = dtoh(out, buf0, N);
  int first = -1;
  for (int i = 0; i < N && first < 0; i++)
    if (in[i] != out[i]) first = i;
  check("apart_round_trip", r == 0 && first < 0, r ? r : first);
  r = event_record(e0, s1);
  check("apart_record_refused", r == 801, r); /* CUDA_ERROR_NOT_SUPPORTED */
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  apart = getenv("DEVICES_APART") && atoi(getenv("DEVICES_APART"));
  if (getenv("DEVICES_SLICES") && atoi(getenv("DEVICES_SLICES")) > 0)
    slice_bytes = (1ull << 40) / (unsigned long long)atoi(getenv("DEVICES_SLICES"));
  lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "FAILED dlopen %s\n", dlerror());
    return 2;
  }
  CUresult (*init)(unsigned) = sym("cuInit");
  CUresult (*get_count)(int *) = sym("cuDeviceGetCount");
  CUresult (*device_get)(int *, int) = sym("cuDeviceGet");
  CUresult (*get_name)(char *, int, int) = sym("cuDeviceGetName");
  CUresult (*get_uuid)(unsigned char *, int) = sym("cuDeviceGetUuid_v2");
  CUresult (*can_access)(int *, int, int) = sym("cuDeviceCanAccessPeer");
  CUresult (*p2p_attribute)(int *, int, int, int) = sym("cuDeviceGetP2PAttribute");
  CUresult (*retain)(CUcontext *, int) = sym("cuDevicePrimaryCtxRetain");
  CUresult (*set_current)(CUcontext) = sym("cuCtxSetCurrent");
  CUresult (*get_device)(int *) = sym("cuCtxGetDevice");
  CUresult (*mem_alloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
  CUresult (*mem_free)(CUdeviceptr) = sym("cuMemFree_v2");
  CUresult (*htod)(CUdeviceptr, const void *, size_t) = sym("cuMemcpyHtoD_v2");
  CUresult (*dtoh)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2");
  CUresult (*peer_copy)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t) = sym("cuMemcpyPeer");
  CUresult (*enable_peer)(CUcontext, unsigned) = sym("cuCtxEnablePeerAccess");
  CUresult (*disable_peer)(CUcontext) = sym("cuCtxDisablePeerAccess");
  CUresult (*ctx_sync)(void) = sym("cuCtxSynchronize");

  CUresult r = init(0);
  if (r) {
    printf("FAIL cuInit got %d\n", r);
    return 2;
  }
  int n = -1, d = -1;
  r = get_count(&n);
  check("count", r == 0 && n == 2, r ? r : n);
  r = device_get(&d, 1);
  check("device_get_1", r == 0 && d == 1, r ? r : d);
  r = device_get(&d, 2);
  check("device_get_2", r == 101, r);

  char name[2][64] = {"", ""};
  unsigned char uuid[2][16];
  memset(uuid, 0, sizeof uuid);
  for (int k = 0; k < 2; k++) {
    r = get_name(name[k], sizeof name[k], k);
    if (!r) r = get_uuid(uuid[k], k);
    check(k ? "describe_1" : "describe_0", r == 0, r);
    printf("device %d: %s uuid[15]=%d\n", k, name[k], uuid[k][15]);
  }
  check("names_differ", strcmp(name[0], name[1]) != 0, 0);
  check("uuids_differ", memcmp(uuid[0], uuid[1], 16) != 0, 0);

  int can = -1;
  r = can_access(&can, 0, 1);
  check("can_access_0_1", r == 0 && can == !apart, r ? r : can);
  can = -1;
  r = can_access(&can, 0, 0);
  check("can_access_0_0", r == 0 && can == 0, r ? r : can);
  int v = -1;
  r = p2p_attribute(&v, 2, 0, 1); /* CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED */
  check("p2p_access_supported_0_1", r == 0 && v == !apart, r ? r : v);
  r = p2p_attribute(&v, 2, 0, 0);
  check("p2p_attribute_0_0", r == 101, r);

  CUcontext ctx0 = NULL, ctx1 = NULL;
  r = retain(&ctx0, 0);
  if (!r) r = retain(&ctx1, 1);
  check("retain", r == 0 && ctx0 && ctx1, r);
  check("contexts_differ", ctx0 != ctx1, 0);

  enum { N = 4096 };
  CUdeviceptr buf0 = 0, buf1 = 0;
  r = set_current(ctx1);
  if (!r) r = get_device(&d);
  check("ctx_device_1", r == 0 && d == 1, r ? r : d);
  r = mem_alloc(&buf1, N);
  check("alloc_slice_1", r == 0 && buf1 >= SLICE1 && buf1 < ARENA_END, r ? r : (long long)buf1);
  static unsigned char in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (unsigned char)(i * 7 + 3);
  r = htod(buf1, in, N);
  check("upload_1", r == 0, r);

  r = set_current(ctx0);
  if (!r) r = get_device(&d);
  check("ctx_device_0", r == 0 && d == 0, r ? r : d);
  r = mem_alloc(&buf0, N);
  check("alloc_slice_0", r == 0 && buf0 >= ARENA && buf0 < SLICE1, r ? r : (long long)buf0);
  r = peer_copy(buf0, ctx0, buf1, ctx1, N);
  check("copy_peer", r == 0, r);
  r = dtoh(out, buf0, N);
  check("download_0", r == 0, r);
  int first = -1;
  for (int i = 0; i < N && first < 0; i++)
    if (in[i] != out[i]) first = i;
  check("round_trip", first < 0, first);

  r = enable_peer(ctx1, 0);
  check("enable_peer", r == (apart ? 217 : 0), r); /* CUDA_ERROR_PEER_ACCESS_UNSUPPORTED */
  r = enable_peer(ctx1, 0);
  check("enable_peer_again", r == (apart ? 217 : 704), r); /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */
  r = disable_peer(ctx1);
  check("disable_peer", r == (apart ? 705 : 0), r);
  r = disable_peer(ctx1);
  check("disable_peer_again", r == 705, r); /* CUDA_ERROR_PEER_ACCESS_NOT_ENABLED */

  if (apart) apart_streams(ctx0, ctx1, buf0, buf1);
  r = mem_free(buf0);
  if (!r) r = mem_free(buf1);
  check("free", r == 0, r);
  r = ctx_sync();
  check("synchronize", r == 0, r);
  nvml_checks(name[1], set_current, ctx0, ctx1);
  printf("devices: done\n");
  return failed;
}
