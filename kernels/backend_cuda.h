/* What the cuda backend (kernels/backend_cuda.cu) exposes beyond
 * kernels/backend.h: the check that refuses a card ferry cannot run on, so
 * a test can ask it about cards this machine does not have. Only in builds
 * with CUDA. */
#ifndef FERRY_KERNELS_BACKEND_CUDA_H
#define FERRY_KERNELS_BACKEND_CUDA_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The oldest compute capability ferry runs on, x10: bf16 tensor cores (sm_80). */
#define BACKEND_CUDA_MIN_CC 80

/* FERRY_OK when this build can run on a card of compute capability
 * major.minor named `name`: the card is sm_80 or newer, and the build
 * carries machine code for its family (same major, minor at most the card's)
 * or PTX it can compile (the card is at least as new as the newest
 * architecture built). Otherwise FERRY_ERR_UNSUPPORTED with a sentence naming
 * the card, its compute capability and what it needs. backend_open() runs it
 * on device 0. Any thread. */
ferry_status backend_cuda_check_card(const char *name, int major, int minor);

#ifdef __cplusplus
}
#endif
#endif
