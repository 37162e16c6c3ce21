/* Host version of the token (+ position, when wpe is given) embedding (backend/ops/encoder.cu is the
 * CUDA one): forward gathers rows of wte and adds the row of wpe of each
 * token's position (t, or its position within its example when positions
 * are given), backward scatters the gradient back into the rows the tokens
 * and positions selected. */
#include "backend/ops/ops_host.h"

#include "common/error.h"

/* The row of wpe token t of row b reads: its position (t without
 * positions), clamped into [0, t] (the launch refused others already). */
static size_t wpe_row(const int32_t *pos, int b, int T, int t)
{
    if (!pos)
        return (size_t)t;
    int32_t p = pos[(size_t)b * T + t];
    return (size_t)(p < 0 ? 0 : p > t ? t : p);
}

ferry_status hostop_encoder_forward(float *out, const int32_t *tokens, const float *wte,
                                    const float *wpe, int B, int T, int C, int V, const int32_t *pos)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int32_t tok = tokens[(size_t)b * T + t];
            if (tok < 0 || (V > 0 && tok >= V))
                return err_set(FERRY_ERR_INVALID_ARGUMENT,
                               "encoder: token %d at batch row %d, position %d is outside the "
                               "vocabulary [0, %d); check the token data and the vocab size",
                               (int)tok, b, t, V);
            float *o = out + ((size_t)b * T + t) * C;
            const float *w = wte + (size_t)tok * C;
            const float *p = wpe ? wpe + wpe_row(pos, b, T, t) * C : NULL;
            for (int i = 0; i < C; i++)
                o[i] = p ? w[i] + p[i] : w[i];
        }
    }
    return FERRY_OK;
}

/* Rows are visited in (b, t) order, so two positions holding the same token
 * add into its row in a fixed order: the result is deterministic. A token
 * outside [0, V) adds into row 0, never outside dwte. */
void hostop_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             int B, int T, int C, int V, const int32_t *pos)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            int32_t tok = tokens[(size_t)b * T + t];
            float *w = dwte + (size_t)(tok < 0 || tok >= V ? 0 : tok) * C; /* as the forward reads it */
            float *p = dwpe ? dwpe + wpe_row(pos, b, T, t) * C : NULL;
            for (int i = 0; i < C; i++)
                w[i] += d[i];
            for (int i = 0; p && i < C; i++)
                p[i] += d[i];
        }
    }
}
