/* mok_main.c — the `mok` command: argument parsing, help, and the choice between the GPU path (all
 * visible GPUs) and the CPU reference path (no GPU, or --cpu).
 * Exit codes: 0 success, 1 the run failed (an error status or a failed check), 2 bad usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>
#include "cli/cli.h"
#include "cli/shapes.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: mok run [options]     run the MoE layer forward and backward\n"
          "       mok tune [options]    GPU: time the plans the shape can run, store the fastest\n"
          "                             in the plan cache (later workspaces of this device, shape,\n"
          "                             group size and config run it; --plan pins fields)\n"
          "       mok shapes            list the named shapes\n"
          "       mok version | --help\n"
          "\n"
          "With GPUs, `mok run` runs the GPU path on every visible GPU (one process each) and prints\n"
          "TFLOP/s per GPU and a sampled check against the CPU reference. With no GPU (or --cpu) it\n"
          "runs the CPU reference of the whole layer over simulated ranks and prints the output\n"
          "checksum and the worst gradient error against finite differences.\n"
          "\n"
          "options:\n"
          "  --cpu                  use the CPU reference path even when GPUs are visible\n"
          "  --breakdown            GPU: also time each stage alone (schedule, dispatch, GEMMs, combine)\n"
          "  --shape NAME           a named shape (mok shapes); GPU default deepseek-v3, CPU small\n"
          "                         (the size flags below change that shape's sizes)\n"
          "  --tokens T             tokens per rank     --hidden H        model width\n"
          "  --experts E            routed experts      --intermediate I  expert width\n"
          "  --topk K               experts per token   --shared IS       shared expert width (0: none)\n"
          "  --ranks N              simulated ranks on the CPU path (default 2)\n"
          "  --routing uniform|zipf token routing (default uniform)\n"
          "  --clamp L              SwiGLU limit L > 0\n"
          "  --dtype bf16|fp8       GPU: routed-expert precision (fp8: block-128 E4M3)\n"
          "  --fp8-wgrad 0|1|2|3    GPU, fp8: weight gradients in FP8: the gradients with 1x128\n"
          "                         scales along the tokens, the activations with one scale per\n"
          "                         expert and channel (3, the default); both 1x128 (1); both per\n"
          "                         expert, no promotion (2); or in bf16 (0)\n"
          "  --fp8-fused-drw 0|1    GPU, fp8: d_router_weights inside the SwiGLU backward (1, the\n"
          "                         default) or from the forward's kept outputs\n"
          "  --fp8-shared 0|1       GPU, fp8: the shared expert's GEMMs in FP8 too (1) or in bf16\n"
          "                         (0, the default)\n"
          "  --path auto|fused|grouped|oracle\n"
          "                         GPU: the execution path, the same as --plan path=P (auto:\n"
          "                         fused in BF16 across GPUs, else grouped; oracle: the mma.sync\n"
          "                         GEMMs)\n"
          "  --plan KEY=VALUE,...   GPU: pin fields of the plan (path, schedule, tile_m, minibatch,\n"
          "                         fwd_comm, bwd_comm, shared_fwd, shared_bwd, fp8_mlp,\n"
          "                         routed_cluster, shared_cluster, routed_warpgroups,\n"
          "                         shared_warpgroups, wgrad_cluster_down, wgrad_cluster_gate_up;\n"
          "                         include/mok.h, mok_plan); the others mok chooses. The plan\n"
          "                         that ran is printed\n"
          "  --seed S               random seed (default 1: two runs print the same checksum)\n"
          "  --iters N              timed iterations on the GPU (default 20)\n"
          "  --warmup N             warm-up iterations on the GPU (default 3)\n"
          "  --samples N            sampled checks against the reference, on either path: gradient\n"
          "                         entries per tensor by finite differences on the CPU (default\n"
          "                         16), tokens per rank against the host fp64 layer on GPUs\n"
          "                         (default 4, FP8 2); 0: no check\n"
          "  --capacity ROWS        GPU: the schedule's rows per rank (0: the worst case)\n"
          "  --ring-mb MB           GPU: token ring of MB MiB per schedule (0: none, the default)\n"
          "  --macrobatch N         GPU: minibatches per macrobatch (the ring's unit)\n"
          "  --build-in-forward 0|1 GPU: the schedule built in the forward's call\n"
          "                         (mok_build_and_forward; its time is then build + forward's)\n"
          "  --workspace-tokens N   GPU: a workspace of N tokens per rank, the steps of --tokens\n"
          "                         (N >= --tokens; mok_schedule_set_tokens; not with --breakdown)\n"
          "  --plan-cache PATH      GPU: the tuned plan cache (default $XDG_CACHE_HOME/mok/plans.tsv,\n"
          "                         else ~/.cache/mok/plans.tsv; \"\": none); `mok run` runs the\n"
          "                         plan stored there for its request unless --plan pins a field\n"
          "  --save 0|1             tune: store the chosen plan (default 1)\n"
          "mok tune takes run's options (the shape, --dtype, --routing, the knobs); its steps are\n"
          "built in the forward's call, 2 warm-up and 5 timed per plan unless --warmup / --iters.\n");
}

/* Parses a whole non-negative integer in [lo, hi]; returns 0 on success. */
static int parse_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || *end || end == s || v < lo || v > hi) {
    fprintf(stderr, "mok: %s wants an integer in [%lld, %lld], got '%s'\n", flag, lo, hi, s);
    return 1;
  }
  *out = v;
  return 0;
}

static int parse_run(int argc, char **argv, cli_options *o) {
  memset(o, 0, sizeof *o);
  mok_config_init(&o->config);
  o->ranks = 2;
  o->iters = 20;
  o->warmup = 3;
  o->samples = -1;
  o->seed = 1;
  o->tune_save = 1;
  for (int f = 0; f < 6; ++f) o->size[f] = -1;
  for (int i = 0; i < argc; ++i) {
    const char *a = argv[i];
    if (strcmp(a, "--cpu") == 0 || strcmp(a, "--breakdown") == 0) {
      *(a[2] == 'c' ? &o->use_cpu : &o->breakdown) = 1;
      if (a[2] == 'b' && !o->gpu_flag) o->gpu_flag = a;
      continue;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    if (i + 1 >= argc || strncmp(a, "--", 2) != 0) {
      fprintf(stderr, "mok: unknown or incomplete option '%s' (mok --help)\n", a);
      return 1;
    }
    const char *v = argv[++i];
    long long n = 0;
    int bad = 0;
    /* flags that only the GPU path reads: the CPU path refuses them rather than ignore them */
    static const char *const gpu_only[] = {
        "--dtype", "--fp8-wgrad", "--fp8-fused-drw", "--fp8-shared", "--path", "--plan", "--iters",
        "--warmup", "--capacity", "--ring-mb", "--macrobatch", "--build-in-forward",
        "--workspace-tokens", "--plan-cache", "--save"};
    for (size_t g = 0; g < sizeof gpu_only / sizeof gpu_only[0]; ++g)
      if (!o->gpu_flag && strcmp(a, gpu_only[g]) == 0) o->gpu_flag = gpu_only[g];
    if (strcmp(a, "--shape") == 0) o->shape_name = v;
    else if (strcmp(a, "--tokens") == 0) bad = parse_int(a, v, 0, 1LL << 24, &o->size[0]);
    else if (strcmp(a, "--hidden") == 0) bad = parse_int(a, v, 1, 1LL << 20, &o->size[1]);
    else if (strcmp(a, "--experts") == 0) bad = parse_int(a, v, 1, 1 << 16, &o->size[2]);
    else if (strcmp(a, "--intermediate") == 0) bad = parse_int(a, v, 1, 1LL << 20, &o->size[3]);
    else if (strcmp(a, "--topk") == 0) bad = parse_int(a, v, 1, 1 << 16, &o->size[4]);
    else if (strcmp(a, "--shared") == 0) bad = parse_int(a, v, 0, 1LL << 20, &o->size[5]);
    else if (strcmp(a, "--ranks") == 0) bad = parse_int(a, v, 1, 64, &n), o->ranks = (int)n;
    else if (strcmp(a, "--seed") == 0) bad = parse_int(a, v, 0, 1LL << 62, &n), o->seed = (uint64_t)n;
    else if (strcmp(a, "--iters") == 0) bad = parse_int(a, v, 1, 100000, &n), o->iters = (int)n, o->iters_set = 1;
    else if (strcmp(a, "--warmup") == 0) bad = parse_int(a, v, 0, 100000, &n), o->warmup = (int)n, o->warmup_set = 1;
    else if (strcmp(a, "--save") == 0) bad = parse_int(a, v, 0, 1, &n), o->tune_save = (int)n;
    else if (strcmp(a, "--plan-cache") == 0) o->config.plan_cache = v;
    else if (strcmp(a, "--samples") == 0) bad = parse_int(a, v, 0, 1 << 20, &n), o->samples = (int)n;
    else if (strcmp(a, "--capacity") == 0) bad = parse_int(a, v, 0, 1LL << 31, &n), o->config.schedule_capacity = n;
    else if (strcmp(a, "--macrobatch") == 0) bad = parse_int(a, v, 1, 1 << 20, &n), o->config.macrobatch_minibatches = (int)n;
    else if (strcmp(a, "--fp8-wgrad") == 0) bad = parse_int(a, v, 0, 3, &n), o->config.fp8_weight_grads = (int)n;
    else if (strcmp(a, "--fp8-fused-drw") == 0) bad = parse_int(a, v, 0, 1, &n), o->config.fp8_fused_router_grad = (int)n;
    else if (strcmp(a, "--fp8-shared") == 0) bad = parse_int(a, v, 0, 1, &n), o->config.fp8_shared_expert = (int)n;
    else if (strcmp(a, "--ring-mb") == 0) bad = parse_int(a, v, 0, 1LL << 30, &n), o->config.ring_bytes = n << 20;
    else if (strcmp(a, "--build-in-forward") == 0) bad = parse_int(a, v, 0, 1, &n), o->build_in_forward = (int)n;
    else if (strcmp(a, "--workspace-tokens") == 0) bad = parse_int(a, v, 0, 1LL << 24, &n), o->workspace_tokens = n;
    else if (strcmp(a, "--routing") == 0) {
      if (strcmp(v, "uniform") == 0) o->routing = CLI_ROUTING_UNIFORM;
      else if (strcmp(v, "zipf") == 0) o->routing = CLI_ROUTING_ZIPF;
      else {
        fprintf(stderr, "mok: --routing wants uniform or zipf, got '%s'\n", v);
        return 1;
      }
    } else if (strcmp(a, "--dtype") == 0) {
      if (strcmp(v, "bf16") == 0) o->config.dtype = MOK_DTYPE_BF16;
      else if (strcmp(v, "fp8") == 0) o->config.dtype = MOK_DTYPE_FP8_BLOCK128;
      else {
        fprintf(stderr, "mok: --dtype wants bf16 or fp8, got '%s'\n", v);
        return 1;
      }
    } else if (strcmp(a, "--path") == 0) {
      char text[64];
      snprintf(text, sizeof text, "path=%s", v);
      if (strlen(v) > 32 || mok_plan_parse(text, &o->config.plan) != MOK_SUCCESS) {
        fprintf(stderr, "mok: --path wants auto, fused, grouped or oracle, got '%s'\n", v);
        return 1;
      }
    } else if (strcmp(a, "--plan") == 0) {
      if (mok_plan_parse(v, &o->config.plan) != MOK_SUCCESS) {
        fprintf(stderr, "mok: --plan wants KEY=VALUE,... with the keys and values of mok_plan "
                        "(include/mok.h), got '%s'\n", v);
        return 1;
      }
    } else if (strcmp(a, "--clamp") == 0) {
      char *end = NULL;
      float l = strtof(v, &end);
      if (!end || *end || !(l > 0.0f && l < 1e30f)) {
        fprintf(stderr, "mok: --clamp wants a number > 0, got '%s'\n", v);
        return 1;
      }
      o->config.use_swiglu_limit = 1;
      o->config.swiglu_limit = l;
    } else {
      fprintf(stderr, "mok: unknown option '%s' (mok --help)\n", a);
      return 1;
    }
    if (bad) return 1;
  }
  return 0;
}

int cli_resolve_shape(cli_options *o, int on_gpu) {
  const char *name = o->shape_name ? o->shape_name : on_gpu ? "deepseek-v3" : "small";
  const mok_shape_preset *p = mok_shape_find(name);
  if (!p) {
    fprintf(stderr, "mok: unknown shape '%s' (mok shapes lists them)\n", name);
    return 1;
  }
  o->shape = p->shape;
  int64_t *dst[6] = {&o->shape.tokens, &o->shape.hidden, &o->shape.num_experts,
                     &o->shape.intermediate, &o->shape.top_k, &o->shape.shared_intermediate};
  for (int f = 0; f < 6; ++f)
    if (o->size[f] >= 0) *dst[f] = o->size[f];
  if (o->shape.top_k > o->shape.num_experts) {
    fprintf(stderr, "mok: --topk %lld is larger than --experts %lld\n", (long long)o->shape.top_k,
            (long long)o->shape.num_experts);
    return 1;
  }
  if (o->workspace_tokens && o->workspace_tokens < o->shape.tokens) {
    fprintf(stderr, "mok: --workspace-tokens %lld is below the %lld tokens of a step\n",
            (long long)o->workspace_tokens, (long long)o->shape.tokens);
    return 1;
  }
  if (o->workspace_tokens && o->breakdown) {
    fprintf(stderr, "mok: --breakdown times the steps on a workspace of their own size: "
            "leave out --workspace-tokens\n");
    return 1;
  }
  return 0;
}

/* The tuned plan cache the command reads and `mok tune` writes unless --plan-cache says:
 * $XDG_CACHE_HOME/mok/plans.tsv, else ~/.cache/mok/plans.tsv ("" when neither is set). */
static const char *default_plan_cache(void) {
  static char path[4096];
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0]) snprintf(path, sizeof path, "%s/mok/plans.tsv", xdg);
  else if (home && home[0]) snprintf(path, sizeof path, "%s/.cache/mok/plans.tsv", home);
  return path;
}

static int gpu_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* each line as it is printed, also into a pipe or a log */
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
    printf("mok %d.%d.%d\n", MOK_VERSION_MAJOR, MOK_VERSION_MINOR, MOK_VERSION_PATCH);
    return 0;
  }
  if (strcmp(argv[1], "shapes") == 0) {
    printf("%-16s %7s %6s %8s %6s %4s %6s\n", "name", "tokens", "H", "E", "I", "k", "Is");
    for (const mok_shape_preset *p = mok_shape_presets; p->name; ++p)
      printf("%-16s %7lld %6lld %8lld %6lld %4lld %6lld\n", p->name, (long long)p->shape.tokens,
             (long long)p->shape.hidden, (long long)p->shape.num_experts,
             (long long)p->shape.intermediate, (long long)p->shape.top_k,
             (long long)p->shape.shared_intermediate);
    return 0;
  }
  const int tune = strcmp(argv[1], "tune") == 0;
  if (strcmp(argv[1], "run") != 0 && !tune) {
    fprintf(stderr, "mok: unknown command '%s' (mok --help)\n", argv[1]);
    return 2;
  }
  cli_options o;
  if (parse_run(argc - 2, argv + 2, &o) != 0) return 2;
  if (!o.config.plan_cache) o.config.plan_cache = default_plan_cache();
  if (tune) {
    o.tune = 1;
    if (!o.iters_set) o.iters = 5;
    if (!o.warmup_set) o.warmup = 2;
    if (o.breakdown || o.workspace_tokens || o.use_cpu) {
      fprintf(stderr, "mok: tune times whole steps on GPUs: leave out --breakdown, "
              "--workspace-tokens and --cpu\n");
      return 2;
    }
    if (gpu_count() <= 0) {
      fprintf(stderr, "mok: tune needs a GPU (it measures the plans on the device)\n");
      return 1;
    }
  }
  const int on_gpu = !o.use_cpu && gpu_count() > 0;
  if (cli_resolve_shape(&o, on_gpu) != 0) return 2;
  if (on_gpu) return cli_run_gpu(&o);
  if (o.gpu_flag) {
    fprintf(stderr, "mok: %s applies to the GPU path only, and this run is on the CPU reference "
            "path (%s): leave it out\n", o.gpu_flag, o.use_cpu ? "--cpu" : "no GPU visible");
    return 2;
  }
  if (!o.use_cpu) printf("no GPU visible: running the CPU reference path\n");
  return cli_run_cpu(&o);
}
