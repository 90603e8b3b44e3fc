/*
 * wasmhost_fake.h: an in-memory host for the C SDK, to unit test a handler's logic natively,
 * without WebAssembly. Build the handler with wasmhost.c and wasmhost_fake.c by the system's C
 * compiler into a test program of your own, and make the daemon's calls with wh_fake_validate,
 * wh_fake_register and wh_fake_deregister:
 *
 *     clang -o example_test example_test.c example.c wasmhost.c wasmhost_fake.c && ./example_test
 *
 * The fake keeps a key-value store per plugin type, as the daemon does (a call's wh_kv_*
 * functions reach the store of its plugin's type), the keys published by the last register
 * call, the log, and the reason of the last call. It checks what the daemon checks of each host
 * function, with the ABI's limits and the daemon's default ones (WH_FAKE_* below: empty keys,
 * publish only in register, a full store, the store quotas of a handler over every type's store)
 * and returns the daemon's codes and reasons (wh_error_reason). A call that logs more lines or
 * bytes, or makes more plugin calls, than the daemon allows is ended there, as the daemon ends
 * it: it returns WH_ERROR, and wh_fake_reason is the daemon's error. The fake does not pool
 * instances, time calls or sandbox anything: run the built module through wasmhost handler test
 * and handler conformance for that. It is not thread-safe, like the handler calls it makes.
 */
#ifndef WASMHOST_FAKE_H
#define WASMHOST_FAKE_H

#include "wasmhost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The limits the fake enforces: the ABI's and the defaults of the daemon's handlers.limits
 * (wasmhost config defaults). TestFakeLimits (internal/abitest) compares them with the daemon's. */
#define WH_FAKE_MAX_KV_ENTRIES 16384            /* keys in one plugin type's store: abi.MaxKVEntries */
#define WH_FAKE_KV_KEYS_PER_HANDLER 16384       /* keys in every store of the handler: kvKeysPerHandler */
#define WH_FAKE_KV_BYTES_PER_HANDLER (16 << 20) /* bytes of their keys and values: kvBytesPerHandler */
#define WH_FAKE_LOG_LINES_PER_CALL 1000         /* lines one call logs: logLinesPerCall */
#define WH_FAKE_LOG_BYTES_PER_CALL (64 << 10)   /* bytes of their messages: logBytesPerCall */
#define WH_FAKE_PUBLISH_KEYS 64                 /* keys one register call publishes: publishKeys */
#define WH_FAKE_PUBLISH_BYTES (64 << 10)        /* bytes of their keys and values: publishBytes */
#define WH_FAKE_PLUGIN_CALLS_PER_CALL 16        /* plugin calls in one call: pluginCallsPerCall */
#define WH_FAKE_PLUGIN_CALL_RESPONSE_SIZE (1 << 20) /* the largest response: pluginCallResponseSize */

/* The handler file the fake's reasons name, where the daemon names the handler's file. */
#define WH_FAKE_HANDLER_FILE "handler.wasm"

/* wh_fake_plugin is a plugin as it describes itself in GetInfo: what a call is about. */
typedef struct wh_fake_plugin {
    const char *socket, *type, *name, *endpoint;
    const char *const *versions; /* a NULL-terminated list (WH_TYPES makes one), or NULL */
} wh_fake_plugin;

/* wh_fake_reset empties the stores, the published keys, the log and the reason, and removes the
 * plugin call function. */
void wh_fake_reset(void);

/* The daemon's calls: each encodes p as the host does, calls the handler through the SDK's
 * export, and returns its status (WH_OK, WH_REJECTED, WH_ERROR). */
int32_t wh_fake_validate(const wh_fake_plugin *p);
int32_t wh_fake_register(const wh_fake_plugin *p);
int32_t wh_fake_deregister(const wh_fake_plugin *p);

/* wh_fake_reason is the reason the last call set (wh_reject, wh_fail), or "" when it set none. */
const char *wh_fake_reason(void);

/* wh_fake_kv sets *value to the value of key in the store of plugin type type and returns true,
 * or returns false when there is no such key. wh_fake_kv_len is the number of keys in that
 * store; wh_fake_kv_put sets a key in it from the test, as an earlier call would have (not
 * checked against the limits, but counted in the quotas of the calls after it). */
bool wh_fake_kv(const char *type, const char *key, wh_str *value);
size_t wh_fake_kv_len(const char *type);
void wh_fake_kv_put(const char *type, const char *key, wh_str value);

/* wh_fake_published is the value the last register call that returned WH_OK published under
 * key (NUL-terminated), or NULL; wh_fake_published_len is the number of keys it published. */
const char *wh_fake_published(const char *key);
size_t wh_fake_published_len(void);

/* The log: wh_fake_log_len lines so far, line i as "LEVEL message" ("INFO registering ..."). */
size_t wh_fake_log_len(void);
const char *wh_fake_log(size_t i);

/* wh_fake_plugin_call_fn answers wh_plugin_call: it appends the encoded response to resp and
 * returns WH_OK, or returns a code (WH_FAILED, ...) with the reason appended to resp instead.
 * Without one, plugin calls return WH_DENIED, as under a host that did not grant them. */
typedef int32_t (*wh_fake_plugin_call_fn)(wh_str method, wh_str req, wh_text *resp);
void wh_fake_set_plugin_call(wh_fake_plugin_call_fn fn);

/* WH_CHECK(cond, format, ...) is one check of a test program: when cond is false it prints
 * "FAIL file:line: " and the message. wh_fake_done prints "PASS: N checks" or "FAIL: n of N
 * checks failed" and returns main's exit status: 0, or 1 when a check failed. */
#define WH_CHECK(cond, ...) wh_fake_check((cond), __FILE__, __LINE__, __VA_ARGS__)
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
void wh_fake_check(bool ok, const char *file, int line, const char *format, ...);
int wh_fake_done(void);

#ifdef __cplusplus
}
#endif

#endif
