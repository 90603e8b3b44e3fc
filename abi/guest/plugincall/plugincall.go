// Package plugincall lets a wasmhost handler call the plugin it is handling: a unary gRPC call
// to the plugin's endpoint, made by the host. It is a separate package because using it makes
// the module import the host function plugin_call, and a module that imports it loads only for
// plugin types whose operator granted the capability abi.CapabilityPluginCall.
package plugincall

import (
	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
)

// Call calls method (a full gRPC method name, "/package.Service/Method") on the endpoint of the
// plugin being handled, with req as the encoded request message, and returns the encoded
// response. The host applies the call's deadline. An error wraps guest.ErrDenied when the
// capability was not granted, guest.ErrFailed when the call failed (its message then carries
// the host's reason: dial error, deadline, gRPC status), or guest.ErrTooLarge (with the host's
// reason when the response was over its limit).
//
// A response of up to 64 KiB is read in one call. A longer one makes the SDK repeat the call
// with a buffer of the size the host reported, so methods whose responses can be that large
// should be safe to call twice.
func Call(method string, req []byte) ([]byte, error) {
	resp := make([]byte, firstBuf)
	for range 2 {
		n := hostCall(method, req, resp)
		if n < 0 {
			reason := ""
			if n == abi.CodeFailed || n == abi.CodeTooLarge {
				reason = guest.ErrorReason()
			}
			return nil, &Error{Method: method, Reason: reason, Err: guest.CodeError(n)}
		}
		if int(n) <= len(resp) {
			return resp[:n], nil
		}
		resp = make([]byte, n)
	}
	return nil, &Error{Method: method, Reason: "the response kept growing", Err: guest.ErrFailed}
}

// firstBuf is the size of the first response buffer.
const firstBuf = 64 << 10

// Error is the error of a failed call: the host function's code, as a guest error, and the
// host's reason when it gave one.
type Error struct {
	Method string
	Reason string // the host's reason; empty when it gave none
	Err    error  // guest.ErrDenied, guest.ErrFailed, guest.ErrTooLarge, ...
}

func (e *Error) Error() string {
	s := "plugincall: " + e.Method + ": " + e.Err.Error()
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }
