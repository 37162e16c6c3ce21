/* engine/window.h: the upload window (ferry_engine_config's upload_window):
 * a ring of a few pinned chunks from the host pool into which a group's
 * fp32 master weights are converted to the device type as its upload
 * streams, in place of a whole host copy of the weights in the device type.
 * Whether it is on and its shape are the layout's rule (engine/layout.h);
 * this file owns the ring and queues the uploads through it. Floor 2. */
#ifndef FERRY_ENGINE_WINDOW_H
#define FERRY_ENGINE_WINDOW_H

#include <stddef.h>

#include "engine/context.h"
#include "engine/groups.h"

typedef struct engine_window engine_window;

/* Allocates the ring for groups of at most `largest` elements (its shape:
 * engine_window_shape with the config's chunks and chunk bytes) from the
 * host pool, as STAGING. On success *out owns it; release with
 * engine_window_close (the pool takes its memory back with the engine). */
ferry_status engine_window_open(const engine_ctx *c, size_t largest, engine_window **out);
/* Waits for the h2d stream and a conversion still under way, and frees the
 * ring's handle. */
void engine_window_close(engine_window *w, backend_stream *h2d);
/* Queues on the h2d stream, behind what is queued there already (the
 * group's update), the upload of group g's master weights into `dst` (the
 * device weights) chunk by chunk: each chunk converted (round to nearest
 * even, as the AdamW's copy) into the ring, then copied. The window's
 * converter thread converts the next chunk while a chunk copies; a chunk is
 * rewritten only after its last copy completed (the stream's order).
 * The master weights must not change until the stream has run it; g->uploaded
 * is the caller's to record. */
ferry_status engine_window_upload(engine_window *w, const engine_ctx *c, const engine_group *g, void *dst);
/* The same for n master weights from `master` (with data parallelism a
 * rank's slot of its group, padding included) into `dst`; `name` is the
 * group's, for the error. */
ferry_status engine_window_upload_span(engine_window *w, const engine_ctx *c, const char *name, const float *master,
                                       size_t n, void *dst);
/* The ring's bytes, elements per chunk and chunks (for the description). */
size_t engine_window_bytes(const engine_window *w);
int engine_window_chunks(const engine_window *w);

#endif
