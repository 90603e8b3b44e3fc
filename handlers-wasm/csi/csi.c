/*
 * csi: the wasmhost handler for CSI drivers (plugin type CSIPlugin), with the semantics of the
 * kubelet's CSI registration handler, written with the C SDK (abi/c):
 *
 *   - validate accepts a driver that supports a CSI version with major 1 ("1.0.0", "1.2",
 *     "v1.5.0"), and refuses it when a driver of the same name is already registered with a
 *     higher version. A driver with the same or a lower version is replaced by the newcomer.
 *   - register calls the driver's CSI NodeGetInfo on its endpoint (the host makes the call,
 *     which needs the plugin_call capability), records the driver in the key-value store and
 *     publishes its version, endpoint, node ID, volume limit and topology.
 *   - deregister forgets the driver, unless a newer registration of the same name (from another
 *     socket) has replaced it in the meantime.
 *
 * The record is written with the store's compare-and-set (ABI v1.1): two drivers of the same
 * name registering in the same instant, on two instances, cannot both pass the version check;
 * the second write finds the first one's record, checks again, and is refused if it is older.
 *
 * The Makefile builds it (make handlers-wasm/csi.wasm). It imports plugin_call, so it loads
 * only where the operator grants that capability to CSIPlugin; see README.md.
 */
#include "wasmhost.h"

#include <stdlib.h>
#include <string.h>

/* The full gRPC name of CSI's NodeGetInfo. Its request, NodeGetInfoRequest, has no fields: it
 * encodes as zero bytes. */
#define METHOD_NODE_GET_INFO "/csi.v1.Node/NodeGetInfo"

/* The store key of a driver's record: driver/<name>. */
#define DRIVER_PREFIX "driver/"
/* The longest driver name whose store key fits WH_MAX_KEY_BYTES. */
#define MAX_NAME_BYTES (WH_MAX_KEY_BYTES - (sizeof DRIVER_PREFIX - 1))

#define SUPPORTED_TEXT "a semantic version with major 1, such as 1.0.0, 1.2 or v1.5.0"

/* How often a write is tried again because another registration of the same name changed the
 * record meanwhile: each retry follows a change, so this is only reached when many copies of
 * one driver register at once. */
#define MAX_WRITE_ATTEMPTS 16
#define ERR_BUSY "the store's record of this driver kept changing while it was written"

/* ---- versions: semantic versions, with an optional v and an optional patch ---- */

typedef struct version {
    uint64_t major, minor, patch;
    wh_str pre; /* the pre-release identifiers, dot-separated; empty for a release */
    wh_str raw; /* as the plugin sent it */
} version;

/* parse_number reads a decimal number without a leading zero that fits 64 bits. */
static bool parse_number(wh_str s, uint64_t *x) {
    if (s.len == 0 || (s.len > 1 && s.ptr[0] == '0')) {
        return false;
    }
    *x = 0;
    for (size_t i = 0; i < s.len; i++) {
        char c = s.ptr[i];
        if (c < '0' || c > '9') {
            return false;
        }
        uint64_t d = (uint64_t)(c - '0');
        if (*x > (UINT64_MAX - d) / 10) {
            return false; /* overflows */
        }
        *x = *x * 10 + d;
    }
    return true;
}

/* next_part cuts s at the first sep: the part before it into *part, the rest (after it) into
 * *s; false when s had no sep (then *part is all of s). */
static bool next_part(wh_str *s, char sep, wh_str *part) {
    const char *at = memchr(s->ptr, sep, s->len);
    if (at == NULL) {
        *part = *s;
        *s = (wh_str){s->ptr + s->len, 0};
        return false;
    }
    *part = (wh_str){s->ptr, (size_t)(at - s->ptr)};
    *s = (wh_str){at + 1, s->len - part->len - 1};
    return true;
}

/* valid_identifiers checks dot-separated pre-release (pre) or build identifiers. */
static bool valid_identifiers(wh_str s, bool pre) {
    bool more = true;
    while (more) {
        wh_str id;
        more = next_part(&s, '.', &id);
        if (id.len == 0) {
            return false;
        }
        bool numeric = true;
        for (size_t i = 0; i < id.len; i++) {
            char c = id.ptr[i];
            if (c >= '0' && c <= '9') {
                continue;
            }
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-') {
                numeric = false;
                continue;
            }
            return false;
        }
        if (pre && numeric && id.len > 1 && id.ptr[0] == '0') {
            return false;
        }
    }
    return true;
}

static bool parse_version(wh_str s, version *v) {
    *v = (version){.raw = s};
    wh_str rest = s;
    if (rest.len > 0 && (rest.ptr[0] == 'v' || rest.ptr[0] == 'V')) {
        rest.ptr++, rest.len--;
    }
    const char *plus = memchr(rest.ptr, '+', rest.len);
    if (plus != NULL) {
        if (!valid_identifiers((wh_str){plus + 1, rest.len - (size_t)(plus - rest.ptr) - 1}, false)) {
            return false;
        }
        rest.len = (size_t)(plus - rest.ptr);
    }
    const char *dash = memchr(rest.ptr, '-', rest.len);
    if (dash != NULL) {
        wh_str pre = {dash + 1, rest.len - (size_t)(dash - rest.ptr) - 1};
        if (!valid_identifiers(pre, true)) {
            return false;
        }
        v->pre = pre;
        rest.len = (size_t)(dash - rest.ptr);
    }
    uint64_t nums[3] = {0, 0, 0};
    int n = 0;
    bool more = true;
    while (more) {
        wh_str part;
        more = next_part(&rest, '.', &part);
        if (n == 3 || !parse_number(part, &nums[n])) {
            return false;
        }
        n++;
    }
    if (n < 2) {
        return false;
    }
    v->major = nums[0], v->minor = nums[1], v->patch = nums[2];
    return true;
}

static int cmp_uint(uint64_t a, uint64_t b) { return a < b ? -1 : a > b ? 1 : 0; }

static int compare_identifier(wh_str a, wh_str b) {
    uint64_t na, nb;
    bool a_num = parse_number(a, &na), b_num = parse_number(b, &nb);
    if (a_num && b_num) {
        return cmp_uint(na, nb);
    }
    if (a_num) {
        return -1;
    }
    if (b_num) {
        return 1;
    }
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n == 0 ? 0 : memcmp(a.ptr, b.ptr, n);
    if (c != 0) {
        return c < 0 ? -1 : 1;
    }
    return cmp_uint(a.len, b.len);
}

/* compare orders versions by semantic version precedence: -1, 0 or 1. */
static int compare(const version *a, const version *b) {
    if (a->major != b->major) {
        return cmp_uint(a->major, b->major);
    }
    if (a->minor != b->minor) {
        return cmp_uint(a->minor, b->minor);
    }
    if (a->patch != b->patch) {
        return cmp_uint(a->patch, b->patch);
    }
    if (a->pre.len == 0 && b->pre.len == 0) {
        return 0;
    }
    if (a->pre.len == 0) {
        return 1; /* a release is above its pre-releases */
    }
    if (b->pre.len == 0) {
        return -1;
    }
    wh_str ap = a->pre, bp = b->pre;
    bool a_more = true, b_more = true;
    while (a_more && b_more) {
        wh_str ai, bi;
        a_more = next_part(&ap, '.', &ai);
        b_more = next_part(&bp, '.', &bi);
        int c = compare_identifier(ai, bi);
        if (c != 0) {
            return c;
        }
    }
    return a_more ? 1 : b_more ? -1 : 0; /* more identifiers: higher */
}

/* highest_supported finds the highest version with major 1 among the plugin's. */
static bool highest_supported(const wh_plugin *p, version *best) {
    bool found = false;
    for (size_t i = 0; i < p->n_versions; i++) {
        version v;
        if (!parse_version(p->versions[i], &v) || v.major != 1) {
            continue;
        }
        if (!found || compare(&v, best) > 0) {
            *best = v;
            found = true;
        }
    }
    return found;
}

/* ---- text ---- */


static void add_quoted_list(wh_text *t, const wh_str *ss, size_t n) {
    wh_text_addbyte(t, '[');
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            wh_text_adds(t, ", ");
        }
        wh_text_addquoted(t, ss[i]);
    }
    wh_text_addbyte(t, ']');
}

/* add_int adds a signed decimal number. */
static void add_int(wh_text *t, int64_t v) {
    if (v < 0) {
        wh_text_addbyte(t, '-');
        wh_text_addu(t, (uint64_t)0 - (uint64_t)v);
        return;
    }
    wh_text_addu(t, (uint64_t)v);
}

/* guest_error is a host function's failure as the Go SDK words it: "guest: kv_get driver/d:
 * guest: too large". */
static int32_t guest_error(const char *function, wh_str key, int32_t code) {
    wh_text t = {0};
    wh_text_adds(&t, "guest: ");
    wh_text_adds(&t, function);
    wh_text_adds(&t, " ");
    wh_text_add(&t, key);
    wh_text_adds(&t, ": guest: ");
    wh_text_adds(&t, wh_code_text(code == WH_NOT_FOUND ? -100 : code));
    return wh_fail_str(wh_text_str(&t));
}

/* ---- the record of a registered driver in the store: driver/<name> ---- */

typedef struct record {
    wh_str endpoint, version, socket;
} record;

static wh_str record_encode(const record *r) {
    wh_text t = {0};
    if (r->endpoint.len > 0) {
        wh_wire_add_bytes(&t, 1, r->endpoint);
    }
    if (r->version.len > 0) {
        wh_wire_add_bytes(&t, 2, r->version);
    }
    if (r->socket.len > 0) {
        wh_wire_add_bytes(&t, 3, r->socket);
    }
    return wh_text_str(&t);
}

/* record_decode decodes b into r; false (with rd failed) when it is malformed. */
static bool record_decode(wh_str b, record *r, wh_wire_reader *rd) {
    *r = (record){0};
    *rd = wh_wire_reader_of(b);
    wh_field f;
    while (wh_wire_next(rd, &f)) {
        wh_str s;
        if (f.num > 3) {
            continue;
        }
        if (!wh_wire_text(rd, &f, &s)) {
            return false;
        }
        if (f.num == 1) {
            r->endpoint = s;
        } else if (f.num == 2) {
            r->version = s;
        } else {
            r->socket = s;
        }
    }
    return rd->err == NULL;
}

static wh_str driver_key(wh_str name) {
    wh_text t = {0};
    wh_text_adds(&t, DRIVER_PREFIX);
    wh_text_add(&t, name);
    return wh_text_str(&t);
}

/* The outcome of lookup and check: go on, or return status (a rejection or a failure, whose
 * reason is set). */
#define GO_ON (-1)

/* lookup reads the record of the driver named name: *found says whether there is one that
 * decodes, *raw is what is stored (has_raw false when nothing is). A record that does not decode
 * is logged and treated as absent, so that a new registration can replace it. */
static int32_t lookup(wh_str name, record *rec, bool *found, wh_str *raw, bool *has_raw) {
    *found = *has_raw = false;
    wh_str key = driver_key(name);
    int32_t rc = wh_kv_get(key, raw);
    if (rc == WH_NOT_FOUND) {
        return GO_ON;
    }
    if (rc < 0) {
        return guest_error("kv_get", key, rc);
    }
    *has_raw = true;
    wh_wire_reader rd;
    if (!record_decode(*raw, rec, &rd)) {
        wh_text t = {0};
        wh_text_adds(&t, "ignoring the stored record of CSI driver ");
        wh_text_add(&t, name);
        wh_text_adds(&t, ": ");
        wh_text_add(&t, wh_wire_error(&rd));
        wh_log(WH_LOG_WARN, wh_text_str(&t));
        return GO_ON;
    }
    *found = true;
    return GO_ON;
}

/* check finds the highest supported version of p and the stored record of its name as it was
 * read (for the compare-and-set that writes over it), or refuses p. The kubelet runs the same
 * check in register as in validate, since another driver may have registered in between; so
 * does this handler, and again whenever its write finds that the record changed since it was
 * read. */
static int32_t check(const wh_plugin *p, version *v, wh_str *raw, bool *has_raw) {
    *has_raw = false;
    if (p->name.len == 0) {
        wh_text t = {0};
        wh_text_adds(&t, "CSI driver at socket ");
        wh_text_add(&t, p->socket);
        wh_text_adds(&t, " has no name");
        return wh_reject_str(wh_text_str(&t));
    }
    if (p->name.len > MAX_NAME_BYTES) {
        wh_text t = {0}, cut = {0};
        wh_text_add(&cut, (wh_str){p->name.ptr, 32});
        wh_text_adds(&cut, "...");
        wh_text_adds(&t, "CSI driver name ");
        wh_text_addquoted(&t, wh_text_str(&cut));
        wh_text_adds(&t, " is ");
        wh_text_addu(&t, p->name.len);
        wh_text_adds(&t, " bytes long; this handler takes names of up to ");
        wh_text_addu(&t, MAX_NAME_BYTES);
        return wh_reject_str(wh_text_str(&t));
    }
    if (!highest_supported(p, v)) {
        wh_text t = {0};
        wh_text_adds(&t, "CSI driver ");
        wh_text_add(&t, p->name);
        wh_text_adds(&t, " at endpoint ");
        wh_text_add(&t, p->endpoint);
        if (p->n_versions == 0) {
            wh_text_adds(&t, " sent no versions");
        } else {
            wh_text_adds(&t, " sent versions ");
            add_quoted_list(&t, p->versions, p->n_versions);
            wh_text_adds(&t, ", none of them supported");
        }
        wh_text_adds(&t, "; supported: " SUPPORTED_TEXT);
        return wh_reject_str(wh_text_str(&t));
    }
    record old;
    bool found;
    int32_t status = lookup(p->name, &old, &found, raw, has_raw);
    if (status != GO_ON || !found) {
        return status;
    }
    if (wh_str_eq(old.socket, p->socket)) {
        /* A record left by an earlier registration from this very socket: the host deregisters
         * a plugin before it registers a new one at the same path, so the record is stale (for
         * example, kept across a host restart). The newcomer replaces it. */
        return GO_ON;
    }
    version ov;
    if (parse_version(old.version, &ov) && compare(&ov, v) > 0) {
        wh_text t = {0};
        wh_text_adds(&t, "driver ");
        wh_text_add(&t, p->name);
        wh_text_adds(&t, " already registered at version ");
        wh_text_add(&t, old.version);
        wh_text_adds(&t, " (endpoint ");
        wh_text_add(&t, old.endpoint);
        wh_text_adds(&t, "); refusing ");
        wh_text_add(&t, v->raw);
        return wh_reject_str(wh_text_str(&t));
    }
    return GO_ON;
}

/* validate checks the driver's versions and that no driver of the same name is registered with
 * a higher one. It changes nothing. */
static int32_t validate(const wh_plugin *p) {
    version v;
    wh_str raw;
    bool has_raw;
    int32_t status = check(p, &v, &raw, &has_raw);
    return status == GO_ON ? WH_OK : status;
}

/* ---- NodeGetInfo ---- */

/* segment is one entry of Topology.segments as the driver sent it; order is its place in the
 * answer, by which a key sent again replaces the earlier value. */
typedef struct segment {
    wh_str key, value;
    size_t order;
} segment;

typedef struct node_info {
    wh_str node_id;
    int64_t max_volumes;
    segment *segments; /* every entry in the order sent, repeated keys too; in call memory */
    size_t n_segments, cap;
} node_info;

/* decode_segment decodes one entry of Topology.segments (a map<string, string>) and appends it;
 * topology() keeps the last value of a key that occurs again, as in a map. Appending is
 * constant time (amortized), so that an answer of 75,000 segments costs a few milliseconds,
 * where a search of the earlier keys for each made it quadratic (seconds). */
static bool decode_segment(wh_str b, node_info *ni, wh_wire_reader *outer) {
    wh_wire_reader r = wh_wire_reader_of(b);
    wh_str key = WH_STR(""), value = WH_STR("");
    wh_field f;
    while (wh_wire_next(&r, &f)) {
        if (f.num == 1 && !wh_wire_text(&r, &f, &key)) {
            break;
        }
        if (f.num == 2 && !wh_wire_text(&r, &f, &value)) {
            break;
        }
    }
    if (r.err != NULL) {
        return wh_wire_fail(outer, r.err_field, r.err);
    }
    if (ni->n_segments == ni->cap) {
        size_t cap = ni->cap == 0 ? 8 : ni->cap * 2;
        segment *segs = wh_alloc(cap * sizeof *segs);
        if (segs == NULL) {
            return wh_wire_fail(outer, 1, "out of memory for the topology");
        }
        if (ni->n_segments > 0) {
            memcpy(segs, ni->segments, ni->n_segments * sizeof *segs);
        }
        ni->segments = segs;
        ni->cap = cap;
    }
    ni->segments[ni->n_segments] = (segment){key, value, ni->n_segments};
    ni->n_segments++;
    return true;
}

/* decode_node_info decodes a NodeGetInfoResponse: node_id = 1, max_volumes_per_node = 2
 * (int64), accessible_topology = 3 (Topology: segments = 1, map<string, string>). */
static bool decode_node_info(wh_str b, node_info *ni, wh_wire_reader *r) {
    *ni = (node_info){.node_id = WH_STR("")};
    *r = wh_wire_reader_of(b);
    wh_field f;
    while (wh_wire_next(r, &f)) {
        if (f.num == 1) {
            if (!wh_wire_text(r, &f, &ni->node_id)) {
                return false;
            }
        } else if (f.num == 2) {
            if (f.type != WH_WIRE_VARINT) {
                return wh_wire_fail(r, f.num, wh_wire_wrong_type(f.type));
            }
            ni->max_volumes = (int64_t)f.varint;
        } else if (f.num == 3) {
            if (f.type != WH_WIRE_BYTES) {
                return wh_wire_fail(r, f.num, wh_wire_wrong_type(f.type));
            }
            wh_wire_reader topo = wh_wire_reader_of(f.data);
            wh_field s;
            while (wh_wire_next(&topo, &s)) {
                if (s.num != 1) {
                    continue;
                }
                if (s.type != WH_WIRE_BYTES) {
                    wh_wire_fail(&topo, s.num, wh_wire_wrong_type(s.type));
                    break;
                }
                if (!decode_segment(s.data, ni, &topo)) {
                    break;
                }
            }
            if (topo.err != NULL) {
                return wh_wire_fail(r, topo.err_field, topo.err);
            }
        }
    }
    return r->err == NULL;
}

/* compare_segments orders segments by key (bytewise, a prefix first), then by their order in
 * the answer. */
static int compare_segments(const void *pa, const void *pb) {
    const segment *a = pa, *b = pb;
    size_t n = a->key.len < b->key.len ? a->key.len : b->key.len;
    int c = n == 0 ? 0 : memcmp(a->key.ptr, b->key.ptr, n);
    if (c != 0) {
        return c;
    }
    if (a->key.len != b->key.len) {
        return a->key.len < b->key.len ? -1 : 1;
    }
    return a->order < b->order ? -1 : a->order > b->order;
}

/* topology is the segments as "k=v,k=v", sorted by key, each key once with the value it was
 * last sent with: one sort (n log n) and one pass. */
static wh_str topology(node_info *ni) {
    size_t n = ni->n_segments;
    if (n > 1) {
        qsort(ni->segments, n, sizeof *ni->segments, compare_segments);
    }
    wh_text t = {0};
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        const segment *sg = &ni->segments[i];
        if (i + 1 < n && wh_str_eq(sg->key, ni->segments[i + 1].key)) {
            continue; /* sent again later: the later value wins */
        }
        if (!first) {
            wh_text_addbyte(&t, ',');
        }
        first = false;
        wh_text_add(&t, sg->key);
        wh_text_addbyte(&t, '=');
        wh_text_add(&t, sg->value);
    }
    return wh_text_str(&t);
}

/* node_get_info calls the driver's NodeGetInfo. Like the kubelet, the handler fails the
 * registration when the call fails or its answer is unusable; the failure is not a rejection,
 * so the host retries with backoff (a driver often starts serving shortly after it registers). */
static int32_t node_get_info(const wh_plugin *p, node_info *ni) {
    wh_text t = {0};
    wh_text_adds(&t, "NodeGetInfo of CSI driver ");
    wh_text_add(&t, p->name);
    wh_text_adds(&t, " at endpoint ");
    wh_text_add(&t, p->endpoint);
    wh_text_addbyte(&t, ' ');
    wh_str resp;
    int32_t rc = wh_plugin_call(WH_STR(METHOD_NODE_GET_INFO), WH_STR(""), &resp);
    if (rc < 0) {
        /* As the Go SDK words it: "plugincall: METHOD: guest: failed: <the host's reason>". */
        wh_text_adds(&t, "failed: plugincall: " METHOD_NODE_GET_INFO ": guest: ");
        wh_text_adds(&t, wh_code_text(rc == WH_NOT_FOUND || rc == WH_CONFLICT ? -100 : rc));
        if (rc == WH_FAILED || rc == WH_TOO_LARGE) { /* the host's reason names the limit */
            wh_str why = wh_error_reason();
            if (why.len > 0) {
                wh_text_adds(&t, ": ");
                wh_text_add(&t, why);
            }
        }
        return wh_fail_str(wh_text_str(&t));
    }
    wh_wire_reader r;
    if (!decode_node_info(resp, ni, &r)) {
        wh_text_adds(&t, "answered a malformed response: ");
        wh_text_add(&t, wh_wire_error(&r));
        return wh_fail_str(wh_text_str(&t));
    }
    if (ni->node_id.len == 0) {
        wh_text_adds(&t, "answered an empty node_id");
        return wh_fail_str(wh_text_str(&t));
    }
    if (ni->max_volumes < 0) {
        wh_text_adds(&t, "answered a negative max_volumes_per_node ");
        add_int(&t, ni->max_volumes);
        return wh_fail_str(wh_text_str(&t));
    }
    return GO_ON;
}

/* register_plugin asks the driver for its node information, publishes it, and records the
 * driver. The record is written last, so that a failure leaves the store as it was (and the
 * host does not call deregister for a registration that failed). */
static int32_t register_plugin(const wh_plugin *p) {
    version v;
    wh_str raw;
    bool has_raw;
    int32_t status = check(p, &v, &raw, &has_raw);
    if (status != GO_ON) {
        return status;
    }
    node_info ni;
    if ((status = node_get_info(p, &ni)) != GO_ON) {
        return status;
    }
    wh_text max = {0};
    add_int(&max, ni.max_volumes);
    const struct {
        const char *key;
        wh_str value;
    } published[] = {
        {"version", v.raw},
        {"endpoint", p->endpoint},
        {"node_id", ni.node_id},
        {"max_volumes_per_node", wh_text_str(&max)},
        {"topology", topology(&ni)},
    };
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++) {
        int32_t rc = wh_publish(wh_cstr(published[i].key), published[i].value);
        if (rc == WH_TOO_LARGE) {
            /* One fact over the host's bounds (a value over 64 KiB, or the call's total) is
             * left out, said in the log; the driver is registered with the others. */
            wh_text t = {0};
            wh_text_adds(&t, "CSI driver ");
            wh_text_add(&t, p->name);
            wh_text_adds(&t, ": not publishing ");
            wh_text_adds(&t, published[i].key);
            wh_text_adds(&t, " of ");
            wh_text_addu(&t, published[i].value.len);
            wh_text_adds(&t, " bytes: over the host's limits on what a registration publishes");
            wh_log(WH_LOG_WARN, wh_text_str(&t));
            continue;
        }
        if (rc < 0) {
            return guest_error("publish", wh_cstr(published[i].key), rc);
        }
    }
    record rec = {.endpoint = p->endpoint, .version = v.raw, .socket = p->socket};
    wh_str value = record_encode(&rec), key = driver_key(p->name);
    for (int attempt = 1;; attempt++) {
        int32_t rc = wh_kv_compare_and_set(key, has_raw ? &raw : NULL, &value);
        if (rc == WH_OK) {
            break;
        }
        if (rc != WH_CONFLICT) {
            return guest_error("kv_compare_and_set", key, rc);
        }
        if (attempt == MAX_WRITE_ATTEMPTS) {
            return wh_fail(ERR_BUSY);
        }
        /* Another registration of this name wrote its record since check read it (NodeGetInfo
         * ran in between): decide again on what it wrote. */
        if ((status = check(p, &v, &raw, &has_raw)) != GO_ON) {
            return status;
        }
    }
    wh_text t = {0};
    wh_text_adds(&t, "registered CSI driver ");
    wh_text_add(&t, p->name);
    wh_text_adds(&t, " version ");
    wh_text_add(&t, v.raw);
    wh_text_adds(&t, " at endpoint ");
    wh_text_add(&t, p->endpoint);
    wh_text_adds(&t, ", node ID ");
    wh_text_add(&t, ni.node_id);
    wh_log(WH_LOG_INFO, wh_text_str(&t));
    return WH_OK;
}

/* deregister forgets the driver if its record is this registration's: same socket and endpoint.
 * When a newer registration of the same name replaced it, the record is that one's and stays. */
static int32_t deregister(const wh_plugin *p) {
    for (int attempt = 0; attempt < MAX_WRITE_ATTEMPTS; attempt++) {
        record rec;
        bool found, has_raw;
        wh_str raw;
        int32_t status = lookup(p->name, &rec, &found, &raw, &has_raw);
        if (status != GO_ON) {
            return status;
        }
        wh_text t = {0};
        if (!found) {
            wh_text_adds(&t, "deregistering CSI driver ");
            wh_text_add(&t, p->name);
            wh_text_adds(&t, " from socket ");
            wh_text_add(&t, p->socket);
            wh_text_adds(&t, ", of which there is no record");
            wh_log(WH_LOG_WARN, wh_text_str(&t));
            return WH_OK;
        }
        if (!wh_str_eq(rec.socket, p->socket) || !wh_str_eq(rec.endpoint, p->endpoint)) {
            wh_text_adds(&t, "deregistering CSI driver ");
            wh_text_add(&t, p->name);
            wh_text_adds(&t, " from socket ");
            wh_text_add(&t, p->socket);
            wh_text_adds(&t, "; keeping the newer registration from socket ");
            wh_text_add(&t, rec.socket);
            wh_text_adds(&t, " (endpoint ");
            wh_text_add(&t, rec.endpoint);
            wh_text_adds(&t, ")");
            wh_log(WH_LOG_INFO, wh_text_str(&t));
            return WH_OK;
        }
        /* Delete the record only if it is still this registration's: a newer one may have
         * replaced it since it was read. */
        wh_str key = driver_key(p->name);
        int32_t rc = wh_kv_compare_and_set(key, &raw, NULL);
        if (rc == WH_OK) {
            wh_text_adds(&t, "deregistered CSI driver ");
            wh_text_add(&t, p->name);
            wh_text_adds(&t, " (endpoint ");
            wh_text_add(&t, p->endpoint);
            wh_text_adds(&t, ")");
            wh_log(WH_LOG_INFO, wh_text_str(&t));
            return WH_OK;
        }
        if (rc != WH_CONFLICT) {
            return guest_error("kv_compare_and_set", key, rc);
        }
    }
    return wh_fail(ERR_BUSY);
}

const wh_handler wh_handler_def = {
    .manifest = {.plugin_types = WH_TYPES("CSIPlugin"), .name = "csi", .version = "0.1.0"},
    .validate = validate,
    .register_plugin = register_plugin,
    .deregister = deregister,
};
