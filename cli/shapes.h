/* shapes.h — the model shapes mok is measured on (docs/DESIGN.md, "How it is measured"), by name. */
#ifndef MOK_SHAPES_H
#define MOK_SHAPES_H

#include "mok.h"

typedef struct {
  const char *name;
  mok_shape shape; /* tokens per rank set to the preset's default */
} mok_shape_preset;

/* NULL-terminated table; the first entry is the CPU default "small". */
extern const mok_shape_preset mok_shape_presets[];

/* The preset called name, or NULL. */
const mok_shape_preset *mok_shape_find(const char *name);

#endif
