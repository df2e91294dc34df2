/* Shared I/O of the reference-test drivers: raw little-endian float32 files
 * and JSON config lookups with defaults. Each driver includes this once;
 * messages are prefixed with DRIVER_NAME, which the driver defines first. */
#ifndef STRATA_TESTS_DRIVER_IO_H
#define STRATA_TESTS_DRIVER_IO_H

#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifndef DRIVER_NAME
#error "define DRIVER_NAME before including driver_io.h"
#endif

static bool read_floats(const char *path, float *dst, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, DRIVER_NAME ": open %s: %s\n", path, strerror(errno));
        return false;
    }
    size_t got = fread(dst, sizeof(float), n, f);
    int extra = fgetc(f);
    fclose(f);
    if (got != n || extra != EOF) {
        fprintf(stderr, DRIVER_NAME ": %s: expected exactly %zu floats\n", path, n);
        return false;
    }
    return true;
}

static FILE *open_out(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        fprintf(stderr, DRIVER_NAME ": create %s: %s\n", path, strerror(errno));
    return f;
}

static bool write_floats(FILE *f, const float *src, size_t n)
{
    if (fwrite(src, sizeof(float), n, f) != n) {
        fprintf(stderr, DRIVER_NAME ": short write\n");
        return false;
    }
    return true;
}

static bool close_out(FILE *f)
{
    if (fclose(f) != 0) {
        fprintf(stderr, DRIVER_NAME ": close: %s\n", strerror(errno));
        return false;
    }
    return true;
}

static double jget_double(json_object *cfg, const char *key, double def)
{
    json_object *v;
    return json_object_object_get_ex(cfg, key, &v) ? json_object_get_double(v) : def;
}

static int64_t jget_int(json_object *cfg, const char *key, int64_t def)
{
    json_object *v;
    return json_object_object_get_ex(cfg, key, &v) ? json_object_get_int64(v) : def;
}

static bool jget_bool(json_object *cfg, const char *key, bool def)
{
    json_object *v;
    return json_object_object_get_ex(cfg, key, &v) ? json_object_get_boolean(v) : def;
}

static const char *jget_str(json_object *cfg, const char *key, const char *def)
{
    json_object *v;
    return json_object_object_get_ex(cfg, key, &v) ? json_object_get_string(v) : def;
}

#endif
