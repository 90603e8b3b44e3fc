/*
 * deviceplugin: the wasmhost handler for device plugins that register through the kubelet's
 * plugins_registry (plugin type DevicePlugin), with the checks of the kubelet's device manager
 * (pkg/kubelet/cm/devicemanager), written with the C SDK (abi/c):
 *
 *   - validate accepts a device plugin whose versions include v1beta1, the device plugin API's
 *     only version, and whose name is an extended resource name (domain/resource, such as
 *     example.com/gpu, outside the kubernetes.io domain), by the kubelet's rule
 *     (v1helper.IsExtendedResourceName).
 *   - register calls the plugin's GetDevicePluginOptions on its endpoint (the host makes the
 *     call, which needs the plugin_call capability), publishes the resource name, the endpoint
 *     and the two options, and records the registration in the key-value store under
 *     resource/<name>. One registration per resource name: a newer one, from another socket,
 *     replaces the record, as a new endpoint replaces the old one in the kubelet.
 *   - deregister forgets the record, unless a newer registration of the same resource name
 *     (from another socket) has replaced it.
 *
 * It never opens ListAndWatch: several device plugins feed every ListAndWatch stream from one
 * channel, so a second stream would take health updates away from the kubelet's. Device counts
 * and health are the kubelet's. See README.md.
 *
 * The Makefile builds it (make handlers-wasm/deviceplugin.wasm). It imports plugin_call, so it
 * loads only where the operator grants that capability to DevicePlugin.
 */
#include "wasmhost.h"

#include <string.h>

/* The device plugin API version the kubelet speaks (pluginapi.Version). */
#define API_VERSION "v1beta1"

/* The full gRPC name of GetDevicePluginOptions. Its request, Empty, has no fields: it encodes
 * as zero bytes. */
#define METHOD_OPTIONS "/v1beta1.DevicePlugin/GetDevicePluginOptions"

/* The largest GetDevicePluginOptions answer this handler reads. DevicePluginOptions is two
 * bools, 4 bytes at most today; the bound leaves room for fields a later API adds (which are
 * skipped) and refuses an answer that could only be a plugin misbehaving. */
#define MAX_OPTIONS_BYTES 4096

/* The store key of a resource's registration: resource/<name>. */
#define RESOURCE_PREFIX "resource/"

/* The kubelet's rule for an extended resource name, in a reason. */
#define RULE_TEXT \
    "an extended resource name is domain/resource, such as example.com/gpu, with the domain a lowercase DNS " \
    "subdomain outside kubernetes.io"

/* The longest domain: the kubelet checks "requests." + the name as a qualified name, whose
 * prefix (a DNS subdomain) has at most 253 bytes. */
#define MAX_DOMAIN_BYTES (253 - (sizeof "requests." - 1))
/* The longest resource part (the name part of a qualified name). */
#define MAX_RESOURCE_BYTES 63

/* How often a write is tried again because another registration of the same resource changed
 * the record meanwhile. */
#define MAX_WRITE_ATTEMPTS 16
#define ERR_BUSY "the store's record of this resource kept changing while it was written"

/* ---- text ---- */

/* guest_error is a host function's failure as the Go SDK words it: "guest: kv_get
 * resource/r: guest: too large". */
static int32_t guest_error(const char *function, wh_str key, int32_t code) {
    wh_text t = {0};
    wh_text_adds(&t, "guest: ");
    wh_text_adds(&t, function);
    wh_text_adds(&t, " ");
    wh_text_add(&t, key);
    wh_text_adds(&t, ": guest: ");
    wh_text_adds(&t, wh_code_text(code == WH_NOT_FOUND || code == WH_CONFLICT ? -100 : code));
    return wh_fail_str(wh_text_str(&t));
}

/* about starts a reason about plugin p: `device plugin "example.com/gpu" at socket /s`. */
static wh_text about(const wh_plugin *p) {
    wh_text t = {0};
    wh_text_adds(&t, "device plugin ");
    wh_text_addquoted(&t, p->name);
    wh_text_adds(&t, " at socket ");
    wh_text_add(&t, p->socket);
    return t;
}

/* ---- the resource name: the kubelet's IsExtendedResourceName ---- */

static bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
static bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

/* has_suffix says whether s ends with suffix. */
static bool has_suffix(wh_str s, const char *suffix) {
    size_t n = strlen(suffix);
    return s.len >= n && memcmp(s.ptr + s.len - n, suffix, n) == 0;
}

/* subdomain_problem says what keeps domain from being a lowercase RFC 1123 DNS subdomain
 * (labels of [a-z0-9-], each starting and ending with [a-z0-9], joined by dots), or NULL. */
static const char *subdomain_problem(wh_str domain) {
    size_t label = 0; /* the current label's length */
    for (size_t i = 0; i < domain.len; i++) {
        char c = domain.ptr[i];
        if (c == '.') {
            if (label == 0 || domain.ptr[i - 1] == '-') {
                return "has a label that is empty or ends with '-'";
            }
            label = 0;
            continue;
        }
        if (c == '-') {
            if (label == 0) {
                return "has a label that starts with '-'";
            }
        } else if (!is_lower_alnum(c)) {
            return "has a character other than a lowercase letter, a digit, '-' or '.'";
        }
        label++;
    }
    if (label == 0 || domain.ptr[domain.len - 1] == '-') {
        return "has a label that is empty or ends with '-'";
    }
    return NULL;
}

/* resource_problem says what keeps r from being the name part of a qualified name (at most 63
 * characters of [A-Za-z0-9-_.], starting and ending with a letter or digit), or NULL. */
static const char *resource_problem(wh_str r) {
    if (r.len == 0) {
        return "is empty";
    }
    if (r.len > MAX_RESOURCE_BYTES) {
        return "is longer than 63 characters";
    }
    for (size_t i = 0; i < r.len; i++) {
        char c = r.ptr[i];
        if (!is_alnum(c) && c != '-' && c != '_' && c != '.') {
            return "has a character other than a letter, a digit, '-', '_' or '.'";
        }
    }
    if (!is_alnum(r.ptr[0]) || !is_alnum(r.ptr[r.len - 1])) {
        return "does not start and end with a letter or a digit";
    }
    return NULL;
}

/* check_name says whether name is an extended resource name, as the kubelet decides it:
 * not native (it has a '/' and does not contain "kubernetes.io/"), not "requests."-prefixed,
 * and "requests." + name a qualified name. For a name the kubelet refuses, it writes why into
 * t and returns false. */
static bool check_name(wh_str name, wh_text *t) {
    const char *slash = memchr(name.ptr, '/', name.len);
    if (slash == NULL) {
        /* The kubelet takes a name without a domain for one in kubernetes.io. */
        wh_text_adds(t, "has no domain (no '/')");
        return false;
    }
    wh_str domain = {name.ptr, (size_t)(slash - name.ptr)};
    wh_str resource = {slash + 1, name.len - domain.len - 1};
    if (memchr(resource.ptr, '/', resource.len) != NULL) {
        wh_text_adds(t, "has more than one '/'");
        return false;
    }
    if (has_suffix(domain, "kubernetes.io")) {
        /* The kubelet refuses any name containing "kubernetes.io/": with one '/', a domain
         * ending in kubernetes.io (kubernetes.io itself, its subdomains, and any other domain
         * ending in those letters). */
        wh_text_adds(t, "is in the kubernetes.io domain, Kubernetes' own: its domain ");
        wh_text_addquoted(t, domain);
        wh_text_adds(t, " ends in kubernetes.io");
        return false;
    }
    if (domain.len >= sizeof "requests." - 1 && memcmp(domain.ptr, "requests.", sizeof "requests." - 1) == 0) {
        wh_text_adds(t, "starts with requests., the prefix of resource quota names");
        return false;
    }
    if (domain.len == 0) {
        wh_text_adds(t, "has an empty domain");
        return false;
    }
    if (domain.len > MAX_DOMAIN_BYTES) {
        wh_text_adds(t, "has a domain of ");
        wh_text_addu(t, domain.len);
        wh_text_adds(t, " bytes; at most ");
        wh_text_addu(t, MAX_DOMAIN_BYTES);
        return false;
    }
    const char *why = subdomain_problem(domain);
    if (why != NULL) {
        wh_text_adds(t, "has a domain ");
        wh_text_addquoted(t, domain);
        wh_text_adds(t, " that is not a DNS subdomain: it ");
        wh_text_adds(t, why);
        return false;
    }
    if ((why = resource_problem(resource)) != NULL) {
        wh_text_adds(t, "has a resource part ");
        wh_text_addquoted(t, resource);
        wh_text_adds(t, " that ");
        wh_text_adds(t, why);
        return false;
    }
    return true;
}

/* check refuses p unless the kubelet's device manager would take it: v1beta1 among its
 * versions, its name an extended resource name. It returns WH_OK to go on. */
static int32_t check(const wh_plugin *p) {
    if (!wh_plugin_supports(p, WH_STR(API_VERSION))) {
        wh_text t = about(p);
        wh_text_adds(&t, ": its versions ");
        wh_text_addbyte(&t, '[');
        for (size_t i = 0; i < p->n_versions; i++) {
            if (i > 0) {
                wh_text_adds(&t, ", ");
            }
            wh_text_addquoted(&t, p->versions[i]);
        }
        wh_text_adds(&t, "] do not include " API_VERSION ", the device plugin API version the kubelet speaks");
        return wh_reject_str(wh_text_str(&t));
    }
    wh_text why = {0};
    if (!check_name(p->name, &why)) {
        wh_text t = about(p);
        wh_text_adds(&t, ": its name is not an extended resource name: it ");
        wh_text_add(&t, wh_text_str(&why));
        wh_text_adds(&t, "; " RULE_TEXT);
        return wh_reject_str(wh_text_str(&t));
    }
    return WH_OK;
}

/* validate checks the versions and the name. It changes nothing; a registration of the same
 * resource from another socket does not refuse it: the newer one wins. */
static int32_t validate(const wh_plugin *p) { return check(p); }

/* ---- GetDevicePluginOptions ---- */

typedef struct options {
    bool pre_start_required;                 /* 1 */
    bool get_preferred_allocation_available; /* 2 */
} options;

/* decode_options decodes a DevicePluginOptions: pre_start_required = 1 and
 * get_preferred_allocation_available = 2, both bool (varints; any value but 0 is true, as in
 * protobuf's decoders). Other fields are skipped. */
static bool decode_options(wh_str b, options *o, wh_wire_reader *r) {
    *o = (options){0};
    *r = wh_wire_reader_of(b);
    wh_field f;
    while (wh_wire_next(r, &f)) {
        if (f.num != 1 && f.num != 2) {
            continue;
        }
        if (f.type != WH_WIRE_VARINT) {
            return wh_wire_fail(r, f.num, wh_wire_wrong_type(f.type));
        }
        if (f.num == 1) {
            o->pre_start_required = f.varint != 0;
        } else {
            o->get_preferred_allocation_available = f.varint != 0;
        }
    }
    return r->err == NULL;
}

/* get_options calls the plugin's GetDevicePluginOptions, as the kubelet does when it connects
 * to a device plugin. A call that fails, or an answer that is too large or malformed, fails
 * the registration (not a rejection: the host retries with backoff, as the kubelet does, since
 * a plugin may start serving just after it registers). */
static int32_t get_options(const wh_plugin *p, options *o) {
    wh_text t = about(p);
    wh_text_adds(&t, ": GetDevicePluginOptions at endpoint ");
    wh_text_add(&t, p->endpoint);
    wh_text_addbyte(&t, ' ');
    wh_str resp;
    int32_t rc = wh_plugin_call(WH_STR(METHOD_OPTIONS), WH_STR(""), &resp);
    if (rc < 0) {
        /* As the Go SDK words it: "plugincall: METHOD: guest: failed: <the host's reason>". */
        wh_text_adds(&t, "failed: plugincall: " METHOD_OPTIONS ": guest: ");
        wh_text_adds(&t, wh_code_text(rc == WH_NOT_FOUND || rc == WH_CONFLICT ? -100 : rc));
        wh_str why = wh_error_reason();
        if (why.len > 0) {
            wh_text_adds(&t, ": ");
            wh_text_add(&t, why);
        }
        return wh_fail_str(wh_text_str(&t));
    }
    if (resp.len > MAX_OPTIONS_BYTES) {
        wh_text_adds(&t, "answered ");
        wh_text_addu(&t, resp.len);
        wh_text_adds(&t, " bytes; this handler reads answers of up to ");
        wh_text_addu(&t, MAX_OPTIONS_BYTES);
        wh_text_adds(&t, " (DevicePluginOptions is two bools)");
        return wh_fail_str(wh_text_str(&t));
    }
    wh_wire_reader r;
    if (!decode_options(resp, o, &r)) {
        wh_text_adds(&t, "answered a malformed DevicePluginOptions: ");
        wh_text_add(&t, wh_wire_error(&r));
        return wh_fail_str(wh_text_str(&t));
    }
    return WH_OK;
}

/* ---- the record of a registration in the store: resource/<name> ---- */

/* A record: the registration socket (1) and the endpoint (2), both strings. */
typedef struct record {
    wh_str socket, endpoint;
} record;

static wh_str record_encode(const record *rec) {
    wh_text t = {0};
    if (rec->socket.len > 0) {
        wh_wire_add_bytes(&t, 1, rec->socket);
    }
    if (rec->endpoint.len > 0) {
        wh_wire_add_bytes(&t, 2, rec->endpoint);
    }
    return wh_text_str(&t);
}

static bool record_decode(wh_str b, record *rec, wh_wire_reader *r) {
    *rec = (record){0};
    *r = wh_wire_reader_of(b);
    wh_field f;
    while (wh_wire_next(r, &f)) {
        if (f.num == 1 && !wh_wire_text(r, &f, &rec->socket)) {
            break;
        }
        if (f.num == 2 && !wh_wire_text(r, &f, &rec->endpoint)) {
            break;
        }
    }
    return r->err == NULL;
}

static wh_str resource_key(wh_str name) {
    wh_text t = {0};
    wh_text_adds(&t, RESOURCE_PREFIX);
    wh_text_add(&t, name);
    return wh_text_str(&t);
}

static wh_str bool_text(bool b) { return b ? WH_STR("true") : WH_STR("false"); }

/* register_plugin asks the plugin for its options, publishes them, and records the
 * registration. The record is written last, so that a failure leaves the store (and a
 * registration of the same resource made before) as it was; the host calls no deregister for a
 * registration that failed. A record of the same resource from another socket is replaced:
 * the newer socket wins. */
static int32_t register_plugin(const wh_plugin *p) {
    int32_t status = check(p);
    if (status != WH_OK) {
        return status;
    }
    options o;
    if ((status = get_options(p, &o)) != WH_OK) {
        return status;
    }
    wh_str pre = bool_text(o.pre_start_required), pref = bool_text(o.get_preferred_allocation_available);
    const struct {
        const char *key;
        wh_str value;
    } published[] = {
        {"resource", p->name},
        {"endpoint", p->endpoint},
        {"pre_start_required", pre},
        {"get_preferred_allocation_available", pref},
    };
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++) {
        int32_t rc = wh_publish(wh_cstr(published[i].key), published[i].value);
        if (rc < 0) {
            return guest_error("publish", wh_cstr(published[i].key), rc);
        }
    }
    wh_str key = resource_key(p->name), old;
    record rec = {.socket = p->socket, .endpoint = p->endpoint};
    wh_str value = record_encode(&rec);
    int32_t rc = wh_kv_get(key, &old);
    if (rc < 0 && rc != WH_NOT_FOUND) {
        return guest_error("kv_get", key, rc);
    }
    record prev = {0};
    wh_wire_reader rd;
    bool replaced = rc >= 0 && record_decode(old, &prev, &rd) && !wh_str_eq(prev.socket, p->socket);
    if ((rc = wh_kv_set(key, value)) < 0) {
        return guest_error("kv_set", key, rc);
    }
    wh_text t = {0};
    wh_text_adds(&t, "registered device plugin for resource ");
    wh_text_add(&t, p->name);
    wh_text_adds(&t, " at endpoint ");
    wh_text_add(&t, p->endpoint);
    wh_text_adds(&t, ", pre_start_required ");
    wh_text_add(&t, pre);
    wh_text_adds(&t, ", get_preferred_allocation_available ");
    wh_text_add(&t, pref);
    if (replaced) {
        wh_text_adds(&t, "; it replaces the registration from socket ");
        wh_text_add(&t, prev.socket);
    }
    wh_log(WH_LOG_INFO, wh_text_str(&t));
    return WH_OK;
}

/* deregister forgets the registration if the record is this one's: same socket and endpoint.
 * When a newer registration of the resource replaced it, the record is that one's and stays. */
static int32_t deregister(const wh_plugin *p) {
    wh_str key = resource_key(p->name);
    for (int attempt = 0; attempt < MAX_WRITE_ATTEMPTS; attempt++) {
        wh_str raw;
        int32_t rc = wh_kv_get(key, &raw);
        wh_text t = {0};
        wh_text_adds(&t, "deregistering device plugin for resource ");
        wh_text_add(&t, p->name);
        wh_text_adds(&t, " from socket ");
        wh_text_add(&t, p->socket);
        if (rc == WH_NOT_FOUND) {
            wh_text_adds(&t, ", of which there is no record");
            wh_log(WH_LOG_WARN, wh_text_str(&t));
            return WH_OK;
        }
        if (rc < 0) {
            return guest_error("kv_get", key, rc);
        }
        record rec;
        wh_wire_reader rd;
        if (!record_decode(raw, &rec, &rd)) {
            wh_text_adds(&t, ": deleting an unreadable record: ");
            wh_text_add(&t, wh_wire_error(&rd));
            wh_log(WH_LOG_WARN, wh_text_str(&t));
        } else if (!wh_str_eq(rec.socket, p->socket) || !wh_str_eq(rec.endpoint, p->endpoint)) {
            wh_text_adds(&t, "; keeping the newer registration from socket ");
            wh_text_add(&t, rec.socket);
            wh_text_adds(&t, " (endpoint ");
            wh_text_add(&t, rec.endpoint);
            wh_text_adds(&t, ")");
            wh_log(WH_LOG_INFO, wh_text_str(&t));
            return WH_OK;
        }
        /* Delete the record only if it is still the one read: a newer registration may have
         * replaced it meanwhile. */
        rc = wh_kv_compare_and_set(key, &raw, NULL);
        if (rc == WH_OK) {
            wh_text done = {0};
            wh_text_adds(&done, "deregistered device plugin for resource ");
            wh_text_add(&done, p->name);
            wh_text_adds(&done, " (endpoint ");
            wh_text_add(&done, p->endpoint);
            wh_text_adds(&done, ")");
            wh_log(WH_LOG_INFO, wh_text_str(&done));
            return WH_OK;
        }
        if (rc != WH_CONFLICT) {
            return guest_error("kv_compare_and_set", key, rc);
        }
    }
    return wh_fail(ERR_BUSY);
}

const wh_handler wh_handler_def = {
    .manifest = {.plugin_types = WH_TYPES("DevicePlugin"), .name = "deviceplugin", .version = "0.1.0"},
    .validate = validate,
    .register_plugin = register_plugin,
    .deregister = deregister,
};
