//go:build !wasip1

package main

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
)

// The handler's logic can be tested natively: in a non-wasip1 build the SDK's host functions
// are an in-memory fake, guest.Fake, which makes the daemon's calls to the handler given to
// guest.Handle and keeps its store, what it published and its log. (abi/guest's tests build
// this package for wasip1 and run it under a WebAssembly host.)
func TestHandler(t *testing.T) {
	fake := guesttest.Fake(t) // the SDK's in-memory host, emptied before and after
	p := guest.Plugin{Type: PluginType, Name: "demo", Endpoint: "/run/demo.sock", Versions: []string{"v1"}}

	var rej *guest.RejectError
	if err := fake.Validate(guest.Plugin{Type: PluginType, Name: "old", Versions: []string{"v0"}}); !errors.As(err, &rej) {
		t.Errorf("Validate of a plugin without v1: %v, want a rejection", err)
	}
	if err := fake.Validate(p); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if err := fake.Register(p); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if got, want := fake.KV(PluginType), map[string]string{"plugin/demo": "/run/demo.sock"}; !maps.Equal(got, want) {
		t.Errorf("kv after Register: %v, want %v", got, want)
	}
	if got, want := fake.Published(), map[string]string{"endpoint": "/run/demo.sock"}; !maps.Equal(got, want) {
		t.Errorf("published after Register: %v, want %v", got, want)
	}
	if err := fake.Deregister(p); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	if got := fake.KV(PluginType); len(got) != 0 {
		t.Errorf("kv after Deregister: %v, want empty", got)
	}
	want := []string{"INFO registering demo at /run/demo.sock", "INFO deregistering demo, registered at /run/demo.sock"}
	if got := fake.Logs(); !slices.Equal(got, want) {
		t.Errorf("logs %q, want %q", got, want)
	}
}

// TestFiveThousandPlugins: a key per plugin fits the store for 5,000 plugins of the type (at
// ABI v1.1's 4,096 keys, 905 of 5,000 failed), and Deregister leaves it empty again.
func TestFiveThousandPlugins(t *testing.T) {
	fake := guesttest.Fake(t)
	plugin := func(i int) guest.Plugin {
		return guest.Plugin{Type: PluginType, Name: "p" + strconv.Itoa(i), Endpoint: "/run/p.sock", Versions: []string{"v1"}}
	}
	for i := range 5000 {
		if err := fake.Register(plugin(i)); err != nil {
			t.Fatalf("Register of plugin %d: %v", i, err)
		}
	}
	if n := len(fake.KV(PluginType)); n != 5000 {
		t.Fatalf("%d keys after 5,000 registrations, want 5,000", n)
	}
	for i := range 5000 {
		if err := fake.Deregister(plugin(i)); err != nil {
			t.Fatalf("Deregister of plugin %d: %v", i, err)
		}
	}
	if n := len(fake.KV(PluginType)); n != 0 {
		t.Errorf("%d keys left after every plugin was deregistered", n)
	}
}

// TestLongestName: a plugin name of 256 bytes, the longest the daemon accepts, gets its key in
// the store (with 256-byte keys, names over 249 bytes failed with "kv_set plugin/…: too large").
func TestLongestName(t *testing.T) {
	fake := guesttest.Fake(t)
	p := guest.Plugin{Type: PluginType, Name: strings.Repeat("n", 256), Endpoint: "/run/long.sock", Versions: []string{"v1"}}
	if err := fake.Register(p); err != nil {
		t.Fatalf("Register of a 256-byte name: %v", err)
	}
	if got := fake.KV(PluginType)["plugin/"+p.Name]; got != p.Endpoint {
		t.Errorf("stored endpoint %q, want %q", got, p.Endpoint)
	}
	if err := fake.Deregister(p); err != nil {
		t.Errorf("Deregister: %v", err)
	}
}

// TestStoreFull: with the plugin type's store full (SetKV fills it as earlier calls would have),
// Register fails, with the daemon's reason, and publishes nothing.
func TestStoreFull(t *testing.T) {
	fake := guesttest.Fake(t)
	for i := range abi.MaxKVEntries {
		fake.SetKV(PluginType, "plugin/p"+strconv.Itoa(i), []byte("/run/p.sock"))
	}
	p := guest.Plugin{Type: PluginType, Name: "demo", Endpoint: "/run/demo.sock", Versions: []string{"v1"}}
	var rej *guest.RejectError
	err := fake.Register(p)
	const want = "guest: kv_set plugin/demo: guest: too large: the store of this plugin type has 16384 keys, the most (abi.MaxKVEntries)"
	if err == nil || errors.As(err, &rej) || err.Error() != want {
		t.Errorf("Register with the store full: %v, want the failure %q", err, want)
	}
	if got := fake.Published(); len(got) != 0 {
		t.Errorf("published %v by a register call that failed", got)
	}
}
