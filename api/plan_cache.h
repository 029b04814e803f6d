/* plan_cache.h — the tuned plan cache's parts that need no device (api/plan_cache.c; the
 * public half is in include/mok.h, "tuning"). */
#ifndef MOK_API_PLAN_CACHE_H
#define MOK_API_PLAN_CACHE_H

#include "mok.h"

/* mok_plan_cache_key for a device of this name (the public call reads the current device's). */
mok_status mok_plan_cache_key_on(const mok_shape *s, const mok_config *c, int ep,
                                 const char *device, char *buf, size_t size);

#endif /* MOK_API_PLAN_CACHE_H */
