/* The engine as an in-tree embedder sees it: the public API (ferry.h) plus
 * the two kernels-layer handles an embedder needs to launch ferry's own ops
 * (kernels/ops.h) on the engine's compute stream. models/, train/, tools/ and
 * tests above engine/ include this, never engine/engine.h (the engine's
 * private state).
 *
 * An embedder outside this tree brings its own kernels and needs only
 * ferry.h: ferry_engine_compute_stream() is the native stream
 * (cudaStream_t), ferry_engine_dtype() the element type of the weights and
 * gradients it gets, ferry_engine_fetch/grads/release the buffers.
 *
 * Contract: work that uses a pointer from ferry_engine_fetch() or
 * ferry_engine_grads() goes on engine_embed_stream(e) and nowhere else, after
 * the call that returned the pointer and before the matching release. The
 * handles live as long as the engine. */
#ifndef FERRY_ENGINE_EMBED_H
#define FERRY_ENGINE_EMBED_H

#include "ferry.h"
#include "kernels/backend.h"
#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The engine's backend: open it once with ferry_engine_create(); ops and
 * activation sizes (gpt2_activations_create) are asked of it. */
backend *engine_embed_backend(ferry_engine *e);
/* The engine's compute stream: the one stream every op on the engine's
 * buffers is launched on; ferry_engine_fetch() makes it wait for the weights. */
backend_stream *engine_embed_stream(ferry_engine *e);

#ifdef __cplusplus
}
#endif
#endif
