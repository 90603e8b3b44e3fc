package client

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestExplainPermission: a socket the caller may not open names who may. (Tests often run as
// root, whom the socket's mode does not stop, so the dial error is made up.)
func TestExplainPermission(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "whc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dialErr := &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
	err = explainDialError(sock, dialErr)
	if !errors.Is(err, ErrPermissionDenied) || !errors.Is(err, syscall.EACCES) ||
		!strings.HasPrefix(err.Error(), "permission denied on "+sock+": the admin socket is for the daemon's user only; run this as root or as ") {
		t.Errorf("explain(EACCES) = %v", err)
	}
	// The owner is named (root here, or whoever runs the test).
	if owner := fileOwner(sock); owner == "" || !strings.HasSuffix(err.Error(), " as "+owner+", who owns it") {
		t.Errorf("explain(EACCES) = %v, want the owner %q named", err, owner)
	}
}
