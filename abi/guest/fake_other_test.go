//go:build !wasip1

package guest

import (
	"errors"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
)

// TestFakeHost exercises the wrappers against the native fake, which applies the ABI's limits.
func TestFakeHost(t *testing.T) {
	f := Fake()
	f.Reset()
	t.Cleanup(f.Reset)

	if _, ok, err := KV.Get("missing"); ok || err != nil {
		t.Errorf("Get(missing) = %v, %v", ok, err)
	}
	big := strings.Repeat("v", 1000) // over the SDK's first read buffer
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
	if err := Publish("endpoint", "/e"); err != nil {
		t.Error(err)
	}
	Log(LevelWarn, "careful")
	Log(LevelInfo, strings.Repeat("x", abi.MaxLogLineBytes+10))
	if got := f.KV(); len(got) != 2 || got["big"] != big {
		t.Errorf("fake KV has %d keys", len(got))
	}
	if got := f.Published(); got["endpoint"] != "/e" || len(got) != 1 {
		t.Errorf("fake published %v", got)
	}
	logs := f.Logs()
	if len(logs) != 2 || logs[0] != "WARN careful" || len(logs[1]) != len("INFO ")+abi.MaxLogLineBytes {
		t.Errorf("fake logs: %d lines, first %q", len(logs), logs[0])
	}
}

// TestFakeCompareAndSet: a nil old means "absent", a nil value deletes, and a value that
// changed since it was read makes CompareAndSet return false without an error.
func TestFakeCompareAndSet(t *testing.T) {
	f := Fake()
	f.Reset()
	t.Cleanup(f.Reset)

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
}
