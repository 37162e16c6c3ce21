/* Byte counts: parsing "24GiB"-style budgets and printing sizes for people. */
#include "common/units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"

char *units_fmt_bytes(char *buf, size_t cap, uint64_t bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, cap, "%.1f %s", v, unit[u]);
    return buf;
}

static int unit_shift(const char *suffix, int *shift)
{
    static const char letters[] = "KMGTP";
    if (*suffix == '\0' || strcasecmp(suffix, "B") == 0) {
        *shift = 0;
        return 1;
    }
    const char *p = strchr(letters, toupper((unsigned char)suffix[0]));
    if (!p)
        return 0;
    const char *rest = suffix + 1;
    if (*rest && strcasecmp(rest, "iB") != 0 && strcasecmp(rest, "B") != 0)
        return 0;
    *shift = 10 * (int)(p - letters + 1);
    return 1;
}

ferry_status units_parse_bytes(const char *text, uint64_t *out)
{
    if (!text || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "units_parse_bytes: NULL argument");
    const char *s = text;
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '-' || *s == '+' || *s == '\0')
        goto bad;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || !isfinite(v) || v < 0)
        goto bad;
    while (isspace((unsigned char)*end))
        end++;
    int shift = 0;
    if (!unit_shift(end, &shift))
        goto bad;
    double bytes = ldexp(v, shift);
    if (bytes >= 18446744073709551616.0)
        goto bad;
    *out = (uint64_t)bytes;
    return FERRY_OK;
bad:
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "'%s' is not a byte count: write a number with an optional unit, "
                   "such as 24GiB, 500MiB or 4096",
                   text);
}
