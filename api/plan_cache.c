/* plan_cache.c — the tuned plan cache (include/mok.h, "tuning"): a text file of the plan `mok
 * tune` measured fastest per device, group size, shape and config. One entry per line,
 *     key <TAB> plan text (mok_plan_format) <TAB> measured ms per step
 * '#' lines are comments; the latest entry of a key wins; a line that does not parse is skipped,
 * so a damaged file costs only the tuning, never a wrong plan (every plan gives the same bits,
 * and the workspace resolves a cached plan like any request, which rejects one this build cannot
 * run). Plain C with no device call (the device name comes in as text): CI tests it. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "api/plan_cache.h"

#define LINE_MAX_BYTES 4096

mok_status mok_plan_cache_key_on(const mok_shape *s, const mok_config *c, int ep,
                                 const char *device, char *buf, size_t size) {
  if (!s || !c || !device || !buf || size == 0) return MOK_ERR_INVALID_ARGUMENT;
  char dev[128];
  size_t n = 0;
  for (const char *d = device; *d && n + 1 < sizeof dev; ++d) /* one word: no blanks, no tabs */
    dev[n++] = (*d == ' ' || *d == '\t' || *d == '\n' || *d == '\r') ? '_' : *d;
  dev[n] = '\0';
  const float L = c->use_swiglu_limit ? c->swiglu_limit : 0.0f;
  const int w = snprintf(buf, size,
                         "mok=%u device=%s ep=%d dtype=%d T=%lld H=%lld I=%lld E=%lld k=%lld "
                         "Is=%lld ring=%lld macro=%d capacity=%lld limit=%.9g fp8_wgrad=%d "
                         "fp8_drw=%d fp8_shared=%d",
                         (unsigned)MOK_VERSION_CODE, n ? dev : "unknown", ep, (int)c->dtype,
                         (long long)s->tokens, (long long)s->hidden,
                         (long long)s->intermediate, (long long)s->num_experts,
                         (long long)s->top_k, (long long)s->shared_intermediate,
                         (long long)c->ring_bytes, c->macrobatch_minibatches,
                         (long long)c->schedule_capacity, (double)L, c->fp8_weight_grads,
                         c->fp8_fused_router_grad, c->fp8_shared_expert);
  if (w < 0 || (size_t)w >= size) return MOK_ERR_INVALID_ARGUMENT;
  return MOK_SUCCESS;
}

/* Splits one line (its newline removed) into key and plan text; 0 when it is not an entry. */
static int split_entry(char *line, char **key, char **plan) {
  if (line[0] == '#' || line[0] == '\0') return 0;
  char *t1 = strchr(line, '\t');
  if (!t1) return 0;
  *t1 = '\0';
  char *t2 = strchr(t1 + 1, '\t');
  if (t2) *t2 = '\0';
  *key = line;
  *plan = t1 + 1;
  return 1;
}

mok_status mok_plan_cache_lookup(const char *path, const char *key, mok_plan *plan, int *found) {
  if (!path || !key || !plan || !found) return MOK_ERR_INVALID_ARGUMENT;
  *found = 0;
  if (!path[0]) return MOK_SUCCESS;
  FILE *f = fopen(path, "r");
  if (!f) return MOK_SUCCESS; /* no file yet: nothing tuned */
  char line[LINE_MAX_BYTES];
  mok_plan best;
  while (fgets(line, sizeof line, f)) {
    const size_t n = strlen(line);
    if (n == sizeof line - 1 && line[n - 1] != '\n') { /* longer than any entry: skip it whole */
      int ch;
      while ((ch = fgetc(f)) != EOF && ch != '\n') {
      }
      continue;
    }
    line[strcspn(line, "\r\n")] = '\0';
    char *k = NULL, *text = NULL;
    if (!split_entry(line, &k, &text) || strcmp(k, key) != 0) continue;
    mok_plan p;
    memset(&p, 0, sizeof p);
    if (mok_plan_parse(text, &p) != MOK_SUCCESS) continue;
    best = p;
    *found = 1;
  }
  fclose(f);
  if (*found) *plan = best;
  return MOK_SUCCESS;
}

/* mkdir -p of path's folder. */
static int make_parent(const char *path) {
  char dir[LINE_MAX_BYTES];
  if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir) return -1;
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return 0;
  *slash = '\0';
  for (char *p = dir + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(dir, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

mok_status mok_plan_cache_store(const char *path, const char *key, const mok_plan *plan,
                                double ms) {
  if (!path || !path[0] || !key || !key[0] || !plan) return MOK_ERR_INVALID_ARGUMENT;
  if (strchr(key, '\t') || strchr(key, '\n')) return MOK_ERR_INVALID_ARGUMENT;
  char text[1024];
  mok_status st = mok_plan_format(plan, text, sizeof text);
  if (st != MOK_SUCCESS) return st;
  if (make_parent(path) != 0) return MOK_ERR_INVALID_ARGUMENT;
  char tmp[LINE_MAX_BYTES];
  if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp)
    return MOK_ERR_INVALID_ARGUMENT;
  FILE *out = fopen(tmp, "w");
  if (!out) return MOK_ERR_INVALID_ARGUMENT;
  FILE *in = fopen(path, "r");
  int ok = 1;
  if (in) { /* every other line as it was, the key's entries dropped */
    char line[LINE_MAX_BYTES], copy[LINE_MAX_BYTES];
    while (fgets(line, sizeof line, in)) {
      memcpy(copy, line, sizeof line);
      copy[strcspn(copy, "\r\n")] = '\0';
      char *k = NULL, *t = NULL;
      if (split_entry(copy, &k, &t) && strcmp(k, key) == 0) continue;
      if (fputs(line, out) < 0) ok = 0;
    }
    fclose(in);
  } else {
    ok &= fputs("# mok's tuned plans (`mok tune`): key <TAB> plan <TAB> ms per step\n", out) >= 0;
  }
  ok &= fprintf(out, "%s\t%s\t%.4f\n", key, text, ms) > 0;
  ok &= fclose(out) == 0;
  if (!ok || rename(tmp, path) != 0) {
    remove(tmp);
    return MOK_ERR_INVALID_ARGUMENT;
  }
  return MOK_SUCCESS;
}
