package main

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// Several instances of one plugin (same type and name, each on a socket of its own: a rolling
// update): the newest registered is the one the handler serves, the other stays registered as
// a standby; when the served one goes, the standby takes over and the handler is told of it,
// not of a deregistration; only when the last instance goes is DeRegisterPlugin called.
func TestE2EInstancesOfOnePlugin(t *testing.T) {
	t.Parallel()
	dirs := newE2EDirs(t, "/tmp")
	h := registrationtest.NewRecordingHandler()
	rd := startWithHandler(t, e2eConfig(dirs), h, fakeType)

	oldSock := filepath.Join(dirs.Socket, "gpu-old.sock")
	oldP := registrationtest.Serve(t, oldSock, pluginInfo(fakeType, "gpu"), registrationtest.Options{})
	wantNotification(t, oldP, true, "")
	rd.waitState(oldSock, reconciler.StateRegistered)

	newSock := filepath.Join(dirs.Socket, "gpu-new.sock")
	newP := registrationtest.Serve(t, newSock, pluginInfo(fakeType, "gpu"), registrationtest.Options{})
	wantNotification(t, newP, true, "")
	rd.waitState(newSock, reconciler.StateRegistered)
	rd.waitState(oldSock, reconciler.StateStandby)
	if got := callsFor(h, oldSock); !slices.Equal(got, []string{registrationtest.MethodValidate, registrationtest.MethodRegister}) {
		t.Fatalf("handler calls for the old instance %v, want no deregistration", got)
	}

	// The new instance goes: the old one takes over, and the handler is told so.
	newP.Close()
	rd.waitState(oldSock, reconciler.StateRegistered)
	if got := callsFor(h, oldSock); !slices.Equal(got, []string{
		registrationtest.MethodValidate, registrationtest.MethodRegister,
		registrationtest.MethodValidate, registrationtest.MethodRegister}) {
		t.Errorf("handler calls for the old instance %v, want it registered again", got)
	}
	if n := len(h.CallsTo(registrationtest.MethodDeRegister)); n != 0 {
		t.Errorf("%d DeRegisterPlugin calls while another instance could take over, want 0", n)
	}

	// The last instance goes: now the handler is told.
	oldP.Close()
	rd.waitGone(oldSock)
	if n := len(h.CallsTo(registrationtest.MethodDeRegister)); n != 1 {
		t.Errorf("%d DeRegisterPlugin calls after the last instance went, want 1", n)
	}
}
