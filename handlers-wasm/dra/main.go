// Command dra is the wasmhost handler for Dynamic Resource Allocation drivers (plugin type
// DRAPlugin), the plugins built with k8s.io/dynamic-resource-allocation/kubeletplugin:
//
//   - Validate accepts a driver that offers a supported DRAPlugin gRPC service (v1.DRAPlugin or
//     v1beta1.DRAPlugin); such drivers send service names, not version numbers, as their
//     supported versions.
//   - Register records, per registration socket, which DRAPlugin service will be used (the
//     newest supported) and which DRAResourceHealth service the driver offers, if any, and
//     publishes them with the endpoint.
//   - Deregister forgets that socket's record. A driver may have several registration sockets
//     at once (a rolling update of its DaemonSet registers <driver>-<uid>-reg.sock next to the
//     old one); each has its own record.
//
// Build it from the repository root (the Makefile does) as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o handlers-wasm/dra.wasm ./handlers-wasm/dra
//
// It needs no capability; see README.md.
package main

import (
	"strconv"
	"strings"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
)

// PluginType is the kubelet's plugin type for DRA drivers.
const PluginType = "DRAPlugin"

// The gRPC services this handler knows, newest first: the first one a driver offers is used.
var (
	pluginServices = []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}
	healthServices = []string{"v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"}
)

// Keys published about a registered driver.
const (
	keyService  = "service"  // the DRAPlugin service to use, e.g. v1.DRAPlugin
	keyHealth   = "health"   // the DRAResourceHealth service offered, or noHealth
	keyEndpoint = "endpoint" // the driver's DRA endpoint
)

// noHealth is published as health when the driver offers no supported health service.
const noHealth = "none"

// socketPrefix starts the store key of a registration's record: socket/<registration socket>.
const socketPrefix = "socket/"

// handler implements guest.Handler. It keeps nothing in memory: instances are pooled and thrown
// away, so every call reads what it needs from the store.
type handler struct{}

func socketKey(socket string) string { return socketPrefix + socket }

// newest returns the first of known that offered contains, or "".
func newest(known, offered []string) string {
	for _, k := range known {
		for _, o := range offered {
			if o == k {
				return k
			}
		}
	}
	return ""
}

// choose returns the record Register would write for p, or a rejection.
func choose(p guest.Plugin) (record, error) {
	switch {
	case p.Name == "":
		return record{}, guest.Reject("DRA driver at socket " + p.Socket + " has no name")
	case p.Socket == "":
		return record{}, guest.Reject("DRA driver " + p.Name + " has no registration socket")
	case len(socketKey(p.Socket)) > abi.MaxKeyBytes:
		return record{}, guest.Reject("DRA driver " + p.Name + ": the registration socket path is " +
			strconv.Itoa(len(p.Socket)) + " bytes long; this handler takes paths of up to " +
			strconv.Itoa(abi.MaxKeyBytes-len(socketPrefix)))
	}
	service := newest(pluginServices, p.Versions)
	if service == "" {
		offered := "offers no services"
		if len(p.Versions) > 0 {
			offered = "offers services " + guest.QuoteList(p.Versions) + ", none of them a supported DRAPlugin service"
		}
		return record{}, guest.Reject("DRA driver " + p.Name + " at endpoint " + p.Endpoint + " " + offered +
			"; supported: " + strings.Join(pluginServices, ", "))
	}
	return record{name: p.Name, endpoint: p.Endpoint, service: service, health: newest(healthServices, p.Versions)}, nil
}

// Validate accepts a driver that offers a supported DRAPlugin service. It changes nothing.
func (handler) Validate(p guest.Plugin) error {
	_, err := choose(p)
	return err
}

// Register publishes the services the driver will be used through, and records them under its
// registration socket. The record is written last, so that a failure leaves the store as it was
// (the host does not call Deregister for a registration that failed).
func (handler) Register(p guest.Plugin) error {
	rec, err := choose(p)
	if err != nil {
		return err
	}
	health := rec.health
	if health == "" {
		health = noHealth
	}
	for _, kv := range [...][2]string{{keyService, rec.service}, {keyHealth, health}, {keyEndpoint, p.Endpoint}} {
		if err := guest.Publish(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := guest.KV.Set(socketKey(p.Socket), rec.encode()); err != nil {
		return err
	}
	guest.Log(guest.LevelInfo, "registered DRA driver "+p.Name+" from socket "+p.Socket+" at endpoint "+
		p.Endpoint+" using "+rec.service+", health "+health)
	return nil
}

// Deregister forgets the record of the driver's registration socket. Records of other sockets,
// of the same driver or not, stay. A record at this socket that names another driver or
// endpoint belongs to a later registration and stays too.
func (handler) Deregister(p guest.Plugin) error {
	key := socketKey(p.Socket)
	b, ok, err := guest.KV.Get(key)
	if err != nil {
		return err
	}
	if !ok {
		guest.Log(guest.LevelWarn, "deregistering DRA driver "+p.Name+" from socket "+p.Socket+
			", of which there is no record")
		return nil
	}
	rec, err := decodeRecord(b)
	switch {
	case err != nil:
		guest.Log(guest.LevelWarn, "deregistering DRA driver "+p.Name+" from socket "+p.Socket+
			": deleting an unreadable record: "+err.Error())
	case rec.name != p.Name || rec.endpoint != p.Endpoint:
		guest.Log(guest.LevelInfo, "deregistering DRA driver "+p.Name+" from socket "+p.Socket+
			"; keeping the record of the later registration there (driver "+rec.name+", endpoint "+rec.endpoint+")")
		return nil
	}
	if err := guest.KV.Delete(key); err != nil {
		return err
	}
	guest.Log(guest.LevelInfo, "deregistered DRA driver "+p.Name+" from socket "+p.Socket)
	return nil
}

func init() {
	guest.Handle(guest.Manifest{PluginTypes: []string{PluginType}, Name: "dra", Version: "0.1.0"}, handler{})
}

// main is required by the Go toolchain and never called: the module is a reactor.
func main() {}
