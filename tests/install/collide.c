/* An embedder whose own functions have the names of ferry's internal ones
 * (err_set, pool_create, arena_create, heap_create, units_fmt_bytes,
 * backend_create), linked against the installed static libferry.a. It must
 * link (no "multiple definition"), call its own functions where it calls
 * them, and ferry must call its own: a bad config gets ferry's sentence. */
#include <ferry.h>
#include <stdio.h>
#include <string.h>

static int mine;
int err_set(int status, const char *fmt) { (void)fmt; mine += 1; return status + 1000; }
void *pool_create(void) { mine += 10; return &mine; }
int arena_create(void) { mine += 100; return 7; }
int heap_create(int x) { return x * 2; }
char *units_fmt_bytes(void) { return "mine"; }
int backend_create(void) { return 42; }

int main(void)
{
    int ok = 1;
    ok &= err_set(1, "x") == 1001 && pool_create() == &mine && arena_create() == 7 && mine == 111;
    ok &= heap_create(21) == 42 && strcmp(units_fmt_bytes(), "mine") == 0 && backend_create() == 42;
    /* ferry's own err_set and units_fmt_bytes speak here. */
    ferry_engine_config cfg = FERRY_ENGINE_CONFIG_INIT;
    cfg.backend = FERRY_BACKEND_HOST;
    cfg.prefetch_groups = 99;
    ferry_engine *e = NULL;
    ferry_status st = ferry_engine_create(&cfg, &e);
    ok &= st == FERRY_ERR_INVALID_ARGUMENT && strstr(ferry_last_error(), "prefetch_groups 99") != NULL && mine == 111;
    cfg.prefetch_groups = 2;
    cfg.device_budget_bytes = 1 << 20;
    st = ferry_engine_create(&cfg, &e);
    void *p = NULL;
    if (st == FERRY_OK)
        st = ferry_engine_alloc(e, FERRY_MEM_ACTIVATIONS, "big", 2 << 20, &p);
    ok &= st == FERRY_ERR_OUT_OF_MEMORY && strstr(ferry_last_error(), "asked 2.0 MiB") != NULL && mine == 111;
    printf("%s: own functions %s, ferry's message: %s\n", ok ? "ok" : "FAILED", mine == 111 ? "called" : "NOT called",
           ferry_last_error());
    ferry_engine_destroy(e);
    return ok ? 0 : 1;
}
