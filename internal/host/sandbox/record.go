package sandbox

// Recording what a handler's calls exchange with the host: the daemon's session capture
// (`wasmhost plugins capture`) and `wasmhost handler test --record/--replay` (package session).
// The host functions note their exchanges in the call's state (callState.rec); endRecord hands
// the finished call to Config.Recorder.

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// Recorder receives, for the plugin types it records, each finished call of a plugin export
// (validate, register, deregister; not a shadow run's): what it saw of the key-value store, its
// plugin_call and kv_* exchanges in order, and its result. The values it receives are its own.
type Recorder interface {
	// Records says whether the calls of pluginType are recorded. It must be quick.
	Records(pluginType string) bool
	// Record receives one finished call of handler h about plugin p. It runs on the call's
	// goroutine, after the call: it must be quick.
	Record(p registration.PluginInfo, h session.Handler, c session.Call)
}

// startRecord starts recording st's call when the host records its type.
func (m *Module) startRecord(st *callState) {
	rec := m.sb.cfg.Recorder
	if rec == nil || m.readOnly || !rec.Records(st.pluginType) {
		return
	}
	st.rec = &session.Call{Export: strings.TrimPrefix(st.export, "wasmhost_"), StoreBefore: map[string]session.Bytes{}}
	st.recKeys, st.recStart = map[string]bool{}, time.Now()
}

// The bounds of one call's recording, counted as the host functions fill it (note,
// noteBefore), before anything is copied. Past either the recording stops adding, for the rest
// of the call, and says what it left out (session.Call.Truncated); the call itself runs on as it
// would unrecorded. They are constants, not handlers.limits keys: they bound what a debugging
// aid keeps, which no operator needs to move to run a handler.
//
// The figures: a real registration records a few exchanges of a few hundred bytes (the shipped
// CSI handler's register: a kv_get, a plugin_call NodeGetInfo answered in ~100-400 bytes, a
// kv_compare_and_set of a ~100-byte record; the DRA and example handlers one or two kv_* calls
// of a path). 256 exchanges leave room for the 16 plugin_calls handlers.limits allows
// (pluginCallsPerCall) and 240 store accesses; 1 MiB is over a thousand times a real call, and
// holds answers of up to about 1 MiB (pluginCallResponseSize's default): a call that reads
// more is recorded in part and says so. A handler reading a 60,000-byte value in a loop stops
// being recorded after ~17 reads instead of holding gigabytes. What the capture keeps across
// calls has bounds of its own (internal/capture).
const (
	MaxRecordExchanges = 256
	MaxRecordBytes     = 1 << 20
)

// recording says whether st's call is being recorded: the host functions build an exchange for
// note only then, so that a call of a type not captured costs nothing more.
func (st *callState) recording() bool { return st != nil && st.rec != nil }

// noteBefore records, when st's call is recorded, the value key has in kv before the call
// first touches it: the part of the store the call saw, which is what a replay needs (and
// costs what the call's own accesses cost, not a copy of the store per call).
func (st *callState) noteBefore(kv *kvStore, key []byte) {
	if !st.recording() || kv == nil || st.rec.Truncated != nil || st.recKeys[string(key)] {
		return
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	v, ok := kv.m[string(key)]
	size := session.StoreEntryOverhead + int64(len(key)+len(v))
	if !st.fits(0, size) {
		st.rec.Truncated = st.rec.Truncated.Add(0, size)
		return
	}
	st.recBytes += size
	st.recKeys[string(key)] = true
	if ok {
		st.rec.StoreBefore[string(key)] = slices.Clone(v)
	}
}

// fits says whether n more exchanges of b bytes fit the bounds of st's recording.
func (st *callState) fits(n int, b int64) bool {
	return st.rec.Truncated == nil && len(st.rec.Exchanges)+n <= MaxRecordExchanges && st.recBytes+b <= MaxRecordBytes
}

// note records one exchange of st's call, when it is recorded and the exchange fits its
// bounds; past them, it counts what it leaves out. Byte slices are copied.
func (st *callState) note(x session.Exchange) {
	if !st.recording() {
		return
	}
	size := x.Size()
	if !st.fits(1, size) {
		st.rec.Truncated = st.rec.Truncated.Add(1, size)
		return
	}
	st.recBytes += size
	x.Request, x.Response = slices.Clone(x.Request), slices.Clone(x.Response)
	x.Old, x.Value = slices.Clone(x.Old), slices.Clone(x.Value)
	st.rec.Exchanges = append(st.rec.Exchanges, x)
}

// endRecord hands st's recorded call, ended with published and err, to the recorder.
func (m *Module) endRecord(st *callState, p registration.PluginInfo, published map[string]string, err error) {
	c := st.rec
	if c == nil {
		return
	}
	st.rec, st.recKeys, st.recBytes = nil, nil, 0
	c.Duration = time.Since(st.recStart)
	switch {
	case err == nil:
		c.Result = session.Result{Status: session.StatusOK, Published: maps.Clone(published)}
	case errors.Is(err, registration.ErrRejected):
		c.Result = session.Result{Status: session.StatusRejected, Reason: strings.TrimPrefix(err.Error(), registration.ErrRejected.Error()+": ")}
	default:
		c.Result = session.Result{Status: session.StatusError, Reason: err.Error()}
	}
	p.Versions = slices.Clone(p.Versions)
	m.sb.cfg.Recorder.Record(p, session.Handler{File: m.file, SHA256: m.sum}, *c)
}

// SetStore replaces the key-value store of pluginType with a copy of kv, as a session recorded
// it before a call (`wasmhost handler test --replay`). It is for tools; the daemon does not
// use it. The store is charged to the next handler that writes it.
func (sb *Sandbox) SetStore(pluginType string, kv map[string][]byte) {
	s := sb.kvStore(pluginType)
	s.mu.Lock()
	defer s.mu.Unlock()
	kvQuotaMu.Lock()
	s.chargeLocked(nil)
	kvQuotaMu.Unlock()
	s.m, s.bytes = make(map[string][]byte, len(kv)), 0
	for k, v := range kv {
		s.m[k] = slices.Clone(v)
		s.bytes += int64(len(k) + len(v))
	}
}

// InstanceMemory returns the linear memory of the module's live instances together, in bytes,
// as read after their last call (`wasmhost handler bench`).
func (m *Module) InstanceMemory() int64 { return m.mem.Load() }
