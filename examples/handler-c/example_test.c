/*
 * example_test.c: unit tests of the example handler's logic (example.c), run natively against
 * the C SDK's fake host (wasmhost_fake.h), without WebAssembly:
 *
 *     clang -o example_test example_test.c example.c wasmhost.c wasmhost_fake.c && ./example_test
 *
 * WH_CHECK (wasmhost_fake.h) prints each failed check; main exits 1 if any failed.
 */
#include <string.h>

#include "wasmhost_fake.h"

/* str_is says whether a NUL-terminated string (NULL for none) is want. */
static int str_is(const char *got, const char *want) { return got != NULL && strcmp(got, want) == 0; }

/* last_log is the last line logged, or "". */
static const char *last_log(void) { return wh_fake_log_len() == 0 ? "" : wh_fake_log(wh_fake_log_len() - 1); }

/* The plugin type of the plugins below, whose store the fake host shows. */
#define TYPE "example.wasmhost.dev"

static const wh_fake_plugin demo = {
    .socket = "/var/lib/wasmhost/plugins_registry/demo-reg.sock",
    .type = TYPE,
    .name = "demo",
    .endpoint = "/var/lib/wasmhost/plugins/demo.sock",
    .versions = WH_TYPES("v1beta1", "v1"),
};

static void test_register_and_deregister(void) {
    wh_fake_reset();
    WH_CHECK(wh_fake_validate(&demo) == WH_OK, "validate demo: %s", wh_fake_reason());
    WH_CHECK(wh_fake_register(&demo) == WH_OK, "register demo: %s", wh_fake_reason());
    WH_CHECK(str_is(last_log(), "INFO registering demo at /var/lib/wasmhost/plugins/demo.sock"), "register logged %s",
             last_log());
    wh_str v;
    WH_CHECK(wh_fake_kv(TYPE, "plugin/demo", &v) && wh_str_eq(v, wh_cstr(demo.endpoint)), "the store has no plugin/demo");
    WH_CHECK(str_is(wh_fake_published("endpoint"), demo.endpoint) && wh_fake_published_len() == 1,
             "register published endpoint = %s, %zu keys", wh_fake_published("endpoint"), wh_fake_published_len());

    /* The daemon may register a plugin again (after a restart): same outcome. */
    WH_CHECK(wh_fake_register(&demo) == WH_OK, "register demo again: %s", wh_fake_reason());
    WH_CHECK(wh_fake_kv_len(TYPE) == 1, "%zu keys in the store after registering twice, want 1",
             wh_fake_kv_len(TYPE));

    WH_CHECK(wh_fake_deregister(&demo) == WH_OK, "deregister demo: %s", wh_fake_reason());
    WH_CHECK(str_is(last_log(), "INFO deregistering demo, registered at /var/lib/wasmhost/plugins/demo.sock"),
             "deregister logged %s", last_log());
    WH_CHECK(wh_fake_kv_len(TYPE) == 0, "%zu keys left in the store after deregister", wh_fake_kv_len(TYPE));
}

static void test_reject(void) {
    wh_fake_reset();
    const wh_fake_plugin old = {.type = "example.wasmhost.dev", .name = "old", .versions = WH_TYPES("v0", "v2")};
    WH_CHECK(wh_fake_validate(&old) == WH_REJECTED, "validate of a plugin without v1 accepted it");
    WH_CHECK(str_is(wh_fake_reason(), "plugin old supports versions [v0, v2]; this handler needs v1"), "reason %s",
             wh_fake_reason());
    const wh_fake_plugin none = {.type = "example.wasmhost.dev", .name = "none"};
    WH_CHECK(wh_fake_validate(&none) == WH_REJECTED, "validate of a plugin with no versions accepted it");
    WH_CHECK(str_is(wh_fake_reason(), "plugin none supports versions []; this handler needs v1"), "reason %s",
             wh_fake_reason());
}

/* Deregistering a plugin this handler has no record of (registered before the store was
 * emptied, say) succeeds, with a warning. */
static void test_deregister_unknown(void) {
    wh_fake_reset();
    WH_CHECK(wh_fake_deregister(&demo) == WH_OK, "deregister of an unknown plugin: %s", wh_fake_reason());
    WH_CHECK(str_is(last_log(), "WARN deregistering demo, which this handler has no record of"), "logged %s",
             last_log());
}

/* What the store holds is what deregister goes by, whichever instance registered the plugin. */
static void test_deregister_from_store(void) {
    wh_fake_reset();
    wh_fake_kv_put(TYPE, "plugin/demo", WH_STR("/elsewhere.sock"));
    WH_CHECK(wh_fake_deregister(&demo) == WH_OK, "deregister: %s", wh_fake_reason());
    WH_CHECK(str_is(last_log(), "INFO deregistering demo, registered at /elsewhere.sock"), "logged %s", last_log());
}

int main(void) {
    test_register_and_deregister();
    test_reject();
    test_deregister_unknown();
    test_deregister_from_store();
    return wh_fake_done();
}
