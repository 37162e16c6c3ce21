/* What the cuda backend (backend/backend_cuda.cu) exposes beyond
 * backend/backend.h: the checks that refuse a card ferry cannot run on and
 * a storage type a card cannot compute in, and the type it stores by
 * default, so a test can ask about cards this machine does not have. Only
 * in builds with CUDA. */
#ifndef FERRY_BACKEND_BACKEND_CUDA_H
#define FERRY_BACKEND_BACKEND_CUDA_H

#include "ferry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The oldest compute capability ferry runs on, x10: tensor cores (sm_70,
 * fp16); and the oldest with bf16 tensor cores (sm_80). */
#define BACKEND_CUDA_MIN_CC 70
#define BACKEND_CUDA_BF16_CC 80

/* FERRY_OK when this build can run on a card of compute capability
 * major.minor named `name`: the card is sm_70 or newer, and the build
 * carries machine code for its family (same major, minor at most the card's)
 * or PTX it can compile (the card is at least as new as the newest
 * architecture built). Otherwise FERRY_ERR_UNSUPPORTED with a sentence naming
 * the card, its compute capability and what it needs. backend_open() runs it
 * on device 0. Any thread. */
ferry_status backend_cuda_check_card(const char *name, int major, int minor);

/* The storage type the card computes in by default: bf16 from sm_80, f16
 * on sm_70 and sm_75 (what dtype AUTO resolves to). */
ferry_dtype backend_cuda_default_dtype(int major, int minor);
/* FERRY_OK when the card can store and compute in `act` (bf16: sm_80 or
 * newer; f16: every card ferry runs on); else FERRY_ERR_UNSUPPORTED with a
 * sentence naming the card, its capability and the type to use. Any
 * thread. */
ferry_status backend_cuda_check_dtype(const char *name, int major, int minor, ferry_dtype act);

#ifdef __cplusplus
}
#endif
#endif
