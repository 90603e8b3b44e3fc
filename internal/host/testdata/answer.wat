;; Type "answer.example", for fuzzing what a guest answers. validate reads the request; its
;; last 4 bytes (little endian) are the status to return, the bytes before them the result.
(module
  (import "wasmhost" "request_read" (func $request_read (param i32 i32) (result i32)))
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "\0a\0eanswer.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 16)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param $len i32) (result i32)
    (if (i32.lt_u (local.get $len) (i32.const 4)) (then (return (i32.const 0))))
    (if (i32.gt_u (local.get $len) (i32.const 65536)) (then (return (i32.const 2))))
    (drop (call $request_read (i32.const 1024) (local.get $len)))
    (drop (call $result_set (i32.const 1024) (i32.sub (local.get $len) (i32.const 4))))
    (i32.load (i32.sub (i32.add (i32.const 1024) (local.get $len)) (i32.const 4))))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
