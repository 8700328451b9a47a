# Sourced by testdata/cuda/suite/build.sh and scripts/preempt-probe.sh: how CUDA test programs
# link against the toolkit NVCC belongs to.
#
#   cuda_link NVCC OUT_DIR    sets `cuda` (the toolkit's root) and `link` (nvcc flags)
#
# Library directories: the toolkit's lib64 (or lib, in the PyPI layout), and the driver stub for
# linking -lcuda on machines whose libcuda.so is elsewhere or absent. The PyPI layout ships
# libcudart.so.13 without the libcudart.so link name: one is made in OUT_DIR/.link.
cuda_link() {
  local nvcc=$1 out=$2 d
  cuda=$(cd "$(dirname "$(readlink -f "$(command -v "$nvcc")")")/.." && pwd)
  link=()
  for d in "$cuda/lib64" "$cuda/lib" "$cuda/targets/x86_64-linux/lib"; do
    [[ -d $d ]] && link+=(-L"$d" -Xlinker -rpath -Xlinker "$d")
  done
  for d in "$cuda/lib64/stubs" "$cuda/targets/x86_64-linux/lib/stubs"; do
    [[ -f $d/libcuda.so ]] && { link+=(-L"$d"); break; }
  done
  if ! compgen -G "$cuda/lib*/libcudart.so" >/dev/null && [[ -f $cuda/lib/libcudart.so.13 ]]; then
    mkdir -p "$out/.link" && ln -sf "$cuda/lib/libcudart.so.13" "$out/.link/libcudart.so"
    link+=(-L"$out/.link")
  fi
}
