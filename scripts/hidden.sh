# shellcheck shell=bash
# Sourced by the GPU suite's client-mode scripts (gpu-suite-client.sh, gpu-suite-compat.sh,
# gpu-suite-samples.sh): `hidden CMD...` runs CMD in a mount namespace where the NVIDIA driver
# cannot be reached — every libcuda / libnvidia-ml the loader knows (GPULESS_HIDE, exported so
# that child scripts hide the same files) covered by /dev/null, and the device nodes too.
if [ -z "${GPULESS_HIDE:-}" ]; then
  GPULESS_HIDE=$(ldconfig -p | awk '/libcuda\.so|libnvidia-ml\.so/ {print $NF}' | xargs -r readlink -f | sort -u | tr '\n' ' ')
  export GPULESS_HIDE
fi

hidden() { # CMD...
  # shellcheck disable=SC2016 # the inner script expands its own "$f" and "$@"
  unshare -m bash -c '
    for f in '"$GPULESS_HIDE"' /dev/nvidia*; do
      if [ -d "$f" ]; then mount -t tmpfs none "$f"; elif [ -e "$f" ]; then mount --bind /dev/null "$f"; fi
    done
    exec "$@"' hidden "$@"
}
