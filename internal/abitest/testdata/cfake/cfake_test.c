/*
 * cfake_test.c: tests of the C SDK's fake host (abi/c/wasmhost_fake.h), built natively with the
 * SDK by TestCFakeHost. The handler below does what the plugin's name asks, and main checks
 * what the fake made of it, with WH_CHECK: each failed check is printed, and "PASS" or "FAIL"
 * at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wasmhost_fake.h"

/* EXPECT_REASON fails the call when wh_error_reason() is not want. */
#define EXPECT_REASON(what, want)                                                                                      \
    do {                                                                                                               \
        if (!wh_str_eq(wh_error_reason(), WH_STR(want))) {                                                             \
            wh_text t_ = {0};                                                                                          \
            wh_text_adds(&t_, what ": reason ");                                                                       \
            wh_text_add(&t_, wh_error_reason());                                                                       \
            return wh_fail_str(wh_text_str(&t_));                                                                      \
        }                                                                                                              \
    } while (0)

/* expect fails the call with a reason naming what went wrong when got is not want. */
#define EXPECT(what, got, want)                                                                                        \
    do {                                                                                                               \
        int32_t g_ = (got);                                                                                            \
        if (g_ != (want)) {                                                                                            \
            wh_text t_ = {0};                                                                                          \
            wh_text_adds(&t_, what ": got ");                                                                          \
            wh_text_adds(&t_, g_ < 0 ? wh_code_text(g_) : "a length or OK");                                           \
            return wh_fail_str(wh_text_str(&t_));                                                                      \
        }                                                                                                              \
    } while (0)

static int32_t validate(const wh_plugin *p) {
    if (wh_str_eq(p->name, WH_STR("publish"))) {
        EXPECT("publish in validate", wh_publish(WH_STR("k"), WH_STR("v")), WH_DENIED);
    }
    if (wh_str_eq(p->name, WH_STR("request"))) {
        /* The request as the daemon encodes it: every field, the versions in order. */
        if (!wh_str_eq(p->socket, WH_STR("/s.sock")) || !wh_str_eq(p->type, WH_STR("t")) ||
            !wh_str_eq(p->endpoint, WH_STR("/e.sock")) || p->n_versions != 3 ||
            !wh_str_eq(p->versions[0], WH_STR("v2")) || !wh_str_eq(p->versions[1], WH_STR("")) ||
            !wh_str_eq(p->versions[2], WH_STR("v1"))) {
            return wh_fail("the request was not decoded as sent");
        }
    }
    if (wh_str_eq(p->name, WH_STR("read"))) { /* rejects with the value of "plugin" in its type's store */
        wh_str v;
        int32_t rc = wh_kv_get(WH_STR("plugin"), &v);
        return rc == WH_NOT_FOUND ? wh_reject("none") : rc < 0 ? wh_fail("kv_get failed") : wh_reject_str(v);
    }
    if (wh_str_eq(p->name, WH_STR("log-lines"))) {
        for (int i = 0; i < WH_FAKE_LOG_LINES_PER_CALL; i++) {
            wh_log(WH_LOG_INFO, WH_STR("line"));
        }
        wh_log(WH_LOG_INFO, WH_STR("one line too many"));
        wh_kv_set(WH_STR("after"), WH_STR("the call went on"));
    }
    if (wh_str_eq(p->name, WH_STR("log-bytes"))) {
        static char line[WH_MAX_LOG_LINE_BYTES];
        memset(line, 'b', sizeof line);
        for (int i = 0; i < WH_FAKE_LOG_BYTES_PER_CALL / WH_MAX_LOG_LINE_BYTES; i++) {
            wh_log(WH_LOG_INFO, (wh_str){line, sizeof line});
        }
        wh_log(WH_LOG_INFO, WH_STR("b"));
        wh_kv_set(WH_STR("after"), WH_STR("the call went on"));
    }
    if (wh_str_eq(p->name, WH_STR("log-most"))) {
        for (int i = 0; i < WH_FAKE_LOG_LINES_PER_CALL; i++) {
            wh_log(WH_LOG_INFO, WH_STR("line"));
        }
    }
    return WH_OK;
}

static int32_t answer(wh_str method, wh_str req, wh_text *resp);

static int32_t register_plugin(const wh_plugin *p) {
    if (wh_str_eq(p->name, WH_STR("kv"))) {
        wh_str v;
        EXPECT("kv_get of a missing key", wh_kv_get(WH_STR("a"), &v), WH_NOT_FOUND);
        EXPECT("kv_set", wh_kv_set(WH_STR("a"), WH_STR("1")), WH_OK);
        EXPECT("kv_get", wh_kv_get(WH_STR("a"), &v), WH_OK);
        if (!wh_str_eq(v, WH_STR("1"))) {
            return wh_fail("kv_get read another value");
        }
        wh_str one = WH_STR("1"), two = WH_STR("2"), three = WH_STR("3");
        EXPECT("compare_and_set of the value there", wh_kv_compare_and_set(WH_STR("a"), &one, &two), WH_OK);
        EXPECT("compare_and_set of a stale value", wh_kv_compare_and_set(WH_STR("a"), &one, &three), WH_CONFLICT);
        EXPECT("compare_and_set of an absent key", wh_kv_compare_and_set(WH_STR("b"), NULL, &one), WH_OK);
        EXPECT("compare_and_set expecting absent", wh_kv_compare_and_set(WH_STR("b"), NULL, &two), WH_CONFLICT);
        EXPECT("compare_and_set deleting", wh_kv_compare_and_set(WH_STR("b"), &one, NULL), WH_OK);
        EXPECT("kv_set of an empty key", wh_kv_set(WH_STR(""), WH_STR("x")), WH_BAD_REQUEST);
        char big[WH_MAX_VALUE_BYTES + 1];
        memset(big, 'x', sizeof big);
        EXPECT("kv_set of a key over the limit", wh_kv_set((wh_str){big, WH_MAX_KEY_BYTES + 1}, WH_STR("x")),
               WH_TOO_LARGE);
        EXPECT("kv_set of a value over the limit", wh_kv_set(WH_STR("c"), (wh_str){big, sizeof big}), WH_TOO_LARGE);
        EXPECT("kv_set of a value at the limit", wh_kv_set(WH_STR("c"), (wh_str){big, sizeof big - 1}), WH_OK);
        EXPECT("kv_delete", wh_kv_delete(WH_STR("c")), WH_OK);
        EXPECT("kv_delete of a missing key", wh_kv_delete(WH_STR("c")), WH_OK);
    }
    if (wh_str_eq(p->name, WH_STR("kv-many"))) {
        /* abi.MaxKVEntries keys, the daemon's default limit (handlers.limits.kvKeysPerHandler). */
        char key[16];
        for (int i = 0; i < 16384; i++) {
            snprintf(key, sizeof key, "k%d", i);
            EXPECT("kv_set of one of 16384 keys", wh_kv_set(wh_cstr(key), WH_STR("v")), WH_OK);
        }
        EXPECT("kv_set of a key there already", wh_kv_set(WH_STR("k0"), WH_STR("again")), WH_OK);
        EXPECT("kv_set of a 16385th key", wh_kv_set(WH_STR("one-more"), WH_STR("v")), WH_TOO_LARGE);
        EXPECT_REASON("kv_set of a 16385th key", "the store of this plugin type has 16384 keys, the most (abi.MaxKVEntries)");
        wh_str v = WH_STR("v");
        EXPECT("compare_and_set of a 16385th key", wh_kv_compare_and_set(WH_STR("one-more"), NULL, &v), WH_TOO_LARGE);
    }
    if (wh_str_eq(p->name, WH_STR("a")) || wh_str_eq(p->name, WH_STR("b"))) {
        EXPECT("kv_set of plugin", wh_kv_set(WH_STR("plugin"), p->name), WH_OK);
    }
    if (wh_str_eq(p->name, WH_STR("quota-keys"))) {
        EXPECT("kv_set of a key there already", wh_kv_set(WH_STR("there"), WH_STR("again")), WH_OK);
        EXPECT("kv_set past kvKeysPerHandler", wh_kv_set(WH_STR("new"), WH_STR("x")), WH_TOO_LARGE);
        EXPECT_REASON("kv_set past kvKeysPerHandler",
                      "handler handler.wasm holds 16384 keys in its stores, the most (handlers.limits.kvKeysPerHandler)");
        wh_str x = WH_STR("x");
        EXPECT("compare_and_set past kvKeysPerHandler", wh_kv_compare_and_set(WH_STR("new"), NULL, &x), WH_TOO_LARGE);
        EXPECT("kv_delete", wh_kv_delete(WH_STR("there")), WH_OK);
        EXPECT("kv_set once a key is deleted", wh_kv_set(WH_STR("new"), WH_STR("x")), WH_OK);
    }
    if (wh_str_eq(p->name, WH_STR("quota-bytes"))) {
        EXPECT("kv_set of a smaller value", wh_kv_set(WH_STR("there"), WH_STR("")), WH_OK);
        EXPECT("kv_set past kvBytesPerHandler", wh_kv_set(WH_STR("new"), WH_STR("0123456789")), WH_TOO_LARGE);
        EXPECT_REASON("kv_set past kvBytesPerHandler", "handler handler.wasm holds 16777211 bytes in its stores; 13 more "
                                                       "would go over 16777216 (handlers.limits.kvBytesPerHandler)");
        EXPECT("kv_set of what fits", wh_kv_set(WH_STR("new"), WH_STR("01")), WH_OK);
        wh_str v01 = WH_STR("01"), v012 = WH_STR("012");
        EXPECT("compare_and_set of one byte more", wh_kv_compare_and_set(WH_STR("new"), &v01, &v012), WH_TOO_LARGE);
    }
    if (wh_str_eq(p->name, WH_STR("publish-big"))) {
        static char big[WH_MAX_VALUE_BYTES - 10];
        memset(big, 'v', sizeof big);
        EXPECT("publish", wh_publish(WH_STR("a"), (wh_str){big, sizeof big}), WH_OK);
        EXPECT("publish past publishBytes", wh_publish(WH_STR("b"), (wh_str){big, 100}), WH_TOO_LARGE);
        EXPECT_REASON("publish past publishBytes", "65628 bytes published would go over 65536 (handlers.limits.publishBytes)");
    }
    if (wh_str_eq(p->name, WH_STR("publish-many"))) {
        /* abi.MaxPublishedKeys keys, the daemon's default limit (handlers.limits.publishKeys). */
        char key[8];
        for (int i = 0; i < 64; i++) {
            snprintf(key, sizeof key, "k%d", i);
            EXPECT("publish of one of 64 keys", wh_publish(wh_cstr(key), WH_STR("v")), WH_OK);
        }
        EXPECT("publish of a key published already", wh_publish(WH_STR("k0"), WH_STR("again")), WH_OK);
        EXPECT("publish of a 65th key", wh_publish(WH_STR("one-more"), WH_STR("v")), WH_TOO_LARGE);
        EXPECT_REASON("publish of a 65th key", "64 keys published, the most in one call (handlers.limits.publishKeys)");
    }
    if (wh_str_eq(p->name, WH_STR("publish-then-fail"))) {
        EXPECT("publish", wh_publish(WH_STR("k"), WH_STR("v")), WH_OK);
        return wh_fail("failed after publishing");
    }
    if (wh_str_eq(p->name, WH_STR("publish"))) {
        EXPECT("publish", wh_publish(WH_STR("k"), WH_STR("v1")), WH_OK);
        EXPECT("publish again", wh_publish(WH_STR("k"), WH_STR("v2")), WH_OK);
        EXPECT("publish of an empty key", wh_publish(WH_STR(""), WH_STR("v")), WH_BAD_REQUEST);
    }
    if (wh_str_eq(p->name, WH_STR("call"))) {
        wh_str resp;
        EXPECT("plugin_call", wh_plugin_call(WH_STR("/pkg.Svc/Get"), WH_STR("req"), &resp), WH_OK);
        if (resp.len != 5000 || resp.ptr[0] != 'r' || resp.ptr[4999] != 'r') {
            return wh_fail("plugin_call read another response");
        }
        EXPECT("plugin_call failing", wh_plugin_call(WH_STR("/pkg.Svc/Fail"), WH_STR(""), &resp), WH_FAILED);
        if (!wh_str_eq(wh_error_reason(), WH_STR("the plugin said no"))) {
            return wh_fail("error_read gave another reason");
        }
        EXPECT("plugin_call of a response over the limit", wh_plugin_call(WH_STR("/pkg.Svc/Huge"), WH_STR(""), &resp),
               WH_TOO_LARGE);
        EXPECT("plugin_call without a method", wh_plugin_call(WH_STR(""), WH_STR(""), &resp), WH_BAD_REQUEST);
        EXPECT("plugin_call of a method not in UTF-8", wh_plugin_call(WH_STR("/pkg.Svc/\xff"), WH_STR(""), &resp),
               WH_BAD_REQUEST);
        EXPECT("plugin_call of a method with a surrogate",
               wh_plugin_call(WH_STR("/pkg.Svc/\xed\xa0\x80"), WH_STR(""), &resp), WH_BAD_REQUEST);
        static char big[WH_MAX_REQUEST_BYTES + 1];
        EXPECT("plugin_call of a request over the limit",
               wh_plugin_call(WH_STR("/pkg.Svc/\xc3\xa9"), (wh_str){big, sizeof big}, &resp), WH_TOO_LARGE);
        EXPECT_REASON("plugin_call of a response over the limit",
                      "response of 1048577 bytes over the limit of 1048576 (handlers.limits.pluginCallResponseSize)");
    }
    if (wh_str_eq(p->name, WH_STR("many-calls"))) {
        wh_str resp;
        for (int i = 0; i <= WH_FAKE_PLUGIN_CALLS_PER_CALL; i++) {
            EXPECT("plugin_call", wh_plugin_call(WH_STR("/pkg.Svc/Small"), WH_STR(""), &resp), WH_OK);
        }
        return wh_fail("the call went on past pluginCallsPerCall");
    }
    if (wh_str_eq(p->name, WH_STR("no-endpoint"))) {
        wh_str resp;
        EXPECT("plugin_call without an endpoint", wh_plugin_call(WH_STR("/pkg.Svc/Get"), WH_STR("req"), &resp), WH_FAILED);
        EXPECT_REASON("plugin_call without an endpoint", "the plugin has no endpoint");
    }
    if (wh_str_eq(p->name, WH_STR("no-call"))) {
        wh_str resp;
        EXPECT("plugin_call without a plugin", wh_plugin_call(WH_STR("/pkg.Svc/Get"), WH_STR(""), &resp), WH_DENIED);
    }
    if (wh_str_eq(p->name, WH_STR("silent-fail"))) {
        return WH_ERROR;
    }
    return WH_OK;
}

static int calls;

static int32_t answer(wh_str method, wh_str req, wh_text *resp) {
    calls++;
    if (wh_str_eq(method, WH_STR("/pkg.Svc/Fail"))) {
        wh_text_adds(resp, "the plugin said no");
        return WH_FAILED;
    }
    if (wh_str_eq(method, WH_STR("/pkg.Svc/Small"))) {
        wh_text_adds(resp, "s");
        return WH_OK;
    }
    if (wh_str_eq(method, WH_STR("/pkg.Svc/Huge"))) {
        for (int i = 0; i <= WH_FAKE_PLUGIN_CALL_RESPONSE_SIZE; i++) {
            wh_text_addbyte(resp, 0);
        }
        return WH_OK;
    }
    if (!wh_str_eq(req, WH_STR("req"))) {
        wh_text_adds(resp, "another request");
        return WH_FAILED;
    }
    for (int i = 0; i < 5000; i++) {
        wh_text_addbyte(resp, 'r');
    }
    return WH_OK;
}

const wh_handler wh_handler_def = {
    .manifest = {.plugin_types = WH_TYPES("t")},
    .validate = validate,
    .register_plugin = register_plugin,
};

static const char *const v1[] = {"v1", NULL};

static wh_fake_plugin plugin(const char *name) {
    return (wh_fake_plugin){.type = "t", .name = name, .endpoint = "/e.sock", .versions = v1};
}

static wh_fake_plugin typed(const char *type, const char *name) {
    wh_fake_plugin p = plugin(name);
    p.type = type;
    return p;
}

/* fill puts n keys with empty values in the store of type, from the test. */
static void fill(const char *type, int n) {
    char key[16];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "k%d", i);
        wh_fake_kv_put(type, key, WH_STR(""));
    }
}

int main(void) {
    wh_fake_plugin p;
    wh_str v;

    wh_fake_reset();
    p = (wh_fake_plugin){.socket = "/s.sock", .type = "t", .name = "request", .endpoint = "/e.sock",
                         .versions = WH_TYPES("v2", "", "v1")};
    WH_CHECK(wh_fake_validate(&p) == WH_OK, "request: %s", wh_fake_reason());

    p = plugin("kv");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "kv: %s", wh_fake_reason());
    WH_CHECK(wh_fake_kv("t", "a", &v) && wh_str_eq(v, WH_STR("2")) && wh_fake_kv_len("t") == 1,
             "the store after kv: %zu keys", wh_fake_kv_len("t"));

    p = plugin("publish");
    WH_CHECK(wh_fake_validate(&p) == WH_OK, "publish in validate: %s", wh_fake_reason());
    WH_CHECK(wh_fake_register(&p) == WH_OK, "publish: %s", wh_fake_reason());
    const char *k = wh_fake_published("k");
    WH_CHECK(wh_fake_published_len() == 1 && k != NULL && strcmp(k, "v2") == 0,
             "published after publish: %zu keys", wh_fake_published_len());
    size_t kept = wh_fake_kv_len("t");
    wh_fake_reset(); /* an empty store, for the 16,384 keys it holds */
    p = plugin("kv-many");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "kv-many: %s", wh_fake_reason());
    WH_CHECK(wh_fake_kv_len("t") == 16384, "store after kv-many: %zu keys (%zu before the reset)", wh_fake_kv_len("t"),
             kept);
    p = plugin("publish-many");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "publish-many: %s", wh_fake_reason());
    WH_CHECK(wh_fake_published_len() == 64, "published after publish-many: %zu keys", wh_fake_published_len());
    p = plugin("publish-big");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "publish-big: %s", wh_fake_reason());
    WH_CHECK(wh_fake_published_len() == 1, "published after publish-big: %zu keys", wh_fake_published_len());
    p = plugin("publish-then-fail");
    WH_CHECK(wh_fake_register(&p) == WH_ERROR, "publish-then-fail returned another status");
    WH_CHECK(strcmp(wh_fake_reason(), "failed after publishing") == 0, "reason %s", wh_fake_reason());
    WH_CHECK(wh_fake_published_len() == 0, "a failed register's keys were kept");

    p = plugin("no-call");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "no-call: %s", wh_fake_reason());
    wh_fake_set_plugin_call(answer);
    p = plugin("call");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "call: %s", wh_fake_reason());
    WH_CHECK(calls == 3, "the plugin answered %d calls, want 3 (one a plugin_call)", calls);
    p = plugin("no-endpoint");
    p.endpoint = NULL;
    WH_CHECK(wh_fake_register(&p) == WH_OK, "no-endpoint: %s", wh_fake_reason());
    WH_CHECK(calls == 3, "the plugin answered a call without an endpoint");

    /* The daemon ends a call over handlers.limits.pluginCallsPerCall, and so does the fake. */
    p = plugin("many-calls");
    WH_CHECK(wh_fake_register(&p) == WH_ERROR, "many-calls returned another status");
    WH_CHECK(strcmp(wh_fake_reason(), "host: budget exceeded: handler.wasm wasmhost_register for plugin \"many-calls\" "
                                      "made more than 16 plugin_call calls in one call (the limit is 16, "
                                      "handlers.limits.pluginCallsPerCall)") == 0,
             "many-calls: reason %s", wh_fake_reason());
    WH_CHECK(wh_kv_set(WH_STR("a"), WH_STR("1")) == WH_DENIED, "the call went on after its budget");

    p = plugin("silent-fail");
    WH_CHECK(wh_fake_register(&p) == WH_ERROR, "silent-fail returned another status");
    WH_CHECK(strcmp(wh_fake_reason(), "(no reason given)") == 0, "reason %s", wh_fake_reason());
    p = plugin("ok");
    WH_CHECK(wh_fake_register(&p) == WH_OK && strcmp(wh_fake_reason(), "") == 0, "ok: reason %s", wh_fake_reason());

    /* The daemon keeps a store per plugin type: a handler serving two types sees the store of
     * the plugin's type in each call, never the other's. */
    wh_fake_reset();
    p = typed("t", "a");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "a: %s", wh_fake_reason());
    p = typed("u", "b");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "b: %s", wh_fake_reason());
    WH_CHECK(wh_fake_kv("t", "plugin", &v) && wh_str_eq(v, WH_STR("a")), "the store of t has no plugin = a");
    WH_CHECK(wh_fake_kv("u", "plugin", &v) && wh_str_eq(v, WH_STR("b")), "the store of u has no plugin = b");
    WH_CHECK(wh_fake_kv_len("t") == 1 && wh_fake_kv_len("u") == 1 && wh_fake_kv_len("v") == 0,
             "stores of %zu, %zu and %zu keys", wh_fake_kv_len("t"), wh_fake_kv_len("u"), wh_fake_kv_len("v"));
    const char *types[] = {"t", "u", "v"}, *want[] = {"a", "b", "none"};
    for (int i = 0; i < 3; i++) {
        p = typed(types[i], "read");
        WH_CHECK(wh_fake_validate(&p) == WH_REJECTED && strcmp(wh_fake_reason(), want[i]) == 0,
                 "the handler read plugin = %s in the store of %s, want %s", wh_fake_reason(), types[i], want[i]);
    }
    wh_fake_kv_put("v", "plugin", WH_STR("put"));
    p = typed("v", "read");
    WH_CHECK(wh_fake_validate(&p) == WH_REJECTED && strcmp(wh_fake_reason(), "put") == 0,
             "the handler read plugin = %s in the store of v, want put", wh_fake_reason());

    /* The quotas of one handler file (handlers.limits.kvKeysPerHandler, kvBytesPerHandler)
     * count the stores of all its types together. */
    wh_fake_reset();
    fill("u", WH_FAKE_KV_KEYS_PER_HANDLER - 2);
    wh_fake_kv_put("t", "there", WH_STR(""));
    wh_fake_kv_put("v", "one", WH_STR(""));
    p = plugin("quota-keys");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "quota-keys: %s", wh_fake_reason());
    WH_CHECK(wh_fake_kv("t", "new", &v) && wh_str_eq(v, WH_STR("x")), "quota-keys did not set new");
    wh_fake_reset();
    /* Two types' stores holding 16 MiB but 4 bytes (6 in "there" = "x" and 3 in the key
     * "big"), and 5 once "there" is emptied: room for "new" = "01", not one byte more. */
    wh_fake_kv_put("t", "there", WH_STR("x"));
    char *big = calloc(WH_FAKE_KV_BYTES_PER_HANDLER, 1);
    wh_fake_kv_put("u", "big", (wh_str){big, WH_FAKE_KV_BYTES_PER_HANDLER - 4 - 6 - 3});
    free(big);
    p = plugin("quota-bytes");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "quota-bytes: %s", wh_fake_reason());
    WH_CHECK(wh_fake_kv("t", "new", &v) && wh_str_eq(v, WH_STR("01")), "quota-bytes did not set new");

    /* The daemon ends a call that logs over handlers.limits.logLinesPerCall or
     * logBytesPerCall, dropping the line over, and so does the fake. */
    wh_fake_reset();
    p = plugin("log-lines");
    WH_CHECK(wh_fake_validate(&p) == WH_ERROR, "log-lines returned another status");
    WH_CHECK(strcmp(wh_fake_reason(), "host: budget exceeded: handler.wasm wasmhost_validate for plugin \"log-lines\" "
                                      "logged more than 1000 lines in one call (the limit is 1000, "
                                      "handlers.limits.logLinesPerCall)") == 0,
             "log-lines: reason %s", wh_fake_reason());
    WH_CHECK(wh_fake_log_len() == WH_FAKE_LOG_LINES_PER_CALL &&
                 strcmp(wh_fake_log(wh_fake_log_len() - 1), "INFO line") == 0,
             "log-lines logged %zu lines", wh_fake_log_len());
    WH_CHECK(wh_fake_kv_len("t") == 0, "the call went on after its budget");
    p = plugin("log-most"); /* each call has a budget of its own */
    WH_CHECK(wh_fake_validate(&p) == WH_OK, "log-most: %s", wh_fake_reason());
    WH_CHECK(wh_fake_validate(&p) == WH_OK, "log-most again: %s", wh_fake_reason());
    p = plugin("log-bytes");
    WH_CHECK(wh_fake_validate(&p) == WH_ERROR, "log-bytes returned another status");
    WH_CHECK(strcmp(wh_fake_reason(), "host: budget exceeded: handler.wasm wasmhost_validate for plugin \"log-bytes\" "
                                      "logged more than 65536 bytes in one call (the limit is 65536, "
                                      "handlers.limits.logBytesPerCall)") == 0,
             "log-bytes: reason %s", wh_fake_reason());
    WH_CHECK(wh_fake_log_len() == 3 * WH_FAKE_LOG_LINES_PER_CALL + 16, "%zu lines logged", wh_fake_log_len());
    WH_CHECK(wh_fake_kv_len("t") == 0, "the call went on after its budget");

    wh_fake_reset();
    WH_CHECK(wh_fake_kv_len("t") == 0 && wh_fake_log_len() == 0 && wh_fake_published_len() == 0, "reset left state");
    p = plugin("no-call");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "reset kept the plugin call function: %s", wh_fake_reason());

    return wh_fake_done();
}
