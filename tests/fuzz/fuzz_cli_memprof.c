/* libFuzzer harness: memprof's command lines (tools/memprof/mp_args.c): the
 * first input byte picks report, dump or plan; the rest is argv,
 * NUL-separated. An accepted plan has a checked model config. */
#include "tests/fuzz/fuzz_util.h"
#include "tools/memprof/memprof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *argv[FUZZ_MAX_ARGS], *copy;
    int which = data[0] % 3;
    int argc = fuzz_argv(which == 0 ? "report" : which == 1 ? "dump" : "plan", data + 1, size - 1, argv, &copy);
    int rc;
    if (which == 0) {
        mp_report_args a;
        rc = mp_parse_report_args(argc, argv, &a);
        if (rc == 0 && (!a.path || a.top < 0 || a.top > MP_TOP_MAX))
            abort();
    } else if (which == 1) {
        const char *path;
        rc = mp_parse_dump_args(argc, argv, &path);
        if (rc == 0 && !path)
            abort();
    } else {
        mp_plan_args a;
        gpt2_config c;
        rc = mp_parse_plan_args(argc, argv, &a, &c);
        if (rc == 0 && (a.seq > c.max_seq_len || a.batch < 1 || c.n_embd % c.n_head))
            abort();
    }
    if (rc < 0 || rc > 2)
        abort();
    free(copy);
    return 0;
}
