//go:build wasip1

package guest

import (
	"strconv"
	"unsafe"

	"github.com/wasmhost/wasmhost/abi"
)

// The exports of ABI v1. The names must be literal in the directives; TestDirectives checks each
// against the constants in package abi.

//go:wasmexport wasmhost_abi_version
func exportABIVersion() int32 { return int32(abi.Version) }

//go:wasmexport wasmhost_manifest
func exportManifest() int32 {
	status, b := encodeManifest()
	resultSet(ptr(b), uint32(len(b)))
	return status
}

//go:wasmexport wasmhost_validate
func exportValidate(requestLen int32) int32 { return serve(opValidate, requestLen) }

//go:wasmexport wasmhost_register
func exportRegister(requestLen int32) int32 { return serve(opRegister, requestLen) }

//go:wasmexport wasmhost_deregister
func exportDeregister(requestLen int32) int32 { return serve(opDeregister, requestLen) }

// reqBuf is reused from call to call: the request is decoded into fresh strings, so nothing
// refers to it after a call.
var reqBuf []byte

func serve(o op, requestLen int32) int32 {
	status, reason := serveRequest(o, requestLen)
	if status != abi.StatusOK {
		resultSet(unsafe.Pointer(unsafe.StringData(reason)), uint32(len(reason)))
	}
	return status
}

func serveRequest(o op, requestLen int32) (int32, string) {
	if requestLen < 0 || requestLen > abi.MaxRequestBytes {
		return abi.StatusError, "guest: request length " + strconv.Itoa(int(requestLen)) + " is out of range"
	}
	if cap(reqBuf) < int(requestLen) {
		reqBuf = make([]byte, requestLen)
	}
	buf := reqBuf[:requestLen]
	if n := requestRead(ptr(buf), uint32(len(buf))); n != requestLen {
		return abi.StatusError, "guest: request_read returned " + strconv.Itoa(int(n)) + ", want the request length " + strconv.Itoa(int(requestLen))
	}
	return dispatch(o, buf)
}
