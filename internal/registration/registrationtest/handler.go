package registrationtest

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// Method names of registration.Handler, as recorded in Call.Method.
const (
	MethodValidate   = "ValidatePlugin"
	MethodRegister   = "RegisterPlugin"
	MethodDeRegister = "DeRegisterPlugin"
)

// Call is one call a RecordingHandler received.
type Call struct {
	Method string // MethodValidate, MethodRegister or MethodDeRegister
	Info   registration.PluginInfo
}

// RecordingHandler is a native registration.Handler that records its calls and returns what
// it was told to. The zero value accepts everything and publishes nothing. It is safe for
// concurrent use, and works inside a testing/synctest bubble when created there.
type RecordingHandler struct {
	mu        sync.Mutex
	calls     []Call
	errs      map[string]error
	published map[string]string
	hook      func(ctx context.Context, c Call) error
	changed   chan struct{} // closed and replaced on every call; nil until first needed
}

var _ registration.Handler = (*RecordingHandler)(nil)

// NewRecordingHandler returns a handler that accepts every plugin.
func NewRecordingHandler() *RecordingHandler { return &RecordingHandler{} }

// SetError makes method (MethodValidate, MethodRegister or MethodDeRegister) return err from
// now on; nil makes it succeed again.
func (h *RecordingHandler) SetError(method string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errs == nil {
		h.errs = make(map[string]error)
	}
	h.errs[method] = err
}

// SetPublished sets what RegisterPlugin returns (a copy is returned each time).
func (h *RecordingHandler) SetPublished(m map[string]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.published = maps.Clone(m)
}

// SetHook makes every call, after it is recorded, run hook and return its error instead of
// the one set with SetError. A hook may block (until ctx is done, to act like a handler that
// hangs). nil removes it.
func (h *RecordingHandler) SetHook(hook func(ctx context.Context, c Call) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hook = hook
}

// Calls returns every call so far, oldest first.
func (h *RecordingHandler) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// CallsTo returns the calls so far to method, oldest first.
func (h *RecordingHandler) CallsTo(method string) []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Call
	for _, c := range h.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// WaitCalls waits at most timeout until method was called at least n times, and returns
// those calls. It fails the test when they do not come.
func (h *RecordingHandler) WaitCalls(t testing.TB, method string, n int, timeout time.Duration) []Call {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		h.mu.Lock()
		var got []Call
		for _, c := range h.calls {
			if c.Method == method {
				got = append(got, c)
			}
		}
		if len(got) >= n {
			h.mu.Unlock()
			return got
		}
		if h.changed == nil {
			h.changed = make(chan struct{})
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("RecordingHandler: %d call(s) to %s within %v, want %d", len(got), method, timeout, n)
			return nil
		}
	}
}

func (h *RecordingHandler) call(ctx context.Context, method string, p registration.PluginInfo) error {
	c := Call{Method: method, Info: p}
	c.Info.Versions = slices.Clone(p.Versions)
	h.mu.Lock()
	h.calls = append(h.calls, c)
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
	hook, err := h.hook, h.errs[method]
	h.mu.Unlock()
	if hook != nil {
		return hook(ctx, c)
	}
	return err
}

// ValidatePlugin records the call and returns the error set for MethodValidate.
func (h *RecordingHandler) ValidatePlugin(ctx context.Context, p registration.PluginInfo) error {
	return h.call(ctx, MethodValidate, p)
}

// RegisterPlugin records the call and returns the published map and the error set for
// MethodRegister.
func (h *RecordingHandler) RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error) {
	if err := h.call(ctx, MethodRegister, p); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.published), nil
}

// DeRegisterPlugin records the call and returns the error set for MethodDeRegister.
func (h *RecordingHandler) DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error {
	return h.call(ctx, MethodDeRegister, p)
}
