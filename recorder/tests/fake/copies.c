/* 2D/3D copies with host memory on either side and a graph kernel node, through the stand-in
 * libcuda (as cudart reaches it): the recorder must store the host rows a copy reads, packed
 * (no pitch padding), hash the rows a copy writes, and lay out a kernel node's parameters. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

typedef struct { size_t x, y; int type; const void *host; uint64_t dev; void *array; size_t pitch; } side2d;
typedef struct { side2d src, dst; size_t width, height; } copy2d;
typedef struct { size_t x, y, z, lod; int type; const void *host; uint64_t dev; void *array, *reserved;
                 size_t pitch, height; } side3d;
typedef struct { side3d src, dst; size_t width, height, depth; } copy3d;
typedef struct { void *func; unsigned grid[3], block[3], smem; void **params, **extra; void *kern, *ctx; } knode;

int main(void) {
  open_driver();
  int (*init)(unsigned) = get("cuInit");
  int (*alloc)(uint64_t *, size_t) = get("cuMemAlloc");
  int (*load)(void **, const void *) = get("cuModuleLoadData");
  int (*getf)(void **, void *, const char *) = get("cuModuleGetFunction");
  int (*copy2)(const copy2d *) = get("cuMemcpy2D");
  int (*copy3)(const copy3d *) = get("cuMemcpy3D");
  int (*graph)(void **, unsigned) = get("cuGraphCreate");
  int (*add_node)(void **, void *, void *const *, size_t, const knode *) = get("cuGraphAddKernelNode");
  static const char ptx[] = ".version 9.0\n.target sm_90\n.address_size 64\n";
  uint64_t d; void *mod, *fn;
  if (init(0) || alloc(&d, 1024) || load(&mod, ptx) || getf(&fn, mod, "scale")) return 4;

  /* Host image: 8 rows of pitch 24; byte = 16*row + column, padding 0xee. The copy reads
   * rows 1..4, columns 4..19, into device rows of pitch 16. */
  unsigned char img[8 * 24];
  for (int r = 0; r < 8; r++)
    for (int c = 0; c < 24; c++) img[r * 24 + c] = c >= 4 && c < 20 ? (unsigned char)(16 * r + c - 4) : 0xee;
  copy2d up = {0};
  up.src.type = 1; up.src.host = img; up.src.x = 4; up.src.y = 1; up.src.pitch = 24;
  up.dst.type = 2; up.dst.dev = d; up.dst.pitch = 16;
  up.width = 16; up.height = 4;
  if (copy2(&up)) return 5;
  /* Back into host rows of pitch 32 (padding untouched: 0x55). */
  unsigned char back[4 * 32];
  memset(back, 0x55, sizeof back);
  copy2d down = {0};
  down.src.type = 2; down.src.dev = d; down.src.pitch = 16;
  down.dst.type = 1; down.dst.host = back; down.dst.pitch = 32;
  down.width = 16; down.height = 4;
  if (copy2(&down)) return 6;
  /* 3D: 2 slices of 3 rows of 8 bytes from host slices of 5 rows of pitch 10, from slice 1. */
  unsigned char vol[3 * 5 * 10];
  for (int i = 0; i < (int)sizeof vol; i++) vol[i] = (unsigned char)(i * 7);
  copy3d v = {0};
  v.src.type = 1; v.src.host = vol; v.src.pitch = 10; v.src.height = 5; v.src.z = 1; v.src.x = 2;
  v.dst.type = 2; v.dst.dev = d + 512; v.dst.pitch = 8; v.dst.height = 3;
  v.width = 8; v.height = 3; v.depth = 2;
  if (copy3(&v)) return 7;

  void *g, *node;
  float k = 1.5f; int n = 64; void *params[] = {&d, &k, &n};
  knode kp = {0};
  kp.func = fn; kp.grid[0] = kp.grid[1] = kp.grid[2] = 1; kp.block[0] = 64; kp.block[1] = kp.block[2] = 1;
  kp.params = params;
  if (graph(&g, 0) || add_node(&node, g, 0, 0, &kp)) return 8;
  unsigned sum = 0;
  for (int i = 0; i < (int)sizeof back; i++) sum = sum * 31 + back[i];
  printf("sum=%u\n", sum);
  return 0;
}
