//go:build wasip1

package plugincall

import "unsafe"

//go:wasmimport wasmhost plugin_call
func pluginCall(method string, req unsafe.Pointer, reqLen uint32, resp unsafe.Pointer, respCap uint32) int32

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// hostCall is the host function plugin_call.
func hostCall(method string, req, resp []byte) int32 {
	return pluginCall(method, ptr(req), uint32(len(req)), ptr(resp), uint32(len(resp)))
}
