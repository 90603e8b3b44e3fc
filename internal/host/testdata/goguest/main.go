// Command goguest is a handler written in Go directly against the ABI (no SDK), for the host's
// tests: type "go.example". validate acts on the plugin's name: "panic" panics, "oom" allocates
// until the runtime dies, "print" writes to stdout and stderr, "spam" prints a lot, anything
// else is accepted. The tests build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
package main

import (
	"os"
	"strings"
	"unsafe"

	"github.com/wasmhost/wasmhost/abi"
)

//go:wasmimport wasmhost request_read
func requestRead(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmhost result_set
func resultSet(ptr unsafe.Pointer, n uint32) int32

var manifest = abi.AppendManifest(nil, abi.Manifest{PluginTypes: []string{"go.example"}, Name: "goguest"})

//go:wasmexport wasmhost_abi_version
func abiVersion() int32 { return int32(abi.Version) }

//go:wasmexport wasmhost_manifest
func wasmhostManifest() int32 {
	resultSet(unsafe.Pointer(&manifest[0]), uint32(len(manifest)))
	return abi.StatusOK
}

var sink [][]byte

//go:wasmexport wasmhost_validate
func validate(n int32) int32 {
	buf := make([]byte, n)
	if n > 0 {
		requestRead(unsafe.Pointer(&buf[0]), uint32(n))
	}
	req, err := abi.DecodePluginRequest(buf)
	if err != nil {
		return abi.StatusError
	}
	switch req.Name {
	case "panic":
		panic("boom from " + req.Name)
	case "oom":
		for {
			sink = append(sink, make([]byte, 1<<20))
		}
	case "print":
		os.Stdout.WriteString("hello on stdout\n")
		os.Stderr.WriteString("hello on stderr\n")
	case "spam":
		line := strings.Repeat("x", 10000) + "\n"
		for range 100 {
			os.Stdout.WriteString(line)
		}
	}
	return abi.StatusOK
}

//go:wasmexport wasmhost_register
func register(n int32) int32 { return abi.StatusOK }

//go:wasmexport wasmhost_deregister
func deregister(n int32) int32 { return abi.StatusOK }

func main() {}
