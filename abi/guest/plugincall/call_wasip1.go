//go:build wasip1

package plugincall

import (
	"unsafe"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
)

//go:wasmimport wasmhost plugin_call
func pluginCall(method string, req unsafe.Pointer, reqLen uint32, resp unsafe.Pointer, respCap uint32) int32

//go:wasmimport wasmhost error_read
func errorRead(buf unsafe.Pointer, n uint32) int32

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

const firstBuf = 64 << 10

func call(method string, req []byte) ([]byte, error) {
	resp := make([]byte, firstBuf)
	for range 2 {
		n := pluginCall(method, ptr(req), uint32(len(req)), ptr(resp), uint32(len(resp)))
		if n < 0 {
			return nil, &Error{Method: method, Reason: lastError(n), Err: guest.CodeError(n)}
		}
		if int(n) <= len(resp) {
			return resp[:n], nil
		}
		resp = make([]byte, n)
	}
	return nil, &Error{Method: method, Reason: "the response kept growing", Err: guest.ErrFailed}
}

// lastError reads the host's reason for a CodeFailed.
func lastError(code int32) string {
	if code != abi.CodeFailed {
		return ""
	}
	buf := make([]byte, 512)
	n := errorRead(ptr(buf), uint32(len(buf)))
	if n > int32(len(buf)) {
		buf = make([]byte, n)
		n = errorRead(ptr(buf), uint32(len(buf)))
	}
	if n <= 0 || int(n) > len(buf) {
		return ""
	}
	return string(buf[:n])
}
