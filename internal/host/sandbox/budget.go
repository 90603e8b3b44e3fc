package sandbox

import (
	"errors"
	"fmt"
	"sync"

	"github.com/wasmhost/wasmhost/abi"
)

// ErrBudget: a call went over one of its budgets (Limits: log lines or bytes, plugin_call
// calls). The call ends there, as a trap does (a budget error also matches ErrTrap), and the
// instance is thrown away.
var ErrBudget = errors.New("host: budget exceeded")

// budgetFault is the panic value of a host function (or of the guest's stdout/stderr) that
// finds its call over a budget: wazero turns it into the error of the guest call, which ends.
type budgetFault struct {
	what  string // what went over, "logged more than 1000 lines"
	key   string // the config key of the limit
	limit int
}

func (e *budgetFault) Error() string {
	return fmt.Sprintf("%s in one call (the limit is %d, handlers.limits.%s)", e.what, e.limit, e.key)
}

func (e *budgetFault) Unwrap() []error { return []error{ErrBudget, ErrTrap} }

// chargeOutput counts one line of guest output (len bytes) against the call's budgets, and
// returns the fault when it goes over (the line is then dropped). Once over, it stays over.
func (in *instance) chargeOutput(st *callState, n int) *budgetFault {
	if st != nil && st.over != nil {
		return st.over
	}
	lim := &in.m.sb.cfg.Limits
	in.outLines++
	in.outBytes += n
	var f *budgetFault
	switch {
	case in.outLines > lim.LogLinesPerCall:
		f = &budgetFault{what: fmt.Sprintf("logged more than %d lines", lim.LogLinesPerCall), key: "logLinesPerCall", limit: lim.LogLinesPerCall}
	case in.outBytes > int(lim.LogBytesPerCall):
		f = &budgetFault{what: fmt.Sprintf("logged more than %d bytes", lim.LogBytesPerCall), key: "logBytesPerCall", limit: int(lim.LogBytesPerCall)}
	default:
		return nil
	}
	if st != nil {
		st.over = f
	}
	return f
}

// kvQuota is what the key-value stores charged to one handler file hold together: its keys,
// and the bytes of their keys and values. It lives in the file's stats; a store is charged to
// the file whose handler last wrote it (normally the only one that ever serves its type).
type kvQuota struct {
	keys  int
	bytes int64
}

// kvStore is the in-memory key-value store of one plugin type, shared by the successive
// modules that handle it.
type kvStore struct {
	mu    sync.Mutex
	m     map[string][]byte
	bytes int64    // of its keys and values
	owner *kvQuota // the quota it is charged to; guarded by kvQuotaMu as well
}

// kvQuotaMu guards every kvQuota and kvStore.owner; it is taken inside kvStore.mu.
var kvQuotaMu sync.Mutex

// set stores val under key, charging the store to q: CodeTooLarge, with the reason, when the
// key is new in a full store or the quota would go over.
func (kv *kvStore) set(m *Module, key string, val []byte) (int32, string) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return kv.setLocked(m, key, val)
}

// setLocked is set with kv.mu held.
func (kv *kvStore) setLocked(m *Module, key string, val []byte) (int32, string) {
	lim := &m.sb.cfg.Limits
	q := &m.stats.kv
	if kv.m == nil {
		return abi.CodeDenied, "the store of this plugin type was freed: its handler was retired"
	}
	old, exists := kv.m[key]
	if !exists && len(kv.m) >= abi.MaxKVEntries {
		return abi.CodeTooLarge, fmt.Sprintf("the store of this plugin type has %d keys, the most (abi.MaxKVEntries)", abi.MaxKVEntries)
	}
	dKeys, dBytes := 0, int64(len(val)-len(old))
	if !exists {
		dKeys, dBytes = 1, int64(len(key)+len(val))
	}
	kvQuotaMu.Lock()
	defer kvQuotaMu.Unlock()
	kv.chargeLocked(q) // the type may have changed hands: its store is charged to the new handler
	switch {
	case dKeys > 0 && q.keys+dKeys > lim.KVKeysPerHandler:
		return abi.CodeTooLarge, fmt.Sprintf("handler %s holds %d keys in its stores, the most (handlers.limits.kvKeysPerHandler)", m.file, q.keys)
	case dBytes > 0 && q.bytes+dBytes > int64(lim.KVBytesPerHandler):
		return abi.CodeTooLarge, fmt.Sprintf("handler %s holds %d bytes in its stores; %d more would go over %d (handlers.limits.kvBytesPerHandler)",
			m.file, q.bytes, dBytes, lim.KVBytesPerHandler)
	}
	kv.m[key] = append([]byte(nil), val...)
	kv.bytes += dBytes
	q.keys += dKeys
	q.bytes += dBytes
	return abi.StatusOK, ""
}

// delete removes key and gives its room back to the store's quota.
func (kv *kvStore) delete(key string) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.deleteLocked(key)
}

// deleteLocked is delete with kv.mu held.
func (kv *kvStore) deleteLocked(key string) {
	old, ok := kv.m[key]
	if !ok {
		return
	}
	delete(kv.m, key)
	n := int64(len(key) + len(old))
	kv.bytes -= n
	kvQuotaMu.Lock()
	if kv.owner != nil {
		kv.owner.keys--
		kv.owner.bytes -= n
	}
	kvQuotaMu.Unlock()
}

// DropStore frees the store of pluginType, when no handler serves the type any more: its room
// goes back to the quota it was charged to.
func (sb *Sandbox) DropStore(pluginType string) {
	sb.mu.Lock()
	kv := sb.kv[pluginType]
	delete(sb.kv, pluginType)
	sb.mu.Unlock()
	if kv == nil {
		return
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kvQuotaMu.Lock()
	kv.chargeLocked(nil)
	kvQuotaMu.Unlock()
	kv.m, kv.bytes = nil, 0
}

// chargeLocked charges the store to the quota q of the handler that now writes it (nil: to
// none), taking it off its former owner's. The caller holds kv.mu and kvQuotaMu.
func (kv *kvStore) chargeLocked(q *kvQuota) {
	if kv.owner == q {
		return
	}
	if kv.owner != nil {
		kv.owner.keys -= len(kv.m)
		kv.owner.bytes -= kv.bytes
	}
	if q != nil {
		q.keys += len(kv.m)
		q.bytes += kv.bytes
	}
	kv.owner = q
}

// kvUsage returns the keys and bytes charged to q.
func kvUsage(q *kvQuota) (int, int64) {
	kvQuotaMu.Lock()
	defer kvQuotaMu.Unlock()
	return q.keys, q.bytes
}
