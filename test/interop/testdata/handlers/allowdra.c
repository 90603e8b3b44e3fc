/*
 * allowdra: a handler of the interop tests for the plugin type DRAPlugin, an operator's policy
 * in a few lines: it admits only DRA drivers whose name is in the domain ALLOWED_DOMAIN and
 * refuses every other with a reason naming that domain. Register and deregister do nothing.
 * The tests build it as the Makefile builds the shipped handlers (kubelet_forward_test.go).
 */
#include "wasmhost.h"

#define ALLOWED_DOMAIN ".allowed.interop.dev"

static bool allowed(wh_str name) {
    wh_str suffix = WH_STR(ALLOWED_DOMAIN);
    if (name.len <= suffix.len) {
        return false;
    }
    return wh_str_eq((wh_str){name.ptr + name.len - suffix.len, suffix.len}, suffix);
}

static int32_t validate(const wh_plugin *p) {
    if (allowed(p->name)) {
        return WH_OK;
    }
    wh_text why = {0};
    wh_text_adds(&why, "DRA driver ");
    wh_text_add(&why, p->name);
    wh_text_adds(&why, " is not under " ALLOWED_DOMAIN " (the interop tests' policy)");
    return wh_reject_str(wh_text_str(&why));
}

static int32_t nothing(const wh_plugin *p) {
    (void)p;
    return WH_OK;
}

const wh_handler wh_handler_def = {
    .manifest = {.plugin_types = WH_TYPES("DRAPlugin"), .name = "allowdra", .version = "0.1.0"},
    .validate = validate,
    .register_plugin = nothing,
    .deregister = nothing,
};
