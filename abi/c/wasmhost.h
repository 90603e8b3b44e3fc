/*
 * wasmhost.h: the C SDK for wasmhost handlers (ABI v1, abi/README.md).
 *
 * A handler is a manifest and three functions. The SDK (wasmhost.c) implements the module's
 * exports, decodes the request, encodes the manifest and wraps the host functions:
 *
 *     #include "wasmhost.h"
 *
 *     static int32_t validate(const wh_plugin *p) { return WH_OK; }   // or wh_reject("why")
 *     static int32_t register_plugin(const wh_plugin *p) {
 *         return wh_publish(WH_STR("endpoint"), p->endpoint) < 0 ? wh_fail("publish failed") : WH_OK;
 *     }
 *     static int32_t deregister(const wh_plugin *p) { return WH_OK; }
 *
 *     const wh_handler wh_handler_def = {
 *         .manifest = {.plugin_types = WH_TYPES("example.com/widget"), .name = "widget", .version = "0.1.0"},
 *         .validate = validate, .register_plugin = register_plugin, .deregister = deregister,
 *     };
 *
 * Build it as a WASI reactor (Debian: clang, lld, wasi-libc, libclang-rt-*-dev-wasm32):
 *
 *     clang --target=wasm32-wasi -mexec-model=reactor -O2 -I abi/c -o widget.wasm widget.c abi/c/wasmhost.c
 *
 * A command (built without -mexec-model=reactor) exports _start instead of _initialize, and the
 * host refuses it.
 *
 * Memory: strings and buffers the SDK returns (the plugin's fields, wh_kv_get's value,
 * wh_plugin_call's response, wh_text's contents, wh_alloc's blocks) live until the export call
 * returns; the SDK frees them all when the next call starts. Nothing needs freeing, and nothing
 * may be kept from one call to the next:
 * the host pools instances and throws one away after any trap or timeout. What must last goes
 * in the key-value store (wh_kv_*).
 */
#ifndef WASMHOST_H
#define WASMHOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this SDK implements (wasmhost_abi_version). */
#define WH_ABI_VERSION 1

/* Statuses a handler function returns (abi.Status*). */
#define WH_OK 0       /* accepted, done */
#define WH_REJECTED 1 /* the plugin is refused; the result is the reason (wh_reject) */
#define WH_ERROR 2    /* the handler failed; the host retries with backoff (wh_fail) */

/* Codes host functions return; non-negative values are WH_OK or lengths (abi.Code*). */
#define WH_NOT_FOUND (-1)   /* kv_get: no such key */
#define WH_TOO_LARGE (-2)   /* a key, value, result or response over its limit, or a store full */
#define WH_DENIED (-3)      /* not allowed now, or a capability not granted */
#define WH_FAILED (-4)      /* plugin_call failed; wh_error_reason() says why */
#define WH_BAD_REQUEST (-5) /* a malformed argument, such as an empty key */
#define WH_CONFLICT (-6)    /* kv_compare_and_set: the value was not the one expected */

/* Log levels (abi.LogLevel). */
#define WH_LOG_DEBUG 0
#define WH_LOG_INFO 1
#define WH_LOG_WARN 2
#define WH_LOG_ERROR 3

/* Limits of ABI v1 (abi.Max*). */
#define WH_MAX_REQUEST_BYTES (64 << 10)
#define WH_MAX_RESULT_BYTES (4 << 10)
#define WH_MAX_LOG_LINE_BYTES (4 << 10)
#define WH_MAX_KEY_BYTES 512
#define WH_MAX_VALUE_BYTES (64 << 10)

/* wh_str is a run of bytes: a string with its length. Strings the SDK makes are also
 * NUL-terminated (ptr[len] == 0), so ptr can be used as a C string. */
typedef struct wh_str {
    const char *ptr;
    size_t len;
} wh_str;

/* WH_STR("literal") is a wh_str of a string literal. */
#define WH_STR(lit) ((wh_str){(lit), sizeof(lit) - 1})

/* wh_cstr is a wh_str of a NUL-terminated string (NULL is the empty string). */
wh_str wh_cstr(const char *s);
/* wh_str_eq says whether two strings have the same bytes. */
bool wh_str_eq(wh_str a, wh_str b);

/* wh_plugin is the plugin a call is about, as it described itself in GetInfo
 * (PluginRequest). */
typedef struct wh_plugin {
    wh_str socket;          /* the registration socket's path */
    wh_str type;            /* the plugin type, e.g. CSIPlugin */
    wh_str name;            /* the plugin's name */
    wh_str endpoint;        /* where it serves its own API (its socket when it gave none) */
    const wh_str *versions; /* the versions it supports, as it sent them */
    size_t n_versions;
} wh_plugin;

/* wh_plugin_supports says whether the plugin listed version v. */
bool wh_plugin_supports(const wh_plugin *p, wh_str v);

/* wh_manifest describes the module: the plugin types it handles (a NULL-terminated list, at
 * least one), and a name and version operators see (optional, NULL for none). */
typedef struct wh_manifest {
    const char *const *plugin_types;
    const char *name;
    const char *version;
} wh_manifest;

/* WH_TYPES("a", "b") is a NULL-terminated list of plugin types for wh_manifest. */
#define WH_TYPES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* wh_handler is the module's handler. Each function is one call from the host and returns a
 * status: WH_OK, wh_reject(reason) or wh_fail(reason). validate is called first, register_plugin
 * after a successful validate, deregister for a plugin that was registered. */
typedef struct wh_handler {
    wh_manifest manifest;
    int32_t (*validate)(const wh_plugin *p);
    int32_t (*register_plugin)(const wh_plugin *p);
    int32_t (*deregister)(const wh_plugin *p);
} wh_handler;

/* The handler: define it, once, in the handler's source. */
extern const wh_handler wh_handler_def;

/* wh_reject sets the reason and returns WH_REJECTED: the plugin is refused and told why, and the
 * host asks again only when something that could change the answer changes. */
int32_t wh_reject(const char *reason);
int32_t wh_reject_str(wh_str reason);
/* wh_fail sets the reason and returns WH_ERROR: the handler failed, the host retries later. */
int32_t wh_fail(const char *reason);
int32_t wh_fail_str(wh_str reason);
/* wh_fail_code returns WH_ERROR with a reason naming the host function, the key and the code:
 * "kv_set plugin/demo: too large". */
int32_t wh_fail_code(const char *function, wh_str key, int32_t code);
/* wh_code_text names a host function's code: "too large", "denied", ... */
const char *wh_code_text(int32_t code);

/* wh_log writes a line to the daemon's log, at a level (WH_LOG_*); lines are cut at
 * WH_MAX_LOG_LINE_BYTES. */
void wh_log(int32_t level, wh_str msg);

/* wh_publish publishes a key and value about the plugin being registered (only in
 * register_plugin). Returns WH_OK or a negative code. */
int32_t wh_publish(wh_str key, wh_str value);

/* The key-value store of the plugin type of the current call: shared by every instance and
 * outliving them. wh_kv_get sets *value (valid until the call ends) and returns WH_OK, or
 * returns WH_NOT_FOUND or another negative code. */
int32_t wh_kv_get(wh_str key, wh_str *value);
int32_t wh_kv_set(wh_str key, wh_str value);
int32_t wh_kv_delete(wh_str key); /* deleting a missing key is WH_OK */
/* wh_kv_compare_and_set (ABI v1.1) sets key to *value if its value is still *old, atomically.
 * old NULL: only if the key does not exist; value NULL: delete it. Returns WH_OK, WH_CONFLICT
 * (nothing changed: read again and decide again) or another negative code. */
int32_t wh_kv_compare_and_set(wh_str key, const wh_str *old, const wh_str *value);

/* wh_plugin_call calls method ("/package.Service/Method") on the endpoint of the plugin being
 * handled, with req an encoded request message, and sets *resp to the encoded response. It needs
 * the plugin_call capability, granted by the operator for the module's plugin types: a module
 * that uses it imports plugin_call and loads only with the grant. Returns WH_OK or a negative
 * code; for WH_FAILED, wh_error_reason() has the host's reason. */
int32_t wh_plugin_call(wh_str method, wh_str req, wh_str *resp);
/* wh_error_reason is the host's reason for the last host function that failed in this call
 * (error_read), or an empty string. */
wh_str wh_error_reason(void);

/* wh_alloc returns n bytes that live until the export call returns (NULL if memory is out). */
void *wh_alloc(size_t n);

/* wh_text builds a string, growing as needed, valid until the call ends. The zero value is an
 * empty text: wh_text t = {0}; wh_text_add(&t, WH_STR("plugin/")); wh_text_add(&t, p->name); */
typedef struct wh_text {
    char *ptr;
    size_t len, cap;
} wh_text;
void wh_text_add(wh_text *t, wh_str s);
void wh_text_adds(wh_text *t, const char *s);
void wh_text_addu(wh_text *t, uint64_t v); /* in decimal */
void wh_text_addbyte(wh_text *t, uint8_t b);
/* wh_text_addquoted adds s in double quotes, escaping quotes, backslashes and ASCII control
 * characters (as \xNN), so that odd values a plugin sent stay visible in a reason or a log. */
void wh_text_addquoted(wh_text *t, wh_str s);
wh_str wh_text_str(const wh_text *t);

/* The protocol buffers wire format (as abi/wire), for the messages of plugin calls. */
enum { WH_WIRE_VARINT = 0, WH_WIRE_FIXED64 = 1, WH_WIRE_BYTES = 2, WH_WIRE_FIXED32 = 5 };

/* wh_wire_add_* append a field to a text: a varint, a length-delimited field (proto3 leaves out
 * an empty singular string: skip it yourself), a tag. */
void wh_wire_add_varint(wh_text *t, uint64_t v);
void wh_wire_add_tag(wh_text *t, uint32_t num, int type);
void wh_wire_add_bytes(wh_text *t, uint32_t num, wh_str v);
void wh_wire_add_uint(wh_text *t, uint32_t num, uint64_t v);

/* wh_field is one field of a message, as wh_wire_next reads it. */
typedef struct wh_field {
    uint32_t num;
    int type;        /* WH_WIRE_* */
    uint64_t varint; /* a WH_WIRE_VARINT field's value */
    wh_str data;     /* a length-delimited field's content (a view, not NUL-terminated) */
} wh_field;

/* wh_wire_reader walks a message: while (wh_wire_next(&r, &f)) { ... } then check r.err. */
typedef struct wh_wire_reader {
    const uint8_t *p, *end;
    const char *err;    /* NULL, or what was malformed: "truncated", "unsupported wire type 3" */
    uint32_t err_field; /* the field it was in; 0 when the tag itself was unreadable */
} wh_wire_reader;
wh_wire_reader wh_wire_reader_of(wh_str msg);
bool wh_wire_next(wh_wire_reader *r, wh_field *f);
/* wh_wire_fail makes r fail at field f with what (as a decoder does for a known field of the
 * wrong type), and returns false. wh_wire_wrong_type is the what of a field of an unexpected
 * wire type: "unexpected wire type 0". */
bool wh_wire_fail(wh_wire_reader *r, uint32_t field, const char *what);
const char *wh_wire_wrong_type(int type);
/* wh_wire_text reads a length-delimited field as a string, which must be valid UTF-8; false
 * (with r failed) when it is not, or is of another wire type. */
bool wh_wire_text(wh_wire_reader *r, const wh_field *f, wh_str *s);
/* wh_wire_error says what was malformed, as abi/wire does: "malformed protobuf message: field 1:
 * truncated". */
wh_str wh_wire_error(const wh_wire_reader *r);
/* wh_utf8_valid says whether s is valid UTF-8 (a proto3 string must be). */
bool wh_utf8_valid(wh_str s);
/* wh_str_dup copies s into call memory, NUL-terminated. */
wh_str wh_str_dup(wh_str s);

#ifdef __cplusplus
}
#endif

#endif /* WASMHOST_H */
