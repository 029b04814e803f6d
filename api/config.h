/* config.h — the library's side of a caller's mok_config (config.c): every entry point that takes
 * one completes it to this library's layout first, then validates the whole. Host C. */
#ifndef MOK_API_CONFIG_H
#define MOK_API_CONFIG_H

#include "mok.h"

/* *out = *in completed to this library's size (fields the caller's header lacks get their
 * defaults), after checking its size, magic and version (MOK_ERR_INVALID_ARGUMENT). */
mok_status mok_config_complete(const mok_config *in, mok_config *out);

/* mok_validate on a completed config. */
mok_status mok_validate_complete(const mok_shape *shape, const mok_config *config, int ep);

/* The device schedule build's chunking of one rank's tokens: *cpr chunks of *ct tokens, small
 * enough for shared memory, with the scan's work (chunks * experts) balanced against each chunk's
 * in-order fill. MOK_ERR_INVALID_SHAPE beyond the build's limits (MOK_SCHED_MAX_*). */
mok_status mok_sched_chunk_geometry(const mok_shape *shape, int ep, int *cpr, int64_t *ct);

#endif /* MOK_API_CONFIG_H */
