/* memprof's command lines, parsed and checked before any work starts, and
 * their --help texts: the report and dump subcommands' options and memprof
 * plan's model and run flags. Owns no state; prints each problem to stderr. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "common/units.h"
#include "train/flag_words.h"
#include "train/hf_llama.h"
#include "train/options.h"
#include "tools/memprof/memprof.h"

void mp_usage(FILE *f)
{
    fputs("usage: memprof [report] [options] TRACE\n"
          "       memprof dump TRACE\n"
          "       memprof plan [options]   (memprof plan --help)\n"
          "\n"
          "Reads a memory trace written by ferry (the trainer's --trace FILE, or\n"
          "trace_open() in the API) and prints, for device and host memory: the\n"
          "peak, the step and phase it fell in, the bytes by category at that\n"
          "moment, and the largest allocations live then.\n"
          "\n"
          "report options:\n"
          "  --json       print the figures as JSON instead of text\n"
          "  --svg FILE   draw a stacked-area timeline by category, phases marked\n"
          "  --step N     draw step N alone (with --svg): what moves within one step\n"
          "  --top N      list the N largest live allocations at each peak (default 10, max 64)\n"
          "  --check-plan exit 3 when the run strayed from the device's memory plan the\n"
          "               trace carries (a trace without one passes, saying so)\n"
          "  -h, --help   this text\n"
          "\n"
          "dump prints every record as one JSON object per line.\n"
          "\n"
          "The report ends with the plan: the device's planned region and buffers\n"
          "as the engine placed them, checked against every device allocation and\n"
          "slot occupancy of the run; the picture draws the address space.\n"
          "\n"
          "Exit status: 0 on success; 1 when the trace is damaged (the figures of\n"
          "the records before the damage are still printed) or is not a trace at\n"
          "all (no figures); 2 on a usage error; 3 with --check-plan when the run\n"
          "strayed from its plan.\n",
          f);
}


int mp_parse_report_args(int argc, char **argv, mp_report_args *a)
{
    *a = (mp_report_args){.top = 10, .step = -1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            mp_usage(stdout);
            return 1;
        } else if (!strcmp(argv[i], "--json")) {
            a->json = true;
        } else if (!strcmp(argv[i], "--check-plan")) {
            a->check_plan = true;
        } else if (!strcmp(argv[i], "--svg") && i + 1 < argc) {
            a->svg = argv[++i];
        } else if (!strcmp(argv[i], "--top") && i + 1 < argc) {
            char *end;
            errno = 0;
            long top = strtol(argv[++i], &end, 10);
            if (errno || end == argv[i] || *end || top < 0 || top > MP_TOP_MAX) {
                fprintf(stderr, "memprof: --top wants a count from 0 to %d, not '%s'\n", MP_TOP_MAX, argv[i]);
                return 2;
            }
            a->top = (int)top;
        } else if (!strcmp(argv[i], "--step") && i + 1 < argc) {
            char *end;
            errno = 0;
            long long step = strtoll(argv[++i], &end, 10);
            if (errno || end == argv[i] || *end || step < 0) {
                fprintf(stderr, "memprof: --step wants a step number (0 or more), not '%s'\n", argv[i]);
                return 2;
            }
            a->step = step;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "memprof: unknown option '%s' (or it lacks its value)\n\n", argv[i]);
            mp_usage(stderr);
            return 2;
        } else if (a->path) {
            fprintf(stderr, "memprof: one trace at a time ('%s' and '%s' given)\n", a->path, argv[i]);
            return 2;
        } else {
            a->path = argv[i];
        }
    }
    if (!a->path) {
        mp_usage(stderr);
        return 2;
    }
    if (a->step >= 0 && !a->svg) {
        fprintf(stderr, "memprof: --step %lld picks the step the picture shows; give --svg FILE too\n", a->step);
        return 2;
    }
    return 0;
}

int mp_parse_dump_args(int argc, char **argv, const char **path)
{
    *path = NULL;
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        mp_usage(stdout);
        return 1;
    }
    if (argc != 2 || argv[1][0] == '-') {
        mp_usage(stderr);
        return 2;
    }
    *path = argv[1];
    return 0;
}

/* ---- memprof plan ---- */

void mp_plan_usage(FILE *f)
{
    fputs("usage: memprof plan [--model NAME | --layers L --heads H --width C] [--vocab V]\n"
          "                    [--context T] [--batch B] [--seq T]\n"
          "                    [--offload none|optimizer|params|nvme|auto]\n"
          "                    [--recompute] [--prefetch K] [--grad-accum K] [--backend cuda|host|auto]\n"
          "                    [--dtype auto|f32|bf16|f16] [--ranks N] [--moments f32|bf16|8bit]\n"
          "                    [--upload-window auto|on|off|SIZE]\n"
          "                    [--gpu-mem SIZE | --card SIZE [--card-reserve SIZE]] [--host-mem SIZE]\n"
          "                    [--json] [--layout] [--layout-svg FILE] [--nvme-path DIR] [--nvme-master]\n"
          "                    [--nvme-window SIZE] [--nvme-block SIZE] [--disk SIZE]\n"
          "\n"
          "Predicts, without running anything, the peak device and host memory of\n"
          "training GPT-2 or a Llama-family model with the trainer's settings (its\n"
          "flags and defaults, but for --backend: a plan is for a GPU, so cuda, where\n"
          "the trainer's auto runs on the host backend on a machine without one), by\n"
          "category, from the sizes the engine and the model allocate, and with\n"
          "--offload nvme the bytes the state takes on disk. With --gpu-mem it says\n"
          "whether the run fits and the largest batch that does; with any budget, for\n"
          "GPT-2, the largest GPT-2-shaped model (dN) that fits them all.\n"
          "\n"
          "  --model NAME    gpt2, gpt2-medium, gpt2-large, gpt2-xl or dN (default d6);\n"
          "                  or of the Llama family, with its own vocabulary and context:\n"
          "                  smollm2-135m, smollm2-360m, tinyllama-1.1b, llama3.2-1b,\n"
          "                  llama3.2-3b, llama3.1-8b, llama2-7b, mistral-7b, qwen2.5-0.5b,\n"
          "                  qwen2.5-1.5b, qwen2.5-7b or llama-dN; or a Hugging Face\n"
          "                  folder (or its config.json) of model_type llama, mistral\n"
          "                  or qwen2\n"
          "  --layers L --heads H --width C   a custom model instead (all three)\n"
          "  --vocab V       vocabulary (default 50257, padded to a multiple of 128)\n"
          "  --context T     longest sequence the model supports (default 1024)\n"
          "  --batch B       sequences per micro-batch (default 4)\n"
          "  --seq T         tokens per sequence (default 256, at most --context)\n"
          "  --offload MODE  none, optimizer, params, nvme, or auto (default optimizer): auto\n"
          "                  predicts the mode train_gpt2's default (auto) chooses for --gpu-mem\n"
          "                  and --host-mem (per rank; none given: not checked), the NVMe tier\n"
          "                  only with --nvme-path, and recompute only when no mode fits\n"
          "                  without it; the largest batch is then across modes and recompute\n"
          "  --recompute     keep only block inputs; recompute the rest in backward\n"
          "  --prefetch K    params mode: groups fetched ahead (default 2, 0..64)\n"
          "  --grad-accum K  micro-batches per step (default 1; more adds their fp32 sum)\n"
          "  --backend KIND  cuda (bf16 or f16 on the device; default), host (fp32), or auto (as\n"
          "                  train_gpt2 would choose here: cuda where a GPU is present, else host)\n"
          "  --dtype TYPE    device storage: auto (the backend's), f32 (host), bf16, or f16\n"
          "                  (Volta and Turing cards; the same bytes as bf16)\n"
          "  --moments FORM  the host Adam moments: f32 (8 bytes a parameter; default), bf16\n"
          "                  (4) or 8bit (2 + 8/256), with --offload optimizer or params\n"
          "  --upload-window W  the master weights converted into a small pinned ring as each\n"
          "                  upload streams, instead of a host copy in the device type (2 bytes\n"
          "                  a parameter less): auto (the engine's default: on with --moments\n"
          "                  bf16 or 8bit), on, off, or SIZE (on, 4 chunks of SIZE; 16MiB)\n"
          "  --ranks N       data parallel ranks (mpirun -np N): each rank's memory, its\n"
          "                  1/N of the host state in optimizer and params modes; --batch\n"
          "                  and --gpu-mem are per rank (default 1)\n"
          "  --gpu-mem SIZE  device budget to check, e.g. 23.5GiB (0: none)\n"
          "  --card SIZE     plan for a card of SIZE, as nvidia-smi prints it (an RTX 4090,\n"
          "                  RTX 3090 or Titan RTX \"24 GB\": 24GiB; V100 32 GB: 32GiB; T4: 15GiB;\n"
          "                  A100 or H100 80 GB: 80GiB): the budget is SIZE less --card-reserve\n"
          "  --card-reserve SIZE  what the CUDA context and the libraries take of the card\n"
          "                  before the engine (default 512MiB; the engine measures it on\n"
          "                  its card: ferry_memory_stats, bench_engine --card)\n"
          "  --host-mem SIZE pinned host memory to check, e.g. 64GiB (0: none)\n"
          "  --nvme-path DIR the state's folder (nvme; with params, puts the state on\n"
          "                  disk): --disk defaults to the space free there\n"
          "  --nvme-master   the fp32 master weights on disk too\n"
          "  --nvme-window SIZE, --nvme-block SIZE   as train_gpt2's (256MiB, 1MiB)\n"
          "  --disk SIZE     disk space to check the state file against\n"
          "  --json          print the figures as JSON\n"
          "  --layout        and the device's layout: every buffer of the engine's static memory\n"
          "                  plan (the activations one by one) with its offset in the planned\n"
          "                  region, its size, category and lifetime\n"
          "  --layout-svg FILE  the layout drawn: the card's memory as one column, each buffer at\n"
          "                  its offset, coloured by category, beside the budget and the card\n"
          "\n"
          UNITS_SIZE_HELP
          "\n"
          "Exit status: 0 when it fits the budgets given (or none is given); 1 when\n"
          "it does not; 2 on a usage error.\n",
          f);
}

static int plan_fail(const char *fmt, const char *a, const char *b)
{
    fputs("memprof plan: ", stderr);
    fprintf(stderr, fmt, a, b);
    fputs("\n(memprof plan --help lists the options)\n", stderr);
    return 2;
}

static int plan_int(const char *flag, const char *text, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "memprof plan: %s wants a whole number from %ld to %ld, not '%s'\n", flag, lo, hi, text);
        return 2;
    }
    *out = (int)v;
    return 0;
}

static int plan_bytes(const char *flag, const char *text, uint64_t *out)
{
    if (units_parse_size_flag(flag, text, "no budget to check", out) != FERRY_OK) {
        fprintf(stderr, "memprof plan: %s\n", ferry_last_error());
        return 2;
    }
    return 0;
}

/* The disk tier's sizes (window, block) are not budgets: any count of bytes
 * (units as everywhere), their ranges checked with the plan. */
static int plan_io_bytes(const char *flag, const char *text, uint64_t *out)
{
    if (units_parse_bytes(text, out) != FERRY_OK) {
        fprintf(stderr, "memprof plan: %s: %s\n", flag, ferry_last_error());
        return 2;
    }
    if (*out == 0) {
        fprintf(stderr, "memprof plan: %s '%s' is 0 bytes, which holds nothing\n", flag, text);
        return 2;
    }
    return 0;
}

/* A flag train_gpt2 also takes, in train_gpt2's own range (train/options.c),
 * so plan accepts exactly the shapes the trainer does; a custom model's
 * fields start at 1 here (train_gpt2's 0 means "not given"). */
static int trainer_int(const char *flag, const char *text, int *out)
{
    double lo = 0, hi = 0;
    if (!train_option_range(flag, &lo, &hi))
        return plan_fail("%s is no flag of train_gpt2's%s", flag, "");
    if (lo < 1 && strcmp(flag, "--prefetch") != 0)
        lo = 1;
    return plan_int(flag, text, (long)lo, (long)hi, out);
}

/* One option at argv[*i] (advancing past its value); 0, or 2 on a bad one. */
static int plan_option(int argc, char **argv, int *i, mp_plan_args *a)
{
    const char *f = argv[*i];
    if (!strcmp(f, "--recompute")) { a->recompute = true; return 0; }
    if (!strcmp(f, "--json")) { a->json = true; return 0; }
    if (!strcmp(f, "--layout")) { a->layout = true; return 0; }
    if (!strcmp(f, "--nvme-master")) { a->nvme_master = true; return 0; }
    static const char *const valued[] = {"--model", "--layers", "--heads", "--width", "--vocab", "--context",
                                         "--batch", "--seq", "--offload", "--prefetch", "--backend",
                                         "--gpu-mem", "--host-mem", "--grad-accum", "--dtype", "--nvme-path",
                                         "--nvme-window", "--nvme-block", "--disk", "--card", "--card-reserve",
                                         "--ranks", "--layout-svg", "--moments",
                                         "--upload-window"};
    bool known = false;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
        known |= !strcmp(f, valued[k]);
    if (!known)
        return plan_fail(f[0] == '-' ? "unknown option '%s'%s" : "unexpected argument '%s'%s (plan reads no trace)",
                         f, "");
    if (*i + 1 >= argc)
        return plan_fail("%s needs a value%s", f, "");
    const char *v = argv[++*i];
    if (!strcmp(f, "--model")) { a->model = v; return 0; }
    if (!strcmp(f, "--layers")) return trainer_int(f, v, &a->layers);
    if (!strcmp(f, "--heads")) return trainer_int(f, v, &a->heads);
    if (!strcmp(f, "--width")) return trainer_int(f, v, &a->width);
    if (!strcmp(f, "--vocab")) return trainer_int(f, v, &a->vocab);
    if (!strcmp(f, "--context")) return trainer_int(f, v, &a->context);
    if (!strcmp(f, "--batch")) return trainer_int(f, v, &a->batch);
    if (!strcmp(f, "--seq")) return trainer_int(f, v, &a->seq);
    if (!strcmp(f, "--prefetch")) return trainer_int(f, v, &a->prefetch);
    if (!strcmp(f, "--grad-accum")) return trainer_int(f, v, &a->grad_accum);
    if (!strcmp(f, "--ranks")) return plan_int(f, v, 1, 65536, &a->ranks);
    if (!strcmp(f, "--dtype") && (ferry_dtype_parse(v, &a->dtype) != FERRY_OK ||
                                  (a->dtype != FERRY_DTYPE_AUTO && a->dtype != FERRY_DTYPE_F32 &&
                                   a->dtype != FERRY_DTYPE_BF16 && a->dtype != FERRY_DTYPE_F16)))
        return plan_fail("--dtype '%s': use auto, f32, bf16 or f16%s", v, "");
    if (!strcmp(f, "--gpu-mem")) return plan_bytes(f, v, &a->gpu_mem);
    if (!strcmp(f, "--host-mem")) return plan_bytes(f, v, &a->host_mem);
    if (!strcmp(f, "--disk")) return plan_bytes(f, v, &a->disk);
    if (!strcmp(f, "--nvme-window")) return plan_io_bytes(f, v, &a->nvme_window);
    if (!strcmp(f, "--nvme-block")) return plan_io_bytes(f, v, &a->nvme_block);
    if (!strcmp(f, "--nvme-path")) { a->nvme_path = v; return 0; }
    if (!strcmp(f, "--layout-svg")) { a->layout_svg = v; return 0; }
    if (!strcmp(f, "--card")) return plan_bytes(f, v, &a->card);
    if (!strcmp(f, "--card-reserve")) {
        if (units_parse_size_flag(f, v, "nothing reserved", &a->card_reserve) != FERRY_OK)
            return plan_fail("%s%s", train_last_error(), "");
        a->card_reserve_given = true;
        return 0;
    }
    if (!strcmp(f, "--upload-window") &&
        train_parse_upload_window(v, &a->upload_window, &a->upload_window_chunk_bytes) != FERRY_OK)
        return plan_fail("%s%s", ferry_last_error(), "");
    if (!strcmp(f, "--moments") && ferry_moments_parse(v, &a->moments) != FERRY_OK)
        return plan_fail("--moments '%s': use f32, bf16 or 8bit%s", v, "");
    if (!strcmp(f, "--offload") && ferry_offload_parse(v, &a->offload) != FERRY_OK)
        return plan_fail("--offload '%s': use none, optimizer, params, nvme or auto%s", v, "");
    if (!strcmp(f, "--backend") && ferry_backend_parse(v, &a->backend) != FERRY_OK)
        return plan_fail("--backend '%s': plan for cuda (bf16 on the device), host (fp32) or auto%s", v, "");
    if (!strcmp(f, "--backend") && a->backend == FERRY_BACKEND_AUTO) { /* as train_gpt2 would choose here */
        ferry_system_info info = FERRY_SYSTEM_INFO_INIT;
        a->backend = ferry_system_probe(&info) == FERRY_OK && info.gpu_count > 0 ? FERRY_BACKEND_CUDA
                                                                                 : FERRY_BACKEND_HOST;
    }
    return 0;
}

/* --card: the budget is what the card leaves; 0 or 2. */
static int plan_card(mp_plan_args *a)
{
    if (a->card_reserve_given && !a->card)
        return plan_fail("--card-reserve is what a card given with --card leaves out; give --card SIZE too%s%s",
                         "", "");
    if (!a->card)
        return 0;
    if (a->gpu_mem)
        return plan_fail("give --card or --gpu-mem, not both: --card SIZE plans for what a card of SIZE leaves "
                         "(SIZE less --card-reserve)%s, --gpu-mem for a budget as it is%s",
                         "", "");
    if (!a->card_reserve_given)
        a->card_reserve = MP_CARD_RESERVE_DEFAULT;
    if (a->card < a->card_reserve + UNITS_SIZE_FLAG_MIN) {
        char c[32], r[32];
        return plan_fail("--card %s leaves nothing after --card-reserve %s", units_fmt_bytes(c, sizeof c, a->card),
                         units_fmt_bytes(r, sizeof r, a->card_reserve));
    }
    a->gpu_mem = a->card - a->card_reserve;
    return 0;
}

/* --model's Hugging Face folder (or its config.json), when it names one:
 * the path of the config.json in *json. */
static bool plan_model_is_folder(const char *model, char *json, size_t cap)
{
    struct stat st;
    if (!model || stat(model, &st) != 0)
        return false;
    if (S_ISDIR(st.st_mode))
        snprintf(json, cap, "%s/config.json", model);
    else
        snprintf(json, cap, "%s", model);
    return true;
}

/* A Llama-family model by name, or read from a Hugging Face folder's
 * config.json: its config, and the figures the printouts share with
 * GPT-2's in *c. 0 or 2. */
static int plan_llama_config(mp_plan_args *a, const char *config_json, gpt2_config *c)
{
    ferry_status st = config_json ? hf_llama_read_config(config_json, &a->llama_cfg)
                                  : llama_config_preset(a->model, &a->llama_cfg);
    if (st != FERRY_OK) {
        fprintf(stderr, "memprof plan: %s%s\n", train_last_error(),
                config_json ? " (--model takes a preset's name or a Hugging Face folder whose config.json has "
                              "model_type llama, mistral or qwen2)" : "");
        return 2;
    }
    const llama_config *l = &a->llama_cfg;
    a->llama = true;
    *c = (gpt2_config){.n_layer = l->n_layer, .n_head = l->n_head, .n_embd = l->n_embd, .vocab_size = l->vocab_size,
                       .padded_vocab_size = l->padded_vocab_size, .max_seq_len = l->max_seq_len};
    if (a->layers || a->heads || a->width) {
        fprintf(stderr, "memprof plan: --layers, --heads and --width make a GPT-2 shape; %s is a Llama-family model "
                        "of its own shape\n", a->model);
        return 2;
    }
    if (a->seq > l->max_seq_len || (l->sliding_window > 0 && a->seq > l->sliding_window)) {
        fprintf(stderr, "memprof plan: --seq %d is longer than %s's %s (%d)\n", a->seq, a->model,
                a->seq > l->max_seq_len ? "context" : "sliding window",
                a->seq > l->max_seq_len ? l->max_seq_len : l->sliding_window);
        return 2;
    }
    return 0;
}

/* The model from the flags, checked; 0 or 2. */
static int plan_model_config(mp_plan_args *a, gpt2_config *c)
{
    char json[4096];
    if (llama_is_preset(a->model))
        return plan_llama_config(a, NULL, c);
    gpt2_config preset;
    if (a->model && gpt2_config_preset(a->model, &preset) != FERRY_OK &&
        plan_model_is_folder(a->model, json, sizeof json))
        return plan_llama_config(a, json, c);
    int custom = (a->layers > 0) + (a->heads > 0) + (a->width > 0);
    if (custom && custom < 3)
        return plan_fail("a custom model needs --layers, --heads and --width together%s%s", "", "");
    if (custom && a->width % a->heads) {
        fprintf(stderr, "memprof plan: --width %d is not a multiple of --heads %d\n", a->width, a->heads);
        return 2;
    }
    ferry_status st = custom ? gpt2_config_from_fields(a->layers, a->heads, a->width, a->vocab, 0, a->context, c)
                             : gpt2_config_preset(a->model, c);
    if (st == FERRY_OK && !custom) { /* a preset with its vocabulary or context changed */
        int V = a->vocab, T = a->context;
        st = gpt2_config_from_fields(c->n_layer, c->n_head, c->n_embd, V, 0, T, c);
    }
    if (st != FERRY_OK) {
        fprintf(stderr, "memprof plan: %s\n", train_last_error());
        return 2;
    }
    if (a->seq > c->max_seq_len) {
        fprintf(stderr, "memprof plan: --seq %d is longer than the model's context (%d); raise --context\n", a->seq,
                c->max_seq_len);
        return 2;
    }
    return 0;
}


int mp_parse_plan_args(int argc, char **argv, mp_plan_args *a, gpt2_config *c)
{
    *a = (mp_plan_args){.model = "d6", .vocab = 50257, .context = 1024, .batch = 4, .seq = 256, .prefetch = 2,
                        .grad_accum = 1, .offload = FERRY_OFFLOAD_OPTIMIZER, .backend = FERRY_BACKEND_CUDA,
                        .dtype = FERRY_DTYPE_AUTO, .ranks = 1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            mp_plan_usage(stdout);
            return 1;
        }
        if (plan_option(argc, argv, &i, a))
            return 2;
    }
    bool disk = a->offload == FERRY_OFFLOAD_NVME ||
                ((a->offload == FERRY_OFFLOAD_PARAMS || a->offload == FERRY_OFFLOAD_AUTO) && a->nvme_path);
    if (a->moments != FERRY_MOMENTS_F32 && a->offload != FERRY_OFFLOAD_OPTIMIZER &&
        a->offload != FERRY_OFFLOAD_PARAMS && a->offload != FERRY_OFFLOAD_NVME)
        return plan_fail("--moments %s is updated by the CPU: plan it with --offload optimizer, params or nvme "
                         "(got --offload %s)",
                         ferry_moments_name(a->moments), ferry_offload_name(a->offload));
    if (!disk && (a->nvme_path || a->nvme_master || a->nvme_window || a->nvme_block || a->disk))
        return plan_fail("the --nvme-* and --disk options plan the state on disk: with --offload nvme, or params "
                         "or auto with --nvme-path%s%s", "", "");
    if (a->nvme_block && (a->nvme_block % 4096 || a->nvme_block > ((uint64_t)64 << 20))) {
        fprintf(stderr, "memprof plan: --nvme-block %llu bytes: give a multiple of 4KiB up to 64MiB\n",
                (unsigned long long)a->nvme_block);
        return 2;
    }
    struct statvfs vs;
    if (a->nvme_path && !a->disk) {
        if (statvfs(a->nvme_path, &vs) != 0) {
            fprintf(stderr, "memprof plan: --nvme-path '%s': %s\n", a->nvme_path, strerror(errno));
            return 2;
        }
        a->disk = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
    }
    if (plan_card(a))
        return 2;
    return plan_model_config(a, c);
}
