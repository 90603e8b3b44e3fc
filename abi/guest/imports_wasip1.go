//go:build wasip1

package guest

import (
	"unsafe"

	"github.com/wasmhost/wasmhost/abi"
)

// The host functions of ABI v1 (abi.ImportModule "wasmhost"). The names must be literal in the
// directives; TestDirectives checks each against the constants in package abi. A Go string
// parameter is passed as two i32, its pointer and its length.

//go:wasmimport wasmhost request_read
func requestRead(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmhost result_set
func resultSet(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport wasmhost log
func hostLog(level int32, msg string)

//go:wasmimport wasmhost publish
func hostPublish(key, value string) int32

//go:wasmimport wasmhost kv_get
func kvGet(key string, buf unsafe.Pointer, n uint32) int32

//go:wasmimport wasmhost kv_set
func kvSet(key string, value unsafe.Pointer, n uint32) int32

//go:wasmimport wasmhost kv_delete
func hostKVDelete(key string) int32

//go:wasmimport wasmhost kv_compare_and_set
func kvCompareAndSet(key string, old unsafe.Pointer, oldLen int32, value unsafe.Pointer, valueLen int32) int32

//go:wasmimport wasmhost error_read
func errorRead(buf unsafe.Pointer, n uint32) int32

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func hostKVGet(key string, buf []byte) int32 { return kvGet(key, ptr(buf), uint32(len(buf))) }

func hostErrorRead(buf []byte) int32 { return errorRead(ptr(buf), uint32(len(buf))) }

// deniedReason: the daemon gives no reason with CodeDenied that error_read could be trusted for.
func deniedReason() string { return "" }

func hostKVSet(key string, value []byte) int32 {
	return kvSet(key, ptr(value), uint32(len(value)))
}

func hostKVCompareAndSet(key string, old, value []byte) int32 {
	return kvCompareAndSet(key, ptr(old), casLen(old), ptr(value), casLen(value))
}

// casLen is the length of a kv_compare_and_set operand: abi.KVAbsent for nil.
func casLen(b []byte) int32 {
	if b == nil {
		return abi.KVAbsent
	}
	return int32(len(b))
}
