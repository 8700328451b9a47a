/* A stand-in for libnvidia-ml.so.1 (cli/tests/run_remote_nvml.rs): outside client mode the
 * recorder's NVML exports pass through to the real library, this one. It has three functions;
 * every other NVML function is missing (NVML_ERROR_FUNCTION_NOT_FOUND through the recorder). */
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 7; return 0; }
int nvmlShutdown(void) { return 0; }
