package sandbox

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
)

// TestKVCompareAndSet runs testdata/cas.wat, which checks kv_compare_and_set's codes from the
// guest side: create when absent, conflict when the value is not the one expected, swap,
// delete, bad and oversized arguments, and a key longer than the old 256-byte limit.
func TestKVCompareAndSet(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "cas")
	if err := m.ValidatePlugin(context.Background(), sandboxtest.Info("cas.example", "p")); err != nil {
		t.Fatalf("validate: %v", err)
	}
}

// TestKVCompareAndSetHammer: goroutines increment one counter by compare-and-set, retrying on
// conflict; no increment is lost, which a get and a set would not promise.
func TestKVCompareAndSetHammer(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "cas")
	kv := h.kvStore("cas.example")
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				for {
					kv.mu.Lock()
					cur, ok := kv.m["n"]
					kv.mu.Unlock()
					n := 0
					if ok {
						n, _ = strconv.Atoi(string(cur))
					} else {
						cur = nil
					}
					code, why := kv.compareAndSet(m, "n", cur, []byte(strconv.Itoa(n+1)))
					if code == abi.StatusOK {
						break
					}
					if code != abi.CodeConflict {
						t.Errorf("compareAndSet: code %d, %s", code, why)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	kv.mu.Lock()
	got := string(kv.m["n"])
	kv.mu.Unlock()
	if got != strconv.Itoa(workers*each) {
		t.Errorf("counter = %s, want %d", got, workers*each)
	}
}
