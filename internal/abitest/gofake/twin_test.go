//go:build !wasip1

package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// answer is the plugin both hosts call: by method.
func answer(method string) ([]byte, error) {
	switch method {
	case "/twin.Echo/down":
		return nil, errors.New("connection refused")
	case "/twin.Echo/huge":
		return make([]byte, guest.FakePluginCallResponseSize+1), nil
	case "/twin.Echo/big": // over the SDK's first buffer: read in two calls
		return make([]byte, 100<<10), nil
	}
	return []byte("ok"), nil
}

type caller struct{}

func (caller) Call(_ context.Context, _, method string, _ []byte, _ int) ([]byte, error) {
	return answer(method)
}

// TestFakeAgreesWithTheDaemon makes the same calls to this handler in the Go SDK's fake host
// and in the daemon's host, with the daemon's default limits, and checks that each ends the same
// way: accepted, or refused or failed with the same reason (the daemon's error names the handler
// file, the export and the plugin before the handler's reason), with the same store and
// published keys after it. The calls go over each limit the fake enforces.
func TestFakeAgreesWithTheDaemon(t *testing.T) {
	wasm := guesttest.Build(t, ".")
	path := filepath.Join(t.TempDir(), guest.FakeHandlerFile) // the file the fake's reasons name
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	hs, err := harness.New(t.Context(), host.Config{
		// The store fills in one call (0.1-0.2 s under -race): time and CPU to spare on a loaded
		// machine. Every other limit is the daemon's default, as the fake's are.
		CallTimeout:   time.Minute,
		Limits:        limits.Handler{CallCPU: limits.Duration(time.Minute)},
		AllowInsecure: true,
		PluginCaller:  caller{},
		Grants:        map[string][]string{TypeA: {"plugin_call"}, TypeB: {"plugin_call"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close(context.Background())
	m, logs, err := hs.Load(t.Context(), path)
	if err != nil {
		t.Fatalf("loading: %v (%v)", err, logs)
	}
	defer m.Close(context.Background())

	fake := guesttest.Fake(t)
	fake.SetPluginCall(func(method string, _ []byte) ([]byte, error) { return answer(method) })

	exports := map[harness.Op]string{harness.Validate: "wasmhost_validate", harness.Register: "wasmhost_register", harness.Deregister: "wasmhost_deregister"}
	step := func(op harness.Op, typ, name string, want string) {
		t.Helper()
		p := guest.Plugin{Socket: "/r/" + name + ".sock", Type: typ, Name: name, Endpoint: "/r/" + name + ".sock", Versions: []string{"v1"}}
		if name == "no-endpoint" {
			p.Endpoint = ""
		}
		st := hs.Do(t.Context(), m, op, registration.PluginInfo(p))
		st.Reason = strings.ReplaceAll(st.Reason, filepath.Dir(path)+"/", "") // the daemon's handler directory
		var ferr error
		switch op {
		case harness.Validate:
			ferr = fake.Validate(p)
		case harness.Register:
			ferr = fake.Register(p)
		case harness.Deregister:
			ferr = fake.Deregister(p)
		}
		what := fmt.Sprintf("%s %s/%s", op, typ, name)
		var rej *guest.RejectError
		switch st.Outcome {
		case harness.OK:
			if ferr != nil {
				t.Errorf("%s: the daemon accepted, the fake returned %v", what, ferr)
			}
		case harness.Rejected:
			if !errors.As(ferr, &rej) || rej.Reason != st.Reason {
				t.Errorf("%s: the daemon refused with %q, the fake returned %v", what, st.Reason, ferr)
			}
		default:
			prefix := fmt.Sprintf("host: handler failed: %s %s for plugin %q: ", guest.FakeHandlerFile, exports[op], name)
			if ferr == nil || errors.As(ferr, &rej) || (st.Reason != ferr.Error() && st.Reason != prefix+ferr.Error()) {
				t.Errorf("%s: the daemon failed with\n\t%q\nthe fake returned\n\t%v", what, st.Reason, ferr)
			}
		}
		// The outcome is the one the test expects (so that a scenario that went wrong in both
		// hosts alike is caught too).
		got := "ok"
		if ferr != nil {
			got = ferr.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("%s: %q, want it to say %q", what, got, want)
		}
		fstore := fake.KV(typ)
		dstore := map[string]string{}
		for k, v := range st.Store {
			dstore[k] = string(v)
		}
		if !maps.Equal(fstore, dstore) {
			t.Errorf("%s: the stores differ: the daemon's has %d keys, the fake's %d", what, len(dstore), len(fstore))
		}
		if op == harness.Register && st.Outcome == harness.OK && !maps.Equal(st.Published, fake.Published()) {
			t.Errorf("%s: the daemon published %v, the fake %v", what, st.Published, fake.Published())
		}
	}

	step(harness.Validate, TypeA, "ok", "ok")
	step(harness.Validate, TypeA, "reject", "plugin reject is refused")
	step(harness.Validate, TypeA, "fail", "(no reason given)")
	step(harness.Validate, TypeA, "panic", "guest: handler panicked: boom")
	step(harness.Validate, TypeA, "publish", "guest: publish k: guest: denied")
	// A store per type.
	step(harness.Register, TypeA, "store", "ok")
	step(harness.Register, TypeB, "store", "ok")
	step(harness.Register, TypeA, "store", "the store is owned by twin.test/a already")
	step(harness.Deregister, TypeA, "store", "ok")
	step(harness.Deregister, TypeB, "store", "ok")
	// The store's and the handler's quotas, over the two types' stores.
	step(harness.Register, TypeA, "keys", "the store of this plugin type has 16384 keys, the most (abi.MaxKVEntries)")
	step(harness.Register, TypeB, "one", "holds 16384 keys in its stores, the most (handlers.limits.kvKeysPerHandler)")
	step(harness.Deregister, TypeA, "keys", "ok")
	step(harness.Register, TypeB, "one", "ok")
	step(harness.Register, TypeA, "bytes", "more would go over 16777216 (handlers.limits.kvBytesPerHandler)")
	step(harness.Deregister, TypeA, "bytes", "ok")
	step(harness.Deregister, TypeB, "one", "ok")
	// Publish.
	step(harness.Register, TypeA, "publish-keys", "64 keys published, the most in one call (handlers.limits.publishKeys)")
	step(harness.Register, TypeA, "publish-bytes", "131072 bytes published would go over 65536 (handlers.limits.publishBytes)")
	// The budgets of a call.
	step(harness.Register, TypeA, "log-lines", "logged more than 1000 lines in one call (the limit is 1000, handlers.limits.logLinesPerCall)")
	step(harness.Register, TypeB, "ok", "ok") // the daemon quarantines a handler after 3 budget faults in a row
	step(harness.Register, TypeA, "log-bytes", "logged more than 65536 bytes in one call (the limit is 65536, handlers.limits.logBytesPerCall)")
	step(harness.Register, TypeA, "calls", "made more than 16 plugin_call calls in one call (the limit is 16, handlers.limits.pluginCallsPerCall)")
	// plugin_call.
	step(harness.Register, TypeA, "no-endpoint", "plugincall: /twin.Echo/no-endpoint: guest: failed: the plugin has no endpoint")
	step(harness.Register, TypeA, "down", "plugincall: /twin.Echo/down: guest: failed: connection refused")
	step(harness.Register, TypeA, "huge", "guest: too large: response of 1048577 bytes over the limit of 1048576 (handlers.limits.pluginCallResponseSize)")
	step(harness.Register, TypeA, "big", "ok")
	step(harness.Register, TypeB, "ok", "ok")
}
