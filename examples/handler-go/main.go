// Command example is the smallest useful wasmhost handler, written as a tutorial. It handles the
// plugin type "example.wasmhost.dev", the type of the walk-through in the top-level README:
//
//   - Validate accepts a plugin only if it supports version "v1";
//   - Register logs, remembers the plugin's endpoint in the key-value store, and publishes it;
//   - Deregister forgets it.
//
// Build it (from the repository root) as a WASI reactor, the form wasmhost loads:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -w' -o example.wasm ./examples/handler-go
//
// and drop example.wasm into the daemon's handler directory. The ABI it speaks is described in
// abi/README.md; package guest (abi/guest) does the ABI's work, so this file is only the logic.
package main

import (
	"slices"
	"strings"

	"github.com/wasmhost/wasmhost/abi/guest"
)

// PluginType is the plugin type this handler serves: a plugin whose GetInfo answer has this
// type is handed to it. A type of your own should be a name you control, so that it cannot
// clash with another handler's (the kubelet's types are CSIPlugin, DRAPlugin, DevicePlugin).
const PluginType = "example.wasmhost.dev"

// wantVersion is the one version of our (imaginary) plugin API this handler speaks.
const wantVersion = "v1"

// handler implements guest.Handler. It has no fields, on purpose: the host runs a pool of
// instances of this module and throws an instance away after any failure, so nothing kept in a
// Go variable is sure to be there at the next call. What must be remembered goes in guest.KV.
type handler struct{}

// Validate is called first, for every plugin that announces PluginType. Returning
// guest.Reject(reason) refuses the plugin: the reason is sent back to it, and the host does not
// retry. Returning any other error means "this handler failed", and the host retries later.
func (handler) Validate(p guest.Plugin) error {
	if !slices.Contains(p.Versions, wantVersion) {
		return guest.Reject("plugin " + p.Name + " supports versions [" +
			strings.Join(p.Versions, ", ") + "]; this handler needs " + wantVersion)
	}
	return nil
}

// Register is called after a successful Validate. If it returns an error, the plugin is told
// that its registration failed.
func (handler) Register(p guest.Plugin) error {
	// Log lines go to the daemon's log, tagged with the plugin type and the plugin.
	// guest.Log takes a plain string; guest.Logf formats, but links package fmt into the module.
	guest.Log(guest.LevelInfo, "registering "+p.Name+" at "+p.Endpoint)

	// The key-value store belongs to the plugin type and outlives every instance: the place for
	// what Deregister will need, or what another call must see.
	if err := guest.KV.Set(storeKey(p), []byte(p.Endpoint)); err != nil {
		return err // not a rejection: the host will retry
	}

	// Published keys are shown by the daemon with the registered plugin, and are forgotten when
	// it is deregistered. Publishing is allowed only here, in Register.
	return guest.Publish("endpoint", p.Endpoint)
}

// Deregister is called when a registered plugin goes away (its socket was removed). Clean up
// what Register left in the store. Deregister is not retried, so do what can be done and report
// the rest.
func (handler) Deregister(p guest.Plugin) error {
	endpoint, ok, err := guest.KV.Get(storeKey(p))
	if err != nil {
		return err
	}
	if !ok {
		guest.Log(guest.LevelWarn, "deregistering "+p.Name+", which this handler has no record of")
		return nil
	}
	guest.Log(guest.LevelInfo, "deregistering "+p.Name+", registered at "+string(endpoint))
	return guest.KV.Delete(storeKey(p))
}

// storeKey is the key-value store key for a plugin. Plugins are told apart by name.
func storeKey(p guest.Plugin) string { return "plugin/" + p.Name }

// init tells the SDK what this module handles and who handles it. It must be an init function:
// the host reads the manifest as soon as the module's initialization has run, before main (which
// a reactor module never runs).
func init() {
	guest.Handle(guest.Manifest{
		PluginTypes: []string{PluginType},
		Name:        "example",
		Version:     "0.1.0",
	}, handler{})
}

// main is required by the Go toolchain and never called.
func main() {}
