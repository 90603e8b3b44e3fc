//go:build !wasip1

package plugincall_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/abi/guest/plugincall"
)

// caller calls the plugin in Register as a test says, and returns what the calls returned.
type caller struct{}

// calls is what caller's Register does: the plugin calls, the method and request of each.
var calls func() error

func (caller) Validate(guest.Plugin) error   { return nil }
func (caller) Register(guest.Plugin) error   { return calls() }
func (caller) Deregister(guest.Plugin) error { return nil }

func init() { guest.Handle(guest.Manifest{PluginTypes: []string{"call.test"}}, caller{}) }

var plugin = guest.Plugin{Type: "call.test", Name: "p", Endpoint: "/run/p.sock", Versions: []string{"v1"}}

// register runs fn as the handler's Register, in a call of the fake, and returns what the
// call returned.
func register(f *guest.FakeHost, p guest.Plugin, fn func() error) error {
	calls = fn
	return f.Register(p)
}

// TestCallNative checks the native build's plugin calls through the fake host: the daemon's
// checks, codes and reasons.
func TestCallNative(t *testing.T) {
	f := guesttest.Fake(t)
	check := func(method string, req []byte, wantResp string, wantErr error, wantMsg string) {
		t.Helper()
		err := register(f, plugin, func() error {
			resp, err := plugincall.Call(method, req)
			var perr *plugincall.Error
			switch {
			case wantErr == nil && (err != nil || string(resp) != wantResp):
				t.Errorf("Call(%q) = %.40q, %v; want %q", method, resp, err, wantResp)
			case wantErr != nil && (!errors.Is(err, wantErr) || !errors.As(err, &perr) || perr.Method != method || err.Error() != wantMsg):
				t.Errorf("Call(%q) = %v\nwant %q, wrapping %v", method, err, wantMsg, wantErr)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the call: %v", err)
		}
	}
	check("/csi.v1.Node/NodeGetInfo", nil, "", guest.ErrDenied, "plugincall: /csi.v1.Node/NodeGetInfo: guest: denied")

	var answered int
	f.SetPluginCall(func(method string, req []byte) ([]byte, error) {
		answered++
		switch string(req) {
		case "down":
			return nil, errors.New("connection refused")
		case "big":
			return []byte(strings.Repeat("b", 100<<10)), nil
		case "huge":
			return make([]byte, guest.FakePluginCallResponseSize+1), nil
		}
		return append([]byte(method+":"), req...), nil
	})
	check("/m", []byte("hi"), "/m:hi", nil, "")
	check("/m", []byte("down"), "", guest.ErrFailed, "plugincall: /m: guest: failed: connection refused")
	check("", nil, "", guest.ErrBadRequest, "plugincall: : guest: bad request")
	check("/m\xff", nil, "", guest.ErrBadRequest, "plugincall: /m\xff: guest: bad request")
	check("/m", make([]byte, abi.MaxRequestBytes+1), "", guest.ErrTooLarge, "plugincall: /m: guest: too large")
	check("/m", []byte("huge"), "", guest.ErrTooLarge,
		fmt.Sprintf("plugincall: /m: guest: too large: response of %d bytes over the limit of %d (handlers.limits.pluginCallResponseSize)",
			guest.FakePluginCallResponseSize+1, guest.FakePluginCallResponseSize))
	// A response over the SDK's first buffer is read by a second call, answered from the first.
	answered = 0
	check("/m", []byte("big"), strings.Repeat("b", 100<<10), nil, "")
	if answered != 1 {
		t.Errorf("the plugin was called %d times for a response of 100 KiB, want 1", answered)
	}

	// A plugin without an endpoint.
	noEndpoint := plugin
	noEndpoint.Endpoint = ""
	err := register(f, noEndpoint, func() error {
		_, err := plugincall.Call("/m", nil)
		return err
	})
	if err == nil || err.Error() != "plugincall: /m: guest: failed: the plugin has no endpoint" {
		t.Errorf("a plugin without an endpoint: %v", err)
	}

	// Outside a call: denied.
	if _, err := plugincall.Call("/m", nil); !errors.Is(err, guest.ErrDenied) {
		t.Errorf("a call outside a handler call: %v, want ErrDenied", err)
	}
}

// TestCallBudget: the daemon ends a call that makes more than pluginCallsPerCall plugin calls;
// a response read in two calls counts twice, as in the daemon.
func TestCallBudget(t *testing.T) {
	f := guesttest.Fake(t)
	f.SetPluginCall(func(method string, req []byte) ([]byte, error) {
		if string(req) == "big" {
			return make([]byte, 100<<10), nil
		}
		return []byte("ok"), nil
	})
	n := 0
	many := func(count int, req string) func() error {
		return func() error {
			for i := range count {
				if _, err := plugincall.Call("/m", []byte(req)); err != nil {
					return fmt.Errorf("call %d: %w", i, err)
				}
				n++
			}
			return guest.Publish("calls", strconv.Itoa(n))
		}
	}
	if err := register(f, plugin, many(guest.FakePluginCallsPerCall, "")); err != nil {
		t.Fatalf("%d calls: %v", guest.FakePluginCallsPerCall, err)
	}
	const want = `host: budget exceeded: handler.wasm wasmhost_register for plugin "p" made more than 16 plugin_call calls in one call (the limit is 16, handlers.limits.pluginCallsPerCall)`
	n = 0
	if err := register(f, plugin, many(guest.FakePluginCallsPerCall+1, "")); err == nil || err.Error() != want {
		t.Errorf("%d calls: %v\nwant %q", guest.FakePluginCallsPerCall+1, err, want)
	}
	if n != guest.FakePluginCallsPerCall || len(f.Published()) != 0 {
		t.Errorf("the call went on after its budget: %d calls made, published %v", n, f.Published())
	}
	n = 0
	if err := register(f, plugin, many(guest.FakePluginCallsPerCall/2+1, "big")); err == nil || err.Error() != want {
		t.Errorf("%d calls of 100 KiB responses: %v\nwant %q", guest.FakePluginCallsPerCall/2+1, err, want)
	}
}
