/* cli.h — what the `mok` command's parts share: parsed options and the two ways to run the layer
 * (the CPU reference path and the GPU path). */
#ifndef MOK_CLI_H
#define MOK_CLI_H

#include <stdint.h>
#include "mok.h"

typedef enum { CLI_ROUTING_UNIFORM = 0, CLI_ROUTING_ZIPF = 1 } cli_routing;

typedef struct {
  mok_shape shape;     /* per-rank shape (cli_resolve_shape)               */
  const char *shape_name; /* --shape, or NULL: the path's default            */
  long long size[6];   /* --tokens --hidden --experts --intermediate --topk --shared (-1: unset) */
  int ranks;           /* ranks: simulated on the CPU, processes on GPUs   */
  cli_routing routing;
  uint64_t seed;
  int iters;           /* timed iterations (GPU path)                      */
  int warmup;          /* warm-up iterations (GPU path)                    */
  int samples;         /* sampled reference checks: gradient entries per tensor on the CPU,
                          tokens per rank on GPUs; 0: no check; -1: the path's default */
  const char *gpu_flag; /* the first GPU-only flag given (NULL: none)        */
  int use_cpu;         /* --cpu: force the reference path                  */
  int breakdown;       /* --breakdown: time each stage alone (GPU path)    */
  int build_in_forward; /* --build-in-forward: mok_build_and_forward (one call, timed whole) */
  int64_t workspace_tokens; /* --workspace-tokens: the workspace's T, above --tokens (GPU; the
                               steps then run --tokens of it, mok_schedule_set_tokens; 0: T) */
  int tune;            /* `mok tune`: time the candidate plans, store the fastest             */
  int tune_save;       /* --save 0|1: store the choice in the plan cache (default 1)          */
  int iters_set, warmup_set; /* --iters / --warmup given (tune has its own defaults)        */
  mok_config config;
} cli_options;

/* Sets o->shape: the named shape, else the path's default (on GPUs deepseek-v3, on the CPU
 * small), with the size flags applied on top. Prints the error and returns nonzero on a bad
 * name or an inconsistent shape. */
int cli_resolve_shape(cli_options *o, int on_gpu);

/* The CPU reference path: runs forward and backward of all simulated ranks, prints the summary.
 * Returns the process exit code. */
int cli_run_cpu(const cli_options *o);

/* The GPU path on every visible GPU: one process per GPU, timing and a sampled correctness check.
 * Returns the process exit code. */
int cli_run_gpu(const cli_options *o);

/* Runs this program once per rank (MOK_RANK, MOK_NRANKS, MOK_RUN_DIR and MOK_RUN_SEED set,
 * NVLink multicast off) with a fresh folder dir (size bytes) for their files, and waits for all.
 * Returns 0, 1 when a rank failed, -1 when the folder or the command line cannot be had. */
int cli_run_ranks(const cli_options *o, int n, char *dir, size_t size);

/* The median of v[0..n) (sorts v). */
double cli_median(double *v, int n);

/* `mok tune`, one rank (cli/tune_gpu.c): every candidate plan on its own workspace with these
 * inputs, its step times into the rank's result file in dir. Returns the exit code. */
int cli_tune_worker(const cli_options *o, mok_group *g, int rank, int n, const char *dir,
                    const mok_weights *wt, const mok_grads *gr, const void *x, const void *dy,
                    const float *rw, const int32_t *topk, void *y);

/* `mok tune`, the launcher: the ranks' result files in dir combined (the slowest rank per step,
 * the median over steps), the table printed, the fastest plan chosen and stored. */
int cli_tune_report(const cli_options *o, int n, const char *dir, int ranks_failed);

#endif
