package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// FuzzManifest: whatever bytes a guest returns as its manifest, the host decodes and checks
// them without panicking, and what it accepts names usable plugin types.
func FuzzManifest(f *testing.F) {
	f.Add(abi.AppendManifest(nil, abi.Manifest{PluginTypes: []string{"a", "b"}, Name: "n", Version: "1"}))
	f.Add([]byte{0x0a, 0x40, 'a'})
	f.Add([]byte{0x0a, 0x00})
	f.Add([]byte{0x0a, 0x01, 'a', 0x0a, 0x01, 'a'})
	f.Add([]byte{0x0a, 0x02, 'a', '\n'})
	f.Fuzz(func(t *testing.T, b []byte) {
		mf, err := abi.DecodeManifest(b)
		if err != nil {
			return
		}
		if checkManifest(mf) != nil {
			return
		}
		for i, pt := range mf.PluginTypes {
			if pt == "" || len(pt) > abi.MaxKeyBytes || !utf8.ValidString(pt) || slices.Contains(mf.PluginTypes[:i], pt) {
				t.Fatalf("accepted plugin type %q in %q", pt, mf.PluginTypes)
			}
		}
		again, err := abi.DecodeManifest(abi.AppendManifest(nil, mf))
		if err != nil || !slices.Equal(again.PluginTypes, mf.PluginTypes) {
			t.Fatalf("manifest %+v does not survive a round trip: %+v, %v", mf, again, err)
		}
	})
}

// FuzzAnswer: the host's reading of a guest's status and result never panics, and a reason is
// always valid UTF-8.
func FuzzAnswer(f *testing.F) {
	f.Add(int32(0), []byte("ok"), 0)
	f.Add(int32(77), []byte{0xff, 0xfe}, 0)
	f.Add(int32(1), []byte(nil), 5000)
	f.Fuzz(func(t *testing.T, status int32, result []byte, over int) {
		bad := checkAnswer(status, over)
		known := status == abi.StatusOK || status == abi.StatusRejected || status == abi.StatusError
		if (bad == "") != (known && over <= 0) {
			t.Fatalf("checkAnswer(%d, %d) = %q", status, over, bad)
		}
		if r := reason(result); !utf8.ValidString(r) || r == "" {
			t.Fatalf("reason(%q) = %q", result, r)
		}
	})
}

func addFixtures(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("..", "testdata", "*.wasm"))
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// FuzzGuestAnswer drives a real guest (testdata/answer.wat) to answer a validate call with any
// status and result, through the whole call path: the call's error is decided by the status and
// the result's size alone, and the host never reports a trap.
func FuzzGuestAnswer(f *testing.F) {
	h, _ := newTestSandbox(f, Config{PoolSize: 1})
	m := mustLoad(f, h, "answer")
	f.Add(int32(0), []byte(""))
	f.Add(int32(1), []byte("no"))
	f.Add(int32(2), []byte("broken"))
	f.Add(int32(77), []byte("x"))
	f.Add(int32(-1), bytes.Repeat([]byte("r"), abi.MaxResultBytes))
	f.Add(int32(1), bytes.Repeat([]byte("r"), abi.MaxResultBytes+1))
	f.Add(int32(1), []byte{0xff, 0x80})
	f.Fuzz(func(t *testing.T, status int32, result []byte) {
		if len(result) > 2*abi.MaxResultBytes {
			return
		}
		name := string(binary.LittleEndian.AppendUint32(slices.Clone(result), uint32(status)))
		p := registration.PluginInfo{Type: "answer.example", Name: name}
		req := abi.AppendPluginRequest(nil, abi.PluginRequest{Type: p.Type, Name: name})
		resultLen := len(req) - 4
		err := m.ValidatePlugin(context.Background(), p)
		var want error
		switch {
		case resultLen > abi.MaxResultBytes:
			want = ErrBadResult
		case status == abi.StatusOK:
		case status == abi.StatusRejected:
			want = registration.ErrRejected
		case status == abi.StatusError:
			want = ErrHandlerFailed
		default:
			want = ErrBadResult
		}
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("status %d, result of %d bytes: got %v, want %v", status, resultLen, err, want)
		}
		if err != nil && !utf8.ValidString(err.Error()) {
			t.Fatalf("error is not valid UTF-8: %q", err)
		}
		if errors.Is(err, registration.ErrRejected) && !strings.HasSuffix(err.Error(), printable(string(req[:resultLen]))) {
			t.Fatalf("reason %q is not the result", err)
		}
	})
}

// FuzzLoad: any bytes given to the loader are refused with ErrBadModule or load into a module
// that answers calls within the deadline; the host never panics.
func FuzzLoad(f *testing.F) {
	addFixtures(f)
	h, _ := newTestSandbox(f, Config{CallTimeout: 100 * time.Millisecond, MemoryLimit: 4 << 20, PoolSize: 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		m, err := h.Load(ctx, "fuzz.wasm", b, new(Stats))
		if err != nil {
			if !errors.Is(err, ErrBadModule) {
				t.Fatalf("load error %v is not ErrBadModule", err)
			}
			if !strings.Contains(err.Error(), "fuzz.wasm") {
				t.Fatalf("load error %q does not name the file", err)
			}
			return
		}
		defer m.Close(ctx)
		if len(m.PluginTypes()) == 0 {
			t.Fatal("a module without plugin types loaded")
		}
		p := sandboxtest.Info(m.PluginTypes()[0], "fuzz")
		_ = m.ValidatePlugin(ctx, p)
		_, _ = m.RegisterPlugin(ctx, p)
		_ = m.DeRegisterPlugin(ctx, p)
	})
}
