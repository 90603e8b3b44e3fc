//go:build !wasip1

package handlers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi/wire"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// rig is one shipped handler, built as the Makefile builds it and loaded in the daemon's host
// (through the harness, which records each call's outcome, logs and store).
type rig struct {
	t   testing.TB
	hs  *harness.Harness
	m   *sandbox.Module
	typ string
}

// newRig builds handlers-wasm/<name> and loads it for plugin type typ, with plugin_call granted
// and answered by caller when caller is not nil.
func newRig(t testing.TB, name, typ string, caller sandbox.PluginCaller) *rig {
	t.Helper()
	path := guestbuild.Shipped(t, name)
	cfg := host.Config{CallTimeout: time.Minute, AllowInsecure: true, PluginCaller: caller}
	if caller != nil {
		cfg.Grants = map[string][]string{typ: {"plugin_call"}}
	}
	hs, err := harness.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hs.Close(context.Background()) })
	m, logs, err := hs.Load(t.Context(), path)
	if err != nil {
		t.Fatalf("loading %s: %v (%v)", name, err, logs)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return &rig{t: t, hs: hs, m: m, typ: typ}
}

func (r *rig) plugin(name, socket, endpoint string, versions ...string) registration.PluginInfo {
	return registration.PluginInfo{Socket: socket, Type: r.typ, Name: name, Endpoint: endpoint, Versions: versions}
}

func (r *rig) do(op harness.Op, p registration.PluginInfo) harness.Step {
	r.t.Helper()
	st := r.hs.Do(r.t.Context(), r.m, op, p)
	if st.Trapped || st.TimedOut {
		r.t.Fatalf("%s of %s: %s", op, p.Name, st.Reason)
	}
	return st
}

// ok makes call op about p and fails the test unless it succeeds.
func (r *rig) ok(op harness.Op, p registration.PluginInfo) harness.Step {
	r.t.Helper()
	st := r.do(op, p)
	if st.Outcome != harness.OK {
		r.t.Fatalf("%s of %s at %s: %s %s", op, p.Name, p.Socket, st.Outcome, st.Reason)
	}
	return st
}

// register validates and registers p, and fails the test unless both succeed.
func (r *rig) register(p registration.PluginInfo) harness.Step {
	r.t.Helper()
	r.ok(harness.Validate, p)
	return r.ok(harness.Register, p)
}

// rejected makes call op about p and returns the reason of its rejection, failing the test for
// any other outcome.
func (r *rig) rejected(op harness.Op, p registration.PluginInfo) string {
	r.t.Helper()
	st := r.do(op, p)
	if st.Outcome != harness.Rejected {
		r.t.Fatalf("%s of %s %q: %s %s, want a rejection", op, p.Name, p.Versions, st.Outcome, st.Reason)
	}
	return st.Reason
}

// failed makes call op about p and returns its failure's reason, failing the test for any
// other outcome (a rejection included).
func (r *rig) failed(op harness.Op, p registration.PluginInfo) string {
	r.t.Helper()
	st := r.do(op, p)
	if st.Outcome != harness.Failed {
		r.t.Fatalf("%s of %s: %s %s, want a failure", op, p.Name, st.Outcome, st.Reason)
	}
	return st.Reason
}

func (r *rig) store() map[string][]byte { return r.hs.Host().Store(r.typ) }

// set sets a key of the plugin type's store, as another instance of the handler would.
func (r *rig) set(key string, value []byte) {
	r.t.Helper()
	if err := r.m.SetStore(r.typ, key, value); err != nil {
		r.t.Fatal(err)
	}
}

// record decodes a record of string fields 1 to n in the store, as the handlers write them.
func (r *rig) record(key string, n int) ([]string, bool) {
	r.t.Helper()
	b, ok := r.store()[key]
	if !ok {
		return nil, false
	}
	fields := make([]string, n)
	err := wire.Walk(b, func(f wire.Field) error {
		if int(f.Num) > n {
			return nil
		}
		s, err := f.Text()
		fields[f.Num-1] = s
		return err
	})
	if err != nil {
		r.t.Fatalf("record %s: %v", key, err)
	}
	return fields, true
}

// encodeRecord encodes string fields 1 to n, leaving out empty ones.
func encodeRecord(fields ...string) []byte {
	var b []byte
	for i, s := range fields {
		b = wire.AppendNonEmpty(b, uint32(i+1), s)
	}
	return b
}

// hasLog says whether a step logged a line starting with prefix ("WARN deregistering ...").
func hasLog(st harness.Step, prefix string) bool {
	return slices.ContainsFunc(st.Logs, func(l harness.LogLine) bool { return strings.HasPrefix(l.String(), prefix) })
}
