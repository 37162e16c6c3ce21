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

/* The unit after a number: nothing or "B" (bytes), "KiB".."PiB" (powers of
 * 1024), "kB"/"KB".."PB" (powers of 1000). 1 on a known unit, 0 on an unknown
 * one, -1 on a bare letter ("G"), which people write for both. */
static int unit_scale(const char *suffix, double *scale)
{
    static const char letters[] = "KMGTP";
    *scale = 1;
    if (*suffix == '\0' || strcmp(suffix, "B") == 0 || strcmp(suffix, "b") == 0)
        return 1;
    const char *p = strchr(letters, toupper((unsigned char)suffix[0]));
    if (!p)
        return 0;
    int power = (int)(p - letters) + 1;
    const char *rest = suffix + 1;
    if (*rest == '\0')
        return -1;
    if (strcasecmp(rest, "iB") == 0) {
        *scale = ldexp(1.0, 10 * power);
        return 1;
    }
    if (strcasecmp(rest, "B") == 0) {
        *scale = pow(1000.0, power);
        return 1;
    }
    return 0;
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
    double scale = 1;
    int known = unit_scale(end, &scale);
    if (known < 0) {
        static const char *const binary[] = {"1024", "2^20", "2^30", "2^40", "2^50"};
        static const char *const decimal[] = {"1000", "10^6", "10^9", "10^12", "10^15"};
        int p = (int)(strchr("KMGTP", toupper((unsigned char)*end)) - "KMGTP");
        int len = (int)(end - s);
        while (len > 0 && isspace((unsigned char)s[len - 1]))
            len--;
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "'%s' is ambiguous: %c is written both for %s and for %s bytes; write %.*s%ciB (binary) "
                       "or %.*s%cB (decimal)",
                       text, "KMGTP"[p], binary[p], decimal[p], len, s, "KMGTP"[p], len, s, "kMGTP"[p]);
    }
    if (!known)
        goto bad;
    double bytes = v * scale;
    if (bytes >= 18446744073709551616.0)
        goto bad;
    *out = (uint64_t)bytes;
    return FERRY_OK;
bad:
    return err_set(FERRY_ERR_INVALID_ARGUMENT,
                   "'%s' is not a byte count: write a number with an optional unit, such as 24GiB "
                   "(binary: KiB, MiB, GiB, TiB), 24GB (decimal: kB, MB, GB, TB) or 4096 (bytes)",
                   text);
}

ferry_status units_parse_size_flag(const char *flag, const char *text, const char *zero_means, uint64_t *out)
{
    if (!flag || !text || !zero_means || !out)
        return err_set(FERRY_ERR_INVALID_ARGUMENT, "units_parse_size_flag: NULL argument");
    uint64_t v = 0;
    if (units_parse_bytes(text, &v) != FERRY_OK)
        return err_wrap(FERRY_ERR_INVALID_ARGUMENT, "%s", flag);
    if ((v != 0 || strtod(text, NULL) != 0.0) && v < UNITS_SIZE_FLAG_MIN)
        return err_set(FERRY_ERR_INVALID_ARGUMENT,
                       "%s '%s' is %llu bytes: a number without a unit is bytes, KiB, MiB, GiB are powers of "
                       "1024 and kB, MB, GB powers of 1000; give at least 1MiB, such as 512MiB or 24GiB, or 0 "
                       "for %s",
                       flag, text, (unsigned long long)v, zero_means);
    *out = v;
    return FERRY_OK;
}
