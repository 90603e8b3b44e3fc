package sandbox

import (
	"bytes"
	"context"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/session"
)

// hostKVCompareAndSet is kv_compare_and_set (ABI v1.1): set or delete a key only if its value
// is still the one the guest read, so that two instances handling two plugins of one type at
// once cannot both act on the same reading (two copies of one CSI driver registering in the
// same instant).
func (m *Module) hostKVCompareAndSet(ctx context.Context, mod api.Module, stack []uint64) {
	if m.denied(ctx, stack) {
		return
	}
	key := guestBytes(mod, abi.ImportKVCompareAndSet, "key", arg(stack, 0), arg(stack, 1))
	old, oldCode := casOperand(mod, "old value", arg(stack, 2), arg(stack, 3))
	val, valCode := casOperand(mod, "new value", arg(stack, 4), arg(stack, 5))
	kv := m.kvFor(stateOf(ctx))
	code := kvKeyCode(kv, key)
	for _, c := range []int32{oldCode, valCode} {
		if code == abi.StatusOK {
			code = c
		}
	}
	if code != abi.StatusOK {
		ret(stack, code)
		return
	}
	stateOf(ctx).noteBefore(kv, key)
	code, why := kv.compareAndSet(m, string(key), old, val)
	if why != "" {
		stateOf(ctx).pluginCallErr = why
	}
	if st := stateOf(ctx); st.recording() {
		st.note(session.Exchange{Fn: session.KVCAS, Key: string(key), Old: old, OldAbsent: old == nil, Value: val, Delete: val == nil, Code: code, Error: why})
	}
	ret(stack, code)
}

// casOperand reads an old or new value of kv_compare_and_set: nil for a length of
// abi.KVAbsent, CodeBadRequest for any other negative length, CodeTooLarge over
// abi.MaxValueBytes (checked before the guest's memory is read).
func casOperand(mod api.Module, what string, ptr, n uint32) ([]byte, int32) {
	switch l := int32(n); {
	case l == abi.KVAbsent:
		return nil, abi.StatusOK
	case l < 0:
		return nil, abi.CodeBadRequest
	case l > abi.MaxValueBytes:
		return nil, abi.CodeTooLarge
	}
	b := guestBytes(mod, abi.ImportKVCompareAndSet, what, ptr, n)
	if b == nil {
		b = []byte{} // present, empty
	}
	return b, abi.StatusOK
}

// compareAndSet sets key to val (deletes it for a nil val) if its value is old (absent for
// a nil old), under the store's lock: CodeConflict when it is not, and set's codes otherwise.
func (kv *kvStore) compareAndSet(m *Module, key string, old, val []byte) (int32, string) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.m == nil {
		return abi.CodeDenied, "the store of this plugin type was freed: its handler was retired"
	}
	cur, exists := kv.m[key]
	if exists != (old != nil) || !bytes.Equal(cur, old) {
		return abi.CodeConflict, ""
	}
	if val == nil {
		kv.deleteLocked(key)
		return abi.StatusOK, ""
	}
	return kv.setLocked(m, key, val)
}
