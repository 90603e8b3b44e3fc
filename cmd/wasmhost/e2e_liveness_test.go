package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// A registered plugin killed as SIGKILL does (its server gone, its socket file left behind)
// is noticed without its file going: its handler's DeRegisterPlugin runs, the socket shows
// failing with the reason, and a plugin that answers at that path again registers.
func TestE2EDeadPluginIsDeregistered(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	h := registrationtest.NewRecordingHandler()
	rd := startWithHandler(t, e2eConfig(dirs), h, fakeType)

	sock := filepath.Join(dirs.Socket, "p.sock")
	p := registrationtest.Serve(t, sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
	wantNotification(t, p, true, "")
	rd.waitState(sock, reconciler.StateRegistered)

	p.Kill()
	h.WaitCalls(t, registrationtest.MethodDeRegister, 1, e2eWait)
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the socket file went: %v (the test is of a file that stays)", err)
	}
	st := rd.waitState(sock, reconciler.StateFailing)
	if !strings.Contains(st.LastError, "plugin gone") {
		t.Errorf("status %+v, want failing with the plugin gone", st)
	}
	if _, ok := rd.d.State().Actual().Get(sock); ok {
		t.Error("the dead plugin is still in the actual state")
	}

	// It restarts: unlinks its old socket and listens again at the same path.
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	p2 := registrationtest.Serve(t, sock, pluginInfo(fakeType, "p"), registrationtest.Options{})
	wantNotification(t, p2, true, "")
	rd.waitState(sock, reconciler.StateRegistered)
	if n := len(h.CallsTo(registrationtest.MethodRegister)); n != 2 {
		t.Errorf("%d RegisterPlugin calls, want 2", n)
	}
}
