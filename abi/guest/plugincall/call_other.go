//go:build !wasip1

package plugincall

import "github.com/wasmhost/wasmhost/abi/guest"

// hostCall is the SDK's fake host's plugin_call (guest.FakeHost.CallPlugin) in native builds.
func hostCall(method string, req, resp []byte) int32 {
	return guest.Fake().CallPlugin(method, req, resp)
}
