// Package reconcilertest provides in-memory fakes for testing the reconciler and what is built on
// it: Operations, which registers plugins in a real state.Actual through the handlers of a
// real registration.Registry without any socket, and Handler, which records what it is asked.
//
// This package is part of the daemon's tests, not a stable API.
package reconcilertest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/typeslots"
)

// DefaultType is the plugin type a socket's plugin has unless SetInfo says otherwise.
const DefaultType = "CSIPlugin"

// Op names an operation in a Call.
type Op string

// The operations.
const (
	OpRegister   Op = "register"
	OpDeregister Op = "deregister"
)

// Call is one call of Operations, recorded when it started.
type Call struct {
	Op   Op
	Path string
	ID   state.Identity
	At   time.Time
}

// NoHandlerError is what Register returns when the plugin's type has no handler. It wraps
// registration.ErrNoHandler and tells the plugin's type and name.
type NoHandlerError struct {
	Socket, Type, Name string
}

func (e *NoHandlerError) Error() string {
	return fmt.Sprintf("%v: %s at socket %s (plugin %s)", registration.ErrNoHandler, e.Type, e.Socket, e.Name)
}

// Unwrap returns registration.ErrNoHandler.
func (e *NoHandlerError) Unwrap() error { return registration.ErrNoHandler }

// PluginType returns the plugin's type.
func (e *NoHandlerError) PluginType() string { return e.Type }

// PluginName returns the plugin's name.
func (e *NoHandlerError) PluginName() string { return e.Name }

// HandlerError is what Register returns when the handler said no or failed: as the real
// Registrar does, a handler error that matches registration.ErrRejected is a rejection,
// anything else wraps registration.ErrHandlerFailed; it tells the plugin's type and name.
type HandlerError struct {
	Type, Name string
	Err        error
}

func (e *HandlerError) Error() string { return e.Err.Error() }

// Unwrap returns the error with its sentinel.
func (e *HandlerError) Unwrap() error { return e.Err }

// PluginType returns the plugin's type.
func (e *HandlerError) PluginType() string { return e.Type }

// PluginName returns the plugin's name.
func (e *HandlerError) PluginName() string { return e.Name }

func handlerError(typ, name, socket, call string, err error) error {
	if errors.Is(err, registration.ErrRejected) {
		err = fmt.Errorf("%w (%s of plugin %s at socket %s)", err, call, name, socket)
	} else {
		err = fmt.Errorf("%w: %s of plugin %s at socket %s: %w", registration.ErrHandlerFailed, call, name, socket, err)
	}
	return &HandlerError{Type: typ, Name: name, Err: err}
}

type info struct{ typ, name string }

// Operations is a fake reconciler.Operations. Register looks up the handler of the plugin's
// type in Handlers, validates, records the plugin in Actual and registers it, as the real
// Registrar does, but without dialling anything. It can be told to fail or to block per socket
// path, and it records every call. It is safe for concurrent use.
type Operations struct {
	Actual   *state.Actual
	Handlers *registration.Registry

	mu         sync.Mutex
	info       map[string]info
	fail       map[string]error
	failDereg  map[string]error
	blocks     map[string]chan struct{}
	waits      map[string]bool
	calls      []Call
	inflight   map[string]int
	total      int
	maxPerPath int
	maxTotal   int
	started    chan Call
}

// NewOperations returns operations over actual and handlers.
func NewOperations(actual *state.Actual, handlers *registration.Registry) *Operations {
	return &Operations{
		Actual:    actual,
		Handlers:  handlers,
		info:      make(map[string]info),
		fail:      make(map[string]error),
		failDereg: make(map[string]error),
		blocks:    make(map[string]chan struct{}),
		waits:     make(map[string]bool),
		inflight:  make(map[string]int),
	}
}

// SetInfo makes the plugin at path answer GetInfo with type typ and name name. Without it the
// type is DefaultType and the name is the socket's file name without ".sock".
func (o *Operations) SetInfo(path, typ, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.info[path] = info{typ, name}
}

// Info returns what the plugin at path answers GetInfo.
func (o *Operations) Info(path string) (typ, name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.infoLocked(path)
}

func (o *Operations) infoLocked(path string) (typ, name string) {
	if i, ok := o.info[path]; ok {
		return i.typ, i.name
	}
	return DefaultType, strings.TrimSuffix(filepath.Base(path), ".sock")
}

// Fail makes every Register of path fail with err, before anything else happens; a nil err
// ends that.
func (o *Operations) Fail(path string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.fail, path)
	} else {
		o.fail[path] = err
	}
}

// FailDeregister makes every Deregister of path fail with err without removing the plugin from
// Actual; a nil err ends that.
func (o *Operations) FailDeregister(path string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		delete(o.failDereg, path)
	} else {
		o.failDereg[path] = err
	}
}

// Waits makes every registration of path say it waits outside the daemon
// (typeslots.Waiting), as the registrar's of a forwarded plugin does, before it blocks (Block).
func (o *Operations) Waits(path string) {
	o.mu.Lock()
	o.waits[path] = true
	o.mu.Unlock()
}

// Block makes every operation of path wait, once recorded, until release is called or its
// context is done; then it returns ctx.Err() or goes on as usual. release may be called more
// than once.
func (o *Operations) Block(path string) (release func()) {
	ch := make(chan struct{})
	o.mu.Lock()
	o.blocks[path] = ch
	o.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			if o.blocks[path] == ch {
				delete(o.blocks, path)
			}
			o.mu.Unlock()
			close(ch)
		})
	}
}

// Started returns a channel that receives every call as it starts. It must be drained: calls
// block until their value is taken. Call it before the calls of interest are made.
func (o *Operations) Started() <-chan Call {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.started == nil {
		o.started = make(chan Call)
	}
	return o.started
}

// Calls returns every call so far, in the order they started.
func (o *Operations) Calls() []Call {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls)
}

// CallsOf returns the calls of path, in the order they started.
func (o *Operations) CallsOf(path string) []Call {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Call
	for _, c := range o.calls {
		if c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// InFlight returns the number of calls running now.
func (o *Operations) InFlight() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total
}

// MaxInFlight returns the most calls that ran at once for one path, and in all.
func (o *Operations) MaxInFlight() (perPath, total int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.maxPerPath, o.maxTotal
}

// begin records a call and returns what blocks it (nil: nothing) and the started channel.
func (o *Operations) begin(op Op, path string, id state.Identity) (<-chan struct{}, chan Call, Call) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := Call{Op: op, Path: path, ID: id, At: time.Now()}
	o.calls = append(o.calls, c)
	o.inflight[path]++
	o.total++
	o.maxPerPath = max(o.maxPerPath, o.inflight[path])
	o.maxTotal = max(o.maxTotal, o.total)
	return o.blocks[path], o.started, c
}

func (o *Operations) end(path string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inflight[path]--
	if o.inflight[path] == 0 {
		delete(o.inflight, path)
	}
	o.total--
}

func (o *Operations) wait(ctx context.Context, block <-chan struct{}, started chan Call, c Call) error {
	if started != nil {
		select {
		case started <- c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Register implements reconciler.Operations.
func (o *Operations) Register(ctx context.Context, s state.Socket) error {
	block, started, c := o.begin(OpRegister, s.Path, s.ID)
	defer o.end(s.Path)
	o.mu.Lock()
	waits := o.waits[s.Path]
	o.mu.Unlock()
	if waits {
		typeslots.Waiting(ctx)
	}
	if err := o.wait(ctx, block, started, c); err != nil {
		return fmt.Errorf("fake: register %s: %w", s.Path, err)
	}
	o.mu.Lock()
	failErr := o.fail[s.Path]
	typ, name := o.infoLocked(s.Path)
	o.mu.Unlock()
	if failErr != nil {
		return failErr
	}
	h, ok := o.Handlers.Get(typ)
	if !ok {
		return &NoHandlerError{Socket: s.Path, Type: typ, Name: name}
	}
	pi := registration.PluginInfo{Socket: s.Path, Type: typ, Name: name, Endpoint: s.Path, Versions: []string{"1.0.0"}}
	if err := h.ValidatePlugin(ctx, pi); err != nil {
		return handlerError(typ, name, s.Path, "ValidatePlugin", err)
	}
	o.Actual.Add(state.Plugin{
		Socket: s.Path, ID: s.ID, Type: typ, Name: name, Endpoint: pi.Endpoint,
		Versions: pi.Versions, Handler: h, RegisteredAt: time.Now(),
	})
	pub, err := h.RegisterPlugin(ctx, pi)
	if err != nil {
		o.Actual.Remove(s.Path)
		return handlerError(typ, name, s.Path, "RegisterPlugin", err)
	}
	o.Actual.Update(s.Path, func(p *state.Plugin) { p.Published = pub })
	return nil
}

// Deregister implements reconciler.Operations.
func (o *Operations) Deregister(ctx context.Context, p state.Plugin) error {
	block, started, c := o.begin(OpDeregister, p.Socket, p.ID)
	defer o.end(p.Socket)
	if err := o.wait(ctx, block, started, c); err != nil {
		return fmt.Errorf("fake: deregister %s: %w", p.Socket, err)
	}
	o.mu.Lock()
	failErr := o.failDereg[p.Socket]
	o.mu.Unlock()
	if failErr != nil {
		return failErr
	}
	o.Actual.Remove(p.Socket)
	h := registrar.HandlerOf(p)
	if h == nil {
		return nil
	}
	if err := h.DeRegisterPlugin(ctx, registrar.InfoOf(p)); err != nil {
		return fmt.Errorf("fake: deregister plugin %s at socket %s: %w", p.Name, p.Socket, err)
	}
	return nil
}

// HandlerCall is one call a Handler received.
type HandlerCall struct {
	Method string // "validate", "register" or "deregister"
	Plugin registration.PluginInfo
}

// Handler is a fake registration.Handler that records its calls and the plugins it holds. It
// can be told to refuse validation or to fail deregistration. It is safe for concurrent use.
type Handler struct {
	mu          sync.Mutex
	calls       []HandlerCall
	plugins     map[string]registration.PluginInfo // by socket
	validateErr error
	deregErr    error
}

// NewHandler returns a handler that accepts every plugin.
func NewHandler() *Handler {
	return &Handler{plugins: make(map[string]registration.PluginInfo)}
}

// SetValidateError makes ValidatePlugin return err (nil: accept).
func (h *Handler) SetValidateError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.validateErr = err
}

// SetDeregisterError makes DeRegisterPlugin return err after forgetting the plugin.
func (h *Handler) SetDeregisterError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deregErr = err
}

// ValidatePlugin implements registration.Handler.
func (h *Handler) ValidatePlugin(_ context.Context, p registration.PluginInfo) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, HandlerCall{"validate", p})
	return h.validateErr
}

// RegisterPlugin implements registration.Handler.
func (h *Handler) RegisterPlugin(_ context.Context, p registration.PluginInfo) (map[string]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, HandlerCall{"register", p})
	h.plugins[p.Socket] = p
	return map[string]string{"name": p.Name}, nil
}

// DeRegisterPlugin implements registration.Handler.
func (h *Handler) DeRegisterPlugin(_ context.Context, p registration.PluginInfo) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, HandlerCall{"deregister", p})
	delete(h.plugins, p.Socket)
	return h.deregErr
}

// Calls returns the calls so far, in order.
func (h *Handler) Calls() []HandlerCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// CallsOf returns the names of the methods called for the plugin at socket, in order.
func (h *Handler) CallsOf(socket string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, c := range h.calls {
		if c.Plugin.Socket == socket {
			out = append(out, c.Method)
		}
	}
	return out
}

// Registered returns the sockets of the plugins the handler holds, sorted.
func (h *Handler) Registered() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.plugins))
	for s := range h.plugins {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
