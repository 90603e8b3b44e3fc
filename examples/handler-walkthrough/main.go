// Command handler-walkthrough is the handler written in this directory's README.md, from an
// empty directory to a registered plugin. It handles a plugin type of our own,
// "sensors.example.com": node agents that expose sensors and speak an API of ours, v1 or the
// older v1beta1.
//
//   - Validate accepts a plugin that speaks v1 or v1beta1, unless a plugin of the same name is
//     registered already from another socket (two agents claiming one name is a mistake).
//   - Register records the plugin (its socket and the API it will be spoken to with) in the
//     key-value store, and publishes the API and its endpoint.
//   - Deregister forgets the plugin, if the record is this registration's.
//
// Build it as a WASI reactor, from the repository root:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags='-s -w' -o sensors.wasm ./examples/handler-walkthrough
package main

import (
	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/wire"
)

// PluginType is the type our plugins announce in GetInfo.
const PluginType = "sensors.example.com"

// apis are the versions of our API this handler speaks, newest first: the newest a plugin
// supports is the one used.
var apis = []string{"v1", "v1beta1"}

// keyPrefix starts the store key of a plugin's record: sensor/<name>.
const keyPrefix = "sensor/"

// handler has no fields: instances come and go, so what must last goes in guest.KV.
type handler struct{}

// record is what the store keeps about a registered plugin, in the protocol buffers wire format
// (package abi/wire; a protobuf library would triple the module's size):
//
//	message Record {
//	  string socket = 1; // the registration socket
//	  string api = 2;    // the API version chosen
//	}
type record struct{ socket, api string }

func (r record) encode() []byte {
	return wire.AppendNonEmpty(wire.AppendNonEmpty(nil, 1, r.socket), 2, r.api)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	err := wire.Walk(b, func(f wire.Field) error {
		var err error
		switch f.Num {
		case 1:
			r.socket, err = f.Text()
		case 2:
			r.api, err = f.Text()
		}
		return err // fields of other numbers are skipped: a later version may add some
	})
	return r, err
}

// lookup returns the record of the plugin named name, if there is one.
func lookup(name string) (record, bool, error) {
	b, ok, err := guest.KV.Get(keyPrefix + name)
	if err != nil || !ok {
		return record{}, false, err
	}
	r, err := decodeRecord(b)
	return r, err == nil, err
}

// check returns the API to speak to p with, or why p is refused.
func check(p guest.Plugin) (string, error) {
	if len(keyPrefix+p.Name) > abi.MaxKeyBytes {
		return "", guest.Reject("sensor plugin name " + p.Name + " is too long")
	}
	api := ""
	for _, a := range apis {
		for _, v := range p.Versions {
			if v == a && api == "" {
				api = a
			}
		}
	}
	if api == "" {
		return "", guest.Reject("sensor plugin " + p.Name + " speaks none of v1, v1beta1")
	}
	old, ok, err := lookup(p.Name)
	if err != nil {
		return "", err // not a rejection: the host retries later
	}
	if ok && old.socket != p.Socket {
		return "", guest.Reject("a sensor plugin named " + p.Name + " is registered already, from " + old.socket)
	}
	return api, nil
}

// Validate decides; it only reads the store.
func (handler) Validate(p guest.Plugin) error {
	_, err := check(p)
	return err
}

// Register checks again (another plugin may have registered since Validate), publishes, and
// records the plugin last, so that a failure leaves the store as it was.
func (handler) Register(p guest.Plugin) error {
	api, err := check(p)
	if err != nil {
		return err
	}
	if err := guest.Publish("api", api); err != nil {
		return err
	}
	if err := guest.Publish("endpoint", p.Endpoint); err != nil {
		return err
	}
	if err := guest.KV.Set(keyPrefix+p.Name, record{socket: p.Socket, api: api}.encode()); err != nil {
		return err
	}
	guest.Log(guest.LevelInfo, "registered sensor plugin "+p.Name+" (API "+api+") at "+p.Endpoint)
	return nil
}

// Deregister forgets the plugin when the record is this registration's. It copes with a
// plugin it has no record of: the host does not retry it.
func (handler) Deregister(p guest.Plugin) error {
	old, ok, err := lookup(p.Name)
	switch {
	case err != nil:
		return err
	case !ok:
		guest.Log(guest.LevelWarn, "deregistering sensor plugin "+p.Name+", of which there is no record")
		return nil
	case old.socket != p.Socket:
		return nil // the record is another registration's
	}
	guest.Log(guest.LevelInfo, "deregistered sensor plugin "+p.Name)
	return guest.KV.Delete(keyPrefix + p.Name)
}

func init() {
	guest.Handle(guest.Manifest{PluginTypes: []string{PluginType}, Name: "sensors", Version: "0.1.0"}, handler{})
}

// main is never called: the module is a reactor.
func main() {}
