/* shapes.c — the named shapes: a small one for the CPU path and the published model shapes. */
#include <string.h>
#include "cli/shapes.h"

/* tokens, hidden, experts, intermediate, top-k, shared intermediate */
const mok_shape_preset mok_shape_presets[] = {
    {"small", {256, 256, 8, 128, 2, 128}},
    {"deepseek-v3", {4096, 7168, 256, 2048, 8, 2048}},
    {"kimi-k2", {4096, 7168, 384, 2048, 8, 2048}},
    {"qwen3-235b", {4096, 4096, 128, 1536, 8, 0}},
    {"qwen3-30b", {4096, 2048, 128, 768, 8, 0}},
    {"glm-4.5", {4096, 5120, 160, 1536, 8, 1536}},
    {"deepseek-v4-pro", {4096, 7168, 384, 3072, 6, 0}},
    {"olmoe", {4096, 2048, 64, 1024, 8, 0}}, /* OLMoE-like: few, fine-grained experts */
    {NULL, {0, 0, 0, 0, 0, 0}},
};

const mok_shape_preset *mok_shape_find(const char *name) {
  for (const mok_shape_preset *p = mok_shape_presets; p->name; ++p)
    if (strcmp(p->name, name) == 0) return p;
  return NULL;
}
