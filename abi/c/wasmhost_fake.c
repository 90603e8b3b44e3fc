/*
 * wasmhost_fake.c: the C SDK's in-memory host, for native unit tests. See wasmhost_fake.h.
 *
 * It defines the host functions wasmhost.c imports in a WebAssembly build (wh_host_*) and calls
 * the exports wasmhost.c defines, as the daemon would.
 */
#include "wasmhost_fake.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __wasm__
#error "wasmhost_fake.c is for native test programs: a handler module links the daemon's host"
#endif

/* The exports of wasmhost.c, plain functions in a native build. */
int32_t wh_export_validate(int32_t n);
int32_t wh_export_register(int32_t n);
int32_t wh_export_deregister(int32_t n);

/* Host functions (wasmhost.c declares them). */
int32_t wh_host_request_read(void *ptr, uint32_t cap);
int32_t wh_host_result_set(const void *ptr, uint32_t len);
void wh_host_log(int32_t level, const void *ptr, uint32_t len);
int32_t wh_host_publish(const void *key, uint32_t key_len, const void *val, uint32_t val_len);
int32_t wh_host_kv_get(const void *key, uint32_t key_len, void *buf, uint32_t cap);
int32_t wh_host_kv_set(const void *key, uint32_t key_len, const void *val, uint32_t val_len);
int32_t wh_host_kv_delete(const void *key, uint32_t key_len);
int32_t wh_host_kv_compare_and_set(const void *key, uint32_t key_len, const void *old, int32_t old_len,
                                   const void *val, int32_t val_len);
int32_t wh_host_plugin_call(const void *method, uint32_t method_len, const void *req, uint32_t req_len, void *resp,
                            uint32_t resp_cap);
int32_t wh_host_error_read(void *ptr, uint32_t cap);

/* A byte string the fake owns, NUL-terminated. */
typedef struct fake_bytes {
    char *ptr;
    size_t len;
} fake_bytes;

/* fake_alloc is realloc that does not fail: out of memory, the test ends there. */
static void *fake_alloc(void *p, size_t n) {
    p = realloc(p, n);
    if (p == NULL) {
        fprintf(stderr, "wasmhost_fake.c: out of memory\n");
        abort();
    }
    return p;
}

/* fake_grow returns the array p of len elements of size elem, with room for one more: its
 * room, *cap, doubled (first, the first time) when it is full. */
static void *fake_grow(void *p, size_t len, size_t *cap, size_t elem, size_t first) {
    if (len < *cap) {
        return p;
    }
    *cap = *cap == 0 ? first : 2 * *cap;
    return fake_alloc(p, *cap * elem);
}

static fake_bytes fake_copy(const void *p, size_t n) {
    fake_bytes b = {fake_alloc(NULL, n + 1), n};
    if (n > 0) {
        memcpy(b.ptr, p, n);
    }
    b.ptr[n] = 0;
    return b;
}

static bool fake_eq(fake_bytes b, const void *p, size_t n) {
    return b.len == n && (n == 0 || memcmp(b.ptr, p, n) == 0);
}

/* A map of byte strings, in insertion order; small enough for a linear search. */
typedef struct fake_entry {
    fake_bytes key, val;
} fake_entry;

typedef struct fake_map {
    fake_entry *e;
    size_t len, cap;
} fake_map;

static fake_entry *fake_find(fake_map *m, const void *key, size_t n) {
    for (size_t i = 0; i < m->len; i++) {
        if (fake_eq(m->e[i].key, key, n)) {
            return &m->e[i];
        }
    }
    return NULL;
}

static void fake_put(fake_map *m, const void *key, size_t kn, const void *val, size_t vn) {
    fake_entry *e = fake_find(m, key, kn);
    if (e != NULL) {
        free(e->val.ptr);
        e->val = fake_copy(val, vn);
        return;
    }
    m->e = fake_grow(m->e, m->len, &m->cap, sizeof *m->e, 8);
    m->e[m->len++] = (fake_entry){fake_copy(key, kn), fake_copy(val, vn)};
}

static void fake_del(fake_map *m, const void *key, size_t n) {
    fake_entry *e = fake_find(m, key, n);
    if (e == NULL) {
        return;
    }
    free(e->key.ptr);
    free(e->val.ptr);
    memmove(e, e + 1, (size_t)(m->e + m->len - (e + 1)) * sizeof *e);
    m->len--;
}

static void fake_clear(fake_map *m) {
    for (size_t i = 0; i < m->len; i++) {
        free(m->e[i].key.ptr);
        free(m->e[i].val.ptr);
    }
    m->len = 0;
}

/* The stores, one per plugin type: the value of the entry of a type is a fake_map. */
typedef struct fake_store {
    fake_bytes type;
    fake_map kv;
} fake_store;

/* The fake's state. */
enum fake_call { FAKE_NONE, FAKE_VALIDATE, FAKE_REGISTER, FAKE_DEREGISTER };

static struct {
    fake_store *stores;
    size_t n_stores, stores_cap;
    size_t kv_keys, kv_bytes; /* in every store: the handler's quotas */
    fake_map published, pending; /* pending: published in the register call in progress */
    size_t pending_bytes;
    fake_bytes *log;
    size_t log_len, log_cap;
    enum fake_call call;
    fake_bytes request, reason, error;
    bool reason_set;
    const char *type, *plugin, *endpoint; /* the call's plugin's (type: whose store) */
    size_t log_lines, log_bytes, plugin_calls; /* the call's budgets, used */
    jmp_buf budget;                            /* where a call over a budget ends */
    wh_fake_plugin_call_fn plugin_call;
    fake_bytes last_method, last_req, last_resp; /* the last plugin call's, in this call */
    int32_t last_code;
    bool last_valid;
} fake;

static void fake_set(fake_bytes *b, const void *p, size_t n) {
    free(b->ptr);
    *b = fake_copy(p, n);
}

/* fake_setf sets b to the text format makes. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void fake_setf(fake_bytes *b, const char *format, ...) {
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(NULL, 0, format, ap);
    va_end(ap);
    char *p = fake_alloc(NULL, n < 0 ? 1 : (size_t)n + 1);
    va_start(ap, format);
    vsnprintf(p, n < 0 ? 1 : (size_t)n + 1, format, ap);
    va_end(ap);
    free(b->ptr);
    *b = (fake_bytes){p, n < 0 ? 0 : (size_t)n};
}

/* fake_store_of returns the store of plugin type t (NULL: ""), made empty if there is none
 * and make is true, else NULL. */
static fake_map *fake_store_of(const char *t, bool make) {
    t = t == NULL ? "" : t;
    for (size_t i = 0; i < fake.n_stores; i++) {
        if (strcmp(fake.stores[i].type.ptr, t) == 0) {
            return &fake.stores[i].kv;
        }
    }
    if (!make) {
        return NULL;
    }
    fake.stores = fake_grow(fake.stores, fake.n_stores, &fake.stores_cap, sizeof *fake.stores, 4);
    fake.stores[fake.n_stores] = (fake_store){fake_copy(t, strlen(t)), {0}};
    return &fake.stores[fake.n_stores++].kv;
}

/* fake_kv_put sets key in the store kv, counting it in the handler's quotas. */
static void fake_kv_put(fake_map *kv, const void *key, size_t kn, const void *val, size_t vn) {
    fake_entry *e = fake_find(kv, key, kn);
    if (e == NULL) {
        fake.kv_keys++;
        fake.kv_bytes += kn + vn;
    } else {
        fake.kv_bytes = fake.kv_bytes - e->val.len + vn;
    }
    fake_put(kv, key, kn, val, vn);
}

/* fake_kv_del deletes key from the store kv, giving its room back to the quotas. */
static void fake_kv_del(fake_map *kv, const void *key, size_t kn) {
    fake_entry *e = fake_find(kv, key, kn);
    if (e != NULL) {
        fake.kv_keys--;
        fake.kv_bytes -= kn + e->val.len;
        fake_del(kv, key, kn);
    }
}

void wh_fake_reset(void) {
    for (size_t i = 0; i < fake.n_stores; i++) {
        fake_clear(&fake.stores[i].kv);
        free(fake.stores[i].kv.e);
        free(fake.stores[i].type.ptr);
    }
    fake.n_stores = 0;
    fake.kv_keys = 0;
    fake.kv_bytes = 0;
    fake_clear(&fake.published);
    fake_clear(&fake.pending);
    for (size_t i = 0; i < fake.log_len; i++) {
        free(fake.log[i].ptr);
    }
    fake.log_len = 0;
    fake_set(&fake.reason, "", 0);
    fake_set(&fake.error, "", 0);
    fake.reason_set = false;
    fake.plugin_call = NULL;
    fake.last_valid = false;
}

/* The request: a PluginRequest in the wire format, as the host encodes it (abi/codec.go). */

static void fake_add(fake_bytes *b, const void *p, size_t n) {
    char *q = fake_alloc(b->ptr, b->len + n + 1);
    memcpy(q + b->len, p, n);
    b->ptr = q;
    b->len += n;
    b->ptr[b->len] = 0;
}

static void fake_add_varint(fake_bytes *b, uint64_t v) {
    unsigned char c;
    while (v >= 0x80) {
        c = (unsigned char)(v | 0x80);
        fake_add(b, &c, 1);
        v >>= 7;
    }
    c = (unsigned char)v;
    fake_add(b, &c, 1);
}

static void fake_add_string(fake_bytes *b, uint32_t num, const char *s, bool always) {
    size_t n = s == NULL ? 0 : strlen(s);
    if (n == 0 && !always) {
        return;
    }
    fake_add_varint(b, (uint64_t)num << 3 | WH_WIRE_BYTES);
    fake_add_varint(b, n);
    fake_add(b, s, n);
}

static int32_t fake_call(enum fake_call call, const wh_fake_plugin *p, int32_t (*export)(int32_t)) {
    fake_bytes req = fake_copy("", 0);
    fake_add_string(&req, 1, p->socket, false);
    fake_add_string(&req, 2, p->type, false);
    fake_add_string(&req, 3, p->name, false);
    fake_add_string(&req, 4, p->endpoint, false);
    for (const char *const *v = p->versions; v != NULL && *v != NULL; v++) {
        fake_add_string(&req, 5, *v, true);
    }
    free(fake.request.ptr);
    fake.request = req;
    fake_set(&fake.reason, "", 0);
    fake_set(&fake.error, "", 0);
    fake.reason_set = false;
    fake.last_valid = false;
    fake_clear(&fake.pending);
    fake.pending_bytes = 0;
    fake.type = p->type == NULL ? "" : p->type;
    fake.plugin = p->name == NULL ? "" : p->name;
    fake.endpoint = p->endpoint == NULL ? "" : p->endpoint;
    fake.log_lines = fake.log_bytes = fake.plugin_calls = 0;
    fake.call = call;
    int32_t status;
    if (setjmp(fake.budget) == 0) {
        status = export((int32_t)req.len);
    } else {
        status = WH_ERROR; /* ended over a budget: the reason is the daemon's error */
    }
    fake.call = FAKE_NONE;
    if (status == WH_OK) {
        fake_set(&fake.reason, "", 0); /* a result set in a call that returns WH_OK is ignored */
    } else if (!fake.reason_set) {
        fake_set(&fake.reason, "(no reason given)", strlen("(no reason given)"));
    }
    if (call == FAKE_REGISTER) {
        fake_clear(&fake.published);
        if (status == WH_OK) { /* keys published by a register call that fails are discarded */
            for (size_t i = 0; i < fake.pending.len; i++) {
                fake_entry *e = &fake.pending.e[i];
                fake_put(&fake.published, e->key.ptr, e->key.len, e->val.ptr, e->val.len);
            }
        }
        fake_clear(&fake.pending);
    }
    return status;
}

int32_t wh_fake_validate(const wh_fake_plugin *p) { return fake_call(FAKE_VALIDATE, p, wh_export_validate); }
int32_t wh_fake_register(const wh_fake_plugin *p) { return fake_call(FAKE_REGISTER, p, wh_export_register); }
int32_t wh_fake_deregister(const wh_fake_plugin *p) { return fake_call(FAKE_DEREGISTER, p, wh_export_deregister); }

const char *wh_fake_reason(void) { return fake.reason.ptr == NULL ? "" : fake.reason.ptr; }

bool wh_fake_kv(const char *type, const char *key, wh_str *value) {
    fake_map *kv = fake_store_of(type, false);
    fake_entry *e = kv == NULL ? NULL : fake_find(kv, key, strlen(key));
    if (e == NULL) {
        return false;
    }
    *value = (wh_str){e->val.ptr, e->val.len};
    return true;
}

size_t wh_fake_kv_len(const char *type) {
    fake_map *kv = fake_store_of(type, false);
    return kv == NULL ? 0 : kv->len;
}

void wh_fake_kv_put(const char *type, const char *key, wh_str value) {
    fake_kv_put(fake_store_of(type, true), key, strlen(key), value.ptr, value.len);
}

const char *wh_fake_published(const char *key) {
    fake_entry *e = fake_find(&fake.published, key, strlen(key));
    return e == NULL ? NULL : e->val.ptr;
}

size_t wh_fake_published_len(void) { return fake.published.len; }

size_t wh_fake_log_len(void) { return fake.log_len; }

const char *wh_fake_log(size_t i) { return i < fake.log_len ? fake.log[i].ptr : NULL; }

void wh_fake_set_plugin_call(wh_fake_plugin_call_fn fn) { fake.plugin_call = fn; }

/* The host functions. */

static bool in_handler_call(void) { return fake.call != FAKE_NONE; }

/* over_budget ends the call in progress, as the daemon ends one that did more than limit of
 * what ("logged", "lines") in one call, over handlers.limits.key: the call returns WH_ERROR
 * with the daemon's error as its reason. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noreturn))
#endif
static void over_budget(const char *did, size_t limit, const char *what, const char *key) {
    static const char *const exports[] = {"", "wasmhost_validate", "wasmhost_register", "wasmhost_deregister"};
    fake_setf(&fake.reason,
              "host: budget exceeded: %s %s%s%s%s %s more than %zu %s in one call (the limit is %zu, handlers.limits.%s)",
              WH_FAKE_HANDLER_FILE, exports[fake.call], *fake.plugin ? " for plugin \"" : "", fake.plugin,
              *fake.plugin ? "\"" : "", did, limit, what, limit, key);
    fake.reason_set = true;
    longjmp(fake.budget, 1);
}

/* check_key returns WH_OK or the code the host returns for key. */
static int32_t check_key(uint32_t n) {
    if (n == 0) {
        return WH_BAD_REQUEST;
    }
    return n > WH_MAX_KEY_BYTES ? WH_TOO_LARGE : WH_OK;
}

static int32_t copy_out(void *ptr, uint32_t cap, fake_bytes b) {
    size_t n = b.len < cap ? b.len : cap;
    if (n > 0) {
        memcpy(ptr, b.ptr, n);
    }
    return (int32_t)b.len;
}

int32_t wh_host_request_read(void *ptr, uint32_t cap) {
    if (!in_handler_call()) {
        return 0;
    }
    return copy_out(ptr, cap, fake.request);
}

int32_t wh_host_result_set(const void *ptr, uint32_t len) {
    if (!in_handler_call()) {
        return WH_DENIED;
    }
    if (len > WH_MAX_RESULT_BYTES) {
        return WH_TOO_LARGE;
    }
    fake_set(&fake.reason, ptr, len);
    fake.reason_set = true;
    return WH_OK;
}

void wh_host_log(int32_t level, const void *ptr, uint32_t len) {
    static const char *const names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    const char *name = level < WH_LOG_DEBUG ? names[0] : level > WH_LOG_ERROR ? names[3] : names[level];
    if (len > WH_MAX_LOG_LINE_BYTES) {
        len = WH_MAX_LOG_LINE_BYTES;
    }
    if (in_handler_call()) { /* a line past the call's budget is dropped, and the call ends */
        fake.log_lines++;
        fake.log_bytes += len;
        if (fake.log_lines > WH_FAKE_LOG_LINES_PER_CALL) {
            over_budget("logged", WH_FAKE_LOG_LINES_PER_CALL, "lines", "logLinesPerCall");
        }
        if (fake.log_bytes > WH_FAKE_LOG_BYTES_PER_CALL) {
            over_budget("logged", WH_FAKE_LOG_BYTES_PER_CALL, "bytes", "logBytesPerCall");
        }
    }
    fake_bytes line = fake_copy(name, strlen(name));
    fake_add(&line, " ", 1);
    fake_add(&line, ptr, len);
    fake.log = fake_grow(fake.log, fake.log_len, &fake.log_cap, sizeof *fake.log, 16);
    fake.log[fake.log_len++] = line;
}

int32_t wh_host_publish(const void *key, uint32_t key_len, const void *val, uint32_t val_len) {
    if (fake.call != FAKE_REGISTER) {
        return WH_DENIED;
    }
    int32_t rc = check_key(key_len);
    if (rc != WH_OK) {
        return rc;
    }
    if (val_len > WH_MAX_VALUE_BYTES) {
        return WH_TOO_LARGE;
    }
    fake_entry *old = fake_find(&fake.pending, key, key_len);
    size_t size = fake.pending_bytes + val_len + (old == NULL ? key_len : 0) - (old == NULL ? 0 : old->val.len);
    if (old == NULL && fake.pending.len >= WH_FAKE_PUBLISH_KEYS) {
        fake_setf(&fake.error, "%zu keys published, the most in one call (handlers.limits.publishKeys)", fake.pending.len);
        return WH_TOO_LARGE;
    }
    if (size > WH_FAKE_PUBLISH_BYTES) {
        fake_setf(&fake.error, "%zu bytes published would go over %d (handlers.limits.publishBytes)", size,
                  WH_FAKE_PUBLISH_BYTES);
        return WH_TOO_LARGE;
    }
    fake_put(&fake.pending, key, key_len, val, val_len);
    fake.pending_bytes = size;
    return WH_OK;
}

int32_t wh_host_kv_get(const void *key, uint32_t key_len, void *buf, uint32_t cap) {
    if (!in_handler_call()) {
        return WH_DENIED;
    }
    int32_t rc = check_key(key_len);
    if (rc != WH_OK) {
        return rc;
    }
    fake_map *kv = fake_store_of(fake.type, false);
    fake_entry *e = kv == NULL ? NULL : fake_find(kv, key, key_len);
    return e == NULL ? WH_NOT_FOUND : copy_out(buf, cap, e->val);
}

/* kv_store sets key in the store of the call's plugin type, as the daemon's store does
 * (internal/host/budget.go): WH_TOO_LARGE, with the daemon's reason, when the key is new in a
 * full store or the handler's quotas would go over. */
static int32_t kv_store(const void *key, size_t kn, const void *val, size_t vn) {
    fake_map *kv = fake_store_of(fake.type, true);
    fake_entry *e = fake_find(kv, key, kn);
    if (e == NULL && kv->len >= WH_FAKE_MAX_KV_ENTRIES) {
        fake_setf(&fake.error, "the store of this plugin type has %d keys, the most (abi.MaxKVEntries)",
                  WH_FAKE_MAX_KV_ENTRIES);
        return WH_TOO_LARGE;
    }
    size_t more = e == NULL ? kn + vn : vn > e->val.len ? vn - e->val.len : 0;
    if (e == NULL && fake.kv_keys + 1 > WH_FAKE_KV_KEYS_PER_HANDLER) {
        fake_setf(&fake.error, "handler %s holds %zu keys in its stores, the most (handlers.limits.kvKeysPerHandler)",
                  WH_FAKE_HANDLER_FILE, fake.kv_keys);
        return WH_TOO_LARGE;
    }
    if (more > 0 && fake.kv_bytes + more > WH_FAKE_KV_BYTES_PER_HANDLER) {
        fake_setf(&fake.error,
                  "handler %s holds %zu bytes in its stores; %zu more would go over %d (handlers.limits.kvBytesPerHandler)",
                  WH_FAKE_HANDLER_FILE, fake.kv_bytes, more, WH_FAKE_KV_BYTES_PER_HANDLER);
        return WH_TOO_LARGE;
    }
    fake_kv_put(kv, key, kn, val, vn);
    return WH_OK;
}

int32_t wh_host_kv_set(const void *key, uint32_t key_len, const void *val, uint32_t val_len) {
    if (!in_handler_call()) {
        return WH_DENIED;
    }
    int32_t rc = check_key(key_len);
    if (rc != WH_OK) {
        return rc;
    }
    if (val_len > WH_MAX_VALUE_BYTES) {
        return WH_TOO_LARGE;
    }
    return kv_store(key, key_len, val, val_len);
}

int32_t wh_host_kv_delete(const void *key, uint32_t key_len) {
    if (!in_handler_call()) {
        return WH_DENIED;
    }
    int32_t rc = check_key(key_len);
    if (rc != WH_OK) {
        return rc;
    }
    fake_map *kv = fake_store_of(fake.type, false);
    if (kv != NULL) {
        fake_kv_del(kv, key, key_len);
    }
    return WH_OK;
}

int32_t wh_host_kv_compare_and_set(const void *key, uint32_t key_len, const void *old, int32_t old_len,
                                   const void *val, int32_t val_len) {
    if (!in_handler_call()) {
        return WH_DENIED;
    }
    int32_t rc = check_key(key_len);
    if (rc != WH_OK) {
        return rc;
    }
    /* Each operand: -1 (absent) or a length up to WH_MAX_VALUE_BYTES, the old one first. */
    int32_t lens[] = {old_len, val_len};
    for (int i = 0; i < 2; i++) {
        if (lens[i] < -1) {
            return WH_BAD_REQUEST;
        }
        if (lens[i] > WH_MAX_VALUE_BYTES) {
            return WH_TOO_LARGE;
        }
    }
    fake_map *kv = fake_store_of(fake.type, true);
    fake_entry *e = fake_find(kv, key, key_len);
    bool same = old_len == -1 ? e == NULL : e != NULL && fake_eq(e->val, old, (size_t)old_len);
    if (!same) {
        return WH_CONFLICT;
    }
    if (val_len == -1) {
        fake_kv_del(kv, key, key_len);
        return WH_OK;
    }
    return kv_store(key, key_len, val, (size_t)val_len);
}

/* fake_utf8 says whether b[0:n] is valid UTF-8, as Go's utf8.Valid does (no overlong forms, no
 * surrogates, nothing past U+10FFFF): the daemon refuses a method that is not. */
static bool fake_utf8(const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = b[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i < len) {
            return false;
        }
        for (size_t k = 1; k < len; k++) {
            if ((b[i + k] & 0xc0) != 0x80) {
                return false;
            }
            cp = cp << 6 | (b[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            return false;
        }
        i += len;
    }
    return true;
}

int32_t wh_host_plugin_call(const void *method, uint32_t method_len, const void *req, uint32_t req_len, void *resp,
                            uint32_t resp_cap) {
    if (!in_handler_call()) {
        fake_set(&fake.error, "plugin_call outside a handler call", strlen("plugin_call outside a handler call"));
        return WH_DENIED;
    }
    if (fake.plugin_call == NULL) {
        const char *why = "plugin_call is not granted (wh_fake_set_plugin_call answers plugin calls)";
        fake_set(&fake.error, why, strlen(why));
        return WH_DENIED;
    }
    if (method_len == 0 || !fake_utf8(method, method_len)) {
        return WH_BAD_REQUEST;
    }
    if (req_len > WH_MAX_REQUEST_BYTES) {
        return WH_TOO_LARGE;
    }
    if (*fake.endpoint == 0) {
        fake_set(&fake.error, "the plugin has no endpoint", strlen("the plugin has no endpoint"));
        return WH_FAILED;
    }
    if (++fake.plugin_calls > WH_FAKE_PLUGIN_CALLS_PER_CALL) {
        over_budget("made", WH_FAKE_PLUGIN_CALLS_PER_CALL, "plugin_call calls", "pluginCallsPerCall");
    }
    /* The SDK calls again with a larger buffer when the response did not fit: that is the same
     * call, answered from the first. */
    if (!(fake.last_valid && fake_eq(fake.last_method, method, method_len) && fake_eq(fake.last_req, req, req_len))) {
        wh_text out = {0};
        fake.last_code = fake.plugin_call((wh_str){method, method_len}, (wh_str){req, req_len}, &out);
        fake_set(&fake.last_method, method, method_len);
        fake_set(&fake.last_req, req, req_len);
        fake_set(&fake.last_resp, out.ptr, out.len);
        fake.last_valid = true;
    }
    if (fake.last_code != WH_OK) {
        fake_set(&fake.error, fake.last_resp.ptr, fake.last_resp.len);
        fake.last_valid = false;
        return fake.last_code;
    }
    if (fake.last_resp.len > WH_FAKE_PLUGIN_CALL_RESPONSE_SIZE) {
        fake_setf(&fake.error, "response of %zu bytes over the limit of %d (handlers.limits.pluginCallResponseSize)",
                  fake.last_resp.len, WH_FAKE_PLUGIN_CALL_RESPONSE_SIZE);
        return WH_TOO_LARGE;
    }
    return copy_out(resp, resp_cap, fake.last_resp);
}

int32_t wh_host_error_read(void *ptr, uint32_t cap) { return copy_out(ptr, cap, fake.error); }

/* Checks. */

static int fake_checks, fake_failures;

void wh_fake_check(bool ok, const char *file, int line, const char *format, ...) {
    fake_checks++;
    if (ok) {
        return;
    }
    fake_failures++;
    printf("FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, format);
    vprintf(format, ap);
    va_end(ap);
    printf("\n");
}

int wh_fake_done(void) {
    if (fake_failures > 0) {
        printf("FAIL: %d of %d checks failed\n", fake_failures, fake_checks);
        return 1;
    }
    printf("PASS: %d checks\n", fake_checks);
    return 0;
}
