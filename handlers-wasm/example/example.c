/*
 * example.c: the example handler of handlers-wasm/example, in C with the C SDK (abi/c). It
 * handles the plugin type "example.wasmhost.dev":
 *
 *   - validate accepts a plugin only if it supports version "v1";
 *   - register logs, remembers the plugin's endpoint in the key-value store, and publishes it;
 *   - deregister forgets it.
 *
 * Build it (from the repository root) as a WASI reactor, the form wasmhost loads:
 *
 *   clang --target=wasm32-wasi -mexec-model=reactor -O2 -I abi/c -o example.wasm examples/handler-c/example.c abi/c/wasmhost.c
 *
 * The walkthrough, README.md beside this file, goes from there to a registered plugin.
 */
#include "wasmhost.h"

/* The one version of our (imaginary) plugin API this handler speaks. */
#define WANT_VERSION "v1"

/* store_key is the key-value store key for a plugin: plugins are told apart by name. */
static wh_str store_key(const wh_plugin *p) {
    wh_text t = {0};
    wh_text_adds(&t, "plugin/");
    wh_text_add(&t, p->name);
    return wh_text_str(&t);
}

/* validate is called first, for every plugin of our type. wh_reject refuses the plugin with a
 * reason it is told; wh_fail says the handler failed (the host retries later). */
static int32_t validate(const wh_plugin *p) {
    if (wh_plugin_supports(p, WH_STR(WANT_VERSION))) {
        return WH_OK;
    }
    wh_text why = {0};
    wh_text_adds(&why, "plugin ");
    wh_text_add(&why, p->name);
    wh_text_adds(&why, " supports versions [");
    for (size_t i = 0; i < p->n_versions; i++) {
        if (i > 0) {
            wh_text_adds(&why, ", ");
        }
        wh_text_add(&why, p->versions[i]);
    }
    wh_text_adds(&why, "]; this handler needs " WANT_VERSION);
    return wh_reject_str(wh_text_str(&why));
}

/* register_plugin is called after a successful validate. Nothing is kept in C variables from
 * one call to the next: the host pools instances and throws one away after a failure. What
 * deregister will need goes in the key-value store of the plugin type. */
static int32_t register_plugin(const wh_plugin *p) {
    wh_text line = {0};
    wh_text_adds(&line, "registering ");
    wh_text_add(&line, p->name);
    wh_text_adds(&line, " at ");
    wh_text_add(&line, p->endpoint);
    wh_log(WH_LOG_INFO, wh_text_str(&line));

    wh_str key = store_key(p);
    int32_t rc = wh_kv_set(key, p->endpoint);
    if (rc < 0) {
        return wh_fail_code("kv_set", key, rc); /* not a rejection: the host will retry */
    }
    /* Published keys are shown with the registered plugin; only register may publish. */
    if ((rc = wh_publish(WH_STR("endpoint"), p->endpoint)) < 0) {
        return wh_fail_code("publish", WH_STR("endpoint"), rc);
    }
    return WH_OK;
}

/* deregister is called when a registered plugin goes away. It is not retried, and after a
 * daemon restart it may come for a plugin this handler has no record of. */
static int32_t deregister(const wh_plugin *p) {
    wh_str key = store_key(p), endpoint;
    int32_t rc = wh_kv_get(key, &endpoint);
    wh_text line = {0};
    if (rc == WH_NOT_FOUND) {
        wh_text_adds(&line, "deregistering ");
        wh_text_add(&line, p->name);
        wh_text_adds(&line, ", which this handler has no record of");
        wh_log(WH_LOG_WARN, wh_text_str(&line));
        return WH_OK;
    }
    if (rc < 0) {
        return wh_fail_code("kv_get", key, rc);
    }
    wh_text_adds(&line, "deregistering ");
    wh_text_add(&line, p->name);
    wh_text_adds(&line, ", registered at ");
    wh_text_add(&line, endpoint);
    wh_log(WH_LOG_INFO, wh_text_str(&line));
    if ((rc = wh_kv_delete(key)) < 0) {
        return wh_fail_code("kv_delete", key, rc);
    }
    return WH_OK;
}

/* The handler: its manifest (what it handles, its name and version) and its three calls. */
const wh_handler wh_handler_def = {
    .manifest = {.plugin_types = WH_TYPES("example.wasmhost.dev"), .name = "example", .version = "0.1.0"},
    .validate = validate,
    .register_plugin = register_plugin,
    .deregister = deregister,
};
