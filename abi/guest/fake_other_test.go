//go:build !wasip1

package guest

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
)

// funcs is a Handler of functions; a nil one accepts.
type funcs struct{ validate, register, deregister func(Plugin) error }

func (h funcs) Validate(p Plugin) error   { return call(h.validate, p) }
func (h funcs) Register(p Plugin) error   { return call(h.register, p) }
func (h funcs) Deregister(p Plugin) error { return call(h.deregister, p) }

func call(fn func(Plugin) error, p Plugin) error {
	if fn == nil {
		return nil
	}
	return fn(p)
}

// fakeWith empties the fake and makes h the module's handler, for the plugin types a.test and
// b.test, as Handle would, until the test ends.
func fakeWith(t *testing.T, h Handler) *FakeHost {
	t.Helper()
	oldH, oldM, oldErr := handler, manifest, manifestErr
	handler, manifest, manifestErr = h, Manifest{PluginTypes: []string{"a.test", "b.test"}}, nil
	f := Fake()
	f.Reset()
	t.Cleanup(func() {
		f.Reset()
		handler, manifest, manifestErr = oldH, oldM, oldErr
	})
	return f
}

func plugin(typ, name string) Plugin {
	return Plugin{Type: typ, Name: name, Endpoint: "/run/" + name + ".sock", Versions: []string{"v1"}}
}

// wantFailure checks that err is a failure of the call (not a rejection) with the reason want.
func wantFailure(t *testing.T, err error, want string) {
	t.Helper()
	var rej *RejectError
	if err == nil || errors.As(err, &rej) || err.Error() != want {
		t.Errorf("call returned %v (%T)\nwant the failure %q", err, err, want)
	}
}

// TestFakeHost exercises the wrappers in a call of the fake, which applies the ABI's limits.
func TestFakeHost(t *testing.T) {
	big := strings.Repeat("v", 1000) // over the SDK's first read buffer
	f := fakeWith(t, funcs{register: func(p Plugin) error {
		if _, ok, err := KV.Get("missing"); ok || err != nil {
			t.Errorf("Get(missing) = %v, %v", ok, err)
		}
		for k, v := range map[string]string{"a": "1", "big": big, "empty": ""} {
			if err := KV.Set(k, []byte(v)); err != nil {
				t.Fatalf("Set(%s): %v", k, err)
			}
			got, ok, err := KV.Get(k)
			if !ok || err != nil || string(got) != v {
				t.Errorf("Get(%s) = %d bytes, %v, %v; want %d bytes", k, len(got), ok, err, len(v))
			}
		}
		if err := KV.Delete("a"); err != nil {
			t.Error(err)
		}
		if err := KV.Delete("a"); err != nil {
			t.Errorf("deleting a missing key: %v", err)
		}
		for _, tc := range []struct {
			err  error
			want error
			msg  string
		}{
			{KV.Set("", nil), ErrBadRequest, "guest: kv_set: guest: bad request"},
			{KV.Set(strings.Repeat("k", abi.MaxKeyBytes+1), nil), ErrTooLarge, ""},
			{KV.Set("k", make([]byte, abi.MaxValueBytes+1)), ErrTooLarge, "guest: kv_set k: guest: too large"},
			{Publish("", "v"), ErrBadRequest, ""},
		} {
			if !errors.Is(tc.err, tc.want) {
				t.Errorf("error %v, want %v", tc.err, tc.want)
			}
			if tc.msg != "" && tc.err.Error() != tc.msg {
				t.Errorf("error %q, want %q", tc.err, tc.msg)
			}
		}
		if err := Publish("endpoint", p.Endpoint); err != nil {
			t.Error(err)
		}
		Log(LevelWarn, "careful")
		Log(LevelInfo, strings.Repeat("x", abi.MaxLogLineBytes+10))
		return nil
	}})
	if err := f.Register(plugin("a.test", "p")); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if got := f.KV("a.test"); len(got) != 2 || got["big"] != big || got["empty"] != "" {
		t.Errorf("the store of a.test has %d keys", len(got))
	}
	if got := f.Published(); got["endpoint"] != "/run/p.sock" || len(got) != 1 {
		t.Errorf("fake published %v", got)
	}
	logs := f.Logs()
	if len(logs) != 2 || logs[0] != "WARN careful" || len(logs[1]) != len("INFO ")+abi.MaxLogLineBytes {
		t.Errorf("fake logs: %d lines, first %q", len(logs), logs[0])
	}
}

// TestFakeOutcomes: the handler's answers as the daemon sees them: nil, a rejection with its
// reason, a failure with its reason ("(no reason given)" for none), a recovered panic.
func TestFakeOutcomes(t *testing.T) {
	f := fakeWith(t, funcs{validate: func(p Plugin) error {
		switch p.Name {
		case "reject":
			return fmt.Errorf("checked: %w", Reject("version 9 is not supported"))
		case "fail":
			return errors.New("the handler is broken")
		case "silent":
			return errors.New("")
		case "panic":
			panic("boom")
		}
		return nil
	}})
	if err := f.Validate(plugin("a.test", "ok")); err != nil {
		t.Errorf("Validate(ok) = %v", err)
	}
	var rej *RejectError
	if err := f.Validate(plugin("a.test", "reject")); !errors.As(err, &rej) || rej.Reason != "checked: version 9 is not supported" {
		t.Errorf("Validate(reject) = %v, want a rejection with the wrapped reason", err)
	}
	wantFailure(t, f.Validate(plugin("a.test", "fail")), "the handler is broken")
	wantFailure(t, f.Validate(plugin("a.test", "silent")), "(no reason given)")
	wantFailure(t, f.Validate(plugin("a.test", "panic")), "guest: handler panicked: boom")
	// The daemon calls a handler only for the types its manifest names.
	err := f.Validate(plugin("c.test", "ok"))
	if err == nil || !strings.Contains(err.Error(), `plugin "ok" is of type "c.test", and the handler's Manifest names ["a.test" "b.test"]`) {
		t.Errorf("Validate of a type the manifest does not name: %v", err)
	}
}

// TestFakeOutsideACall: the handler's methods called directly, not through the fake, find the
// host functions denied, as they are outside a call in the daemon; the error says why.
func TestFakeOutsideACall(t *testing.T) {
	h := funcs{register: func(p Plugin) error { return KV.Set("plugin/"+p.Name, nil) }}
	f := fakeWith(t, h)
	err := h.Register(plugin("a.test", "p"))
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "no call in progress") {
		t.Errorf("KV.Set outside a call: %v, want ErrDenied saying there is no call", err)
	}
	Log(LevelInfo, "from init") // logged, as the daemon logs a module's init
	if got := f.Logs(); len(got) != 1 || got[0] != "INFO from init" {
		t.Errorf("logs %q", got)
	}
}

// TestFakeStorePerType: each plugin type has its own store, as in the daemon: a call reaches
// the store of its plugin's type, and SetKV and KV name the type.
func TestFakeStorePerType(t *testing.T) {
	f := fakeWith(t, funcs{register: func(p Plugin) error {
		if v, ok, err := KV.Get("owner"); err != nil || ok {
			return fmt.Errorf("owner is %q already (%v, %v)", v, ok, err)
		}
		return KV.Set("owner", []byte(p.Name))
	}})
	f.SetKV("b.test", "seeded", []byte("before"))
	if err := f.Register(plugin("a.test", "x")); err != nil {
		t.Fatal(err)
	}
	if err := f.Register(plugin("b.test", "y")); err != nil {
		t.Errorf("Register of a b.test plugin saw a.test's store: %v", err)
	}
	want := map[string]map[string]string{
		"a.test": {"owner": "x"},
		"b.test": {"owner": "y", "seeded": "before"},
		"c.test": {},
	}
	for typ, w := range want {
		if got := f.KV(typ); !maps.Equal(got, w) {
			t.Errorf("KV(%s) = %v, want %v", typ, got, w)
		}
	}
	wantFailure(t, f.Register(plugin("a.test", "z")), `owner is "x" already (true, <nil>)`)
}

// TestFakeStoreQuotas: a full store, and the handler's key and byte quotas over the stores of
// all its types, refuse a write with ErrTooLarge and the daemon's reason; deleting gives the
// room back.
func TestFakeStoreQuotas(t *testing.T) {
	var key, value string
	f := fakeWith(t, funcs{
		register:   func(Plugin) error { return KV.Set(key, []byte(value)) },
		deregister: func(Plugin) error { return KV.Delete(key) },
	})
	reg := func(typ, k, v string) error {
		key, value = k, v
		return f.Register(plugin(typ, "p"))
	}
	unreg := func(typ, k string) {
		t.Helper()
		key = k
		if err := f.Deregister(plugin(typ, "p")); err != nil {
			t.Fatal(err)
		}
	}

	// A full store: abi.MaxKVEntries keys in a.test.
	for i := range abi.MaxKVEntries {
		f.SetKV("a.test", "k"+strconv.Itoa(i), nil)
	}
	wantFailure(t, reg("a.test", "new", ""), "guest: kv_set new: guest: too large: the store of this plugin type has 16384 keys, the most (abi.MaxKVEntries)")
	if err := reg("a.test", "k7", "replaced"); err != nil {
		t.Errorf("replacing a key of a full store: %v", err)
	}

	// The same keys count against the handler's quota in another type's store.
	wantFailure(t, reg("b.test", "new", ""), "guest: kv_set new: guest: too large: handler handler.wasm holds 16384 keys in its stores, the most (handlers.limits.kvKeysPerHandler)")
	unreg("a.test", "k0")
	if err := reg("b.test", "new", ""); err != nil {
		t.Errorf("a key of b.test after one of a.test was deleted: %v", err)
	}
	if n := len(f.KV("a.test")) + len(f.KV("b.test")); n != FakeKVKeysPerHandler {
		t.Errorf("%d keys in the two stores, want %d", n, FakeKVKeysPerHandler)
	}

	// The bytes: fill to 10 bytes short of the quota, with one value in a.test.
	f.Reset()
	f.SetKV("a.test", "big", make([]byte, FakeKVBytesPerHandler-len("big")-10))
	if err := reg("b.test", "k", "12345678"); err != nil { // 1 + 8 bytes: fits
		t.Fatal(err)
	}
	wantFailure(t, reg("b.test", "k", "1234567890"),
		fmt.Sprintf("guest: kv_set k: guest: too large: handler handler.wasm holds %d bytes in its stores; 2 more would go over %d (handlers.limits.kvBytesPerHandler)",
			FakeKVBytesPerHandler-1, FakeKVBytesPerHandler))
	if err := reg("b.test", "k", "123456789"); err != nil { // exactly the quota
		t.Errorf("a value that fills the quota exactly: %v", err)
	}
	if err := reg("b.test", "k", ""); err != nil { // shrinking is allowed
		t.Errorf("shrinking a value: %v", err)
	}
	if got := f.KV("b.test")["k"]; got != "" {
		t.Errorf("k = %q after it was set empty", got)
	}
}

// TestFakeCompareAndSet: a nil old means "absent", a nil value deletes, and a value that
// changed since it was read makes CompareAndSet return false without an error.
func TestFakeCompareAndSet(t *testing.T) {
	f := fakeWith(t, funcs{register: func(Plugin) error {
		step := func(old, value []byte, want bool) {
			t.Helper()
			if got, err := KV.CompareAndSet("k", old, value); got != want || err != nil {
				t.Fatalf("CompareAndSet(k, %q, %q) = %v, %v; want %v", old, value, got, err, want)
			}
		}
		step(nil, []byte("a"), true)  // created
		step(nil, []byte("b"), false) // it exists now
		step([]byte("x"), []byte("b"), false)
		step([]byte("a"), []byte{}, true) // an empty value is a value
		got, ok, err := KV.Get("k")
		if !ok || err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Get after setting an empty value = %q, %v, %v", got, ok, err)
		}
		step(nil, []byte("c"), false)
		step(got, nil, true) // Get's answer passed as it is; nil deletes
		if _, ok, _ := KV.Get("k"); ok {
			t.Fatal("the key is still there after a compare-and-delete")
		}
		if _, err := KV.CompareAndSet("", nil, []byte("v")); !errors.Is(err, ErrBadRequest) {
			t.Errorf("an empty key: %v, want ErrBadRequest", err)
		}
		long := strings.Repeat("n", 256) // the longest plugin name, with a prefix
		if ok, err := KV.CompareAndSet("driver/"+long, nil, []byte("v")); !ok || err != nil {
			t.Errorf("a key for the longest plugin name: %v, %v", ok, err)
		}
		return nil
	}})
	if err := f.Register(plugin("a.test", "p")); err != nil {
		t.Fatal(err)
	}
	// Over the quota, a compare-and-set refuses as kv_set does.
	f2 := fakeWith(t, funcs{register: func(Plugin) error {
		_, err := KV.CompareAndSet("new", nil, []byte("v"))
		return err
	}})
	for i := range FakeKVKeysPerHandler {
		f2.SetKV("b.test", "k"+strconv.Itoa(i), nil)
	}
	wantFailure(t, f2.Register(plugin("a.test", "p")),
		"guest: kv_compare_and_set new: guest: too large: handler handler.wasm holds 16384 keys in its stores, the most (handlers.limits.kvKeysPerHandler)")
}

// TestFakePublish: Publish only in Register, within the daemon's publish limits, and what a
// register call published is kept only when it succeeds.
func TestFakePublish(t *testing.T) {
	var n, size int
	var fail bool
	f := fakeWith(t, funcs{
		validate: func(Plugin) error { return Publish("k", "v") },
		register: func(Plugin) error {
			for i := range n {
				if err := Publish("k"+strconv.Itoa(i), strings.Repeat("v", size)); err != nil {
					return err
				}
			}
			if fail {
				return errors.New("failed after publishing")
			}
			return nil
		},
	})
	p := plugin("a.test", "p")
	if err := f.Validate(p); err == nil || err.Error() != "guest: publish k: guest: denied" {
		t.Errorf("Publish in Validate: %v, want denied", err)
	}
	n, size = FakePublishKeys, 1
	if err := f.Register(p); err != nil {
		t.Fatal(err)
	}
	if got := f.Published(); len(got) != FakePublishKeys || got["k0"] != "v" {
		t.Errorf("published %d keys, want %d", len(got), FakePublishKeys)
	}
	n = FakePublishKeys + 1
	wantFailure(t, f.Register(p), "guest: publish k64: guest: too large: 64 keys published, the most in one call (handlers.limits.publishKeys)")
	if got := f.Published(); len(got) != 0 {
		t.Errorf("a register call that failed left %d published keys", len(got))
	}
	n, size = 2, abi.MaxValueBytes-2 // the second key goes over publishBytes
	wantFailure(t, f.Register(p), fmt.Sprintf("guest: publish k1: guest: too large: %d bytes published would go over %d (handlers.limits.publishBytes)",
		2*(2+abi.MaxValueBytes-2), FakePublishBytes))
	n, size, fail = 1, 1, true
	wantFailure(t, f.Register(p), "failed after publishing")
	if got := f.Published(); len(got) != 0 {
		t.Errorf("a register call that failed left %d published keys", len(got))
	}
}

// TestFakeLogBudget: a call that logs more lines or bytes than the daemon allows is ended at
// the line over it, with the daemon's error, even when the handler recovers from the end; the
// next call has a budget of its own.
func TestFakeLogBudget(t *testing.T) {
	var lines, size int
	var recovering bool
	f := fakeWith(t, funcs{register: func(p Plugin) error {
		if recovering {
			defer func() { _ = recover() }()
		}
		for i := range lines {
			Log(LevelInfo, strconv.Itoa(i)+strings.Repeat("x", size))
		}
		return Publish("endpoint", p.Endpoint)
	}})
	p := plugin("a.test", "p")
	lines = FakeLogLinesPerCall
	if err := f.Register(p); err != nil {
		t.Fatalf("%d lines: %v", lines, err)
	}
	lines = FakeLogLinesPerCall + 1
	wantFailure(t, f.Register(p), `host: budget exceeded: handler.wasm wasmhost_register for plugin "p" logged more than 1000 lines in one call (the limit is 1000, handlers.limits.logLinesPerCall)`)
	if n := len(f.Logs()); n != 2*FakeLogLinesPerCall {
		t.Errorf("%d lines logged, want %d: the line over the budget is dropped", n, 2*FakeLogLinesPerCall)
	}
	if got := f.Published(); len(got) != 0 {
		t.Errorf("a register call that was ended published %v", got)
	}
	recovering = true
	wantFailure(t, f.Register(p), `host: budget exceeded: handler.wasm wasmhost_register for plugin "p" logged more than 1000 lines in one call (the limit is 1000, handlers.limits.logLinesPerCall)`)

	// 16 lines of 4 KiB are the 64 KiB; the 17th is over.
	f.Reset()
	recovering, lines, size = false, 17, abi.MaxLogLineBytes
	wantFailure(t, f.Register(p), `host: budget exceeded: handler.wasm wasmhost_register for plugin "p" logged more than 65536 bytes in one call (the limit is 65536, handlers.limits.logBytesPerCall)`)
	if n := len(f.Logs()); n != 16 {
		t.Errorf("%d lines logged, want 16", n)
	}
	lines = 16
	if err := f.Register(p); err != nil {
		t.Errorf("16 lines of 4 KiB: %v", err)
	}
}
