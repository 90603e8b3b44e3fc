;; Type "depth.example". validate recurses 200 deep, then returns: about 20 KiB of call stack,
;; within the default handlers.limits.maxCallStack, over a small one.
(module
  (import "wasmhost" "result_set" (func $result_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\0a\0ddepth.example")
  (func $f (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 0))
      (else (i32.add (call $f (i32.sub (local.get $n) (i32.const 1))) (i32.const 1)))))
  (func (export "wasmhost_abi_version") (result i32) (i32.const 1))
  (func (export "wasmhost_manifest") (result i32)
    (drop (call $result_set (i32.const 0) (i32.const 15)))
    (i32.const 0))
  (func (export "wasmhost_validate") (param i32) (result i32)
    (drop (call $f (i32.const 200)))
    (i32.const 0))
  (func (export "wasmhost_register") (param i32) (result i32) (i32.const 0))
  (func (export "wasmhost_deregister") (param i32) (result i32) (i32.const 0)))
