//go:build !wasip1

package plugincall

import (
	"errors"

	"github.com/wasmhost/wasmhost/abi/guest"
)

// call uses the SDK's fake host (guest.Fake) in native builds. An error of the fake's function
// that is not one of the SDK's is reported as guest.ErrFailed with its message as the reason.
func call(method string, req []byte) ([]byte, error) {
	resp, err := guest.Fake().CallPlugin(method, req)
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, guest.ErrDenied), errors.Is(err, guest.ErrBadRequest), errors.Is(err, guest.ErrTooLarge):
		return nil, &Error{Method: method, Err: err}
	}
	return nil, &Error{Method: method, Reason: err.Error(), Err: guest.ErrFailed}
}
