//go:build !wasip1

package main

import (
	"errors"
	"maps"
	"testing"

	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
)

// The handler's logic, natively: the SDK's host functions are an in-memory fake in a non-wasip1
// build, which makes the daemon's calls to the handler. Step 1 of the walkthrough.
func TestWalkthroughHandler(t *testing.T) {
	fake := guesttest.Fake(t) // the SDK's in-memory host, emptied before and after
	p := guest.Plugin{Socket: "/r/thermal-1.sock", Type: PluginType, Name: "thermal-1", Endpoint: "/r/thermal-1.sock", Versions: []string{"v1beta1", "v1"}}

	var rej *guest.RejectError
	if err := fake.Validate(guest.Plugin{Type: PluginType, Name: "legacy-1", Versions: []string{"v0"}}); !errors.As(err, &rej) {
		t.Errorf("Validate of a v0 plugin: %v, want a rejection", err)
	}
	if err := fake.Register(p); err != nil {
		t.Fatal(err)
	}
	if got, want := fake.Published(), map[string]string{"api": "v1", "endpoint": "/r/thermal-1.sock"}; !maps.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
	// Another plugin claiming the same name from another socket is refused.
	dup := p
	dup.Socket = "/r/other.sock"
	if err := fake.Validate(dup); !errors.As(err, &rej) || rej.Reason != "a sensor plugin named thermal-1 is registered already, from /r/thermal-1.sock" {
		t.Errorf("Validate of a duplicate: %v", err)
	}
	// Its deregistration (had it registered) would leave the record alone.
	if err := fake.Deregister(dup); err != nil || len(fake.KV(PluginType)) != 1 {
		t.Errorf("Deregister of the duplicate: %v, store %v", err, fake.KV(PluginType))
	}
	if err := fake.Deregister(p); err != nil || len(fake.KV(PluginType)) != 0 {
		t.Errorf("Deregister: %v, store %v", err, fake.KV(PluginType))
	}
}
