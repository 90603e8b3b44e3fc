/*
 * cfake_test.c: tests of the C SDK's fake host (abi/c/wasmhost_fake.h), built natively with the
 * SDK by TestCFakeHost. The handler below does what the plugin's name asks, and main checks
 * what the fake made of it, with WH_CHECK: each failed check is printed, and "PASS" or "FAIL"
 * at the end.
 */
#include <stdio.h>
#include <string.h>

#include "wasmhost_fake.h"

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
        wh_str v = WH_STR("v");
        EXPECT("compare_and_set of a 16385th key", wh_kv_compare_and_set(WH_STR("one-more"), NULL, &v), WH_TOO_LARGE);
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

static wh_fake_plugin plugin(const char *name) { return (wh_fake_plugin){.type = "t", .name = name, .versions = v1}; }

int main(void) {
    wh_fake_plugin p;
    wh_str v;

    wh_fake_reset();
    p = (wh_fake_plugin){.socket = "/s.sock", .type = "t", .name = "request", .endpoint = "/e.sock",
                         .versions = WH_TYPES("v2", "", "v1")};
    WH_CHECK(wh_fake_validate(&p) == WH_OK, "request: %s", wh_fake_reason());

    p = plugin("kv");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "kv: %s", wh_fake_reason());
    WH_CHECK(wh_fake_kv("a", &v) && wh_str_eq(v, WH_STR("2")) && wh_fake_kv_len() == 1,
             "the store after kv: %zu keys", wh_fake_kv_len());

    p = plugin("publish");
    WH_CHECK(wh_fake_validate(&p) == WH_OK, "publish in validate: %s", wh_fake_reason());
    WH_CHECK(wh_fake_register(&p) == WH_OK, "publish: %s", wh_fake_reason());
    const char *k = wh_fake_published("k");
    WH_CHECK(wh_fake_published_len() == 1 && k != NULL && strcmp(k, "v2") == 0,
             "published after publish: %zu keys", wh_fake_published_len());
    size_t kept = wh_fake_kv_len();
    wh_fake_reset(); /* an empty store, for the 16,384 keys it holds */
    p = plugin("kv-many");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "kv-many: %s", wh_fake_reason());
    WH_CHECK(wh_fake_kv_len() == 16384, "store after kv-many: %zu keys (%zu before the reset)", wh_fake_kv_len(), kept);
    p = plugin("publish-many");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "publish-many: %s", wh_fake_reason());
    WH_CHECK(wh_fake_published_len() == 64, "published after publish-many: %zu keys", wh_fake_published_len());
    p = plugin("publish-then-fail");
    WH_CHECK(wh_fake_register(&p) == WH_ERROR, "publish-then-fail returned another status");
    WH_CHECK(strcmp(wh_fake_reason(), "failed after publishing") == 0, "reason %s", wh_fake_reason());
    WH_CHECK(wh_fake_published_len() == 0, "a failed register's keys were kept");

    p = plugin("no-call");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "no-call: %s", wh_fake_reason());
    wh_fake_set_plugin_call(answer);
    p = plugin("call");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "call: %s", wh_fake_reason());
    WH_CHECK(calls == 2, "the plugin answered %d calls, want 2 (one a plugin_call)", calls);

    p = plugin("silent-fail");
    WH_CHECK(wh_fake_register(&p) == WH_ERROR, "silent-fail returned another status");
    WH_CHECK(strcmp(wh_fake_reason(), "(no reason given)") == 0, "reason %s", wh_fake_reason());
    p = plugin("ok");
    WH_CHECK(wh_fake_register(&p) == WH_OK && strcmp(wh_fake_reason(), "") == 0, "ok: reason %s", wh_fake_reason());

    wh_fake_reset();
    WH_CHECK(wh_fake_kv_len() == 0 && wh_fake_log_len() == 0 && wh_fake_published_len() == 0, "reset left state");
    p = plugin("no-call");
    WH_CHECK(wh_fake_register(&p) == WH_OK, "reset kept the plugin call function: %s", wh_fake_reason());

    return wh_fake_done();
}
