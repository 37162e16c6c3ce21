/* The shape table the op tests and the kernel lab drive every op of the
 * registry (backend/ops/op_list.h) over: per row an op, its sizes and scalars
 * ("name=value", the names of its arguments; scalars not named take the
 * driver's defaults, dev/ops/opdrive.h; an optional tensor named "=none" is
 * passed as NULL; positions, NULL unless named "pos=packed": examples of
 * random lengths packed into each row), the class of its tolerance, and where one tensor the op
 * writes is held to another ("name=elem", "name=mixed", or a relative error
 * "name=1e-5": fp32 statistics computed from exact inputs).
 * Small, odd sizes, so that a kernel's edge cases (partial tiles, rows not
 * a multiple of a warp, head sizes that pad) are met; every op has at least
 * one row (tests/ops checks it).
 * Header-only data; not used by the library. */
#ifndef FERRY_DEV_OPS_OP_SHAPES_H
#define FERRY_DEV_OPS_OP_SHAPES_H

#include <stdlib.h>
#include <string.h>

typedef enum op_tol {
    OPTOL_ELEM,  /* elementwise and normalising ops, sums in fp32 */
    OPTOL_MIXED, /* a 16-bit intermediate enters (logits, P in attention) */
} op_tol;

typedef struct op_shape {
    const char *op;    /* the registry's name, without "ops_" */
    const char *sizes; /* "B=2 T=12 C=40 V=50" */
    op_tol tol;
    const char *tols; /* "mean=1e-5 rstd=1e-4", or NULL */
} op_shape;

static const op_shape op_shapes[] = {
    {"encoder_forward", "B=2 T=67 C=96 V=50", OPTOL_ELEM, NULL},
    {"encoder_forward", "B=3 T=33 C=20 V=3", OPTOL_ELEM, NULL}, /* C not a multiple of 8; 3 ids, long runs */
    {"encoder_backward", "B=2 T=67 C=96 V=50", OPTOL_ELEM, NULL},
    {"encoder_backward", "B=3 T=33 C=20 V=3", OPTOL_ELEM, NULL}, /* 3 ids, long runs */
    {"encoder_forward", "B=2 T=67 C=96 V=50 wpe=none", OPTOL_ELEM, NULL}, /* no position embedding (Llama) */
    {"encoder_forward", "B=3 T=33 C=20 V=3 wpe=none", OPTOL_ELEM, NULL},
    {"encoder_backward", "B=2 T=67 C=96 V=50 dwpe=none", OPTOL_ELEM, NULL},
    {"encoder_forward", "B=2 T=67 C=96 V=50 pos=packed", OPTOL_ELEM, NULL}, /* positions restart per example */
    {"encoder_forward", "B=3 T=33 C=20 V=3 pos=packed", OPTOL_ELEM, NULL},
    {"encoder_backward", "B=2 T=67 C=96 V=50 pos=packed", OPTOL_ELEM, NULL},
    {"encoder_backward", "B=3 T=33 C=20 V=3 pos=packed", OPTOL_ELEM, NULL},
    {"layernorm_forward", "N=131 C=96", OPTOL_ELEM, "mean=1e-5 rstd=1e-4"},
    {"layernorm_forward", "N=37 C=50", OPTOL_ELEM, "mean=1e-5 rstd=1e-4"},
    {"layernorm_backward", "N=131 C=96", OPTOL_ELEM, NULL},
    {"layernorm_backward", "N=37 C=50", OPTOL_ELEM, NULL},
    {"layernorm_backward", "N=1030 C=520", OPTOL_ELEM, NULL}, /* rows past one pass of 512, a partial 256-column chunk */
    {"matmul_forward", "N=134 C=96 OC=200", OPTOL_ELEM, NULL},
    {"matmul_forward", "N=64 C=128 OC=384 bias=none", OPTOL_ELEM, NULL},
    {"matmul_backward", "N=134 C=96 OC=200", OPTOL_ELEM, NULL},
    {"matmul_backward", "N=64 C=128 OC=384 dbias=none", OPTOL_ELEM, NULL},
    {"matmul_backward", "N=600 C=16 OC=37", OPTOL_ELEM, NULL}, /* dbias: 16-column strips, columns not a multiple of 8 */
    {"gelu_forward", "n=10001", OPTOL_ELEM, NULL},
    {"gelu_backward", "n=10001", OPTOL_ELEM, NULL},
    {"residual_forward", "n=10001", OPTOL_ELEM, NULL},
    {"attention_forward", "B=2 T=67 C=96 NH=2", OPTOL_MIXED, NULL},  /* HS 48: padded to 64; T not a multiple of 64 */
    {"attention_forward", "B=1 T=130 C=128 NH=2", OPTOL_MIXED, NULL}, /* HS 64, as GPT-2 */
    {"attention_forward", "B=2 T=40 C=36 NH=3", OPTOL_MIXED, NULL},   /* HS 12: scalar loads */
    {"attention_forward", "B=1 T=70 C=256 NH=2", OPTOL_MIXED, NULL},  /* HS 128, the largest */
    {"attention_forward", "B=1 T=200 C=128 NH=2", OPTOL_MIXED, NULL}, /* 64-key tiles crossing 128-query blocks */
    {"attention_backward", "B=2 T=67 C=96 NH=2", OPTOL_MIXED, NULL},
    {"attention_backward", "B=2 T=40 C=36 NH=3", OPTOL_MIXED, NULL},
    {"attention_backward", "B=1 T=200 C=128 NH=2", OPTOL_MIXED, NULL}, /* HS 64: four key tiles, four query tiles */
    {"attention_backward", "B=1 T=70 C=256 NH=2", OPTOL_MIXED, NULL},  /* HS 128: 32-row inner tiles */
    {"attention_forward", "B=3 T=1 C=64 NH=1", OPTOL_MIXED, NULL},    /* one token: a tile of one row */
    {"attention_backward", "B=3 T=1 C=64 NH=1", OPTOL_MIXED, NULL},
    /* Packed examples (positions): per-row lower bounds, tiles below a block's lowest start skipped, rows
     * whose first tiles hold none of their keys. */
    {"attention_forward", "B=2 T=67 C=96 NH=2 pos=packed", OPTOL_MIXED, NULL},
    {"attention_forward", "B=2 T=200 C=128 NH=2 pos=packed", OPTOL_MIXED, NULL}, /* HS 64, four key tiles */
    {"attention_forward", "B=2 T=40 C=36 NH=3 pos=packed", OPTOL_MIXED, NULL},
    {"attention_forward", "B=1 T=150 C=256 NH=2 pos=packed", OPTOL_MIXED, NULL}, /* HS 128 */
    {"attention_backward", "B=2 T=67 C=96 NH=2 pos=packed", OPTOL_MIXED, NULL},
    {"attention_backward", "B=2 T=200 C=128 NH=2 pos=packed", OPTOL_MIXED, NULL},
    {"attention_backward", "B=2 T=40 C=36 NH=3 pos=packed", OPTOL_MIXED, NULL},
    {"attention_backward", "B=1 T=150 C=256 NH=2 pos=packed", OPTOL_MIXED, NULL}, /* HS 128: 32-row inner tiles */
    {"classifier", "N=37 C=64 V=1000 Vp=1024 chunk=16 grad_scale=0.5", OPTOL_MIXED, "losses=elem"},
    {"classifier", "N=20 C=32 V=250 Vp=256 chunk=64", OPTOL_MIXED, "losses=elem"},
    {"classifier", "N=20 C=32 V=250 Vp=256 chunk=64 dinp=none dwte=none", OPTOL_MIXED, "losses=elem"}, /* loss only */
    {"convert_from_f32", "n=4099", OPTOL_ELEM, NULL},
    {"convert_to_f32", "n=4099", OPTOL_ELEM, NULL},
    {"adamw", "n=3001 step=3 grad_scale=0.75", OPTOL_ELEM, NULL},
    {"sumsq", "n=5003", OPTOL_ELEM, NULL},
    {"accumulate", "n=1001 first=0", OPTOL_ELEM, NULL},
    {"accumulate", "n=1001 first=1", OPTOL_ELEM, NULL},
    {"rmsnorm_forward", "N=131 C=96 eps=1e-5", OPTOL_ELEM, "rstd=1e-5"},
    {"rmsnorm_forward", "N=37 C=50 eps=1e-6", OPTOL_ELEM, "rstd=1e-5"},   /* C not a multiple of 8: scalar */
    {"rmsnorm_forward", "N=64 C=1030 eps=1e-5", OPTOL_ELEM, "rstd=1e-5"}, /* wide, scalar */
    {"rmsnorm_forward", "N=16 C=1040 eps=1e-5", OPTOL_ELEM, "rstd=1e-5"}, /* wide, a partial last 256-column pass */
    {"rmsnorm_backward", "N=131 C=96", OPTOL_ELEM, NULL},
    {"rmsnorm_backward", "N=37 C=50", OPTOL_ELEM, NULL},
    {"rmsnorm_backward", "N=64 C=1030", OPTOL_ELEM, NULL},
    {"rmsnorm_backward", "N=1030 C=520", OPTOL_ELEM, NULL}, /* dweight: rows past one pass of 512 */
    {"rope_forward", "B=2 T=33 NH=4 NKV=2 HS=64", OPTOL_ELEM, NULL},  /* grouped-query heads */
    {"rope_forward", "B=1 T=17 NH=3 NKV=1 HS=128", OPTOL_ELEM, NULL}, /* one key/value head (MQA) */
    {"rope_forward", "B=2 T=19 NH=2 NKV=2 HS=12", OPTOL_ELEM, NULL},  /* half of 6: scalar */
    {"rope_forward", "B=1 T=9 NH=6 NKV=3 HS=40", OPTOL_ELEM, NULL},   /* half of 20: scalar, grouped */
    {"rope_backward", "B=2 T=33 NH=4 NKV=2 HS=64", OPTOL_ELEM, NULL},
    {"rope_backward", "B=1 T=17 NH=3 NKV=1 HS=128", OPTOL_ELEM, NULL},
    {"rope_backward", "B=2 T=19 NH=2 NKV=2 HS=12", OPTOL_ELEM, NULL},
    {"rope_backward", "B=1 T=9 NH=6 NKV=3 HS=40", OPTOL_ELEM, NULL},
    {"swiglu_forward", "N=37 I=100", OPTOL_ELEM, NULL}, /* I not a multiple of 8: scalar */
    {"swiglu_forward", "N=5 I=1030", OPTOL_ELEM, NULL},
    {"swiglu_forward", "N=9 I=344", OPTOL_ELEM, NULL},  /* 16-byte accesses */
    {"swiglu_backward", "N=37 I=100", OPTOL_ELEM, NULL},
    {"swiglu_backward", "N=5 I=1030", OPTOL_ELEM, NULL},
    {"swiglu_backward", "N=9 I=344", OPTOL_ELEM, NULL},
    {"kv_append", "B=2 Tq=5 NH=4 NKV=4 HS=16 Tmax=12 pos0=3", OPTOL_ELEM, NULL},      /* GPT-2's: a prompt chunk */
    {"kv_append", "B=3 Tq=1 NH=6 NKV=2 HS=64 Tmax=9 pos0=8", OPTOL_ELEM, NULL},       /* one token, the last slot */
    {"kv_append_rope", "B=2 Tq=7 NH=4 NKV=2 HS=64 Tmax=20 pos0=0", OPTOL_ELEM, NULL}, /* a prompt from 0, grouped */
    {"kv_append_rope", "B=1 Tq=1 NH=3 NKV=1 HS=12 Tmax=40 pos0=33", OPTOL_ELEM, NULL}, /* one token, MQA, half 6 */
    {"kv_append_rope", "B=2 Tq=3 NH=2 NKV=2 HS=128 Tmax=8 pos0=5", OPTOL_ELEM, NULL},
    {"attention_decode", "B=2 Tq=1 NH=4 NKV=2 HS=64 Tmax=70 pos0=66", OPTOL_MIXED, NULL},  /* a token at 66: 67 keys */
    {"attention_decode", "B=1 Tq=9 NH=6 NKV=3 HS=40 Tmax=20 pos0=3", OPTOL_MIXED, NULL},   /* a chunk: 4..12 keys */
    {"attention_decode", "B=3 Tq=1 NH=3 NKV=1 HS=12 Tmax=300 pos0=290", OPTOL_MIXED, NULL}, /* keys past a 256 tile, MQA */
    {"attention_decode", "B=1 Tq=2 NH=2 NKV=2 HS=256 Tmax=5 pos0=0", OPTOL_MIXED, NULL},   /* the largest head */
};

#define OP_SHAPES (sizeof op_shapes / sizeof op_shapes[0])

/* The tolerance `tensor` of `shape` is held to: its entry in shape->tols,
 * else the row's class (elem, mixed: the caller's values for its type). */
static inline double op_shape_tol(const op_shape *shape, const char *tensor, double elem, double mixed)
{
    double tol = shape->tol == OPTOL_MIXED ? mixed : elem;
    size_t len = strlen(tensor);
    for (const char *p = shape->tols; p && *p;) {
        while (*p == ' ')
            p++;
        if (strncmp(p, tensor, len) == 0 && p[len] == '=') {
            const char *v = p + len + 1;
            if (strncmp(v, "elem", 4) == 0)
                return elem;
            if (strncmp(v, "mixed", 5) == 0)
                return mixed;
            return strtod(v, NULL);
        }
        p = strchr(p, ' ');
    }
    return tol;
}

#endif
