/* test_plan_cache.c — tuning's parts that need no GPU: the candidate plans of a request (the
 * default first, each once, every one resolvable and keeping the caller's requests), and the tuned
 * plan cache (keys that tell requests apart, store and lookup, the latest entry winning, damaged
 * lines skipped, a missing file being no entry, the default path). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "api/config.h"
#include "api/plan.h"
#include "api/plan_cache.h"
#include "mok.h"
#include "tests/tests.h"
#include "tests/test_util.h"

static const mok_device_facts h200 = {1, 132};

static mok_config config_of(mok_dtype dtype) {
  mok_config c;
  mok_config_init(&c);
  c.dtype = dtype;
  return c;
}

/* Whether a candidate other than the default holds every field text names at its value. */
static int has_plan(const mok_plan *ps, int n, const char *text) {
  mok_plan want;
  memset(&want, 0, sizeof want);
  if (mok_plan_parse(text, &want) != MOK_SUCCESS) return 0;
  const int *w = (const int *)&want;
  const int nf = (int)(sizeof want / sizeof(int));
  for (int i = 1; i < n; ++i) {
    const int *v = (const int *)&ps[i];
    int all = 1;
    for (int f = 0; f < nf; ++f) all &= w[f] == 0 || v[f] == w[f];
    if (all) return 1;
  }
  return 0;
}

void test_plan_candidates(void) {
  const mok_shape dsv3 = {7168, 7168, 256, 2048, 8, 2048};
  mok_plan ps[64];
  for (int dt = 0; dt < 2; ++dt) {
    mok_config c = config_of(dt ? MOK_DTYPE_FP8_BLOCK128 : MOK_DTYPE_BF16);
    for (int ep = 1; ep <= 2; ++ep) {
      mok_plan def;
      CHECK_STATUS(mok_plan_resolve(&dsv3, &c, ep, &h200, &def), MOK_SUCCESS);
      const int n = mok_plan_candidates_on(&dsv3, &c, ep, &h200, ps, 64);
      CHECK(n >= 4 && n < 64);
      CHECK(memcmp(&ps[0], &def, sizeof def) == 0); /* the default first */
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < i; ++j) CHECK(memcmp(&ps[i], &ps[j], sizeof ps[i]) != 0);
        /* each is a plan the request can run: pinned whole, it resolves to itself */
        mok_config pinned = c;
        pinned.plan = ps[i];
        mok_plan again;
        CHECK_STATUS(mok_validate(&dsv3, &pinned, ep), MOK_SUCCESS);
        CHECK_STATUS(mok_plan_resolve(&dsv3, &pinned, ep, &h200, &again), MOK_SUCCESS);
        CHECK(memcmp(&again, &ps[i], sizeof again) == 0);
        CHECK(ps[i].path != MOK_PATH_ORACLE && ps[i].schedule == MOK_SCHEDULE_PARALLEL);
      }
      if (!dt) { /* BF16: the other path, and other comm-CTA counts */
        CHECK(has_plan(ps, n, ep == 1 ? "path=fused" : "path=grouped"));
        CHECK(has_plan(ps, n, "shared_fwd=in_line"));
      } else {
        CHECK(has_plan(ps, n, "fp8_mlp=two_launches"));
        CHECK(has_plan(ps, n, "wgrad_cluster_down=1"));
        for (int i = 0; i < n; ++i) CHECK(ps[i].path == MOK_PATH_GROUPED);
      }
    }
    /* a field the caller requests is never varied */
    c.plan.shared_fwd = MOK_SHARED_IN_LINE;
    c.plan.bwd_comm_ctas = 24;
    const int n = mok_plan_candidates_on(&dsv3, &c, 1, &h200, ps, 64);
    CHECK(n >= 2);
    for (int i = 0; i < n; ++i) /* (a comm count applies where the kernels run beside) */
      CHECK(ps[i].shared_fwd == MOK_SHARED_IN_LINE &&
            (ps[i].bwd_comm_ctas == 24 || ps[i].shared_bwd != MOK_SHARED_BESIDE));
  }
  /* max bounds the count; the oracle has one way to run; a bad request has none */
  mok_config c = config_of(MOK_DTYPE_BF16);
  CHECK(mok_plan_candidates_on(&dsv3, &c, 1, &h200, ps, 2) == 2);
  const mok_device_facts other = {0, 108};
  CHECK(mok_plan_candidates_on(&dsv3, &c, 1, &other, ps, 64) == 1 && ps[0].path == MOK_PATH_ORACLE);
  c.plan.tile_m = 96;
  CHECK(mok_plan_candidates_on(&dsv3, &c, 1, &h200, ps, 64) == 0);
}

static char *temp_path(const char *name, char *buf, size_t size) {
  const char *dir = getenv("TMPDIR");
  snprintf(buf, size, "%s/mok_plan_cache_test.%ld/sub/%s", dir && dir[0] ? dir : "/tmp",
           (long)getpid(), name);
  return buf;
}

static void remove_tree(const char *file) {
  char dir[1024];
  remove(file);
  snprintf(dir, sizeof dir, "%s", file);
  for (int i = 0; i < 2; ++i) {
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    *slash = '\0';
    rmdir(dir);
  }
}

void test_plan_cache(void) {
  const mok_shape s = {7168, 7168, 256, 2048, 8, 2048};
  mok_config c = config_of(MOK_DTYPE_BF16);
  char k1[1024], k2[1024], k3[1024], path[1024];
  CHECK_STATUS(mok_plan_cache_key_on(&s, &c, 1, "NVIDIA H200", k1, sizeof k1), MOK_SUCCESS);
  CHECK(strchr(k1, '\t') == NULL && strstr(k1, "NVIDIA_H200") != NULL);
  /* what changes the fastest plan changes the key */
  CHECK_STATUS(mok_plan_cache_key_on(&s, &c, 2, "NVIDIA H200", k2, sizeof k2), MOK_SUCCESS);
  CHECK(strcmp(k1, k2) != 0);
  mok_config f = config_of(MOK_DTYPE_FP8_BLOCK128);
  CHECK_STATUS(mok_plan_cache_key_on(&s, &f, 1, "NVIDIA H200", k3, sizeof k3), MOK_SUCCESS);
  CHECK(strcmp(k1, k3) != 0);
  mok_shape t = s;
  t.tokens = 4096;
  CHECK_STATUS(mok_plan_cache_key_on(&t, &c, 1, "NVIDIA H200", k3, sizeof k3), MOK_SUCCESS);
  CHECK(strcmp(k1, k3) != 0);
  CHECK_STATUS(mok_plan_cache_key_on(&s, &c, 1, "NVIDIA H100", k3, sizeof k3), MOK_SUCCESS);
  CHECK(strcmp(k1, k3) != 0);
  CHECK_STATUS(mok_plan_cache_key_on(&s, &c, 1, "NVIDIA H200", k3, 8), MOK_ERR_INVALID_ARGUMENT);

  temp_path("plans.tsv", path, sizeof path);
  mok_plan p, got;
  int found = 1;
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, &got, &found), MOK_SUCCESS); /* no file */
  CHECK(found == 0);
  memset(&p, 0, sizeof p);
  CHECK_STATUS(mok_plan_parse("path=fused,fwd_comm=8,routed_cluster=2", &p), MOK_SUCCESS);
  CHECK_STATUS(mok_plan_cache_store(path, k1, &p, 40.5), MOK_SUCCESS); /* makes the folders */
  mok_plan q = p;
  q.fwd_comm_ctas = 16;
  CHECK_STATUS(mok_plan_cache_store(path, k2, &q, 30.0), MOK_SUCCESS);
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && memcmp(&got, &p, sizeof p) == 0);
  CHECK_STATUS(mok_plan_cache_lookup(path, k2, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && memcmp(&got, &q, sizeof q) == 0);
  CHECK_STATUS(mok_plan_cache_lookup(path, k3, &got, &found), MOK_SUCCESS);
  CHECK(found == 0);
  /* storing a key again replaces its entry: one line per key */
  p.fwd_comm_ctas = 2;
  CHECK_STATUS(mok_plan_cache_store(path, k1, &p, 39.0), MOK_SUCCESS);
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && got.fwd_comm_ctas == 2);
  FILE *fh = fopen(path, "r");
  int lines_k1 = 0, lines = 0;
  char line[4096];
  while (fh && fgets(line, sizeof line, fh)) {
    ++lines;
    lines_k1 += strncmp(line, k1, strlen(k1)) == 0 && line[strlen(k1)] == '\t';
  }
  if (fh) fclose(fh);
  CHECK(lines_k1 == 1 && lines == 3); /* the comment, k2, k1 */
  /* damaged lines are skipped; a later good entry of a key still counts, a later bad one not */
  fh = fopen(path, "a");
  CHECK(fh != NULL);
  if (fh) {
    fprintf(fh, "garbage without tabs\n%s\tpath=nowhere\t1.0\n%s\t\n", k2, k2);
    fprintf(fh, "%s\tpath=grouped,fwd_comm=32\t12.0\n", k2);
    fprintf(fh, "%s\tfwd_comm=notanumber\t11.0\n", k2);
    fclose(fh);
  }
  CHECK_STATUS(mok_plan_cache_lookup(path, k2, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && got.path == MOK_PATH_GROUPED && got.fwd_comm_ctas == 32);
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, &got, &found), MOK_SUCCESS);
  CHECK(found == 1 && got.fwd_comm_ctas == 2);
  /* bad arguments; "" is no cache */
  CHECK_STATUS(mok_plan_cache_store("", k1, &p, 1.0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_cache_store(path, "a\tb", &p, 1.0), MOK_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(mok_plan_cache_lookup("", k1, &got, &found), MOK_SUCCESS);
  CHECK(found == 0);
  CHECK_STATUS(mok_plan_cache_lookup(path, k1, NULL, &found), MOK_ERR_INVALID_ARGUMENT);
  remove_tree(path);

  /* the path: the config's, else the XDG cache folder, else HOME's .cache */
  char buf[1024];
  c.plan_cache = "/some/where.tsv";
  CHECK_STATUS(mok_plan_cache_path(&c, buf, sizeof buf), MOK_SUCCESS);
  CHECK(strcmp(buf, "/some/where.tsv") == 0);
  c.plan_cache = "";
  CHECK_STATUS(mok_plan_cache_path(&c, buf, sizeof buf), MOK_SUCCESS);
  CHECK(buf[0] == '\0');
  c.plan_cache = NULL;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char *xdg_old = xdg ? strdup(xdg) : NULL, *home_old = home ? strdup(home) : NULL;
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  CHECK_STATUS(mok_plan_cache_path(&c, buf, sizeof buf), MOK_SUCCESS);
  CHECK(strcmp(buf, "/x/cache/mok/plans.tsv") == 0);
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  CHECK_STATUS(mok_plan_cache_path(NULL, buf, sizeof buf), MOK_SUCCESS);
  CHECK(strcmp(buf, "/home/u/.cache/mok/plans.tsv") == 0);
  if (xdg_old) setenv("XDG_CACHE_HOME", xdg_old, 1);
  if (home_old) setenv("HOME", home_old, 1);
  else unsetenv("HOME");
  free(xdg_old);
  free(home_old);
  /* a config of mok 0.2's layout (no plan_cache) is accepted, its cache the default */
  mok_config old = config_of(MOK_DTYPE_BF16), full;
  old.size = MOK_CONFIG_SIZE_0_2;
  old.plan_cache = (const char *)1; /* past the caller's size: never read */
  CHECK_STATUS(mok_config_complete(&old, &full), MOK_SUCCESS);
  CHECK(full.plan_cache == NULL && full.size == sizeof(mok_config));
  old.size = MOK_CONFIG_SIZE_0_2 + 4;
  CHECK_STATUS(mok_config_complete(&old, &full), MOK_ERR_INVALID_ARGUMENT);
}
