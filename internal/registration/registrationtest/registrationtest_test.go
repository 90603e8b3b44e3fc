package registrationtest_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

func TestCloseRemovesSocketKillLeavesIt(t *testing.T) {
	dir := registrationtest.SocketDir(t)
	a := registrationtest.Serve(t, filepath.Join(dir, "a.sock"), registrationtest.Info{Type: "t", Name: "a"}, registrationtest.Options{})
	b := registrationtest.Serve(t, filepath.Join(dir, "b.sock"), registrationtest.Info{Type: "t", Name: "b"}, registrationtest.Options{})
	a.Close()
	a.Close() // idempotent
	if _, err := os.Lstat(a.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after Close, socket: %v", err)
	}
	b.Kill()
	if _, err := os.Lstat(b.Path()); err != nil {
		t.Fatalf("after Kill, socket gone: %v", err)
	}
	if _, err := net.Dial("unix", b.Path()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a killed plugin: %v, want ECONNREFUSED", err)
	}
}

func TestListenDelayRefusesUntilListening(t *testing.T) {
	dir := registrationtest.SocketDir(t)
	p := registrationtest.Serve(t, filepath.Join(dir, "late.sock"), registrationtest.Info{Type: "t", Name: "late"}, registrationtest.Options{ListenDelay: time.Hour})
	fi, err := os.Lstat(p.Path())
	if err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("bound socket file: %v, %v", fi, err)
	}
	if _, err := net.Dial("unix", p.Path()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial before listen: %v, want ECONNREFUSED", err)
	}
}

func TestRecordingHandler(t *testing.T) {
	h := registrationtest.NewRecordingHandler()
	var _ registration.Handler = h
	h.SetPublished(map[string]string{"k": "v"})
	info := registration.PluginInfo{Socket: "/s", Type: "t", Name: "n", Versions: []string{"v1"}}
	done := make(chan struct{})
	go func() { h.RegisterPlugin(context.Background(), info); close(done) }()
	calls := h.WaitCalls(t, registrationtest.MethodRegister, 1, 10*time.Second)
	<-done
	if calls[0].Info.Name != "n" {
		t.Fatalf("calls %+v", calls)
	}
	pub, err := h.RegisterPlugin(context.Background(), info)
	if err != nil || pub["k"] != "v" {
		t.Fatalf("RegisterPlugin = %v, %v", pub, err)
	}
	boom := errors.New("boom")
	h.SetError(registrationtest.MethodDeRegister, boom)
	if err := h.DeRegisterPlugin(context.Background(), info); !errors.Is(err, boom) {
		t.Fatalf("DeRegisterPlugin error = %v", err)
	}
	h.SetHook(func(ctx context.Context, c registrationtest.Call) error {
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := h.ValidatePlugin(ctx, info); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hooked ValidatePlugin error = %v", err)
	}
	if n := len(h.Calls()); n != 4 {
		t.Fatalf("%d calls recorded, want 4", n)
	}
}
