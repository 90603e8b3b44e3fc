/*
 * dra: the wasmhost handler for Dynamic Resource Allocation drivers (plugin type DRAPlugin),
 * the plugins built with k8s.io/dynamic-resource-allocation/kubeletplugin, written with the C
 * SDK (abi/c):
 *
 *   - validate accepts a driver that offers a supported DRAPlugin gRPC service (v1.DRAPlugin or
 *     v1beta1.DRAPlugin); such drivers send service names, not version numbers, as their
 *     supported versions.
 *   - register records, per registration socket, which DRAPlugin service will be used (the
 *     newest supported) and which DRAResourceHealth service the driver offers, if any, and
 *     publishes them with the endpoint.
 *   - deregister forgets that socket's record. A driver may have several registration sockets
 *     at once (a rolling update of its DaemonSet registers <driver>-<uid>-reg.sock next to the
 *     old one); each has its own record.
 *
 * The Makefile builds it (make handlers-wasm/dra.wasm). It needs no capability; see README.md.
 */
#include "wasmhost.h"

/* The gRPC services this handler knows, newest first: the first one a driver offers is used. */
static const char *const plugin_services[] = {"v1.DRAPlugin", "v1beta1.DRAPlugin", NULL};
static const char *const health_services[] = {"v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth", NULL};
#define SUPPORTED_TEXT "v1.DRAPlugin, v1beta1.DRAPlugin"

/* Published as health when the driver offers no supported health service. */
#define NO_HEALTH "none"

/* The store key of a registration's record: socket/<registration socket>. */
#define SOCKET_PREFIX "socket/"

/* newest returns the first of known that the plugin offers, or an empty string. */
static wh_str newest(const char *const *known, const wh_plugin *p) {
    for (; *known != NULL; known++) {
        if (wh_plugin_supports(p, wh_cstr(*known))) {
            return wh_cstr(*known);
        }
    }
    return WH_STR("");
}


/* guest_error is a host function's failure as the Go SDK words it: "guest: kv_set socket/s:
 * guest: too large". */
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

/* The record of a registration, under socket/<registration socket>. */
typedef struct record {
    wh_str name, endpoint, service, health;
} record;

static wh_str record_encode(const record *r) {
    wh_text t = {0};
    const wh_str fields[] = {r->name, r->endpoint, r->service, r->health};
    for (uint32_t i = 0; i < 4; i++) {
        if (fields[i].len > 0) {
            wh_wire_add_bytes(&t, i + 1, fields[i]);
        }
    }
    return wh_text_str(&t);
}

static bool record_decode(wh_str b, record *r, wh_wire_reader *rd) {
    *r = (record){0};
    wh_str *fields[] = {&r->name, &r->endpoint, &r->service, &r->health};
    *rd = wh_wire_reader_of(b);
    wh_field f;
    while (wh_wire_next(rd, &f)) {
        if (f.num > 4) {
            continue;
        }
        if (!wh_wire_text(rd, &f, fields[f.num - 1])) { /* a known field of another wire type is malformed */
            break;
        }
    }
    return rd->err == NULL;
}

static wh_str socket_key(wh_str socket) {
    wh_text t = {0};
    wh_text_adds(&t, SOCKET_PREFIX);
    wh_text_add(&t, socket);
    return wh_text_str(&t);
}

/* choose fills in the record register would write for p, or refuses p (and returns the status:
 * WH_OK to go on). */
static int32_t choose(const wh_plugin *p, record *rec) {
    wh_text t = {0};
    if (p->name.len == 0) {
        wh_text_adds(&t, "DRA driver at socket ");
        wh_text_add(&t, p->socket);
        wh_text_adds(&t, " has no name");
        return wh_reject_str(wh_text_str(&t));
    }
    if (p->socket.len == 0) {
        wh_text_adds(&t, "DRA driver ");
        wh_text_add(&t, p->name);
        wh_text_adds(&t, " has no registration socket");
        return wh_reject_str(wh_text_str(&t));
    }
    if (p->socket.len + sizeof SOCKET_PREFIX - 1 > WH_MAX_KEY_BYTES) {
        wh_text_adds(&t, "DRA driver ");
        wh_text_add(&t, p->name);
        wh_text_adds(&t, ": the registration socket path is ");
        wh_text_addu(&t, p->socket.len);
        wh_text_adds(&t, " bytes long; this handler takes paths of up to ");
        wh_text_addu(&t, WH_MAX_KEY_BYTES - (sizeof SOCKET_PREFIX - 1));
        return wh_reject_str(wh_text_str(&t));
    }
    wh_str service = newest(plugin_services, p);
    if (service.len == 0) {
        wh_text_adds(&t, "DRA driver ");
        wh_text_add(&t, p->name);
        wh_text_adds(&t, " at endpoint ");
        wh_text_add(&t, p->endpoint);
        if (p->n_versions == 0) {
            wh_text_adds(&t, " offers no services");
        } else {
            wh_text_adds(&t, " offers services [");
            for (size_t i = 0; i < p->n_versions; i++) {
                if (i > 0) {
                    wh_text_adds(&t, ", ");
                }
                wh_text_addquoted(&t, p->versions[i]);
            }
            wh_text_adds(&t, "], none of them a supported DRAPlugin service");
        }
        wh_text_adds(&t, "; supported: " SUPPORTED_TEXT);
        return wh_reject_str(wh_text_str(&t));
    }
    *rec = (record){.name = p->name, .endpoint = p->endpoint, .service = service, .health = newest(health_services, p)};
    return WH_OK;
}

/* validate accepts a driver that offers a supported DRAPlugin service. It changes nothing. */
static int32_t validate(const wh_plugin *p) {
    record rec;
    return choose(p, &rec);
}

/* register_plugin publishes the services the driver will be used through, and records them
 * under its registration socket. The record is written last, so that a failure leaves the
 * store as it was (the host does not call deregister for a registration that failed). */
static int32_t register_plugin(const wh_plugin *p) {
    record rec;
    int32_t status = choose(p, &rec);
    if (status != WH_OK) {
        return status;
    }
    wh_str health = rec.health.len > 0 ? rec.health : WH_STR(NO_HEALTH);
    const struct {
        const char *key;
        wh_str value;
    } published[] = {{"service", rec.service}, {"health", health}, {"endpoint", p->endpoint}};
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++) {
        int32_t rc = wh_publish(wh_cstr(published[i].key), published[i].value);
        if (rc < 0) {
            return guest_error("publish", wh_cstr(published[i].key), rc);
        }
    }
    wh_str key = socket_key(p->socket);
    int32_t rc = wh_kv_set(key, record_encode(&rec));
    if (rc < 0) {
        return guest_error("kv_set", key, rc);
    }
    wh_text t = {0};
    wh_text_adds(&t, "registered DRA driver ");
    wh_text_add(&t, p->name);
    wh_text_adds(&t, " from socket ");
    wh_text_add(&t, p->socket);
    wh_text_adds(&t, " at endpoint ");
    wh_text_add(&t, p->endpoint);
    wh_text_adds(&t, " using ");
    wh_text_add(&t, rec.service);
    wh_text_adds(&t, ", health ");
    wh_text_add(&t, health);
    wh_log(WH_LOG_INFO, wh_text_str(&t));
    return WH_OK;
}

/* deregister forgets the record of the driver's registration socket. Records of other sockets,
 * of the same driver or not, stay. A record at this socket that names another driver or
 * endpoint belongs to a later registration and stays too. */
static int32_t deregister(const wh_plugin *p) {
    wh_str key = socket_key(p->socket), b;
    int32_t rc = wh_kv_get(key, &b);
    wh_text t = {0};
    wh_text_adds(&t, "deregistering DRA driver ");
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
    if (!record_decode(b, &rec, &rd)) {
        wh_text_adds(&t, ": deleting an unreadable record: ");
        wh_text_add(&t, wh_wire_error(&rd));
        wh_log(WH_LOG_WARN, wh_text_str(&t));
    } else if (!wh_str_eq(rec.name, p->name) || !wh_str_eq(rec.endpoint, p->endpoint)) {
        wh_text_adds(&t, "; keeping the record of the later registration there (driver ");
        wh_text_add(&t, rec.name);
        wh_text_adds(&t, ", endpoint ");
        wh_text_add(&t, rec.endpoint);
        wh_text_adds(&t, ")");
        wh_log(WH_LOG_INFO, wh_text_str(&t));
        return WH_OK;
    }
    if ((rc = wh_kv_delete(key)) < 0) {
        return guest_error("kv_delete", key, rc);
    }
    wh_text done = {0};
    wh_text_adds(&done, "deregistered DRA driver ");
    wh_text_add(&done, p->name);
    wh_text_adds(&done, " from socket ");
    wh_text_add(&done, p->socket);
    wh_log(WH_LOG_INFO, wh_text_str(&done));
    return WH_OK;
}

const wh_handler wh_handler_def = {
    .manifest = {.plugin_types = WH_TYPES("DRAPlugin"), .name = "dra", .version = "0.1.0"},
    .validate = validate,
    .register_plugin = register_plugin,
    .deregister = deregister,
};
