/*
 * wasmhost.c: the C SDK for wasmhost handlers. See wasmhost.h, and abi/README.md for the ABI.
 *
 * The exports of ABI v1 are defined here and call the handler the module defines
 * (wh_handler_def). Each host function is declared once; the linker keeps only those a module
 * uses, so a module that never calls wh_plugin_call does not import plugin_call and needs no
 * grant.
 */
#include "wasmhost.h"

#include <stdlib.h>
#include <string.h>

#ifdef __wasm__
#define WH_IMPORT(name) __attribute__((import_module("wasmhost"), import_name(#name)))
#define WH_EXPORT(name) __attribute__((export_name(#name)))
#else
/* A native build, for unit tests: wasmhost_fake.c defines the host functions and calls the
 * exports (wasmhost_fake.h). */
#define WH_IMPORT(name)
#define WH_EXPORT(name)
#endif

WH_IMPORT(request_read) int32_t wh_host_request_read(void *ptr, uint32_t cap);
WH_IMPORT(result_set) int32_t wh_host_result_set(const void *ptr, uint32_t len);
WH_IMPORT(log) void wh_host_log(int32_t level, const void *ptr, uint32_t len);
WH_IMPORT(publish) int32_t wh_host_publish(const void *key, uint32_t key_len, const void *val, uint32_t val_len);
WH_IMPORT(kv_get) int32_t wh_host_kv_get(const void *key, uint32_t key_len, void *buf, uint32_t cap);
WH_IMPORT(kv_set) int32_t wh_host_kv_set(const void *key, uint32_t key_len, const void *val, uint32_t val_len);
WH_IMPORT(kv_delete) int32_t wh_host_kv_delete(const void *key, uint32_t key_len);
WH_IMPORT(kv_compare_and_set)
int32_t wh_host_kv_compare_and_set(const void *key, uint32_t key_len, const void *old, int32_t old_len,
                                   const void *val, int32_t val_len);
WH_IMPORT(plugin_call)
int32_t wh_host_plugin_call(const void *method, uint32_t method_len, const void *req, uint32_t req_len, void *resp,
                            uint32_t resp_cap);
WH_IMPORT(error_read) int32_t wh_host_error_read(void *ptr, uint32_t cap);

/* Call memory: every block wh_alloc hands out, freed when the next export call starts (not
 * when this one returns: the ABI lets a host read the result when the export returns). */
struct wh_block {
    struct wh_block *next;
    max_align_t data[];
};
static struct wh_block *wh_blocks;

void *wh_alloc(size_t n) {
    struct wh_block *b = malloc(sizeof *b + n);
    if (b == NULL) {
        return NULL;
    }
    b->next = wh_blocks;
    wh_blocks = b;
    return b->data;
}

static void wh_free_all(void) {
    while (wh_blocks != NULL) {
        struct wh_block *next = wh_blocks->next;
        free(wh_blocks);
        wh_blocks = next;
    }
}

wh_str wh_cstr(const char *s) { return s == NULL ? WH_STR("") : (wh_str){s, strlen(s)}; }

bool wh_str_eq(wh_str a, wh_str b) { return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0); }

wh_str wh_str_dup(wh_str s) {
    char *p = wh_alloc(s.len + 1);
    if (p == NULL) {
        return WH_STR("");
    }
    if (s.len > 0) {
        memcpy(p, s.ptr, s.len);
    }
    p[s.len] = 0;
    return (wh_str){p, s.len};
}

bool wh_plugin_supports(const wh_plugin *p, wh_str v) {
    for (size_t i = 0; i < p->n_versions; i++) {
        if (wh_str_eq(p->versions[i], v)) {
            return true;
        }
    }
    return false;
}

/* Text. A text that cannot grow (memory out) stays as it was. */

static bool wh_text_grow(wh_text *t, size_t more) {
    if (t->len + more + 1 <= t->cap) {
        return true;
    }
    size_t cap = t->cap < 64 ? 64 : t->cap;
    while (cap < t->len + more + 1) {
        cap *= 2;
    }
    char *p = wh_alloc(cap);
    if (p == NULL) {
        return false;
    }
    if (t->len > 0) {
        memcpy(p, t->ptr, t->len);
    }
    t->cap = cap;
    t->ptr = p;
    return true;
}

void wh_text_add(wh_text *t, wh_str s) {
    if (s.len == 0 || !wh_text_grow(t, s.len)) {
        return;
    }
    memcpy(t->ptr + t->len, s.ptr, s.len);
    t->len += s.len;
    t->ptr[t->len] = 0;
}

void wh_text_adds(wh_text *t, const char *s) { wh_text_add(t, wh_cstr(s)); }

void wh_text_addbyte(wh_text *t, uint8_t b) {
    char c = (char)b;
    wh_text_add(t, (wh_str){&c, 1});
}

void wh_text_addquoted(wh_text *t, wh_str s) {
    static const char hex[] = "0123456789abcdef";
    wh_text_addbyte(t, '"');
    for (size_t i = 0; i < s.len; i++) {
        uint8_t c = (uint8_t)s.ptr[i];
        if (c == '"' || c == '\\') {
            wh_text_addbyte(t, '\\');
            wh_text_addbyte(t, c);
        } else if (c < 0x20 || c == 0x7f) {
            wh_text_adds(t, "\\x");
            wh_text_addbyte(t, (uint8_t)hex[c >> 4]);
            wh_text_addbyte(t, (uint8_t)hex[c & 0xf]);
        } else {
            wh_text_addbyte(t, c);
        }
    }
    wh_text_addbyte(t, '"');
}

void wh_text_addu(wh_text *t, uint64_t v) {
    char buf[20];
    size_t i = sizeof buf;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    wh_text_add(t, (wh_str){buf + i, sizeof buf - i});
}

wh_str wh_text_str(const wh_text *t) { return t->len == 0 ? WH_STR("") : (wh_str){t->ptr, t->len}; }

/* The wire format. */

void wh_wire_add_varint(wh_text *t, uint64_t v) {
    while (v >= 0x80) {
        wh_text_addbyte(t, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    wh_text_addbyte(t, (uint8_t)v);
}

void wh_wire_add_tag(wh_text *t, uint32_t num, int type) { wh_wire_add_varint(t, (uint64_t)num << 3 | (type & 7)); }

void wh_wire_add_bytes(wh_text *t, uint32_t num, wh_str v) {
    wh_wire_add_tag(t, num, WH_WIRE_BYTES);
    wh_wire_add_varint(t, v.len);
    wh_text_add(t, v);
}

void wh_wire_add_uint(wh_text *t, uint32_t num, uint64_t v) {
    wh_wire_add_tag(t, num, WH_WIRE_VARINT);
    wh_wire_add_varint(t, v);
}

wh_wire_reader wh_wire_reader_of(wh_str msg) {
    const uint8_t *p = (const uint8_t *)msg.ptr;
    return (wh_wire_reader){p, p + msg.len, NULL, 0};
}

bool wh_wire_fail(wh_wire_reader *r, uint32_t field, const char *what) {
    if (r->err == NULL) {
        r->err = what;
        r->err_field = field;
    }
    return false;
}

const char *wh_wire_wrong_type(int type) {
    static const char *const names[8] = {
        "unexpected wire type 0", "unexpected wire type 1", "unexpected wire type 2", "unexpected wire type 3",
        "unexpected wire type 4", "unexpected wire type 5", "unexpected wire type 6", "unexpected wire type 7",
    };
    return names[type & 7];
}

bool wh_wire_text(wh_wire_reader *r, const wh_field *f, wh_str *s) {
    if (f->type != WH_WIRE_BYTES) {
        return wh_wire_fail(r, f->num, wh_wire_wrong_type(f->type));
    }
    if (!wh_utf8_valid(f->data)) {
        return wh_wire_fail(r, f->num, "not valid UTF-8");
    }
    *s = f->data;
    return true;
}

wh_str wh_wire_error(const wh_wire_reader *r) {
    wh_text t = {0};
    wh_text_adds(&t, "malformed protobuf message: ");
    if (r->err_field != 0) {
        wh_text_adds(&t, "field ");
        wh_text_addu(&t, r->err_field);
        wh_text_adds(&t, ": ");
    }
    wh_text_adds(&t, r->err != NULL ? r->err : "no error");
    return wh_text_str(&t);
}

/* wh_varint reads a varint of at most 64 bits; false if there is none. */
static bool wh_varint(wh_wire_reader *r, uint64_t *v) {
    *v = 0;
    for (int i = 0; i < 10 && r->p + i < r->end; i++) {
        uint8_t c = r->p[i];
        if (i == 9 && c > 1) {
            return false;
        }
        *v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (c < 0x80) {
            r->p += i + 1;
            return true;
        }
    }
    return false;
}

bool wh_wire_next(wh_wire_reader *r, wh_field *f) {
    static const char *const unsupported[8] = {
        "unsupported wire type 0", "unsupported wire type 1", "unsupported wire type 2", "unsupported wire type 3",
        "unsupported wire type 4", "unsupported wire type 5", "unsupported wire type 6", "unsupported wire type 7",
    };
    if (r->err != NULL || r->p >= r->end) {
        return false;
    }
    uint64_t tag;
    if (!wh_varint(r, &tag) || tag >> 3 == 0 || tag >> 3 > 0x7fffffff) {
        return wh_wire_fail(r, 0, "bad field tag");
    }
    *f = (wh_field){.num = (uint32_t)(tag >> 3), .type = (int)(tag & 7)};
    size_t n = 0;
    switch (f->type) {
    case WH_WIRE_VARINT:
        if (!wh_varint(r, &f->varint)) {
            return wh_wire_fail(r, f->num, "bad varint");
        }
        return true;
    case WH_WIRE_FIXED64:
        n = 8;
        break;
    case WH_WIRE_FIXED32:
        n = 4;
        break;
    case WH_WIRE_BYTES: {
        uint64_t size;
        if (!wh_varint(r, &size) || size > (uint64_t)(r->end - r->p)) {
            return wh_wire_fail(r, f->num, "truncated");
        }
        n = (size_t)size;
        break;
    }
    default:
        return wh_wire_fail(r, f->num, unsupported[f->type & 7]);
    }
    if (n > (size_t)(r->end - r->p)) {
        return wh_wire_fail(r, f->num, "truncated");
    }
    f->data = (wh_str){(const char *)r->p, n};
    r->p += n;
    return true;
}

bool wh_utf8_valid(wh_str s) {
    const uint8_t *p = (const uint8_t *)s.ptr, *end = p + s.len;
    while (p < end) {
        uint8_t c = *p;
        size_t n;
        uint32_t min, cp;
        if (c < 0x80) {
            p++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 2, min = 0x80, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 3, min = 0x800, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 4, min = 0x10000, cp = c & 0x07;
        } else {
            return false;
        }
        if ((size_t)(end - p) < n) {
            return false;
        }
        for (size_t i = 1; i < n; i++) {
            if ((p[i] & 0xc0) != 0x80) {
                return false;
            }
            cp = cp << 6 | (p[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            return false;
        }
        p += n;
    }
    return true;
}

/* Results. */

static int32_t wh_result(int32_t status, wh_str reason) {
    size_t n = reason.len;
    if (n > WH_MAX_RESULT_BYTES) { /* cut, without splitting a UTF-8 sequence */
        n = WH_MAX_RESULT_BYTES;
        while (n > 0 && ((uint8_t)reason.ptr[n] & 0xc0) == 0x80) {
            n--;
        }
    }
    wh_host_result_set(reason.ptr, (uint32_t)n);
    return status;
}

int32_t wh_reject(const char *reason) { return wh_result(WH_REJECTED, wh_cstr(reason)); }
int32_t wh_reject_str(wh_str reason) { return wh_result(WH_REJECTED, reason); }
int32_t wh_fail(const char *reason) { return wh_result(WH_ERROR, wh_cstr(reason)); }
int32_t wh_fail_str(wh_str reason) { return wh_result(WH_ERROR, reason); }

const char *wh_code_text(int32_t code) {
    switch (code) {
    case WH_NOT_FOUND:
        return "not found";
    case WH_TOO_LARGE:
        return "too large";
    case WH_DENIED:
        return "denied";
    case WH_FAILED:
        return "failed";
    case WH_BAD_REQUEST:
        return "bad request";
    case WH_CONFLICT:
        return "conflict";
    }
    return code >= 0 ? "ok" : "unknown host code";
}

int32_t wh_fail_code(const char *function, wh_str key, int32_t code) {
    wh_text t = {0};
    wh_text_adds(&t, function);
    if (key.len > 0) {
        wh_text_adds(&t, " ");
        wh_text_add(&t, key);
    }
    wh_text_adds(&t, ": ");
    wh_text_adds(&t, wh_code_text(code));
    wh_str reason = wh_error_reason();
    if (reason.len > 0) {
        wh_text_adds(&t, ": ");
        wh_text_add(&t, reason);
    }
    return wh_fail_str(wh_text_str(&t));
}

/* Host functions. */

void wh_log(int32_t level, wh_str msg) {
    size_t n = msg.len > WH_MAX_LOG_LINE_BYTES ? WH_MAX_LOG_LINE_BYTES : msg.len;
    wh_host_log(level, msg.ptr, (uint32_t)n);
}

int32_t wh_publish(wh_str key, wh_str value) {
    return wh_host_publish(key.ptr, (uint32_t)key.len, value.ptr, (uint32_t)value.len);
}

int32_t wh_kv_get(wh_str key, wh_str *value) {
    size_t cap = 256;
    /* The value may change size between two reads when another instance sets it: try a few
     * times with a buffer of the size last reported. */
    for (int i = 0; i < 4; i++) {
        char *buf = wh_alloc(cap + 1);
        if (buf == NULL) {
            return WH_TOO_LARGE;
        }
        int32_t n = wh_host_kv_get(key.ptr, (uint32_t)key.len, buf, (uint32_t)cap);
        if (n < 0) {
            return n;
        }
        if ((size_t)n <= cap) {
            buf[n] = 0;
            *value = (wh_str){buf, (size_t)n};
            return WH_OK;
        }
        cap = (size_t)n;
    }
    return WH_FAILED;
}

int32_t wh_kv_set(wh_str key, wh_str value) {
    return wh_host_kv_set(key.ptr, (uint32_t)key.len, value.ptr, (uint32_t)value.len);
}

int32_t wh_kv_delete(wh_str key) { return wh_host_kv_delete(key.ptr, (uint32_t)key.len); }

int32_t wh_kv_compare_and_set(wh_str key, const wh_str *old, const wh_str *value) {
    return wh_host_kv_compare_and_set(key.ptr, (uint32_t)key.len, old ? old->ptr : NULL, old ? (int32_t)old->len : -1,
                                      value ? value->ptr : NULL, value ? (int32_t)value->len : -1);
}

int32_t wh_plugin_call(wh_str method, wh_str req, wh_str *resp) {
    size_t cap = 64 << 10;
    for (int i = 0; i < 2; i++) {
        char *buf = wh_alloc(cap + 1);
        if (buf == NULL) {
            return WH_TOO_LARGE;
        }
        int32_t n = wh_host_plugin_call(method.ptr, (uint32_t)method.len, req.ptr, (uint32_t)req.len, buf,
                                        (uint32_t)cap);
        if (n < 0) {
            return n;
        }
        if ((size_t)n <= cap) {
            buf[n] = 0;
            *resp = (wh_str){buf, (size_t)n};
            return WH_OK;
        }
        cap = (size_t)n;
    }
    return WH_FAILED;
}

wh_str wh_error_reason(void) {
    char small[1];
    int32_t n = wh_host_error_read(small, 0);
    if (n <= 0) {
        return WH_STR("");
    }
    char *buf = wh_alloc((size_t)n + 1);
    if (buf == NULL) {
        return WH_STR("");
    }
    int32_t m = wh_host_error_read(buf, (uint32_t)n);
    if (m < 0 || m > n) {
        return WH_STR("");
    }
    buf[m] = 0;
    return (wh_str){buf, (size_t)m};
}

/* The exports. */

WH_EXPORT(wasmhost_abi_version) int32_t wh_export_abi_version(void) { return WH_ABI_VERSION; }

WH_EXPORT(wasmhost_manifest) int32_t wh_export_manifest(void) {
    wh_free_all();
    const wh_manifest *m = &wh_handler_def.manifest;
    if (m->plugin_types == NULL || m->plugin_types[0] == NULL) {
        return wh_fail("wasmhost.h: the manifest names no plugin type");
    }
    wh_text t = {0};
    for (const char *const *typ = m->plugin_types; *typ != NULL; typ++) {
        wh_wire_add_bytes(&t, 1, wh_cstr(*typ));
    }
    if (m->name != NULL && m->name[0] != 0) {
        wh_wire_add_bytes(&t, 2, wh_cstr(m->name));
    }
    if (m->version != NULL && m->version[0] != 0) {
        wh_wire_add_bytes(&t, 3, wh_cstr(m->version));
    }
    int32_t status = WH_OK;
    if (t.len > WH_MAX_RESULT_BYTES) {
        status = wh_fail("wasmhost.h: the encoded manifest is over WH_MAX_RESULT_BYTES");
    } else {
        wh_host_result_set(t.ptr, (uint32_t)t.len);
    }
    return status;
}

/* wh_decode decodes an encoded PluginRequest into p, its strings copied and NUL-terminated.
 * Returns NULL, or what is malformed. */
static const char *wh_decode(wh_str req, wh_plugin *p) {
    *p = (wh_plugin){0};
    size_t n_versions = 0;
    wh_wire_reader r = wh_wire_reader_of(req);
    wh_field f;
    while (wh_wire_next(&r, &f)) { /* count the versions first */
        if (f.num == 5 && f.type == WH_WIRE_BYTES) {
            n_versions++;
        }
    }
    if (r.err != NULL) {
        return r.err;
    }
    wh_str *versions = NULL;
    if (n_versions > 0 && (versions = wh_alloc(n_versions * sizeof *versions)) == NULL) {
        return "out of memory";
    }
    r = wh_wire_reader_of(req);
    while (wh_wire_next(&r, &f)) {
        if (f.num > 5 || f.type != WH_WIRE_BYTES) {
            continue; /* unknown: a later revision's field */
        }
        if (!wh_utf8_valid(f.data)) {
            return "a string is not valid UTF-8";
        }
        wh_str s = wh_str_dup(f.data);
        switch (f.num) {
        case 1:
            p->socket = s;
            break;
        case 2:
            p->type = s;
            break;
        case 3:
            p->name = s;
            break;
        case 4:
            p->endpoint = s;
            break;
        case 5:
            versions[p->n_versions++] = s;
            break;
        }
    }
    p->versions = versions;
    return NULL;
}

static int32_t wh_serve(int32_t (*fn)(const wh_plugin *), int32_t request_len) {
    wh_free_all();
    int32_t status;
    if (request_len < 0 || request_len > WH_MAX_REQUEST_BYTES) {
        status = wh_fail("wasmhost.h: the request length is out of range");
    } else {
        char *buf = wh_alloc((size_t)request_len + 1);
        wh_plugin p;
        const char *bad;
        if (buf == NULL) {
            status = wh_fail("wasmhost.h: out of memory for the request");
        } else if (wh_host_request_read(buf, (uint32_t)request_len) != request_len) {
            status = wh_fail("wasmhost.h: request_read did not return the request length");
        } else if ((bad = wh_decode((wh_str){buf, (size_t)request_len}, &p)) != NULL) {
            wh_text t = {0};
            wh_text_adds(&t, "wasmhost.h: decoding the request: ");
            wh_text_adds(&t, bad);
            status = wh_fail_str(wh_text_str(&t));
        } else if (fn == NULL) {
            status = WH_OK;
        } else {
            status = fn(&p);
        }
    }
    return status;
}

WH_EXPORT(wasmhost_validate) int32_t wh_export_validate(int32_t n) { return wh_serve(wh_handler_def.validate, n); }
WH_EXPORT(wasmhost_register) int32_t wh_export_register(int32_t n) {
    return wh_serve(wh_handler_def.register_plugin, n);
}
WH_EXPORT(wasmhost_deregister) int32_t wh_export_deregister(int32_t n) {
    return wh_serve(wh_handler_def.deregister, n);
}
