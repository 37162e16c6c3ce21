/* Run by test_dp_load.sh under mpirun: every rank inspects the checkpoint
 * folder argv[1] as train_gpt2 --resume does before its engine exists
 * (run_state_inspect: config.json, state.ferry's run state, and the
 * CRC-32C of model.safetensors' tensors, which the ranks share out), and
 * says how many bytes it read meanwhile, by the kernel's count (rchar in
 * /proc/self/io, every thread's read(2) and pread(2)):
 *   rank R of N: read B bytes: ok
 *   rank R of N: read B bytes: failed: MESSAGE
 * Exit 0 when the inspection succeeded, 1 when it failed, 77 without
 * /proc/self/io. */
#include <stdio.h>
#include <stdlib.h>

#include "ferry.h"
#include "train/run_state.h"

static long long bytes_read(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    long long v = -1;
    if (f && fscanf(f, "rchar: %lld", &v) != 1)
        v = -1;
    if (f)
        fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: dp_inspect CHECKPOINT_FOLDER\n");
        return 2;
    }
    ferry_world_info w = FERRY_WORLD_INFO_INIT;
    if (ferry_world_join(&w) != FERRY_OK) {
        fprintf(stderr, "joining the world: %s\n", ferry_last_error());
        return 1;
    }
    model_spec cfg;
    train_resume r;
    long long before = bytes_read();
    ferry_status st = run_state_inspect(argv[1], &cfg, &r);
    long long after = bytes_read();
    if (before < 0 || after < 0) {
        printf("rank %d of %d: this kernel has no /proc/self/io\n", w.rank, w.world_size);
        ferry_world_leave();
        return 77;
    }
    printf("rank %d of %d: read %lld bytes: %s%s\n", w.rank, w.world_size, after - before,
           st == FERRY_OK ? "ok" : "failed: ", st == FERRY_OK ? "" : ferry_last_error());
    fflush(stdout);
    ferry_world_leave();
    return st == FERRY_OK ? 0 : 1;
}
