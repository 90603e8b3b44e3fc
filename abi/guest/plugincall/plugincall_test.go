//go:build !wasip1

package plugincall_test

import (
	"errors"
	"testing"

	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/plugincall"
)

// TestCallNative checks the native build's plugin calls through guest.Fake.
func TestCallNative(t *testing.T) {
	f := guest.Fake()
	f.Reset()
	t.Cleanup(f.Reset)

	_, err := plugincall.Call("/csi.v1.Node/NodeGetInfo", nil)
	var perr *plugincall.Error
	if !errors.Is(err, guest.ErrDenied) || !errors.As(err, &perr) || perr.Method != "/csi.v1.Node/NodeGetInfo" {
		t.Errorf("without a grant: %v, want ErrDenied naming the method", err)
	}

	f.SetPluginCall(func(method string, req []byte) ([]byte, error) {
		if string(req) == "down" {
			return nil, errors.New("connection refused")
		}
		return append([]byte(method+":"), req...), nil
	})
	resp, err := plugincall.Call("/m", []byte("hi"))
	if err != nil || string(resp) != "/m:hi" {
		t.Errorf("Call = %q, %v", resp, err)
	}
	_, err = plugincall.Call("/m", []byte("down"))
	if !errors.Is(err, guest.ErrFailed) || err.Error() != "plugincall: /m: guest: failed: connection refused" {
		t.Errorf("a failing call: %v", err)
	}
	if _, err = plugincall.Call("", nil); !errors.Is(err, guest.ErrBadRequest) {
		t.Errorf("an empty method: %v, want ErrBadRequest", err)
	}
}
