// Command csi is the wasmhost handler for CSI drivers (plugin type CSIPlugin), with the
// semantics of the kubelet's CSI registration handler:
//
//   - Validate accepts a driver that supports a CSI version with major 1 ("1.0.0", "1.2",
//     "v1.5.0"), and refuses it when a driver of the same name is already registered with a
//     higher version. A driver with the same or a lower version is replaced by the newcomer.
//   - Register calls the driver's CSI NodeGetInfo on its endpoint (the host makes the call, which
//     needs the plugin_call capability), records the driver in the key-value store and publishes
//     its version, endpoint, node ID, volume limit and topology.
//   - Deregister forgets the driver, unless a newer registration of the same name (from another
//     socket) has replaced it in the meantime.
//
// The record is written with the store's compare-and-set (ABI v1.1): two drivers of the same
// name registering in the same instant, on two instances, cannot both pass the version check;
// the second write finds the first one's record, checks again, and is refused if it is older.
//
// Build it from the repository root (the Makefile does) as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o handlers-wasm/csi.wasm ./handlers-wasm/csi
//
// It imports plugin_call, so it loads only where the operator grants that capability to
// CSIPlugin; see README.md.
package main

import (
	"errors"
	"strconv"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/plugincall"
)

// PluginType is the kubelet's plugin type for CSI drivers.
const PluginType = "CSIPlugin"

// methodNodeGetInfo is the full gRPC name of CSI's NodeGetInfo. Its request,
// NodeGetInfoRequest, has no fields: it encodes as zero bytes.
const methodNodeGetInfo = "/csi.v1.Node/NodeGetInfo"

// Keys published about a registered driver.
const (
	keyVersion    = "version"              // the highest supported CSI version the driver sent
	keyEndpoint   = "endpoint"             // the driver's CSI endpoint
	keyNodeID     = "node_id"              // NodeGetInfo's node_id
	keyMaxVolumes = "max_volumes_per_node" // NodeGetInfo's max_volumes_per_node (0: no limit given)
	keyTopology   = "topology"             // NodeGetInfo's accessible_topology, "k=v,k=v" sorted by key
)

// driverPrefix starts the store key of a driver's record: driver/<name>.
const driverPrefix = "driver/"

// maxNameBytes is the longest driver name whose store key fits abi.MaxKeyBytes.
const maxNameBytes = abi.MaxKeyBytes - len(driverPrefix)

// handler implements guest.Handler. It keeps nothing in memory: instances are pooled and thrown
// away, so every call reads what it needs from the store.
type handler struct{}

func driverKey(name string) string { return driverPrefix + name }

// Validate checks the driver's versions and that no driver of the same name is registered with
// a higher one. It changes nothing.
func (handler) Validate(p guest.Plugin) error {
	_, _, err := check(p)
	return err
}

// check returns the highest supported version of p and the stored record of its name as it
// was read (nil when there is none, for the compare-and-set that writes over it), or a
// rejection (or, when the store cannot be read, an error). The kubelet runs the same check in
// Register as in Validate, since another driver may have registered in between; so does this
// handler, and again whenever its write finds that the record changed since it was read.
func check(p guest.Plugin) (version, []byte, error) {
	switch {
	case p.Name == "":
		return version{}, nil, guest.Reject("CSI driver at socket " + p.Socket + " has no name")
	case len(p.Name) > maxNameBytes:
		return version{}, nil, guest.Reject("CSI driver name " + guest.Quote(p.Name[:32]+"...") + " is " +
			strconv.Itoa(len(p.Name)) + " bytes long; this handler takes names of up to " + strconv.Itoa(maxNameBytes))
	}
	v, ok := highestSupported(p.Versions)
	if !ok {
		sent := "sent no versions"
		if len(p.Versions) > 0 {
			sent = "sent versions " + guest.QuoteList(p.Versions) + ", none of them supported"
		}
		return version{}, nil, guest.Reject("CSI driver " + p.Name + " at endpoint " + p.Endpoint + " " + sent +
			"; supported: " + supportedText)
	}
	old, raw, ok, err := lookup(p.Name)
	if err != nil || !ok {
		return v, raw, err
	}
	if old.socket == p.Socket {
		// A record left by an earlier registration from this very socket: the host deregisters
		// a plugin before it registers a new one at the same path, so the record is stale (for
		// example, kept across a host restart). The newcomer replaces it.
		return v, raw, nil
	}
	if ov, ok := parseVersion(old.version); ok && compare(ov, v) > 0 {
		return version{}, nil, guest.Reject("driver " + p.Name + " already registered at version " + old.version +
			" (endpoint " + old.endpoint + "); refusing " + v.raw)
	}
	return v, raw, nil
}

// lookup reads the record of the driver named name, and returns it decoded and as stored (raw
// is nil when there is none). A record that does not decode is logged and treated as absent,
// so that a new registration can replace it.
func lookup(name string) (rec record, raw []byte, ok bool, err error) {
	b, ok, err := guest.KV.Get(driverKey(name))
	if err != nil || !ok {
		return record{}, nil, false, err
	}
	r, err := decodeRecord(b)
	if err != nil {
		guest.Log(guest.LevelWarn, "ignoring the stored record of CSI driver "+name+": "+err.Error())
		return record{}, b, false, nil
	}
	return r, b, true, nil
}

// maxWriteAttempts bounds how often a write is tried again because another registration of
// the same name changed the record meanwhile: each retry follows a change, so this is only
// reached when many copies of one driver register at once.
const maxWriteAttempts = 16

// errBusy: the record kept changing under the write; the host retries the call with backoff.
var errBusy = errors.New("the store's record of this driver kept changing while it was written")

// Register asks the driver for its node information, publishes it, and records the driver.
// The record is written last, so that a failure leaves the store as it was (and the host does
// not call Deregister for a registration that failed).
func (handler) Register(p guest.Plugin) error {
	v, raw, err := check(p)
	if err != nil {
		return err
	}
	info, err := nodeGetInfo(p)
	if err != nil {
		return err
	}
	for _, kv := range [...][2]string{
		{keyVersion, v.raw},
		{keyEndpoint, p.Endpoint},
		{keyNodeID, info.nodeID},
		{keyMaxVolumes, strconv.FormatInt(info.maxVolumes, 10)},
		{keyTopology, topology(info.segments)},
	} {
		if err := guest.Publish(kv[0], kv[1]); err != nil {
			return err
		}
	}
	rec := record{endpoint: p.Endpoint, version: v.raw, socket: p.Socket}
	for attempt := 1; ; attempt++ {
		written, err := guest.KV.CompareAndSet(driverKey(p.Name), raw, rec.encode())
		switch {
		case err != nil:
			return err
		case written:
		case attempt == maxWriteAttempts:
			return errBusy
		default:
			// Another registration of this name wrote its record since check read it (NodeGetInfo
			// ran in between): decide again on what it wrote.
			if _, raw, err = check(p); err != nil {
				return err
			}
			continue
		}
		break
	}
	guest.Log(guest.LevelInfo, "registered CSI driver "+p.Name+" version "+v.raw+" at endpoint "+p.Endpoint+
		", node ID "+info.nodeID)
	return nil
}

// nodeGetInfo calls the driver's NodeGetInfo. Like the kubelet, the handler fails the
// registration when the call fails or its answer is unusable; the error is not a rejection, so
// the host retries with backoff (a driver often starts serving shortly after it registers).
func nodeGetInfo(p guest.Plugin) (nodeInfo, error) {
	fail := func(what string, err error) (nodeInfo, error) {
		return nodeInfo{}, &nodeInfoError{"NodeGetInfo of CSI driver " + p.Name + " at endpoint " + p.Endpoint + " " + what, err}
	}
	resp, err := plugincall.Call(methodNodeGetInfo, nil)
	if err != nil {
		return fail("failed: "+err.Error(), err)
	}
	info, err := decodeNodeInfo(resp)
	switch {
	case err != nil:
		return fail("answered a malformed response: "+err.Error(), err)
	case info.nodeID == "":
		return fail("answered an empty node_id", nil)
	case info.maxVolumes < 0:
		return fail("answered a negative max_volumes_per_node "+strconv.FormatInt(info.maxVolumes, 10), nil)
	}
	return info, nil
}

// nodeInfoError is a failed or unusable NodeGetInfo; it wraps the plugin call's error, if any.
type nodeInfoError struct {
	msg string
	err error
}

func (e *nodeInfoError) Error() string { return e.msg }
func (e *nodeInfoError) Unwrap() error { return e.err }

// Deregister forgets the driver if its record is this registration's: same socket and endpoint.
// When a newer registration of the same name replaced it, the record is that one's and stays.
func (handler) Deregister(p guest.Plugin) error {
	for range maxWriteAttempts {
		rec, raw, ok, err := lookup(p.Name)
		switch {
		case err != nil:
			return err
		case !ok:
			guest.Log(guest.LevelWarn, "deregistering CSI driver "+p.Name+" from socket "+p.Socket+
				", of which there is no record")
			return nil
		case rec.socket != p.Socket || rec.endpoint != p.Endpoint:
			guest.Log(guest.LevelInfo, "deregistering CSI driver "+p.Name+" from socket "+p.Socket+
				"; keeping the newer registration from socket "+rec.socket+" (endpoint "+rec.endpoint+")")
			return nil
		}
		// Delete the record only if it is still this registration's: a newer one may have
		// replaced it since it was read.
		deleted, err := guest.KV.CompareAndSet(driverKey(p.Name), raw, nil)
		if err != nil {
			return err
		}
		if deleted {
			guest.Log(guest.LevelInfo, "deregistered CSI driver "+p.Name+" (endpoint "+p.Endpoint+")")
			return nil
		}
	}
	return errBusy
}

func init() {
	guest.Handle(guest.Manifest{PluginTypes: []string{PluginType}, Name: "csi", Version: "0.1.0"}, handler{})
}

// main is required by the Go toolchain and never called: the module is a reactor.
func main() {}
