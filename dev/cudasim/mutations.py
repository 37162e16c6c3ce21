#!/usr/bin/env python3
"""Bugs planted one at a time into ferry's CUDA and engine code, each of which
the suite 'cudasim' must catch: the proof that the simulated device sees what
it claims to see (docs/cudasim.md has the last run's table).

For each mutation the script takes a copy of the tree (the files git tracks,
copied once into WORK/src), replaces one exact piece of source, rebuilds, and
runs the tests named for it on the simulator; a mutation is caught when a
test fails (a build that fails is reported, not counted). The copy is
restored after each. Nothing in the working tree is touched.

usage: dev/cudasim/mutations.py [--work DIR] [--only NAME]... [--ci] [--list | --check]
  --work DIR   where the copy and its build live (default /tmp/ferry-mutations;
               kept between runs, so a second run rebuilds only what changed)
  --only NAME  run only this mutation (repeatable)
  --ci         the bounded run CI makes (the test 'mutations-ci'): only the
               rows of CI_ROWS (shared-memory hazards the simulator must
               catch under any schedule), each with its one test, in
               CI_ROWS's order; fails when a row is not caught
  --list       print the mutations and exit
  --check      only check that every mutation still applies to this tree
               (its text found exactly once in its file, its tests known to
               the build's test list when --build is given): seconds, no
               build; exit 1 naming each that does not (CI runs it)
  --build DIR  with --check: the build folder whose tests the rows name
The rows of NARROW run test_ops_gpu narrowed to the op planted
(FERRY_TEST_ONLY). Prints one line per mutation as it lands, then the table
(markdown), also written to WORK/mutations.md. Exit status 0 when every
mutation expected to be caught was caught.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

OPS = ["ops-sim-ascending", "ops-sim-descending", "ops-sim-random", "kernel-lab-sim"]
# The warp-serial runs: one warp a whole barrier interval ahead of the rest.
WARP = ["ops-sim-warp-ascending", "ops-sim-warp-descending"]
ENGINE = ["engine-sim", "review-sim"]

# name, what it plants, file, the exact text, its replacement, the tests, expected caught
MUTATIONS = [
    ("syncthreads-strip", "removed __syncthreads: the 16-column strip sums (matmul's dbias, layernorm's "
     "dweight/dbias) read the row slots' partial sums before they are written",
     "backend/ops/cuda_util.cuh",
     "        *cu_strip_at(sm, slot, 8 * half + j) = acc[j];\n    __syncthreads();\n",
     "        *cu_strip_at(sm, slot, 8 * half + j) = acc[j];\n", OPS, True),
    ("chunks-layernorm", "layernorm's register-row dinp given a chunk too few: the last 256-column chunk of a "
     "row (C = 520) never computed",
     "backend/ops/layernorm.cu",
     "            const int chunks = (C + 255) / 256;\n",
     "            const int chunks = C / 256 > 0 ? C / 256 : 1;\n", OPS, True),
    ("syncwarp-attention", "removed __syncwarp: the WMMA attention forward (Volta's; lab variants 1 and 2) reads "
     "the P V product another lane stored",
     "backend/ops/attention_wmma.cu",
     "            wmma::store_matrix_sync(Uf + n * 16, acc[n], D::LDO, wmma::mem_row_major);\n        __syncwarp();\n",
     "            wmma::store_matrix_sync(Uf + n * 16, acc[n], D::LDO, wmma::mem_row_major);\n", OPS, True),
    ("syncwarp-before-shuffle", "removed __syncwarp between lanes that only shuffles separate in the WMMA attention "
     "(Volta's; lab variants 1 and 2): a GPU's shuffle does not order memory, and the race check orders lanes by "
     "__syncwarp alone",
     "backend/ops/attention_wmma.cu",
     "        __syncwarp(); /* Pb complete, Uf's scores consumed */\n", "", OPS, True),
    ("shuffle-lane-attention", "wrong shuffle lane: the WMMA attention's row maximum taken with lane ^ 2 instead of "
     "lane ^ 1",
     "backend/ops/attention_wmma.cu",
     "tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));",
     "tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));", OPS, True),
    ("shuffle-warp-sum", "wrong shuffle lanes: the warp sum stops one step short (lane ^ 1 never added)",
     "backend/ops/cuda_util.cuh",
     "static __device__ __forceinline__ float cu_warp_sum(float v)\n{\n    for (int o = 16; o > 0; o >>= 1)",
     "static __device__ __forceinline__ float cu_warp_sum(float v)\n{\n    for (int o = 16; o > 1; o >>= 1)",
     OPS, True),
    ("grid-layernorm", "off-by-one grid: layernorm forward launches N / 8 blocks, the last rows unwritten",
     "backend/ops/layernorm.cu",
     "    const unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);\n"
     "    return cu_with_type(act, \"layernorm_forward\"",
     "    const unsigned blocks = (unsigned)(N / ROWS_PER_BLOCK);\n"
     "    return cu_with_type(act, \"layernorm_forward\"", OPS, True),
    ("grid-colsum", "off-by-one grid: the column sum launches cols / 16 strips",
     "backend/ops/matmul.cu",
     "colsum_add_kernel<T><<<(cols + CU_STRIP - 1) / CU_STRIP, 1024, 0, stream>>>",
     "colsum_add_kernel<T><<<cols / CU_STRIP, 1024, 0, stream>>>", OPS, True),
    ("transpose-matmul", "swapped cuBLASLt transpose: the forward's weight not transposed",
     "backend/ops/matmul.cu",
     "return cuda_gemm(cu_stream(stream), act, true, false, OC, N, C,",
     "return cuda_gemm(cu_stream(stream), act, false, false, OC, N, C,", OPS, True),
    ("ld-matmul", "wrong leading dimension: dinp's gemm reads dout with ld OC + 8",
     "backend/ops/matmul.cu",
     "st = cuda_gemm(s, act, false, false, C, N, OC, weight, C, dout, OC, dinp, C, 1.0f, nullptr);",
     "st = cuda_gemm(s, act, false, false, C, N, OC, weight, C, dout, OC + 8, dinp, C, 1.0f, nullptr);", OPS, True),
    ("smem-optin", "missing shared-memory opt-in: the attention kernels launched with up to 102 KiB and no "
     "cudaFuncSetAttribute",
     "backend/ops/cuda_util.cuh",
     "    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));\n",
     "", OPS, True),
    ("cp-async-wait", "the attention forward no longer waits for its K/V tile's cp.async before the barrier: the "
     "warps read a tile still in flight",
     "backend/ops/attention.cu",
     "                cu_cp_commit<ARCH>();\n                cu_cp_wait<ARCH, 1>();\n            } else {\n"
     "                cu_cp_wait<ARCH, 0>();\n            }\n        } else if (j > j0) {\n"
     "            load_rows<T, HSP, BKV, THREADS, ARCH>(Kt,",
     "                cu_cp_commit<ARCH>();\n            } else {\n"
     "                cu_cp_wait<ARCH, 0>();\n            }\n        } else if (j > j0) {\n"
     "            load_rows<T, HSP, BKV, THREADS, ARCH>(Kt,", OPS + WARP, True),
    ("stage-barrier", "removed the barrier that ends a K/V tile: the next tile's copy overwrites a stage other "
     "warps still read",
     "backend/ops/attention.cu",
     "        __syncthreads(); /* every warp is done with this stage */\n", "", OPS + WARP, True),
    ("stage-barrier-dkv", "removed the barrier that ends a query tile of the attention backward's dK/dV kernel: the "
     "next tile's cp.async overwrites a Q/dO stage other warps still read",
     "backend/ops/attention.cu",
     "        __syncthreads();\n    }\n    /* The warp's own K rows of shared memory stage its results. */\n",
     "    }\n    /* The warp's own K rows of shared memory stage its results. */\n", OPS + WARP, True),
    ("stage-barrier-dq", "removed the barrier that ends a K/V tile of the attention backward's dQ kernel: the "
     "next tile's cp.async overwrites a stage other warps still read",
     "backend/ops/attention.cu",
     "        __syncthreads();\n    }\n    store_rows<T, HSP>(dqkv + (size_t)b * T_ * stride",
     "    }\n    store_rows<T, HSP>(dqkv + (size_t)b * T_ * stride", OPS + WARP, True),
    ("cp-async-barrier", "removed the barrier after the attention forward's cp.async wait: each thread has its "
     "own copies of the K/V tile, the other warps read them unordered",
     "backend/ops/attention.cu",
     "            load_rows<T, HSP, BKV, THREADS, ARCH>(Vt, base + 2 * C, stride, kv0, T_, HS, vec);\n        }\n"
     "        __syncthreads();\n",
     "            load_rows<T, HSP, BKV, THREADS, ARCH>(Vt, base + 2 * C, stride, kv0, T_, HS, vec);\n        }\n",
     OPS + WARP, True),
    ("cp-async-wait-last", "a wrong cp.async count: the attention forward's last K/V tile waited with "
     "cp.async.wait_group 1 where 0 is needed, so the tile it reads is still in flight",
     "backend/ops/attention.cu",
     "                cu_cp_wait<ARCH, 0>();\n            }\n        } else if (j > j0) {",
     "                cu_cp_wait<ARCH, 1>();\n            }\n        } else if (j > j0) {", OPS + WARP, True),
    ("cp-async-wait-dkv", "a wrong cp.async count: the attention backward's dK/dV kernel waits with "
     "cp.async.wait_group 2 where 1 is needed, so the K/V rows and the query tile it reads are still in flight",
     "backend/ops/attention.cu",
     "                load_floats<THREADS>(Ds + s2 * BI, drow, q0 + BI, BI, T_, 1.0f);\n"
     "                cu_cp_commit<ARCH>();\n                cu_cp_wait<ARCH, 1>();\n",
     "                load_floats<THREADS>(Ds + s2 * BI, drow, q0 + BI, BI, T_, 1.0f);\n"
     "                cu_cp_commit<ARCH>();\n                cu_cp_wait<ARCH, 2>();\n", OPS + WARP, True),
    ("cp-async-wait-dq-last", "a wrong cp.async count: the attention backward's dQ kernel waits for its last K/V "
     "tile with cp.async.wait_group 1 where 0 is needed",
     "backend/ops/attention.cu",
     "                cu_cp_wait<ARCH, 0>();\n            }\n        } else if (j > 0) {\n"
     "            load_rows<T, HSP, BI, THREADS, ARCH>(Kt,",
     "                cu_cp_wait<ARCH, 1>();\n            }\n        } else if (j > 0) {\n"
     "            load_rows<T, HSP, BI, THREADS, ARCH>(Kt,", OPS + WARP, True),
    ("cp-async-wait-wrapper", "the cp.async wait wrapper's count off by one (wait_group N + 1 for cu_cp_wait<N>): "
     "every attention kernel reads a tile still in flight",
     "backend/ops/mma.cuh",
     '        asm volatile("cp.async.wait_group %0;\\n" ::"n"(N));',
     '        asm volatile("cp.async.wait_group %0;\\n" ::"n"(N + 1));', OPS + WARP, True),
    ("syncwarp-store-rows", "removed the __syncwarp in the mma.sync attention's store_rows (the forward's output, "
     "the backward's dK, dV and dQ): lanes read the staged rows other lanes of the warp have not written yet",
     "backend/ops/attention.cu",
     "            cu_pack2<T>(acc[dt][2] * factor, acc[dt][3] * factor);\n    }\n    __syncwarp();\n",
     "            cu_pack2<T>(acc[dt][2] * factor, acc[dt][3] * factor);\n    }\n", OPS + WARP, True),
    ("syncwarp-store-rows-reuse", "removed the __syncwarp that ends store_rows: the dK/dV kernel's dV overwrites "
     "the warp's stage while other lanes still read dK from it (write-after-read)",
     "backend/ops/attention.cu",
     "            *p = cu_round<T>(accumulate ? v + cu_f32(*p) : v);\n        }\n    }\n    __syncwarp();\n}",
     "            *p = cu_round<T>(accumulate ? v + cu_f32(*p) : v);\n        }\n    }\n}", OPS + WARP, True),
    ("syncthreads-strip-part", "removed cu_strip_sum's second __syncthreads: threads 0..15 add the 16 parts "
     "before the 256 threads have written them (rmsnorm's dweight, matmul's dbias, layernorm's dweight/dbias)",
     "backend/ops/cuda_util.cuh",
     "        sm.part[part][col] = s;\n    }\n    __syncthreads();\n",
     "        sm.part[part][col] = s;\n    }\n", OPS + WARP, True),
    ("syncthreads-decode-q", "removed the barrier that publishes attention_decode's query row in shared memory: "
     "the dot products read it before the threads that load it have",
     "backend/ops/attention_decode.cu",
     "        qs[tid] = cu_f32(qrow[tid]);\n    __syncthreads();\n",
     "        qs[tid] = cu_f32(qrow[tid]);\n", ["decode-cuda-sim"], True),
    ("syncthreads-decode-reduce", "removed the barrier that ends attention_decode's block reduction: the next "
     "reduction overwrites red[0] while other warps still read the last one's result (write-after-read)",
     "backend/ops/attention_decode.cu",
     "    const float r = red[0];\n    __syncthreads();\n",
     "    const float r = red[0];\n", ["decode-cuda-sim"], True),
    ("ldmatrix-trans", "P @ V reads V through ldmatrix without .trans: the B fragments of V's transpose",
     "backend/ops/attention.cu",
     "            cu_ldsm4<true>(b, cu_smem(y + ", "            cu_ldsm4<false>(b, cu_smem(y + ", OPS, True),
    ("mma-k8-turing", "Turing's m16n8k16 as two m16n8k8: the second half multiplied by the first half's B",
     "backend/ops/mma.cuh",
     '                     : "r"(a[2]), "r"(a[3]), "r"(b1));',
     '                     : "r"(a[2]), "r"(a[3]), "r"(b0));', ["ops-sim-f16-sm75"], True),
    ("d2h-before-kernel", "a D2H recorded before the kernel that writes the buffer: the drain of a group's "
     "gradients no longer waits for its backward",
     "engine/drain.c",
     "        if ((st = backend_stream_wait_event(c->d2h, g->grads_done)) == FERRY_OK &&\n",
     "        if ((st = FERRY_OK) == FERRY_OK &&\n", ENGINE, True),
    ("upload-while-read", "an upload into a buffer still being read: params mode gives a group's weight slot "
     "back (for the next group's upload) without waiting for its last use",
     "engine/residency.c",
     "    ferry_status st = backend_event_synchronize(g->released);\n    if (st != FERRY_OK)\n        return st;\n",
     "    ferry_status st = FERRY_OK;\n", ENGINE, True),
    ("compute-before-upload", "the compute stream no longer waits for a group's upload before reading it",
     "engine/schedule.c",
     "    if ((rc = backend_stream_wait_event(st, g->uploaded)) != FERRY_OK)\n        return rc;\n    if (timed) {",
     "    if (timed) {", ENGINE, True),
    ("dpu-group0", "the delayed update's upload waits for group 0's backward only (the review's finding, put back: "
     "covered by engine_step's wait for every drain, so nothing can fail)",
     "engine/update.c",
     "        st = upload(u, &gs->g[i], gs->g[i].grads_done);",
     "        st = upload(u, &gs->g[i], gs->g[0].grads_done);", ENGINE, False),
    ("encoder-static-smem", "the encoder's shared-memory check without the static part (the review's finding, "
     "put back)",
     "backend/ops/encoder.cu",
     "constexpr int WTE_MAX_C = (int)((48 * 1024 - WTE_STATIC_SMEM) / sizeof(float));",
     "constexpr int WTE_MAX_C = (int)((48 * 1024) / sizeof(float));", ["review-sim"], True),
    ("encoder-token-v", "the encoder backward without its V bound: a token >= V passed to the op adds into a row "
     "past dwte (the review's finding, put back)",
     "backend/ops/encoder.cu",
     "__device__ __forceinline__ int clamp_token(int32_t t, int V) { return t < 0 || t >= V ? 0 : t; }",
     "__device__ __forceinline__ int clamp_token(int32_t t, int V) { return t < 0 && V > 0 ? 0 : t; }",
     ["review-sim"], True),
    ("f16-wmma-tile32", "the WMMA attention's 32-query tiles (Turing's before the mma.sync kernels) with the row "
     "maximum taken over half the lanes of a row pair",
     "backend/ops/attention_wmma.cu",
     "tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));",
     "tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, BQ == 32 ? 0 : 1));",
     ["ops-sim-f16-sm75"], True),
    # A barrier that protects an overwrite while other warps still read.
    ("syncthreads-overwrite-blocksum", "removed __syncthreads that keeps a block sum from overwriting its 32 "
     "partials while the block maximum before it still reads them (write-after-read: the classifier's and "
     "layernorm's reductions)",
     "backend/ops/cuda_util.cuh",
     "    v = cu_warp_sum(v);\n    __syncthreads(); /* `shared` may still be read by a previous call */\n",
     "    v = cu_warp_sum(v);\n", WARP + ["ops-sim-ascending"], True),
    ("syncthreads-overwrite-logits", "removed __syncthreads before the classifier overwrites its logits with "
     "the gradient while thread 0 still reads the target's logit (global memory: no race check; the "
     "warp-serial schedule shows it)",
     "backend/ops/classifier.cu",
     "    __syncthreads(); /* row[target] is read above before it is overwritten */\n", "", WARP, True),
    ("syncthreads-overwrite-attention", "removed __syncthreads before the WMMA attention (Volta's) loads the next "
     "K/V tile over the one other warps still multiply",
     "backend/ops/attention_wmma.cu",
     "        __syncthreads(); /* every warp is done with the previous K/V */\n", "", ["ops-sim-f16-sm70"], True),
    # A non-atomic read-modify-write.
    ("rmw-warp-count", "a non-atomic read-modify-write: the encoder's per-warp match count taken by every "
     "matching lane incrementing one shared counter, where lane 0 stored the ballot's popcount (gcc checks "
     "`x++`'s store through its load's check, so the access hooks see two reads; the lanes run one at a time, "
     "so no update is lost here)",
     "backend/ops/encoder.cu",
     "        if (lane == 0)\n            warp_count[warp] = __popc(mask);\n",
     "        if (lane == 0)\n            warp_count[warp] = 0;\n        __syncwarp();\n        if (match)\n"
     "            warp_count[warp]++;\n", OPS, False),
    # The host reading a download before its event.
    ("host-read-before-d2h", "the CPU reads a group's drained gradients before their download has landed: the "
     "norm and sum tiles no longer wait for the D2H stream's host function",
     "engine/drain.c",
     "    while (!job->landed && !job->abandoned)\n        pthread_cond_wait(&job->landed_cond, &job->lock);\n",
     "", ENGINE, True),
    # fp16 overflow handling.
    ("f16-saturate", "fp16 overflow hidden: the kernels' fp16 rounding saturates at 65504 instead of storing "
     "inf, so an overflowing gradient never reaches the loss scale's check",
     "backend/ops/cuda_util.cuh",
     "    static __device__ __forceinline__ f16 round(float x) { return __float2half_rn(x); }",
     "    static __device__ __forceinline__ f16 round(float x) { return __float2half_rn(fminf(fmaxf(x, -65504.0f), "
     "65504.0f)); }", ["ops-sim-f16-sm75", "train-sim-f16"], True),
    # A wrong limits-table entry.
    ("limits-sm86", "a wrong limits-table entry: the simulated RTX 3090 (sm_86) allows the A100's 163 KiB of "
     "shared memory a block instead of 99 KiB",
     "dev/cudasim/arch.cpp",
     "    {86, \"NVIDIA GeForce RTX 3090\", 82, 48 << 10, 99 << 10, 100 << 10, 1536, 24ull << 30, 1},",
     "    {86, \"NVIDIA GeForce RTX 3090\", 82, 48 << 10, 163 << 10, 100 << 10, 1536, 24ull << 30, 1},",
     ["device-sim", "ops-sim-xl"], True),
    # cuBLASLt alignment and workspace misuse.
    ("cublaslt-alignment", "cuBLASLt told every operand is 16-byte aligned, whatever the pointers are",
     "backend/ops/matmul.cu",
     "    uint32_t aa = k.align_a, ab = k.align_b, ad = k.align_d;",
     "    uint32_t aa = 16, ab = 16, ad = 16;", OPS + ["engine-sim"], True),
    ("cublaslt-workspace", "cuBLASLt's matmul given 4 KiB of workspace where its algorithm was chosen for the "
     "32 MiB offered",
     "backend/ops/matmul.cu",
     "                              &p->algo, c->workspace, c->workspace_bytes, stream));",
     "                              &p->algo, c->workspace, 4096, stream));", ["engine-sim", "gpt2-cuda-sim"], True),
    # NCCL misuse.
    ("nccl-count", "NCCL misuse: the all-gather asked for one element more a rank than its buffers hold",
     "backend/comm_nccl.c",
     "             : kind == NCCL_AG ? ncclAllGather(send, recv, count, nccl_type(t), n->comm, cs)",
     "             : kind == NCCL_AG ? ncclAllGather(send, recv, count + 1, nccl_type(t), n->comm, cs)",
     ["engine-dp-sim-2-bf16", "dp-gpu-sim"], True),
    # An out-of-bounds read of a tail.
    ("tail-read-layernorm", "an out-of-bounds read of a row's tail: layernorm's mean reads one element past "
     "the end of each row (the next row's first, or past the buffer)",
     "backend/ops/layernorm.cu",
     "    for (int c = lane * PER; c < C; c += 32 * PER) {\n        load_n<PER>(v, x + c);\n#pragma unroll\n"
     "        for (int j = 0; j < PER; j++)\n            sum += v[j];",
     "    for (int c = lane * PER; c <= C; c += 32 * PER) {\n        load_n<PER>(v, x + c);\n#pragma unroll\n"
     "        for (int j = 0; j < PER; j++)\n            sum += v[j];", OPS, True),
]


# The rows whose tests are narrowed to the op planted: FERRY_TEST_ONLY's
# words for test_ops_gpu (the other programs ignore it). A test then stops
# at the first part that can see the bug instead of running every op.
NARROW = {name: "attention" for name in (
    "stage-barrier", "stage-barrier-dkv", "stage-barrier-dq", "cp-async-wait", "cp-async-barrier",
    "cp-async-wait-last", "cp-async-wait-dkv", "cp-async-wait-dq-last", "cp-async-wait-wrapper",
    "syncwarp-store-rows", "syncwarp-store-rows-reuse")}
NARROW["syncthreads-strip-part"] = "rmsnorm_backward"

# The rows CI runs at every run (--ci), each with one test: a shared-memory
# hazard of each kind in the kernels that depend on it, which the race
# check catches whatever the schedule, so a thread-serial one is enough.
# Chosen to keep the step within about five minutes on two cores (a row is
# a compile of what includes its file, about 35 s for attention.cu, and a
# narrowed test): docs/cudasim.md has its time. They run in this order:
# attention_decode.cu's first, then attention.cu's, then mma.cuh's (which
# attention.cu includes), so attention.cu is compiled once a row and once
# more to put it back.
CI_ROWS = {
    "syncthreads-decode-reduce": "decode-cuda-sim",  # (a) warps reusing a tile without __syncthreads
    "stage-barrier": "ops-sim-ascending",          # (c) the next tile's cp.async over a stage being read
    "cp-async-barrier": "ops-sim-ascending",       # (c) no barrier after the wait
    "syncwarp-store-rows": "ops-sim-ascending",    # (a) lanes reusing a warp's tile without __syncwarp
    "cp-async-wait-wrapper": "ops-sim-ascending",  # (b) a wait count off by one, every attention kernel
}


JOBS = "-j%d" % max(1, len(os.sched_getaffinity(0)))  # the copy's builds: no more jobs than cores


def run(cmd, cwd=None, timeout=None, env=None):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                       env=env)
    return p.returncode, p.stdout


def copy_tree(root, dst):
    rc, out = run(["git", "ls-files", "-z"], cwd=root)
    if rc:
        sys.exit("mutations: git ls-files failed in %s:\n%s" % (root, out))
    for rel in filter(None, out.split("\0")):
        src, to = os.path.join(root, rel), os.path.join(dst, rel)
        os.makedirs(os.path.dirname(to), exist_ok=True)
        if not os.path.exists(to) or open(src, "rb").read() != open(to, "rb").read():
            # A new time stamp, not the source's: a file changed since the
            # copy's last build must look newer than that build's objects.
            shutil.copyfile(src, to)
            shutil.copymode(src, to)


def test_targets(build, tests):
    """The files in the build folder the named tests run (their programs, and
    the programs a script test is given), for ninja to bring up to date."""
    import json
    rc, out = run(["meson", "introspect", build, "--tests"])
    if rc:
        sys.exit("mutations: meson introspect failed:\n" + out[-3000:])
    build = os.path.abspath(build)
    files = set()
    for t in json.loads(out):
        if t["name"] in tests:
            for c in t["cmd"]:
                if not isinstance(c, str) or c.startswith("-") or "/" not in c:
                    continue  # an option or a word, not a program
                c = os.path.normpath(c if os.path.isabs(c) else os.path.join(build, c))
                if c.startswith(build + os.sep):  # a script in the source tree is not a target
                    files.add(os.path.relpath(c, build))
    return sorted(files)


def meson_test(build, tests, only=None):
    env = dict(os.environ)
    if only:
        env["FERRY_TEST_ONLY"] = only
    rc, out = run(["meson", "test", "-C", build, "--num-processes", "2", "--no-rebuild"] + tests, timeout=3600,
                  env=env)
    failed = [t for t in tests if any(any(w in l for w in (" FAIL ", " ERROR ", " TIMEOUT "))
                                      for l in out.splitlines() if (" %s " % t) in l)]
    return rc == 0, failed, out


def check_rows(root, build):
    """Every row's text once in its file, and its tests in the build's list."""
    import json
    known = None
    if build:
        rc, out = run(["meson", "introspect", build, "--tests"])
        if rc:
            sys.exit("mutations: meson introspect %s failed:\n%s" % (build, out[-2000:]))
        known = {t["name"] for t in json.loads(out)}
    bad, names = 0, set()
    for name, what, rel, old, new, tests, expect in MUTATIONS:
        problems = []
        if name in names:
            problems.append("the name is used twice")
        names.add(name)
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            problems.append("%s does not exist" % rel)
        else:
            n = open(path, encoding="utf-8").read().count(old)
            if n != 1:
                problems.append("its text is found %d times in %s, not once (the source moved on: update the row)"
                                % (n, rel))
        if old == new:
            problems.append("it changes nothing")
        if known is not None:
            missing = [t for t in tests if t not in known]
            if missing:
                problems.append("the build has no test %s" % ", ".join(missing))
        for p in problems:
            print("mutations: %s: %s" % (name, p))
        bad += bool(problems)
    for name in sorted(set(NARROW) - names):
        print("mutations: %s: NARROW names a row the table does not have" % name)
        bad += 1
    for name, test in sorted(CI_ROWS.items()):
        problems = []
        if name not in names:
            problems.append("CI_ROWS names a row the table does not have")
        if known is not None and test not in known:
            problems.append("CI_ROWS names the test %s, which the build does not have" % test)
        for p in problems:
            print("mutations: %s: %s" % (name, p))
        bad += bool(problems)
    print("mutations: %d rows, %d apply to this tree%s" % (len(MUTATIONS), len(MUTATIONS) - bad,
                                                          "" if not bad else "; fix the others"))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--work", default="/tmp/ferry-mutations")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--build")
    ap.add_argument("--ci", action="store_true")
    a = ap.parse_args()
    # A test's timeout ends this with SIGTERM: the planted file is put back
    # on the way out (the finally below) rather than left in the copy.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("mutations: stopped (SIGTERM)"))
    if a.list:
        for m in MUTATIONS:
            print("%-24s %s (%s)" % (m[0], m[1], m[2]))
        return 0
    if a.check:
        return check_rows(os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")), a.build)
    chosen = [m for m in MUTATIONS if (not a.only or m[0] in a.only) and (not a.ci or m[0] in CI_ROWS)]
    if a.ci:  # one test each, in CI_ROWS's order
        order = list(CI_ROWS)
        chosen = sorted((m[:5] + ([CI_ROWS[m[0]]],) + m[6:] for m in chosen), key=lambda m: order.index(m[0]))
    t_start = time.time()
    unknown = set(a.only) - {m[0] for m in MUTATIONS}
    if unknown:
        sys.exit("mutations: no mutation named %s (--list shows them)" % ", ".join(sorted(unknown)))
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    src, build = os.path.join(a.work, "src"), os.path.join(a.work, "build")
    os.makedirs(src, exist_ok=True)
    copy_tree(root, src)
    if not os.path.exists(os.path.join(build, "build.ninja")):
        rc, out = run(["meson", "setup", build, src, "-Dcuda=disabled", "-Dcudasim=enabled"])
        if rc:
            sys.exit("mutations: meson setup failed:\n" + out[-3000:])
    # A copy's build kept from an earlier run keeps its options: the cards
    # the simulated backend accepts are gpu_archs's (auto: every one).
    run(["meson", "configure", build, "-Dgpu_archs=auto"])
    # The copy's meson files may have changed since its build: regenerated
    # first, so the test list read below is this tree's.
    rc, out = run(["ninja", "-C", build, "build.ninja"])
    if rc:
        sys.exit("mutations: the copy's build does not regenerate:\n" + out[-3000:])
    tests = sorted({t for m in chosen for t in m[5]})
    targets = test_targets(build, tests)
    rc, out = run(["ninja", "-C", build, JOBS] + targets)
    if rc:
        sys.exit("mutations: the unmutated tree does not build:\n" + out[-3000:])
    for only in sorted({NARROW.get(m[0], "") for m in chosen}):  # the tests as the rows below run them
        ok, failed, out = meson_test(build, sorted({t for m in chosen if NARROW.get(m[0], "") == only
                                                    for t in m[5]}), only)
        if not ok:
            sys.exit("mutations: the unmutated tree fails %s; fix that first:\n%s" % (failed, out[-3000:]))
    print("baseline: %s pass (%.0f s)" % (", ".join(tests), time.time() - t_start), flush=True)
    rows, bad = [], 0
    for name, what, rel, old, new, mtests, expect in chosen:
        path = os.path.join(src, rel)
        text = open(path, encoding="utf-8").read()
        if text.count(old) != 1:
            rows.append((name, what, rel, "the text to replace is not found once (the source moved on)", expect))
            bad += 1
            print("%-24s NOT APPLIED: the text is not there once" % name, flush=True)
            continue
        t0 = time.time()
        try:
            open(path, "w", encoding="utf-8").write(text.replace(old, new))
            rc, out = run(["ninja", "-C", build, JOBS] + test_targets(build, mtests))
            if rc:
                result, caught = "does not build", None
            else:
                ok, failed, out = meson_test(build, mtests, NARROW.get(name))
                caught = not ok
                result = ("caught by " + ", ".join(failed or ["a test"])) if caught else "not caught"
        finally:
            open(path, "w", encoding="utf-8").write(text)
        bad += caught is not expect
        rows.append((name, what, rel, result, expect))
        print("%-24s %s (%.0f s)%s" % (name, result, time.time() - t0,
                                      "" if caught is expect else "  <-- UNEXPECTED"), flush=True)
    run(["ninja", "-C", build, JOBS] + targets)  # leave the copy's build unmutated
    print("mutations: %d rows in %.0f s" % (len(rows), time.time() - t_start), flush=True)
    table = ["| mutation | file | result |", "| --- | --- | --- |"]
    for name, what, rel, result, expect in rows:
        table.append("| %s: %s | `%s` | %s%s |" % (name, what, rel, result,
                                                  "" if expect else " (expected: a known limit)"))
    text = "\n".join(table) + "\n"
    print("\n" + text)
    open(os.path.join(a.work, "mutations.md"), "w").write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
