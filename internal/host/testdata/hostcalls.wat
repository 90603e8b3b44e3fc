;; Type "hostcalls.example". validate calls a host function at every node of an exponential call tree, no loop.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (import "wasmhost" "request_read" (func $request_read (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\11hostcalls.example")
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 19)))
    (i32.const 0))
  ;; Each call asks the host for the request (a host function), then calls itself twice.
  (func $f (param $n i32) (result i32)
    (drop (call $request_read (i32.const 64) (i32.const 64)))
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 1))
      (else (i32.add
        (call $f (i32.sub (local.get $n) (i32.const 1)))
        (call $f (i32.sub (local.get $n) (i32.const 1)))))))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (drop (call $f (i32.const 45)))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
