//go:build !wasip1

package guest

import (
	"bytes"
	"maps"
	"sync"

	"github.com/wasmhost/wasmhost/abi"
)

// FakeHost is the in-memory host that backs the SDK in a native (non-wasip1) build, so that a
// handler's methods can be called from go test. It enforces the ABI's key and value limits. It
// does not know which call is in progress, so Publish is allowed at any time.
type FakeHost struct {
	mu         sync.Mutex
	kv         map[string][]byte
	published  map[string]string
	logs       []string
	pluginCall func(method string, req []byte) ([]byte, error)
}

var fake = &FakeHost{}

// Fake returns the process's FakeHost. It exists only in native builds.
func Fake() *FakeHost { return fake }

// Reset empties the store, the published keys and the log, and removes the plugin call function.
func (f *FakeHost) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kv, f.published, f.logs, f.pluginCall = nil, nil, nil, nil
}

// KV returns a copy of the store.
func (f *FakeHost) KV() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]string, len(f.kv))
	for k, v := range f.kv {
		m[k] = string(v)
	}
	return m
}

// Published returns a copy of the published keys.
func (f *FakeHost) Published() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.published)
}

// Logs returns the lines logged so far, each prefixed with its level ("INFO registered").
func (f *FakeHost) Logs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.logs...)
}

// SetPluginCall sets the function that answers plugincall.Call. Without one, calls fail with
// ErrDenied, as they do under a host that did not grant the capability.
func (f *FakeHost) SetPluginCall(fn func(method string, req []byte) ([]byte, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pluginCall = fn
}

// CallPlugin is the fake's plugin_call, used by package plugincall in native builds: it calls
// the function set with SetPluginCall, or returns ErrDenied when there is none.
func (f *FakeHost) CallPlugin(method string, req []byte) ([]byte, error) {
	f.mu.Lock()
	fn := f.pluginCall
	f.mu.Unlock()
	switch {
	case method == "":
		return nil, ErrBadRequest
	case fn == nil:
		return nil, ErrDenied
	}
	return fn(method, req)
}

var levelNames = map[int32]string{
	int32(abi.LogDebug): "DEBUG", int32(abi.LogInfo): "INFO",
	int32(abi.LogWarn): "WARN", int32(abi.LogError): "ERROR",
}

func hostLog(level int32, msg string) {
	name, ok := levelNames[level]
	if !ok {
		name = "INFO"
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	fake.logs = append(fake.logs, name+" "+msg)
}

func checkKey(key string) int32 {
	switch {
	case key == "":
		return abi.CodeBadRequest
	case len(key) > abi.MaxKeyBytes:
		return abi.CodeTooLarge
	}
	return abi.StatusOK
}

func hostPublish(key, value string) int32 {
	if c := checkKey(key); c != abi.StatusOK {
		return c
	}
	if len(value) > abi.MaxValueBytes {
		return abi.CodeTooLarge
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if _, ok := fake.published[key]; !ok && len(fake.published) >= abi.MaxPublishedKeys {
		return abi.CodeTooLarge
	}
	if fake.published == nil {
		fake.published = map[string]string{}
	}
	fake.published[key] = value
	return abi.StatusOK
}

func hostKVGet(key string, buf []byte) int32 {
	if c := checkKey(key); c != abi.StatusOK {
		return c
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	v, ok := fake.kv[key]
	if !ok {
		return abi.CodeNotFound
	}
	copy(buf, v)
	return int32(len(v))
}

func hostKVSet(key string, value []byte) int32 {
	if c := checkKey(key); c != abi.StatusOK {
		return c
	}
	if len(value) > abi.MaxValueBytes {
		return abi.CodeTooLarge
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if _, ok := fake.kv[key]; !ok && len(fake.kv) >= abi.MaxKVEntries {
		return abi.CodeTooLarge
	}
	if fake.kv == nil {
		fake.kv = map[string][]byte{}
	}
	fake.kv[key] = append([]byte(nil), value...)
	return abi.StatusOK
}

func hostKVDelete(key string) int32 {
	if c := checkKey(key); c != abi.StatusOK {
		return c
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	delete(fake.kv, key)
	return abi.StatusOK
}

func hostKVCompareAndSet(key string, old, value []byte) int32 {
	if c := checkKey(key); c != abi.StatusOK {
		return c
	}
	if len(old) > abi.MaxValueBytes || len(value) > abi.MaxValueBytes {
		return abi.CodeTooLarge
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	cur, ok := fake.kv[key]
	if ok != (old != nil) || !bytes.Equal(cur, old) {
		return abi.CodeConflict
	}
	switch {
	case value == nil:
		delete(fake.kv, key)
		return abi.StatusOK
	case !ok && len(fake.kv) >= abi.MaxKVEntries:
		return abi.CodeTooLarge
	}
	if fake.kv == nil {
		fake.kv = map[string][]byte{}
	}
	fake.kv[key] = append([]byte(nil), value...)
	return abi.StatusOK
}
