/* Which cards the cuda backend accepts (backend_cuda_check_card) and in
 * which storage type (backend_cuda_default_dtype, backend_cuda_check_dtype),
 * asked about real cards by their name and compute capability, so it runs
 * with or without a GPU: below sm_70 (no tensor cores) is refused with a
 * sentence naming the card, its capability and the minimum; a card this
 * build carries no code for is refused with the flag to rebuild with (and,
 * for Volta, the toolkit to build with); sm_70 and sm_75 store f16 by
 * default and refuse bf16 with a sentence naming the card and f16. The
 * expectations are written per build: the default gpu_archs (auto: 75, 80,
 * 86, 89, 90, and 70 with a CUDA 12 toolkit) and the GPU pack's (90). Then
 * opening the backend here: on a machine without a driver it must say "no
 * GPU" (FERRY_ERR_UNSUPPORTED); with a GPU it must open it, in the type its
 * capability says. */
#include <stdbool.h>
#include <string.h>

#include "ferry_cuda_build.h"
#include "backend/backend.h"
#include "backend/backend_cuda.h"
#include "backend/ops/ops.h"
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
    refused("Tesla P100-PCIE-16GB", 6, 0, (const char *const[]){"Tesla P100-PCIE-16GB", "6.0", "sm_70", NULL});
    refused("NVIDIA GeForce GTX 1080 Ti", 6, 1,
            (const char *const[]){"NVIDIA GeForce GTX 1080 Ti", "6.1", "sm_70", NULL});
    refused("NVIDIA Jetson TX2", 6, 2, (const char *const[]){"NVIDIA Jetson TX2", "6.2", "sm_70", NULL});
}

/* The type each card computes in: f16 below sm_80, bf16 refused there by
 * name, both from sm_80. Independent of the build. */
static void storage_types(void)
{
    static const struct { const char *name; int major, minor; ferry_dtype want; } cards[] = {
        {"Tesla V100-SXM2-32GB", 7, 0, FERRY_DTYPE_F16}, {"Tesla T4", 7, 5, FERRY_DTYPE_F16},
        {"NVIDIA TITAN RTX", 7, 5, FERRY_DTYPE_F16},      {"NVIDIA GeForce RTX 2080 Ti", 7, 5, FERRY_DTYPE_F16},
        {"NVIDIA A100-SXM4-80GB", 8, 0, FERRY_DTYPE_BF16}, {"NVIDIA GeForce RTX 3090", 8, 6, FERRY_DTYPE_BF16},
        {"NVIDIA H200", 9, 0, FERRY_DTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof cards / sizeof cards[0]; i++) {
        TAP_IS_INT(backend_cuda_default_dtype(cards[i].major, cards[i].minor), cards[i].want,
                   "%s (%d.%d) stores %s by default", cards[i].name, cards[i].major, cards[i].minor,
                   ferry_dtype_name(cards[i].want));
        tap_is_status(backend_cuda_check_dtype(cards[i].name, cards[i].major, cards[i].minor, FERRY_DTYPE_F16),
                      FERRY_OK, "%s computes in f16", cards[i].name);
        ferry_status bf = backend_cuda_check_dtype(cards[i].name, cards[i].major, cards[i].minor, FERRY_DTYPE_BF16);
        if (cards[i].want == FERRY_DTYPE_BF16) {
            tap_is_status(bf, FERRY_OK, "%s computes in bf16", cards[i].name);
            continue;
        }
        if (!tap_is_status(bf, FERRY_ERR_UNSUPPORTED, "%s refuses bf16", cards[i].name))
            continue;
        const char *msg = ferry_last_error();
        char cc[8];
        snprintf(cc, sizeof cc, "%d.%d", cards[i].major, cards[i].minor);
        if (!tap_ok(strstr(msg, cards[i].name) && strstr(msg, cc) && strstr(msg, "f16") && strstr(msg, "sm_80"),
                    "the refusal names the card, its capability, sm_80 and f16"))
            tap_diag("  message: %s", msg);
    }
    tap_is_status(backend_cuda_check_dtype("NVIDIA H200", 9, 0, FERRY_DTYPE_F32), FERRY_ERR_UNSUPPORTED,
                  "f32 storage is refused on cuda");
}

/* The cards of the families every default build carries. */
static void default_build(void)
{
    accepted("Tesla T4", 7, 5);
    accepted("NVIDIA TITAN RTX", 7, 5);
    accepted("NVIDIA GeForce RTX 2080 Ti", 7, 5);
    accepted("Quadro RTX 6000", 7, 5);
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
        if (be) {
            tap_ok(strstr(backend_device_name(be), "sm_") != NULL, "device: %s", backend_device_name(be));
            bool old = strstr(backend_device_name(be), "(sm_7") != NULL;
            TAP_IS_INT(backend_act_dtype(be), old ? FERRY_DTYPE_F16 : FERRY_DTYPE_BF16, "it stores %s by default",
                       old ? "f16 (sm_7x)" : "bf16");
            tap_is_status(backend_set_act_dtype(be, FERRY_DTYPE_F16), FERRY_OK, "f16 can be chosen on it");
        }
    }
    backend_close(be);
}

int main(void)
{
    tap_diag("built for FERRY_CUDA_ARCHS (%d of them), PTX compute_%d", N_BUILT, FERRY_CUDA_PTX_ARCH);
    below_minimum();
    storage_types();
    if (built_is((const int[]){75, 80, 86, 89, 90}, 5)) { /* auto with CUDA 13: no Volta */
        default_build();
        refused("Tesla V100-SXM2-16GB", 7, 0,
                (const char *const[]){"Tesla V100-SXM2-16GB", "7.0", "-Dgpu_archs=70", "CUDA 12", NULL});
    } else if (built_is((const int[]){70, 75, 80, 86, 89, 90}, 6)) { /* auto with CUDA 12 */
        default_build();
        accepted("Tesla V100-SXM2-16GB", 7, 0);
        accepted("NVIDIA TITAN V", 7, 0);
    } else if (built_is((const int[]){90}, 1)) {
        pack_build();
    }
    for (int i = 0; i < N_BUILT; i++)
        tap_is_status(backend_cuda_check_card("a card of a built architecture", built[i] / 10, built[i] % 10),
                      FERRY_OK, "sm_%d, in gpu_archs, is accepted", built[i]);
    open_here();
    return tap_done();
}
