;; Type "badptr.example". validate hands a host function an out-of-bounds pointer, which one
;; chosen by the request length (a request with only the type and a plugin name of n bytes is
;; 16+2+n bytes):
;; name of 1 byte: log, 2: result_set, 3: request_read, 4: kv_get, 5: kv_set, 6: kv_delete,
;; 7: log with a negative length; any other: accept. register hands publish a bad value.
(module
  (import "wasmhost" "request_read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "log" (func $log (param i32 i32 i32)))
  (import "wasmhost" "publish" (func $publish (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (import "wasmhost" "kv_delete" (func $kv_delete (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0ebadptr.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 16)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param $len i32) (result i32)
    (block $done
      (block $b7 (block $b6 (block $b5 (block $b4 (block $b3 (block $b2 (block $b1
        (br_table $b1 $b2 $b3 $b4 $b5 $b6 $b7 $done (i32.sub (local.get $len) (i32.const 19))))
        ;; 1: log
        (call $log (i32.const 1) (i32.const 0xFFFFFF00) (i32.const 100))
        (br $done))
        ;; 2: result_set
        (drop (call $result_set (i32.const 0xFFFFFFF0) (i32.const 100)))
        (br $done))
        ;; 3: request_read past the end of memory
        (drop (call $request_read (i32.const 65530) (i32.const 100)))
        (br $done))
        ;; 4: kv_get with a buffer past the end
        (drop (call $kv_get (i32.const 0) (i32.const 1) (i32.const 65535) (i32.const 10)))
        (br $done))
        ;; 5: kv_set with a bad key
        (drop (call $kv_set (i32.const 0xFFFFFFFF) (i32.const 2) (i32.const 0) (i32.const 1)))
        (br $done))
        ;; 6: kv_delete with a key past the end
        (drop (call $kv_delete (i32.const 70000) (i32.const 1)))
        (br $done))
      ;; 7: log with a negative length
      (call $log (i32.const 1) (i32.const 0) (i32.const -1)))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32)
    (drop (call $publish (i32.const 0) (i32.const 1) (i32.const 65000) (i32.const 1000)))
    (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
