/* Which cards the cuda backend accepts (backend_cuda_check_card), asked
 * about real cards by their name and compute capability, so it runs with or
 * without a GPU: below sm_80 (no bf16 tensor cores) is refused with a
 * sentence naming the card, its capability and the minimum; a card this
 * build carries no code for is refused with the flag to rebuild with. The
 * expectations are written per build: the default gpu_archs (80, 86, 89, 90)
 * and the GPU pack's (90). Then opening the backend here: on a machine
 * without a driver it must say "no GPU" (FERRY_ERR_UNSUPPORTED); with a GPU
 * it must open it. */
#include <stdbool.h>
#include <string.h>

#include "ferry_cuda_build.h"
#include "kernels/backend.h"
#include "kernels/backend_cuda.h"
#include "tests/tap.h"

static const int built[] = {FERRY_CUDA_ARCHS};
#define N_BUILT (int)(sizeof built / sizeof built[0])

static bool built_is(const int *want, int n)
{
    if (n != N_BUILT)
        return false;
    for (int i = 0; i < n; i++)
        if (built[i] != want[i])
            return false;
    return true;
}

static void accepted(const char *name, int major, int minor)
{
    tap_is_status(backend_cuda_check_card(name, major, minor), FERRY_OK, "%s (%d.%d) is accepted", name, major,
                  minor);
}

/* Refused, and the sentence holds every piece in `words`. */
static void refused(const char *name, int major, int minor, const char *const *words)
{
    if (!tap_is_status(backend_cuda_check_card(name, major, minor), FERRY_ERR_UNSUPPORTED, "%s (%d.%d) is refused",
                       name, major, minor))
        return;
    const char *msg = ferry_last_error();
    bool all = true;
    for (int i = 0; words[i]; i++)
        all &= strstr(msg, words[i]) != NULL;
    if (!tap_ok(all, "the refusal names the card, its capability and what it needs"))
        tap_diag("  message: %s", msg);
}

static void below_minimum(void)
{
    refused("Tesla T4", 7, 5, (const char *const[]){"Tesla T4", "7.5", "sm_80", NULL});
    refused("Tesla V100-SXM2-16GB", 7, 0, (const char *const[]){"Tesla V100-SXM2-16GB", "7.0", "sm_80", NULL});
    refused("Quadro RTX 6000", 7, 5, (const char *const[]){"Quadro RTX 6000", "7.5", "sm_80", NULL});
}

static void default_build(void)
{
    accepted("NVIDIA A100-SXM4-80GB", 8, 0);
    accepted("NVIDIA GeForce RTX 3090", 8, 6);
    accepted("NVIDIA A10", 8, 6);
    accepted("NVIDIA RTX A5000", 8, 6);
    accepted("Orin (nvgpu)", 8, 7); /* sm_86 code runs on 8.7 */
    accepted("NVIDIA GeForce RTX 4090", 8, 9);
    accepted("NVIDIA L4", 8, 9);
    accepted("NVIDIA H200", 9, 0);
    accepted("NVIDIA B200", 10, 0);             /* from the sm_90 PTX */
    accepted("NVIDIA GeForce RTX 5090", 12, 0); /* likewise */
}

static void pack_build(void)
{
    accepted("NVIDIA H100 80GB HBM3", 9, 0);
    accepted("NVIDIA H200", 9, 0);
    accepted("NVIDIA B200", 10, 0);
    refused("NVIDIA A100-SXM4-80GB", 8, 0,
            (const char *const[]){"NVIDIA A100-SXM4-80GB", "8.0", "sm_90", "-Dgpu_archs=80", NULL});
    refused("NVIDIA GeForce RTX 4090", 8, 9,
            (const char *const[]){"NVIDIA GeForce RTX 4090", "8.9", "-Dgpu_archs=89", NULL});
}

static void open_here(void)
{
    backend *be = NULL;
    ferry_status st = backend_open(FERRY_BACKEND_CUDA, &be);
    if (backend_cuda_device_count() == 0) {
        if (tap_is_status(st, FERRY_ERR_UNSUPPORTED, "no GPU here: opening cuda is FERRY_ERR_UNSUPPORTED"))
            tap_ok(strstr(ferry_last_error(), "no GPU is visible") != NULL, "and says so: %s", ferry_last_error());
    } else {
        tap_is_status(st, FERRY_OK, "a GPU here (%d device(s)): the cuda backend opens", backend_cuda_device_count());
        if (be)
            tap_ok(strstr(backend_device_name(be), "sm_") != NULL, "device: %s", backend_device_name(be));
    }
    backend_close(be);
}

int main(void)
{
    tap_diag("built for FERRY_CUDA_ARCHS (%d of them), PTX compute_%d", N_BUILT, FERRY_CUDA_PTX_ARCH);
    below_minimum();
    if (built_is((const int[]){80, 86, 89, 90}, 4))
        default_build();
    else if (built_is((const int[]){90}, 1))
        pack_build();
    for (int i = 0; i < N_BUILT; i++)
        tap_is_status(backend_cuda_check_card("a card of a built architecture", built[i] / 10, built[i] % 10),
                      FERRY_OK, "sm_%d, in gpu_archs, is accepted", built[i]);
    open_here();
    return tap_done();
}
